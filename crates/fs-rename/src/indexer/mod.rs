//! Indexing a local directory tree into the tree index, and keeping it in step with the disk.
//!
//! A run has four steps:
//!
//! 1. the walk (`walk.rs`: walkdir on the blocking pool, never following symbolic links),
//!    which records each entry's identity on disk (device and inode), and goes on while
//!    step 2 takes its lock and reads the store;
//! 2. under the tree lock on the target (no rename can move it, or anything above it,
//!    meanwhile), one read of what the store holds there: an identity found at a new path
//!    whose old path is gone was moved on disk (`moves.rs`). Documents are matched by path,
//!    those the moves will carry by the path they will have: unchanged ones left alone,
//!    changed ones rewritten (conditional on the version read), new ones created; what is
//!    new or changed where the moves go is left for after them;
//! 3. the moves: each document moved is renamed in the store (a tree-locked, journaled
//!    rename: ids and every field kept), not deleted and created again; if they left
//!    anything to do, a second pass like step 2 does it;
//! 4. documents with no counterpart on disk are reported, and with `prune` deleted, a
//!    journaled `rm -r` of each topmost one under its own tree locks (`prune.rs`).
//!
//! A directory moved, and nothing else changed, is thus one read of the target, made while
//! the walk runs, and one rename that does not read the subtree again (on the embedded
//! store: see `known_subtrees`).
//!
//! `docs/indexing.md` describes what is and is not detected.

mod content;
mod moves;
mod one;
mod prune;
mod walk;
mod watch;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::{FsDoc, FsPath};
use fs_store::BulkOp;
use serde::Serialize;

use crate::error::{RenameError, Result};
use crate::ops::{mkdir, to_source, under_write_lock, LockSettings};
use crate::tree::{Entry, FsTree};
use content::Plan;
pub use content::DEFAULT_CONTENT_MAX;
pub use moves::Move;
use walk::{Walk, Walked};
pub use watch::{watch_dir, WatchBatch, WatchEvent, WatchOptions, WatchReport, WatchSink};

/// How [`index_dir`] works.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Documents per bulk request. Default: 1 000.
    pub batch_size: usize,
    /// Delete documents under the target that are no longer on disk. Default: false.
    pub prune: bool,
    /// The locks' lease and wait.
    pub locks: LockSettings,
    /// Stores the text of UTF-8 files up to this many bytes in their documents' `content`
    /// (`None`: no text is read). Default: `None`.
    pub content: Option<u64>,
}

impl Default for IndexOptions {
    fn default() -> IndexOptions {
        IndexOptions {
            batch_size: 1_000,
            prune: false,
            content: None,
            locks: LockSettings::default(),
        }
    }
}

/// Progress of an indexing run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexProgress {
    /// Entries walked so far (indexed or skipped).
    pub walked: u64,
    /// Documents created or updated so far.
    pub written: u64,
}

/// An entry that was not indexed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The local path (non-UTF-8 bytes shown as U+FFFD).
    pub path: String,
    /// Why it was skipped.
    pub reason: String,
}

/// What an indexing run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IndexReport {
    /// The directory indexed.
    pub dir: PathBuf,
    /// Where it was indexed.
    pub at: String,
    /// Files indexed (created, updated or unchanged).
    pub files: u64,
    /// Directories indexed.
    pub dirs: u64,
    /// Bytes in the files indexed.
    pub bytes: u64,
    /// Documents created.
    pub created: u64,
    /// Documents rewritten because the entry changed.
    pub updated: u64,
    /// Documents already up to date.
    pub unchanged: u64,
    /// Files whose text was stored in this run (`content`).
    pub texts: u64,
    /// Renames made because entries moved on disk (a directory moved is one).
    pub moves: u64,
    /// Documents those renames moved.
    pub moved: u64,
    /// The first hundred moves.
    pub move_list: Vec<Move>,
    /// Moves found that the store refused to apply, with the reason (their entries were
    /// indexed as new; their old documents are stale).
    pub moves_failed: Vec<String>,
    /// Documents under the target with no entry on disk any more.
    pub stale: u64,
    /// Of those, deleted (with `prune`).
    pub pruned: u64,
    /// Symbolic links (not followed, not indexed).
    pub symlinks: u64,
    /// Entries skipped for any reason, symbolic links included.
    pub skipped_count: u64,
    /// The first hundred skipped entries.
    pub skipped: Vec<Skipped>,
    /// Writes the store refused.
    pub failed: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl IndexReport {
    /// Returns documents written (created or updated) per second.
    pub fn docs_per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            (self.files + self.dirs) as f64 / secs
        } else {
            0.0
        }
    }

    fn skip(&mut self, skipped: Skipped) {
        self.skipped_count += 1;
        if self.skipped.len() < 100 {
            self.skipped.push(skipped);
        }
    }
}

/// A callback told of progress after every batch.
pub type IndexProgressSink = Arc<dyn Fn(IndexProgress) + Send + Sync>;

/// Indexes the local directory `dir` at `at` in the tree, creating `at`'s missing parents.
///
/// # Errors
/// [`RenameError::Local`] if `dir` is not a readable directory; lock and store failures.
/// Unreadable entries, names that are not UTF-8 and symbolic links are not errors: they are
/// counted and listed in the report.
pub async fn index_dir(
    tree: &FsTree,
    dir: &Path,
    at: &FsPath,
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
) -> Result<IndexReport> {
    tree.ensure_indices().await?;
    // An index created before identities has no mapping for them yet.
    let context = format!("adding identities to the mapping of `{}`", tree.index());
    tree.store()
        .extend_mapping(tree.index(), &fs_model::tree_index_mappings())
        .await
        .map_err(RenameError::store(context))?;
    index_prepared(tree, dir, at, options, progress).await
}

/// [`index_dir`] on a tree whose indices and mapping are known to be ready: the watcher's
/// later runs (a subtree, a rescan), which need not ask again each time.
async fn index_prepared(
    tree: &FsTree,
    dir: &Path,
    at: &FsPath,
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
) -> Result<IndexReport> {
    let started = Instant::now();
    let (mut report, stale) = index_unpruned(tree, dir, at, options, progress).await?;
    if options.prune && !stale.is_empty() {
        report.pruned = prune::prune(tree, dir, stale, options, &mut report).await?;
        tree.refresh().await?;
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Steps 1 to 3 of [`index_prepared`]; returns the report and what is stale, whatever
/// `options.prune` says (the watcher decides for itself when to remove what it found gone).
async fn index_unpruned(
    tree: &FsTree,
    dir: &Path,
    at: &FsPath,
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
) -> Result<(IndexReport, Vec<Entry>)> {
    let meta = std::fs::metadata(dir).map_err(|e| local(dir, &e.to_string()))?;
    if !meta.is_dir() {
        return Err(local(dir, "not a directory"));
    }
    if let Some(parent) = at.parent() {
        mkdir(tree, &options.locks, &parent, true).await?;
    }
    let started = Instant::now();
    let mut report = IndexReport {
        dir: dir.to_owned(),
        at: at.to_string(),
        ..IndexReport::default()
    };
    // The walk goes on while the tree lock is taken and the store read.
    let mut walk = Walk::start(dir, at);

    // Step 2 and 3 at once, under the tree lock on the target: one read of what the store
    // holds finds the moves, and brings up to date everything the moves do not carry.
    let locked = locked_pass(
        tree,
        &mut walk,
        (dir, at),
        options,
        progress,
        &mut report,
        true,
    )
    .await?;
    let mut stale = locked.stale;
    if !locked.moves.is_empty() {
        // The moves, each a rename under its own locks (which the target's lock would have
        // kept out).
        let moves = moves::apply_moves(
            tree,
            (dir, at),
            (&locked.moves, locked.known),
            &locked.present,
            options,
        )
        .await?;
        report.moves = moves.done.len() as u64;
        report.moved = moves.done.iter().map(|m| m.documents).sum();
        report.move_list = moves.done.into_iter().take(100).collect();
        let failed = !moves.failed.is_empty();
        report.moves_failed = moves.failed;
        if locked.deferred || failed {
            // What the moves did not bring up to date (entries new or changed inside what
            // moved, a move that failed): a second pass, which reads the target again.
            stale = second_pass(tree, &mut walk, (dir, at), options, &mut report).await?;
        }
    }
    report.stale = stale.len() as u64;
    tree.refresh().await?;
    report.elapsed = started.elapsed();
    Ok((report, stale))
}

/// The documents under `at` as the store has them now, in the order read (by path, on the
/// stores that scan in that order), with where each path is among them.
async fn existing_under(tree: &FsTree, at: &FsPath) -> Result<Existing> {
    tree.refresh().await?;
    let mut existing = Existing::default();
    tree.for_each_page(at, 1_000, |page| {
        for entry in page {
            existing
                .slot
                .insert(entry.doc.path.clone(), existing.read.len());
            existing.read.push(Some(entry));
        }
        Ok(())
    })
    .await?;
    Ok(existing)
}

/// What [`existing_under`] read: the entries, each taken out when it is written or found
/// stale; `slot` holds each path not yet matched (the moves' documents are matched by the
/// path they will have, in `locked_index`).
#[derive(Default)]
struct Existing {
    read: Vec<Option<Entry>>,
    slot: HashMap<FsPath, usize>,
}

impl Existing {
    /// Takes out the entry at `path`, if it is there and not matched yet.
    fn take(&mut self, path: &FsPath) -> Option<Entry> {
        let i = self.slot.remove(path)?;
        self.read.get_mut(i)?.take()
    }
}

fn local(path: &Path, message: &str) -> RenameError {
    RenameError::Local {
        path: path.display().to_string(),
        message: message.to_owned(),
    }
}

/// [`locked_index`] under the tree lock on `at`, released after it.
async fn locked_pass(
    tree: &FsTree,
    walk: &mut Walk,
    (dir, at): (&Path, &FsPath),
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
    report: &mut IndexReport,
    find_moves: bool,
) -> Result<Locked> {
    let client = options
        .locks
        .client(tree, format!("index {} as {at}", dir.display()));
    let guard = client.lock_tree(at).await?;
    let work = locked_index(tree, walk, (dir, at), options, progress, report, find_moves);
    under_write_lock(tree, guard, work).await
}

/// What the locked pass found and left to do.
struct Locked {
    /// The moves found, to be made after the pass.
    moves: Vec<moves::Planned>,
    /// For each move, its source's subtree as read here, where the rename can use it.
    known: Vec<Option<Vec<Entry>>>,
    /// Entries the moves will not bring up to date (new or changed inside what moves): a
    /// second pass is needed after them.
    deferred: bool,
    /// Paths the store holds after the pass, outside what moves.
    present: HashSet<FsPath>,
    /// Documents not on disk (at the path the moves will give them).
    stale: Vec<Entry>,
}

/// Steps 2 and 3, under the tree lock on `at`: reads what the store holds under `at` and,
/// with `find_moves`, finds the moves in it. Documents the moves will carry are matched with
/// the walk at the path they will have, and left to the moves; entries new or changed in
/// the moves' area are left to a second pass; everything else is created and updated here,
/// with the text of the files that need it read (see `content.rs`).
async fn locked_index(
    tree: &FsTree,
    walk: &mut Walk,
    (dir, at): (&Path, &FsPath),
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
    report: &mut IndexReport,
    find_moves: bool,
) -> Result<Locked> {
    let (existing, walked) = tokio::join!(existing_under(tree, at), walk.entries());
    let (mut existing, walked) = (existing?, walked?);
    let planned = if find_moves {
        moves::find_moves((dir, at), existing.read.iter().flatten(), walked)
    } else {
        Vec::new()
    };
    let pairs = || planned.iter().map(|m| (&m.from, &m.to));
    let in_area = |p: &FsPath| {
        planned
            .iter()
            .any(|m| p.is_inside(&m.from) || p.is_inside(&m.to))
    };
    // The documents the moves carry, by the path they will have: where they are in what was
    // read (at their old path), and whether the walk found them there.
    let mut carried: HashMap<FsPath, (usize, bool)> = HashMap::new();
    if !planned.is_empty() {
        carried.reserve(existing.slot.len());
        existing.slot.retain(|path, &mut i| {
            let to = moves::after(pairs(), path);
            if to == *path {
                return true;
            }
            carried.insert(to, (i, false));
            false
        });
    }
    let mut deferred = false;
    let mut present = HashSet::from([at.clone()]);
    let batch_size = options.batch_size.max(1);
    let mut walked_so_far = 0u64;
    for batch in walked.chunks(batch_size) {
        walked_so_far += batch.len() as u64;
        // What each entry needs; the files whose text is wanted are read together, off the
        // runtime's threads, before the batch is written.
        let mut planned_writes: Vec<(Option<Entry>, FsDoc, Plan)> = Vec::new();
        for item in batch {
            let doc = match item {
                Walked::Doc(doc) => doc,
                Walked::Symlink(s) => {
                    report.symlinks += 1;
                    report.skip(s.clone());
                    continue;
                }
                Walked::Skipped(s) => {
                    report.skip(s.clone());
                    continue;
                }
            };
            if doc.is_dir() {
                report.dirs += 1;
            } else {
                report.files += 1;
                report.bytes += doc.size;
            }
            if let Some((i, found)) = carried.get_mut(&doc.path) {
                *found = true;
                let as_read = existing.read.get(*i).and_then(Option::as_ref);
                if as_read
                    .is_some_and(|e| content::up_to_date_once_moved(&e.doc, doc, options.content))
                {
                    report.unchanged += 1;
                } else {
                    deferred = true;
                }
                continue;
            }
            if in_area(&doc.path) {
                deferred = true;
                continue;
            }
            let entry = existing.take(&doc.path);
            let plan = content::plan(entry.as_ref().map(|e| &e.doc), doc, options.content);
            if plan == Plan::Unchanged {
                report.unchanged += 1;
                present.insert(doc.path.clone());
                continue;
            }
            planned_writes.push((entry, doc.clone(), plan));
        }
        let texts = read_texts(dir, at, &planned_writes, options.content).await?;
        let mut ops = Vec::new();
        let mut paths = Vec::new();
        for ((entry, doc, plan), text) in planned_writes.into_iter().zip(texts) {
            let had_text = text.is_some();
            let doc = match (plan, entry) {
                // The file holds no text: its document stays as it is.
                (Plan::Fill, _) if !had_text => {
                    report.unchanged += 1;
                    present.insert(doc.path);
                    continue;
                }
                (_, Some(entry)) => {
                    let doc = doc.with_content(text);
                    ops.push(BulkOp::Index {
                        source: to_source(tree, &entry.id, &doc)?,
                        id: entry.id,
                        if_version: Some(entry.version),
                    });
                    doc
                }
                (_, None) => {
                    let id = FsDoc::new_id();
                    let doc = doc.with_content(text);
                    ops.push(BulkOp::Create {
                        source: to_source(tree, &id, &doc)?,
                        id,
                    });
                    doc
                }
            };
            let created = matches!(ops.last(), Some(BulkOp::Create { .. }));
            paths.push((doc.path, created, had_text));
        }
        if !ops.is_empty() {
            let context = format!("indexing under `{at}`");
            let results = tree
                .store()
                .bulk(tree.index(), ops)
                .await
                .map_err(RenameError::store(context))?;
            for ((path, created, had_text), result) in paths.into_iter().zip(results) {
                match result {
                    Ok(_) => {
                        if created {
                            report.created += 1;
                        } else {
                            report.updated += 1;
                        }
                        report.texts += u64::from(had_text);
                        present.insert(path);
                    }
                    Err(e) => {
                        report.failed += 1;
                        report.skip(Skipped {
                            path: path.to_string(),
                            reason: format!("{REFUSED}: {e}"),
                        });
                    }
                }
            }
        }
        if let Some(sink) = &progress {
            sink(IndexProgress {
                walked: walked_so_far,
                written: report.created + report.updated,
            });
        }
    }
    tree.refresh().await?;
    // Not on disk: what is left of the store's documents, those the moves carry at the path
    // they will have.
    let Existing { mut read, slot } = existing;
    let mut stale: Vec<Entry> = slot.into_values().filter_map(|i| read[i].take()).collect();
    // What the moves carry stays in `read`, in the order read: the rest is taken out.
    let mut moving = vec![false; read.len()];
    for (to, (i, found)) in carried {
        moving[i] = true;
        if let (false, Some(entry)) = (found, &read[i]) {
            stale.push(Entry {
                doc: placed(entry.doc.clone(), to),
                ..entry.clone()
            });
        }
    }
    let carried_as_read = read
        .into_iter()
        .zip(moving)
        .filter_map(|(entry, moving)| entry.filter(|_| moving))
        .collect();
    let known = known_subtrees(tree, &planned, carried_as_read);
    Ok(Locked {
        moves: planned,
        known,
        deferred,
        present,
        stale,
    })
}

/// For each of `planned`, the documents of its source's subtree as `existing` holds them,
/// for the rename to write without reading them again ([`Renamer`] counts them under its
/// locks, and reads them if anything changed): only for a move whose subtree no move before
/// it touches (else the versions read are not those it will find), and only on a store that
/// makes several writes in one transaction, where the rename's writes of known documents
/// cost what its pipelined scan does; on Elasticsearch the scan overlaps its reads with its
/// writes, and reading again costs less than writing one page at a time.
///
/// [`Renamer`]: crate::Renamer
fn known_subtrees(
    tree: &FsTree,
    planned: &[moves::Planned],
    carried: Vec<Entry>,
) -> Vec<Option<Vec<Entry>>> {
    let mut known: Vec<Option<Vec<Entry>>> = vec![None; planned.len()];
    if !tree.store().chains_bulk() {
        return known;
    }
    let touches = |a: &FsPath, b: &FsPath| a.is_inside(b) || b.is_inside(a);
    for (k, m) in planned.iter().enumerate() {
        let untouched = planned[..k]
            .iter()
            .all(|e| !touches(&m.from, &e.from) && !touches(&m.from, &e.to));
        if untouched {
            // A directory's move carries nearly all of them, a file's one.
            let room = if k == 0 { carried.len() } else { 0 };
            known[k] = Some(Vec::with_capacity(room));
        }
    }
    // Each document goes with the first move whose source holds it: an untouched move's
    // documents are no earlier move's.
    for entry in carried {
        let first = planned
            .iter()
            .position(|m| entry.doc.path.is_inside(&m.from));
        if let Some(Some(entries)) = first.and_then(|k| known.get_mut(k)) {
            entries.push(entry);
        }
    }
    // In path order, as a scan writes them (the index on paths is updated in order): the
    // order read, on a store that reads in that order.
    for entries in known.iter_mut().flatten() {
        if !entries.is_sorted_by(|a, b| a.doc.path <= b.doc.path) {
            entries.sort_unstable_by(|a, b| a.doc.path.cmp(&b.doc.path));
        }
    }
    known
}

/// `doc` as a rename puts it at `path`: the path and what derives from it changed, the rest
/// kept.
fn placed(doc: FsDoc, path: FsPath) -> FsDoc {
    FsDoc {
        parent: path.parent(),
        name: path.name().to_owned(),
        depth: path.depth(),
        path,
        ..doc
    }
}

/// The reason given for an entry the store refused to write.
const REFUSED: &str = "the store refused it";

/// The pass after the moves, when they left entries to bring up to date: the whole target
/// read again under its tree lock, and what is not up to date written. Returns what is
/// stale. Its counts are added to `report` (what the first pass wrote, this one finds
/// unchanged).
async fn second_pass(
    tree: &FsTree,
    walk: &mut Walk,
    (dir, at): (&Path, &FsPath),
    options: &IndexOptions,
    report: &mut IndexReport,
) -> Result<Vec<Entry>> {
    let mut again = IndexReport::default();
    let locked = locked_pass(tree, walk, (dir, at), options, None, &mut again, false).await?;
    let first_wrote = report.created + report.updated;
    report.created += again.created;
    report.updated += again.updated;
    report.texts += again.texts;
    report.failed += again.failed;
    report.unchanged = again.unchanged.saturating_sub(first_wrote);
    for skipped in again.skipped {
        if skipped.reason.starts_with(REFUSED) {
            report.skip(skipped);
        }
    }
    Ok(locked.stale)
}

/// Reads the text of each planned file that wants it, on the blocking pool; `None` for the
/// others and for files that hold no text.
async fn read_texts(
    dir: &Path,
    at: &FsPath,
    planned: &[(Option<Entry>, FsDoc, Plan)],
    content: Option<u64>,
) -> Result<Vec<Option<String>>> {
    let Some(max) = content else {
        return Ok(vec![None; planned.len()]);
    };
    let locals: Vec<Option<PathBuf>> = planned
        .iter()
        .map(|(_, doc, plan)| match plan {
            Plan::Write { read: true } | Plan::Fill => walk::local_path(dir, at, &doc.path),
            _ => None,
        })
        .collect();
    if locals.iter().all(Option::is_none) {
        return Ok(vec![None; planned.len()]);
    }
    tokio::task::spawn_blocking(move || {
        locals
            .iter()
            .map(|local| local.as_deref().and_then(|l| content::read_text(l, max)))
            .collect()
    })
    .await
    .map_err(|e| local(dir, &format!("reading the files' text failed: {e}")))
}
