//! What must hold after every step of a simulation, whatever is running, dead or half-done.
//!
//! Read from the store's live tables ([`SqliteStore::snapshot`]), never through a search: a
//! checker that refreshed would publish writes on behalf of the code it checks and hide a
//! forgotten refresh.

use std::collections::{BTreeMap, BTreeSet};

use fs_locks::{LeaseClock, LockMode, Observed};
use fs_model::{journal_index_name, lock_index_name, tree_lock_id, DocKind, FsDoc, FsPath};
use fs_rename::{JobKind, JournalEntry};
use fs_store::{SqliteStore, StoreError, StoredDoc};

use crate::INDEX;

/// What the simulation knows independently of the store: every document that should exist,
/// by id, as the jobs committed so far (in commit order) left it. Renames move documents
/// (ids and metadata stay), copies add documents (ids from [`FsDoc::copy_id`], metadata of
/// their source), deletes remove them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The model: each document as it should be stored.
    pub docs: BTreeMap<String, FsDoc>,
}

impl Expected {
    /// A committed rename: everything at or under `from` now lies under `to`.
    pub fn rename(&mut self, from: &FsPath, to: &FsPath) {
        for doc in self.docs.values_mut() {
            if doc.path.is_inside(from) {
                *doc = doc.renamed(from, to).expect("rebase");
            }
        }
    }

    /// The documents a copy of `from` to `to` journaled as `job` creates, by id.
    pub fn copies(&self, job: &str, from: &FsPath, to: &FsPath) -> BTreeMap<String, FsDoc> {
        self.docs
            .iter()
            .filter(|(_, doc)| doc.path.is_inside(from))
            .map(|(id, doc)| {
                let copy = doc.renamed(from, to).expect("rebase");
                (FsDoc::copy_id(job, id), copy)
            })
            .collect()
    }

    /// A committed copy: adds its documents; returns how many, or why it cannot be.
    pub fn copy(&mut self, job: &str, from: &FsPath, to: &FsPath) -> Result<usize, String> {
        let copies = self.copies(job, from, to);
        if copies.is_empty() {
            return Err(format!("nothing at `{from}` to copy"));
        }
        if let Some(taken) = copies.keys().find(|id| self.docs.contains_key(*id)) {
            return Err(format!("copy id `{taken}` is taken already"));
        }
        let n = copies.len();
        self.docs.extend(copies);
        Ok(n)
    }

    /// A committed delete: removes everything at or under `path`; returns how many.
    pub fn delete(&mut self, path: &FsPath) -> usize {
        let before = self.docs.len();
        self.docs.retain(|_, doc| !doc.path.is_inside(path));
        before - self.docs.len()
    }

    /// What a listing of `path` shows (everything under a directory, or the file itself):
    /// `None` if nothing is at `path`.
    pub fn listing(&self, path: &FsPath) -> Option<BTreeMap<String, FsDoc>> {
        let top = self.docs.values().find(|doc| doc.path == *path)?;
        Some(
            self.docs
                .iter()
                .filter(|(_, doc)| match top.kind {
                    DocKind::File => doc.path == *path,
                    DocKind::Dir => doc.path.is_descendant_of(path),
                })
                .map(|(id, doc)| (id.clone(), doc.clone()))
                .collect(),
        )
    }
}

/// A job in flight: its journal entry is open, so the documents it covers may be anywhere
/// between before and after it.
pub struct InFlight {
    pub kind: JobKind,
    pub job: String,
    pub from: FsPath,
    pub to: FsPath,
}

impl InFlight {
    fn describe(&self) -> String {
        format!(
            "{} (journal {})",
            self.kind.describe(self.from.as_str(), self.to.as_str()),
            self.job
        )
    }
}

/// A waiter registration seen on a lock document: the locked path (the document id where it
/// records none), the waiting process, and the registration's expiry.
pub type Waiter = (String, String, i64);

/// What a check saw besides its verdict: the waiter registrations in the lock index.
#[derive(Debug, Default)]
pub struct Seen {
    pub waiters: Vec<Waiter>,
}

async fn live(store: &SqliteStore, index: &str) -> Result<Vec<StoredDoc>, String> {
    match store.snapshot(index).await {
        Ok(docs) => Ok(docs),
        // Created lazily (the journal, on the first job).
        Err(StoreError::IndexNotFound { .. }) => Ok(Vec::new()),
        Err(e) => Err(format!("reading `{index}`: {e}")),
    }
}

/// The journal's entries by id, without its fences (tombstones, which hold no job).
pub async fn open_entries(store: &SqliteStore) -> Result<BTreeMap<String, JournalEntry>, String> {
    let mut entries = BTreeMap::new();
    for d in live(store, &journal_index_name(INDEX)).await? {
        if d.source.get("state").and_then(|s| s.as_str()) == Some("fenced") {
            continue;
        }
        let entry: JournalEntry = serde_json::from_value(d.source)
            .map_err(|e| format!("journal entry `{}` unreadable: {e}", d.id))?;
        entries.insert(d.id, entry);
    }
    Ok(entries)
}

pub fn path(s: &str) -> Result<FsPath, String> {
    FsPath::parse(s).map_err(|e| format!("bad path `{s}`: {e}"))
}

/// Checks every invariant; returns the first violation found.
///
/// 1. The documents are exactly the model's, but for the jobs in flight: a document an open
///    delete covers may be gone already, and a document an open copy makes may be there
///    already, with exactly its copy id and content. Each stores consistent `parent`, `name`,
///    `depth`.
/// 2. No path is stored twice.
/// 3. No two incompatible grants overlap (S and X targets, Gray's table per document).
/// 4. No committed job's effect is missing: every document of the model has its metadata,
///    and lies where the model puts it or belongs to a rename in flight and lies at its model
///    path moved from that rename's source to its destination (not yet committed).
/// 5. The tree is well-formed: the model's, always; the store's, outside the renames and
///    copies in flight (every document's parent exists and is a directory). A delete in
///    flight is no excuse: it deletes deepest first, so it never leaves an orphan.
pub async fn check(store: &SqliteStore, expected: &Expected) -> Result<Seen, String> {
    let docs = live(store, INDEX).await?;
    let mut actual: BTreeMap<String, FsDoc> = BTreeMap::new();
    for d in docs {
        // A copy's claim on an id is no part of the tree; the copy's conditional write
        // replaces it, and recovery sweeps those a job left (or sent late, paused).
        if FsDoc::claim_job(&d.source).is_some() {
            continue;
        }
        let doc: FsDoc = serde_json::from_value(d.source)
            .map_err(|e| format!("document `{}` is not a tree document: {e}", d.id))?;
        if !doc.is_consistent() {
            return Err(format!("document `{}` is inconsistent: {doc:?}", d.id));
        }
        actual.insert(d.id, doc);
    }
    let mut in_flight = Vec::new();
    for (id, entry) in open_entries(store).await? {
        in_flight.push(InFlight {
            kind: entry.kind,
            job: id,
            from: path(&entry.from)?,
            to: path(&entry.to)?,
        });
    }

    // 1. The same documents, but for what the jobs in flight add or remove.
    let mut may_appear: BTreeMap<String, (FsDoc, &InFlight)> = BTreeMap::new();
    for f in in_flight.iter().filter(|f| f.kind == JobKind::Copy) {
        for (id, copy) in expected.copies(&f.job, &f.from, &f.to) {
            may_appear.insert(id, (copy, f));
        }
    }
    let vanished: Vec<&String> = expected
        .docs
        .iter()
        .filter(|(id, doc)| {
            !actual.contains_key(*id)
                && !in_flight
                    .iter()
                    .any(|f| f.kind == JobKind::Delete && doc.path.is_inside(&f.from))
        })
        .map(|(id, _)| id)
        .collect();
    let mut appeared = Vec::new();
    for (id, doc) in actual
        .iter()
        .filter(|(id, _)| !expected.docs.contains_key(*id))
    {
        match may_appear.get(id) {
            Some((copy, _)) if copy == doc => {}
            Some((copy, f)) => {
                return Err(format!(
                    "`{id}` holds {doc:?}, but the copy {} makes there is {copy:?}",
                    f.describe()
                ))
            }
            None => appeared.push(id),
        }
    }
    if !appeared.is_empty() || !vanished.is_empty() {
        return Err(format!(
            "documents appeared {appeared:?} or vanished {vanished:?} (no job in flight \
             explains it)"
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

    // 3. No incompatible grants overlap.
    let waiters = check_locks(store).await?;

    // 4. Every document of the model where the committed jobs put it, or in flight.
    for (id, doc) in &actual {
        let Some(model) = expected.docs.get(id) else {
            continue;
        };
        if (doc.kind, doc.size, doc.modified) != (model.kind, model.size, model.modified) {
            return Err(format!(
                "`{id}` has changed: {doc:?}, the model says {model:?}"
            ));
        }
        if doc.path == model.path {
            continue;
        }
        let moved_early = in_flight.iter().any(|f| {
            f.kind == JobKind::Rename
                && model.path.is_inside(&f.from)
                && model.path.rebase(&f.from, &f.to).as_ref() == Ok(&doc.path)
        });
        if !moved_early {
            return Err(format!(
                "`{id}` is at `{}`, but the committed jobs put it at `{}` and no rename \
                 in flight explains the difference",
                doc.path, model.path
            ));
        }
    }

    // 5. Well-formed: the model everywhere, the store outside what is in flight.
    let model_dirs: BTreeSet<&FsPath> = expected
        .docs
        .values()
        .filter(|d| d.kind == DocKind::Dir)
        .map(|d| &d.path)
        .collect();
    for (id, doc) in &expected.docs {
        let parent = doc.path.parent().ok_or("a document at the root")?;
        if !parent.is_root() && !model_dirs.contains(&parent) {
            return Err(format!(
                "the model puts `{id}` at `{}`, whose parent is no directory",
                doc.path
            ));
        }
    }
    let dirs: BTreeSet<&FsPath> = actual
        .values()
        .filter(|d| d.kind == DocKind::Dir)
        .map(|d| &d.path)
        .collect();
    for (id, doc) in &actual {
        let moving = in_flight.iter().any(|f| match f.kind {
            JobKind::Rename => doc.path.is_inside(&f.from) || doc.path.is_inside(&f.to),
            // A page's creates may land in any order (a failed item is sent again).
            JobKind::Copy => doc.path.is_inside(&f.to),
            JobKind::Delete => false,
        });
        let Some(parent) = doc.path.parent() else {
            return Err(format!("`{id}` is stored at the root"));
        };
        if !moving && !parent.is_root() && !dirs.contains(&parent) {
            return Err(format!(
                "`{id}` at `{}` has no parent directory, and no rename or copy in flight covers it",
                doc.path
            ));
        }
    }
    Ok(Seen { waiters })
}

/// Invariant 3: no two incompatible grants overlap. A target lock (X, or S) counts as granted
/// once it is valid and its owner's intention locks on every ancestor are in place;
/// mid-acquisition (items written out of order after a failed bulk item) or mid-release a set
/// is incomplete, and grants nothing. Two granted targets of different owners on overlapping
/// paths (one at or under the other) must both be S; and on every group document the valid
/// holders' modes must be pairwise compatible (Gray's table). Returns the waiter
/// registrations it saw.
async fn check_locks(store: &SqliteStore) -> Result<Vec<Waiter>, String> {
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
    let mut waiters = Vec::new();
    // (locked path, owner, mode, expiry) of every X and S.
    let mut targets: Vec<(String, String, LockMode, i64)> = Vec::new();
    for (id, (observed, lock_path)) in &docs {
        for (pid, w) in observed.waiters() {
            let label = lock_path.clone().unwrap_or_else(|| id.clone());
            waiters.push((label, pid.clone(), w.expires_at));
        }
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
    Ok(waiters)
}

/// What must hold once everything has expired and a fault-free recovery has settled: no
/// lock document (no holder, and no waiter registration: a dead waiter's is gone), no
/// journal entry, and exactly the model's documents, each exactly as the model has it. So
/// every copy made its whole subtree (the ids [`FsDoc::copy_id`] gives, under the
/// destination, with its source's metadata) or nothing, and every delete removed its whole
/// subtree or nothing.
pub async fn check_settled(store: &SqliteStore, expected: &Expected) -> Result<(), String> {
    check(store, expected).await?;
    let locks = live(store, &lock_index_name(INDEX)).await?;
    let now = LeaseClock::new().now_ms();
    for lock in &locks {
        let observed = Observed::from_source(&lock.source);
        if let Some((pid, w)) = observed.waiters().iter().find(|(_, w)| w.expires_at < now) {
            return Err(format!(
                "lock document `{}` keeps the registration of waiter {pid} ({}), expired {} ms \
                 ago, after recovery",
                lock.id,
                w.holder,
                now - w.expires_at
            ));
        }
    }
    if !locks.is_empty() {
        let ids: Vec<&str> = locks.iter().map(|d| d.id.as_str()).collect();
        return Err(format!("locks left: {ids:?}"));
    }
    let journal = open_entries(store).await?;
    if !journal.is_empty() {
        return Err(format!("{} journal entries left", journal.len()));
    }
    for d in live(store, INDEX).await? {
        if let Some(job) = FsDoc::claim_job(&d.source) {
            return Err(format!(
                "the claim `{}` of copy job {job} is left after recovery",
                d.id
            ));
        }
        let doc: FsDoc = serde_json::from_value(d.source).map_err(|e| e.to_string())?;
        if expected.docs.get(&d.id) != Some(&doc) {
            return Err(format!(
                "`{}` is {doc:?}, the committed jobs made it {:?}",
                d.id,
                expected.docs.get(&d.id)
            ));
        }
    }
    Ok(())
}
