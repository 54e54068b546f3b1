//! What must hold after every step of a simulation, whatever is running, dead or half-done.
//!
//! Read from the store's live tables ([`SqliteStore::snapshot`]), never through a search: a
//! checker that refreshed would publish writes on behalf of the code it checks and hide a
//! forgotten refresh.

use std::collections::{BTreeMap, BTreeSet};

use fs_locks::{LeaseClock, LockMode, Observed};
use fs_model::{journal_index_name, lock_index_name, tree_lock_id, DocKind, FsDoc, FsPath};
use fs_rename::JournalEntry;
use fs_store::{SqliteStore, StoreError, StoredDoc};

use crate::INDEX;

/// What the simulation knows independently of the store: the documents it created (with
/// their kinds, which renames never change) and where the committed renames put them.
#[derive(Debug, Clone)]
pub struct Expected {
    /// Kind of each document, by id.
    pub kinds: BTreeMap<String, DocKind>,
    /// Path of each document by id, as the renames committed so far (in commit order) left
    /// it: the model.
    pub model: BTreeMap<String, String>,
}

/// A rename in flight: its journal entry is open, so its documents may be anywhere between
/// its source and its destination.
struct InFlight {
    from: FsPath,
    to: FsPath,
}

async fn live(store: &SqliteStore, index: &str) -> Result<Vec<StoredDoc>, String> {
    match store.snapshot(index).await {
        Ok(docs) => Ok(docs),
        // Created lazily (the journal, on the first rename).
        Err(StoreError::IndexNotFound { .. }) => Ok(Vec::new()),
        Err(e) => Err(format!("reading `{index}`: {e}")),
    }
}

/// The journal's entries, without its fences (tombstones, which hold no rename).
async fn open_entries(store: &SqliteStore) -> Result<Vec<StoredDoc>, String> {
    let mut docs = live(store, &journal_index_name(INDEX)).await?;
    docs.retain(|d| d.source.get("state").and_then(|s| s.as_str()) != Some("fenced"));
    Ok(docs)
}

fn path(s: &str) -> Result<FsPath, String> {
    FsPath::parse(s).map_err(|e| format!("bad path `{s}`: {e}"))
}

/// Checks every invariant; returns the first violation found.
///
/// 1. The documents are exactly those created: none appeared, none vanished (the count is
///    constant and ids never change), and each stores consistent `parent`, `name`, `depth`.
/// 2. No path is stored twice.
/// 3. No two owners hold granted exclusive tree locks that overlap.
/// 4. No committed rename's effect is missing: every document is where the model puts it,
///    or it belongs to a rename in flight and lies at its model path moved from that rename's
///    source to its destination (not yet committed).
/// 5. The tree is well-formed: the model's, always; the store's, outside the renames in
///    flight (every document's parent exists and is a directory).
pub async fn check(store: &SqliteStore, expected: &Expected) -> Result<(), String> {
    let docs = live(store, INDEX).await?;
    let mut actual: BTreeMap<String, FsDoc> = BTreeMap::new();
    for d in docs {
        let doc: FsDoc = serde_json::from_value(d.source)
            .map_err(|e| format!("document `{}` is not a tree document: {e}", d.id))?;
        if !doc.is_consistent() {
            return Err(format!("document `{}` is inconsistent: {doc:?}", d.id));
        }
        actual.insert(d.id, doc);
    }

    // 1. The same documents.
    let ids: BTreeSet<&String> = actual.keys().collect();
    let want: BTreeSet<&String> = expected.kinds.keys().collect();
    if ids != want {
        let appeared: Vec<_> = ids.difference(&want).collect();
        let vanished: Vec<_> = want.difference(&ids).collect();
        return Err(format!(
            "documents appeared {appeared:?} or vanished {vanished:?}"
        ));
    }

    // 2. No path twice.
    let mut by_path: BTreeMap<&FsPath, &String> = BTreeMap::new();
    for (id, doc) in &actual {
        if let Some(other) = by_path.insert(&doc.path, id) {
            return Err(format!(
                "path `{}` stored twice (`{other}` and `{id}`)",
                doc.path
            ));
        }
    }

    // 3. No overlapping granted exclusive locks.
    check_locks(store).await?;

    // 4. Every document where the committed renames put it, or in flight.
    let mut in_flight = Vec::new();
    for d in open_entries(store).await? {
        let entry: JournalEntry = serde_json::from_value(d.source)
            .map_err(|e| format!("journal entry `{}` unreadable: {e}", d.id))?;
        in_flight.push(InFlight {
            from: path(&entry.from)?,
            to: path(&entry.to)?,
        });
    }
    for (id, doc) in &actual {
        let model = path(&expected.model[id])?;
        if doc.path == model {
            continue;
        }
        let moved_early = in_flight.iter().any(|f| {
            model.is_inside(&f.from) && model.rebase(&f.from, &f.to).as_ref() == Ok(&doc.path)
        });
        if !moved_early {
            return Err(format!(
                "`{id}` is at `{}`, but the committed renames put it at `{model}` and no rename \
                 in flight explains the difference",
                doc.path
            ));
        }
    }

    // 5. Well-formed: the model everywhere, the store outside what is in flight.
    let model_dirs: BTreeSet<String> = expected
        .model
        .iter()
        .filter(|(id, _)| expected.kinds[*id] == DocKind::Dir)
        .map(|(_, p)| p.clone())
        .collect();
    for (id, p) in &expected.model {
        let parent = path(p)?.parent().ok_or("a document at the root")?;
        if !parent.is_root() && !model_dirs.contains(parent.as_str()) {
            return Err(format!(
                "the model puts `{id}` at `{p}`, whose parent is no directory"
            ));
        }
    }
    let dirs: BTreeSet<&FsPath> = actual
        .values()
        .filter(|d| d.kind == DocKind::Dir)
        .map(|d| &d.path)
        .collect();
    for (id, doc) in &actual {
        let moving = in_flight
            .iter()
            .any(|f| doc.path.is_inside(&f.from) || doc.path.is_inside(&f.to));
        let Some(parent) = doc.path.parent() else {
            return Err(format!("`{id}` is stored at the root"));
        };
        if !moving && !parent.is_root() && !dirs.contains(&parent) {
            return Err(format!(
                "`{id}` at `{}` has no parent directory, and no rename in flight covers it",
                doc.path
            ));
        }
    }
    Ok(())
}

/// Invariant 3: no two incompatible grants overlap. A target lock (X, or S) counts as granted
/// once it is valid and its owner's intention locks on every ancestor are in place;
/// mid-acquisition (items written out of order after a failed bulk item) or mid-release a set
/// is incomplete, and grants nothing. Two granted targets of different owners on overlapping
/// paths (one at or under the other) must both be S; and on every group document the valid
/// holders' modes must be pairwise compatible (Gray's table).
async fn check_locks(store: &SqliteStore) -> Result<(), String> {
    let now = LeaseClock::new().now_ms();
    let docs: BTreeMap<String, (Observed, Option<String>)> = live(store, &lock_index_name(INDEX))
        .await?
        .into_iter()
        .map(|d| {
            let path = d
                .source
                .get("path")
                .and_then(|p| p.as_str())
                .map(str::to_owned);
            (d.id, (Observed::from_source(&d.source), path))
        })
        .collect();
    // (locked path, owner, mode, expiry) of every X and S.
    let mut targets: Vec<(String, String, LockMode, i64)> = Vec::new();
    for (id, (observed, lock_path)) in &docs {
        match observed {
            Observed::Exclusive {
                process_id: Some(pid),
                expires_at: Some(t),
                ..
            } => {
                if let Some(p) = lock_path {
                    targets.push((p.clone(), pid.clone(), LockMode::Exclusive, *t));
                }
            }
            Observed::Group { holders, .. } => {
                let valid: Vec<(&String, LockMode)> = holders
                    .iter()
                    .filter(|(_, h)| h.expires_at >= now)
                    .map(|(pid, h)| (pid, h.mode))
                    .collect();
                for (i, (pa, ma)) in valid.iter().enumerate() {
                    for (pb, mb) in &valid[i + 1..] {
                        if !ma.compatible(*mb) {
                            return Err(format!(
                                "lock document `{id}` holds {ma} ({pa}) and {mb} ({pb}) at once"
                            ));
                        }
                    }
                }
                for (pid, h) in holders {
                    if h.mode == LockMode::Shared {
                        if let Some(p) = lock_path {
                            targets.push((p.clone(), pid.clone(), LockMode::Shared, h.expires_at));
                        }
                    }
                }
            }
            Observed::Exclusive { .. } => {}
        }
    }
    let mut granted: Vec<(FsPath, String, LockMode)> = Vec::new();
    for (lock_path, pid, mode, expires_at) in targets {
        if expires_at < now {
            continue;
        }
        let locked = path(&lock_path)?;
        let complete = locked.ancestors().into_iter().skip(1).all(|ancestor| {
            ancestor.is_root()
                || matches!(docs.get(&tree_lock_id(&ancestor)),
                    Some((Observed::Group { holders, .. }, _)) if holders.contains_key(&pid))
        });
        if complete {
            granted.push((locked, pid, mode));
        }
    }
    for (i, (a, pa, ma)) in granted.iter().enumerate() {
        for (b, pb, mb) in &granted[i + 1..] {
            let both_read = *ma == LockMode::Shared && *mb == LockMode::Shared;
            if pa != pb && a.overlaps(b) && !both_read {
                return Err(format!(
                    "granted {ma} on `{a}` ({pa}) and {mb} on `{b}` ({pb}) overlap"
                ));
            }
        }
    }
    Ok(())
}

/// What must hold once everything has expired and a fault-free recovery has settled: no
/// lock, no journal entry, and every document exactly where the model puts it.
pub async fn check_settled(store: &SqliteStore, expected: &Expected) -> Result<(), String> {
    check(store, expected).await?;
    let locks = live(store, &lock_index_name(INDEX)).await?;
    if !locks.is_empty() {
        let ids: Vec<&str> = locks.iter().map(|d| d.id.as_str()).collect();
        return Err(format!("locks left: {ids:?}"));
    }
    let journal = open_entries(store).await?;
    if !journal.is_empty() {
        return Err(format!("{} journal entries left", journal.len()));
    }
    for d in live(store, INDEX).await? {
        let at = d.source["path"].as_str().unwrap_or_default();
        if at != expected.model[&d.id] {
            return Err(format!(
                "`{}` is at `{at}`, the committed renames put it at `{}`",
                d.id, expected.model[&d.id]
            ));
        }
    }
    Ok(())
}
