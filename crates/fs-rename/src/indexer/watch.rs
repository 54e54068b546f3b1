//! `index --watch`: following the directory after the first run (the `notify` crate: inotify
//! on Linux).
//!
//! Events are gathered until the directory has been quiet for the debounce (or for at most
//! ten debounces), then applied as one batch, in the order they came:
//!
//! - a rename inside the tree (inotify pairs its two halves) is a tree-locked, journaled rename
//!   in the store: a directory moved inside the tree is one rename, ids kept;
//! - every other event marks its path *dirty*: after the renames, each dirty path (the topmost
//!   ones: a dirty directory covers what is under it) is brought in step with the disk: a
//!   directory is indexed (with move detection and pruning, as `index --prune`), a file gets
//!   its document created or updated, a path gone from disk is removed from the store (a
//!   journaled `rm -r`). So a directory moved in is an index of that subtree, one moved out a
//!   delete, and a burst of writes to one file one update;
//! - a dirty path recorded before a rename of a directory above it is followed to its new
//!   place.
//!
//! The disk runs ahead of the events: when a batch is applied, the disk is as it is now. So a
//! batch cut while the events go on applies its renames only (its dirty paths wait for a quiet
//! batch, [`MAX_HOLD`] at most); a path found gone is forgotten only one batch later, when a
//! rename that explains it would have come; and a directory indexed is indexed once more in the
//! next batch, for what changed in it before its watch was in place.
//!
//! An event-queue overflow (the kernel dropped events), or an error of the watch itself, is
//! answered with a rescan: the whole tree indexed again with `--prune`, which finds what the
//! lost events would have said. The watcher never gives up on its own.
//!
//! Every change takes the same tree locks as any other job, so `fsrename mv` jobs elsewhere in
//! the store run beside it, and a job that renames a path the watcher owns is undone by the
//! watcher's next change there (the disk is the truth under the watched target); see
//! `docs/indexing.md`.

use std::collections::{BTreeSet, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use fs_model::{FsDoc, FsPath};
use fs_store::{BulkOp, Scope, SearchRequest};
use notify::event::{ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};
use serde::Serialize;

use super::content::{self, Plan};
use super::one::{describe_one, index_one, OneFile};
use super::{index_dir, IndexOptions, IndexReport};
use crate::error::{RenameError, Result};
use crate::job::Renamer;
use crate::ops::{to_source, under_write_lock};
use crate::tree::{Entry, FsTree};

/// How [`watch_dir`] works.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The first run's options; `batch_size` and the locks serve every later change too.
    pub index: IndexOptions,
    /// How long the directory must be quiet before a batch of changes is applied. Default:
    /// 250 ms.
    pub debounce: Duration,
    /// Events held between the watch and the batches at most; when it is full the watch
    /// waits, and the kernel's queue takes the rest (and overflows into a rescan). Default:
    /// 65 536.
    pub queue: usize,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            index: IndexOptions {
                prune: true,
                ..IndexOptions::default()
            },
            debounce: Duration::from_millis(250),
            queue: 65_536,
        }
    }
}

/// What one batch of changes did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WatchBatch {
    /// Events in the batch.
    pub events: u64,
    /// Renames applied.
    pub renames: u64,
    /// Directories indexed (created, moved in, or changed in ways events do not pair).
    pub indexed: u64,
    /// Files whose document was created or updated.
    pub files: u64,
    /// Paths removed from the store (deleted or moved out on disk).
    pub removed: u64,
    /// True if the batch was a rescan of the whole tree (the kernel dropped events).
    pub rescan: bool,
    /// Why it was, if it was.
    pub rescan_reason: Option<String>,
    /// What could not be applied (retried by the next change there, or the next rescan).
    pub failures: Vec<String>,
}

/// What the watch did, until it stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WatchReport {
    /// The first run.
    pub initial: IndexReport,
    /// Batches applied.
    pub batches: u64,
    /// Renames, directory indexes, file updates, removals and rescans, over all batches.
    pub renames: u64,
    /// See [`WatchBatch::indexed`].
    pub indexed: u64,
    /// See [`WatchBatch::files`].
    pub files: u64,
    /// See [`WatchBatch::removed`].
    pub removed: u64,
    /// Rescans after an overflow or a failed watch.
    pub rescans: u64,
    /// Failures, over all batches.
    pub failures: u64,
}

/// Told of the first run and of every batch.
pub enum WatchEvent<'a> {
    /// The first run is done; changes from now on are followed.
    Ready(&'a IndexReport),
    /// A batch of `events` was gathered and is about to be applied (no event is taken from
    /// the watch meanwhile).
    Applying {
        /// Events in the batch.
        events: u64,
    },
    /// A batch was applied.
    Batch(&'a WatchBatch),
}

/// A callback told of [`WatchEvent`]s.
pub type WatchSink = Arc<dyn Fn(WatchEvent<'_>) + Send + Sync>;

/// One change, as the events said it.
enum Change {
    /// A rename inside the tree: both halves, paired by inotify (which also sends each half
    /// alone, under the same tracker).
    Rename(PathBuf, PathBuf, Option<usize>),
    /// Something happened at the path; `tracker` pairs a rename's halves.
    Dirty(PathBuf, Option<usize>),
    /// Events were lost.
    Rescan(String),
}

/// Indexes `dir` at `at`, then follows it until `stop` resolves; returns what it did.
///
/// # Errors
/// The first run's errors, and a watch that cannot be set up at all (no inotify). Failures
/// of single changes are reported in the batches, not returned.
pub async fn watch_dir(
    tree: &FsTree,
    dir: &Path,
    at: &FsPath,
    options: &WatchOptions,
    stop: impl Future<Output = ()>,
    sink: Option<WatchSink>,
) -> Result<WatchReport> {
    let root = std::fs::canonicalize(dir).map_err(|e| super::local(dir, &e.to_string()))?;
    let (tx, mut rx) =
        tokio::sync::mpsc::channel::<notify::Result<notify::Event>>(options.queue.max(1));
    // Watching starts before the first run, so that nothing that happens during it is missed.
    // The handler runs on notify's thread: when the queue is full it waits there, and the
    // kernel keeps the rest (overflowing into a rescan).
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = tx.blocking_send(event);
    })
    .map_err(|e| super::local(&root, &format!("cannot watch: {e}")))?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .map_err(|e| super::local(&root, &format!("cannot watch: {e}")))?;
    let initial = index_dir(tree, &root, at, &options.index, None).await?;
    if let Some(sink) = &sink {
        sink(WatchEvent::Ready(&initial));
    }
    let mut report = WatchReport {
        initial,
        ..WatchReport::default()
    };
    let mut applier = Applier {
        tree,
        root: &root,
        at,
        options,
        recent: std::collections::VecDeque::new(),
        postponed: std::sync::Mutex::default(),
        confirmed: HashSet::new(),
        recheck: std::sync::Mutex::default(),
        rechecking: HashSet::new(),
        held: (Vec::new(), BTreeSet::new(), None),
    };
    tokio::pin!(stop);
    loop {
        // Removals waiting for the next batch get one after the debounce, events or not.
        let waiting = applier.has_postponed();
        let first = tokio::select! {
            event = rx.recv() => Some(event),
            () = tokio::time::sleep(options.debounce), if waiting => None,
            () = &mut stop => break,
        };
        let mut changes = Vec::new();
        let mut events = 0u64;
        // Whether the batch ends because the directory was quiet for the debounce (or it is
        // the wake-up for what earlier batches left), not because the events went on.
        let mut quiet = true;
        match first {
            Some(Some(first)) => {
                events += 1;
                push(&mut changes, first);
            }
            Some(None) => return Err(super::local(&root, "the watch ended by itself")),
            None => {}
        }
        let deadline = tokio::time::Instant::now() + options.debounce * 10;
        loop {
            tokio::select! {
                event = rx.recv() => match event {
                    Some(event) => {
                        events += 1;
                        push(&mut changes, event);
                    }
                    None => break,
                },
                () = tokio::time::sleep(options.debounce) => break,
                () = tokio::time::sleep_until(deadline) => {
                    quiet = false;
                    break;
                }
            }
        }
        if let Some(sink) = &sink {
            sink(WatchEvent::Applying { events });
        }
        let mut batch = applier.apply(changes, quiet).await;
        batch.events = events;
        report.batches += 1;
        report.renames += batch.renames;
        report.indexed += batch.indexed;
        report.files += batch.files;
        report.removed += batch.removed;
        report.rescans += u64::from(batch.rescan);
        report.failures += batch.failures.len() as u64;
        for failure in &batch.failures {
            tracing::warn!(%failure, "a change was not applied; the next change there or a rescan retries it");
        }
        if let Some(sink) = &sink {
            sink(WatchEvent::Batch(&batch));
        }
    }
    drop(watcher);
    Ok(report)
}

/// Turns an event into changes.
fn push(changes: &mut Vec<Change>, event: notify::Result<notify::Event>) {
    let event = match event {
        Ok(event) => event,
        // A directory gone before its watch could be added (removed or moved right after it
        // was made): its going has events of its own; what it held is looked at again.
        Err(e)
            if matches!(
                &e.kind,
                notify::ErrorKind::PathNotFound | notify::ErrorKind::WatchNotFound
            ) || matches!(&e.kind, notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound) =>
        {
            changes.extend(e.paths.into_iter().map(|p| Change::Dirty(p, None)));
            return;
        }
        Err(e) => {
            changes.push(Change::Rescan(format!("the watch failed: {e}")));
            return;
        }
    };
    if event.need_rescan() {
        changes.push(Change::Rescan("the kernel's event queue overflowed".into()));
        return;
    }
    match event.kind {
        EventKind::Access(_) => {}
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if event.paths.len() == 2 => {
            let tracker = event.tracker();
            let mut paths = event.paths.into_iter();
            if let (Some(from), Some(to)) = (paths.next(), paths.next()) {
                changes.push(Change::Rename(from, to, tracker));
            }
        }
        _ => {
            let tracker = event.tracker();
            changes.extend(
                event
                    .paths
                    .into_iter()
                    .map(|path| Change::Dirty(path, tracker)),
            );
        }
    }
}

/// The longest the dirty paths of batches cut while the events go on wait for a quiet one.
const MAX_HOLD: Duration = Duration::from_secs(10);

/// How long a rename is remembered: an event inside a moved directory may still come with
/// the old path for a while (until the watch of each subdirectory follows the move).
const RECENT: Duration = Duration::from_secs(10);

/// Applies batches of changes.
struct Applier<'a> {
    tree: &'a FsTree,
    root: &'a Path,
    at: &'a FsPath,
    options: &'a WatchOptions,
    /// Renames on disk of the last [`RECENT`], oldest first.
    recent: std::collections::VecDeque<(PathBuf, PathBuf, tokio::time::Instant)>,
    /// Paths found gone from disk, whose removal from the store waits for the next batch
    /// (see [`Applier::apply`]).
    postponed: std::sync::Mutex<Vec<PathBuf>>,
    /// Paths found gone in an earlier batch and still gone: removed in this one.
    confirmed: HashSet<PathBuf>,
    /// Directories indexed in this batch, indexed again in the next (see
    /// [`Applier::index_subtree`]).
    recheck: std::sync::Mutex<Vec<PathBuf>>,
    /// Directories this batch indexes again: not to be checked a third time.
    rechecking: HashSet<PathBuf>,
    /// The dirty paths (and touched directories) of batches cut while the events went on,
    /// held for a quiet one (see [`Applier::apply`]), and since when.
    held: (
        Vec<PathBuf>,
        BTreeSet<PathBuf>,
        Option<tokio::time::Instant>,
    ),
}

impl Applier<'_> {
    /// The store path of the local path `local`; `None` outside the tree or for a name that
    /// is not UTF-8.
    fn store_path(&self, local: &Path) -> Option<FsPath> {
        let relative = local.strip_prefix(self.root).ok()?;
        let mut path = self.at.clone();
        for component in relative.components() {
            path = path.join(component.as_os_str().to_str()?).ok()?;
        }
        Some(path)
    }

    fn postponed_list(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.postponed.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn has_postponed(&self) -> bool {
        !self.postponed_list().is_empty()
            || !self.recheck_list().is_empty()
            || !self.held.0.is_empty()
            || !self.held.1.is_empty()
    }

    fn recheck_list(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.recheck.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the store may now forget what it holds at `local`, gone from disk: only once
    /// a batch after the one that found it gone has confirmed it. The disk runs ahead of the
    /// events: a path gone now may have been renamed by an event not yet received, and the
    /// rename, when it comes, must find the documents there to carry them (ids and all).
    fn gone_for_good(&self, local: &Path) -> bool {
        if self.confirmed.contains(local) {
            return true;
        }
        self.postponed_list().push(local.to_owned());
        false
    }

    fn renamer(&self, what: String) -> Renamer {
        let locks = &self.options.index.locks;
        Renamer::builder(Arc::clone(self.tree.store()), self.tree.index())
            .lease(locks.lease)
            .wait(locks.wait)
            .lock_protocol(locks.protocol)
            .holder(format!("index --watch {}: {what}", self.root.display()))
            .build()
    }

    /// Applies a batch. While the events go on (`quiet` false: the batch was cut by the
    /// longest wait), only its renames are applied: indexing a directory then would read the
    /// disk as it is now, ahead of events not yet received (a directory filled by moves and
    /// moved again, indexed at its last place before the renames that lead there), and those
    /// renames would find their destination taken. The dirty paths wait, followed through
    /// the renames, for a quiet batch, or [`MAX_HOLD`] at most.
    async fn apply(&mut self, changes: Vec<Change>, quiet: bool) -> WatchBatch {
        let mut batch = WatchBatch::default();
        if let Some(Change::Rescan(why)) = changes.iter().find(|c| matches!(c, Change::Rescan(_))) {
            tracing::warn!(reason = %why, "events were lost: indexing the whole tree again");
            batch.rescan = true;
            batch.rescan_reason = Some(why.clone());
            // The rescan sees all that the held paths would have said.
            self.held = (Vec::new(), BTreeSet::new(), None);
            let mut options = self.options.index.clone();
            options.prune = true;
            match super::index_prepared(self.tree, self.root, self.at, &options, None).await {
                Ok(r) => {
                    batch.renames += r.moves;
                    batch.indexed += 1;
                    batch.removed += r.pruned;
                }
                Err(e) => batch.failures.push(format!("rescan: {e}")),
            }
            return batch;
        }
        // What earlier batches found gone: this batch's events came after it was found gone,
        // so a rename that explains it is among them (and carries its documents, ids and
        // all); what is still gone after them was deleted, or moved out.
        let hold = !quiet && self.held.2.is_none_or(|since| since.elapsed() < MAX_HOLD);
        let (earlier, recheck): (Vec<PathBuf>, Vec<PathBuf>) = if hold {
            (Vec::new(), Vec::new())
        } else {
            (
                std::mem::take(&mut *self.postponed_list()),
                std::mem::take(&mut *self.recheck_list()),
            )
        };
        // The halves of the renames inotify paired: the rename itself says it all.
        let paired: HashSet<usize> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Rename(_, _, tracker) => *tracker,
                _ => None,
            })
            .collect();
        let mut dirty: Vec<PathBuf> = std::mem::take(&mut self.held.0);
        let mut touched: BTreeSet<PathBuf> = std::mem::take(&mut self.held.1);
        for change in changes {
            match change {
                Change::Dirty(_, Some(t)) if paired.contains(&t) => {}
                Change::Dirty(path, _) => dirty.push(path),
                Change::Rename(from, to, _) => {
                    // Inside a directory just moved, inotify may still name the old place:
                    // if the destination is not on disk, its new place is taken.
                    let (from, to) = if to.symlink_metadata().is_err() {
                        let (f, t) = (self.follow(&from), self.follow(&to));
                        if t.symlink_metadata().is_ok() {
                            (f, t)
                        } else {
                            (from, to)
                        }
                    } else {
                        (from, to)
                    };
                    // Inside a directory not indexed yet (made or moved in, in this batch or
                    // one held), the store holds at most part of what moves: what it holds is
                    // renamed, and the destination indexed.
                    let partial = dirty.iter().any(|d| from.starts_with(d) && *d != from);
                    // What was dirty under `from` is now under `to`.
                    for path in &mut dirty {
                        if let Ok(rest) = path.strip_prefix(&from) {
                            *path = rebased(&to, rest);
                        }
                    }
                    // Their directories' modification times changed.
                    touched.extend(from.parent().map(Path::to_owned));
                    touched.extend(to.parent().map(Path::to_owned));
                    self.rename(&from, &to, &mut dirty, &mut batch).await;
                    if partial {
                        dirty.push(to.clone());
                    }
                    self.recent
                        .push_back((from, to, tokio::time::Instant::now()));
                }
                Change::Rescan(_) => {}
            }
        }
        while self
            .recent
            .front()
            .is_some_and(|(_, _, at)| at.elapsed() > RECENT)
        {
            self.recent.pop_front();
        }
        if hold {
            self.held = (
                dirty,
                touched,
                self.held.2.or(Some(tokio::time::Instant::now())),
            );
            return batch;
        }
        self.held.2 = None;
        self.confirmed.clear();
        self.rechecking.clear();
        for dir in recheck {
            let moved = self.follow(&dir);
            if moved.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                self.rechecking.insert(moved.clone());
                dirty.push(moved);
            }
        }
        for path in earlier {
            let moved = self.follow(&path);
            if moved != path {
                // Renamed since: looked at in its new place (the store rename carried what
                // the store held there; what it did not hold is indexed there). What the
                // store holds at the old place now came after, and is stale.
                dirty.push(moved);
            }
            if path.symlink_metadata().is_err() {
                self.confirmed.insert(path.clone());
            }
            dirty.push(path);
        }
        // An event from inside a directory just moved may carry its old path: where the old
        // path is gone, its new place is looked at too.
        let mut followed = Vec::new();
        for path in &dirty {
            if path.symlink_metadata().is_ok() {
                continue;
            }
            let moved = self.follow(path);
            if moved != *path {
                followed.push(moved);
            }
        }
        dirty.extend(followed);
        // A directory's entries changed: its own modification time did too.
        touched.extend(dirty.iter().filter_map(|p| p.parent()).map(Path::to_owned));
        touched.retain(|p| p.starts_with(self.root));
        // Directories on disk are indexed whole (created, moved in: their entries may have
        // come before their watch); the rest, and the directories touched, one document each.
        let (dirs, others): (Vec<PathBuf>, Vec<PathBuf>) = topmost(dirty)
            .into_iter()
            .partition(|p| p.symlink_metadata().is_ok_and(|m| m.is_dir()));
        // A move into a directory made just before it has no pair: inotify had no watch there
        // yet. What vanished in this batch and turns up under a directory to index is the
        // same file by identity, and is renamed, not deleted and created again.
        if !dirs.is_empty() {
            self.pair_by_identity(&dirs, &others, &mut batch).await;
        }
        for dir in &dirs {
            self.index_subtree(dir, &mut batch).await;
        }
        touched.retain(|p| !dirs.iter().any(|d| p.starts_with(d)));
        let mut single: Vec<PathBuf> = others;
        single.extend(touched);
        single.sort();
        single.dedup();
        let slow = match self.sync_documents(&single, &mut batch).await {
            Ok(slow) => slow,
            Err(e) => {
                batch
                    .failures
                    .push(format!("{} entries: {e}", single.len()));
                Vec::new()
            }
        };
        for path in slow {
            self.sync(&path, &mut batch).await;
        }
        batch
    }

    /// Renames in the store what vanished from disk in this batch (`others` gone from disk)
    /// and turns up, by identity, under one of `dirs` (see `moves.rs`).
    async fn pair_by_identity(&self, dirs: &[PathBuf], others: &[PathBuf], batch: &mut WatchBatch) {
        let mut gone: HashMap<FsPath, Entry> = HashMap::new();
        for local in others {
            if local.symlink_metadata().is_ok() {
                continue;
            }
            let Some(path) = self.store_path(local) else {
                continue;
            };
            let read = self
                .tree
                .for_each_page(&path, 1_000, |page| {
                    gone.extend(page.into_iter().map(|e| (e.doc.path.clone(), e)));
                    Ok(())
                })
                .await;
            if let Err(e) = read {
                batch.failures.push(format!("reading {path}: {e}"));
            }
        }
        if gone.is_empty() {
            return;
        }
        for dir in dirs {
            let Some(path) = self.store_path(dir) else {
                continue;
            };
            let (local, at) = (dir.clone(), path.clone());
            let Ok(walked) =
                tokio::task::spawn_blocking(move || super::walk::walk_all(&local, &at)).await
            else {
                continue;
            };
            let planned = super::moves::find_moves((self.root, self.at), gone.values(), &walked);
            match super::moves::apply_moves(
                self.tree,
                (self.root, self.at),
                (&planned, Vec::new()),
                &HashSet::new(),
                &self.options.index,
            )
            .await
            {
                Ok(moves) => {
                    batch.renames += moves.done.len() as u64;
                    for m in &moves.done {
                        gone.retain(|p, _| !p.is_inside(&m.from));
                    }
                }
                Err(e) => batch.failures.push(format!("moves into {path}: {e}")),
            }
        }
    }

    /// Where `path` is after the recent renames, in order.
    fn follow(&self, path: &Path) -> PathBuf {
        let mut moved = path.to_owned();
        for (from, to, _) in &self.recent {
            if let Ok(rest) = moved.strip_prefix(from) {
                moved = rebased(to, rest);
            }
        }
        moved
    }

    /// Indexes the directory `local` and everything under it.
    async fn index_subtree(&self, local: &Path, batch: &mut WatchBatch) {
        let Some(path) = self.store_path(local) else {
            return;
        };
        // A directory made or moved in is watched from when notify sees it, and what
        // changed in it before that (an entry moved out at once, say) has no event: it is
        // indexed once more in the next batch, when its watch is surely in place.
        if !self.rechecking.contains(local) {
            self.recheck_list().push(local.to_owned());
        }
        match super::index_unpruned(self.tree, local, &path, &self.options.index, None).await {
            Ok((r, stale)) => {
                batch.indexed += 1;
                batch.renames += r.moves;
                // What the index found gone goes once a later batch confirms it.
                let gone: Vec<Entry> = stale
                    .into_iter()
                    .filter(|e| {
                        super::walk::local_path(self.root, self.at, &e.doc.path)
                            .is_some_and(|l| self.gone_for_good(&l))
                    })
                    .collect();
                if !gone.is_empty() {
                    let mut pruned = IndexReport::default();
                    match super::prune::prune(
                        self.tree,
                        self.root,
                        gone,
                        &self.options.index,
                        &mut pruned,
                    )
                    .await
                    {
                        Ok(n) => batch.removed += n,
                        Err(e) => batch.failures.push(format!("prune under {path}: {e}")),
                    }
                    batch.failures.extend(
                        pruned
                            .skipped
                            .into_iter()
                            .map(|s| format!("{}: {}", s.path, s.reason)),
                    );
                }
            }
            // Gone since the batch began: its going has events of its own.
            Err(RenameError::Local { .. }) if local.symlink_metadata().is_err() => {}
            Err(e) => batch
                .failures
                .push(format!("index {}: {e}", local.display())),
        }
    }

    /// The document to write for the entry `found` at `local` when the store holds `stored`
    /// at its path, with its text read if it needs it (see `content.rs`); `None` if the
    /// document is up to date. The file is read here, under the lock, like its metadata: a
    /// batch of the watcher holds few files.
    fn with_text(&self, local: &Path, stored: Option<&FsDoc>, found: &FsDoc) -> Option<FsDoc> {
        let max = self.options.index.content;
        let plan = content::plan(stored, found, max);
        let text = match (plan, max) {
            (Plan::Unchanged, _) => return None,
            (Plan::Write { read: true } | Plan::Fill, Some(max)) => content::read_text(local, max),
            _ => None,
        };
        if plan == Plan::Fill && text.is_none() {
            return None;
        }
        Some(found.clone().with_content(text))
    }

    /// Brings the one document of each of `locals` (files, directories alone, paths gone) in
    /// step with the disk, under one tree lock on the target: one search and one bulk request
    /// a chunk. Returns what needs more than one document written (a file whose parent the
    /// store lacks, an entry that changed kind, a directory gone with its subtree), for
    /// [`Applier::sync`].
    async fn sync_documents(
        &self,
        locals: &[PathBuf],
        batch: &mut WatchBatch,
    ) -> Result<Vec<PathBuf>> {
        let mut wanted: Vec<(PathBuf, FsPath, Option<FsDoc>)> = Vec::new();
        for local in locals {
            let Some(path) = self.store_path(local) else {
                continue;
            };
            let doc = match std::fs::symlink_metadata(local) {
                Ok(meta) if meta.is_dir() || meta.is_file() => Some(describe_one(&path, &meta)),
                // Symbolic links and special files are not indexed.
                Ok(_) => None,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    batch.failures.push(format!("{}: {e}", local.display()));
                    continue;
                }
            };
            wanted.push((local.clone(), path, doc));
        }
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let client = self
            .options
            .index
            .locks
            .client(self.tree, format!("index --watch {}", self.root.display()));
        let guard = client.lock_tree(self.at).await?;
        let tree = self.tree;
        let (slow, written) = under_write_lock(tree, guard, async {
            tree.refresh().await?;
            let mut slow = Vec::new();
            let mut written = (0u64, 0u64);
            for chunk in wanted.chunks(500) {
                let scopes = chunk
                    .iter()
                    .map(|(_, path, _)| Scope::Exact(path.clone()))
                    .collect();
                let request = SearchRequest::single_page(Scope::AnyOf(scopes), chunk.len() * 2 + 1);
                let context = format!("reading {} documents", chunk.len());
                let page = tree
                    .store()
                    .search(tree.index(), request)
                    .await
                    .map_err(RenameError::store(context))?;
                let mut stored: HashMap<FsPath, Entry> = HashMap::new();
                for doc in page.docs {
                    let entry = Entry::from_stored(tree.index(), doc)?;
                    stored.insert(entry.doc.path.clone(), entry);
                }
                let mut ops = Vec::new();
                let mut known: HashSet<FsPath> = stored.keys().cloned().collect();
                for (local, path, doc) in chunk {
                    match (stored.remove(path), doc) {
                        (Some(entry), Some(doc)) if entry.doc.kind != doc.kind => {
                            slow.push(local.clone())
                        }
                        (Some(entry), Some(doc)) => {
                            let Some(doc) = self.with_text(local, Some(&entry.doc), doc) else {
                                continue;
                            };
                            ops.push(BulkOp::Index {
                                source: to_source(tree, &entry.id, &doc)?,
                                id: entry.id,
                                if_version: Some(entry.version),
                            });
                            written.0 += u64::from(!doc.is_dir());
                        }
                        (None, Some(doc)) => {
                            // Its parent must be there: in the store already, or in this
                            // chunk before it (parents sort first).
                            let parent_known = doc.parent.as_ref().is_none_or(|p| {
                                known.contains(p) || p == self.at || !p.is_inside(self.at)
                            });
                            if !parent_known {
                                slow.push(local.clone());
                                continue;
                            }
                            let id = FsDoc::new_id();
                            let doc = self.with_text(local, None, doc).unwrap_or(doc.clone());
                            ops.push(BulkOp::Create {
                                source: to_source(tree, &id, &doc)?,
                                id,
                            });
                            known.insert(path.clone());
                            written.0 += u64::from(!doc.is_dir());
                        }
                        (Some(entry), None) if entry.doc.is_dir() => slow.push(local.clone()),
                        // Gone from disk (not a symbolic link or a special file put there):
                        // forgotten once a later batch confirms it.
                        (Some(_), None)
                            if local.symlink_metadata().is_err() && !self.gone_for_good(local) => {}
                        (Some(entry), None) => {
                            ops.push(BulkOp::Delete {
                                id: entry.id,
                                if_version: Some(entry.version),
                            });
                            written.1 += 1;
                        }
                        (None, None) => {}
                    }
                }
                if ops.is_empty() {
                    continue;
                }
                let context = format!("writing {} documents", ops.len());
                let results = tree
                    .store()
                    .bulk(tree.index(), ops)
                    .await
                    .map_err(RenameError::store(context.clone()))?;
                if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
                    return Err(RenameError::store(context)(e));
                }
            }
            tree.refresh().await?;
            Ok((slow, written))
        })
        .await?;
        batch.files += written.0;
        batch.removed += written.1;
        Ok(slow)
    }

    /// Applies a rename on disk to the store; what cannot be applied that way is marked
    /// dirty instead (a source the store does not hold yet, a destination outside the tree).
    async fn rename(
        &self,
        from: &Path,
        to: &Path,
        dirty: &mut Vec<PathBuf>,
        batch: &mut WatchBatch,
    ) {
        let (Some(f), Some(t)) = (self.store_path(from), self.store_path(to)) else {
            dirty.push(from.to_owned());
            dirty.push(to.to_owned());
            return;
        };
        let renamer = self.renamer(format!("mv {f} {t}"));
        let mut outcome = renamer.rename(&f, &t).await;
        if let (Err(RenameError::DestinationParentMissing { .. }), Some(parent)) =
            (&outcome, t.parent())
        {
            // A directory made on disk in this batch, not indexed yet: made in the store now
            // (its document is brought up to date with the rest of the batch).
            match crate::ops::mkdir(self.tree, &self.options.index.locks, &parent, true).await {
                Ok(_) => outcome = renamer.rename(&f, &t).await,
                Err(e) => batch.failures.push(format!("mkdir -p {parent}: {e}")),
            }
        }
        if let Err(RenameError::DestinationExists { .. }) = outcome {
            // rename(2) replaces its destination: so does the store.
            if let Err(e) = renamer.remove(&t, true).await {
                batch
                    .failures
                    .push(format!("rm -r {t} (replaced on disk): {e}"));
            }
            outcome = renamer.rename(&f, &t).await;
        }
        match outcome {
            Ok(_) => batch.renames += 1,
            // Not in the store yet (created in this batch), or its parent is not: indexed.
            Err(_) => {
                dirty.push(from.to_owned());
                dirty.push(to.to_owned());
            }
        }
    }

    /// Brings the store in step with the disk at `local`.
    async fn sync(&self, local: &Path, batch: &mut WatchBatch) {
        let Some(path) = self.store_path(local) else {
            return;
        };
        let shown = local.display();
        match std::fs::symlink_metadata(local) {
            Ok(meta) if meta.is_dir() => self.index_subtree(local, batch).await,
            Ok(meta) if meta.is_file() => {
                let mut outcome =
                    index_one(self.tree, (local, &meta), &path, &self.options.index).await;
                if let Ok(OneFile::OtherKind) = outcome {
                    // A directory replaced by a file.
                    if let Err(e) = self
                        .renamer(format!("rm -r {path}"))
                        .remove(&path, true)
                        .await
                    {
                        batch.failures.push(format!("rm -r {path}: {e}"));
                        return;
                    }
                    outcome =
                        index_one(self.tree, (local, &meta), &path, &self.options.index).await;
                }
                match outcome {
                    Ok(OneFile::Created | OneFile::Updated) => batch.files += 1,
                    Ok(OneFile::Unchanged | OneFile::OtherKind) => {}
                    Err(e) => batch.failures.push(format!("index {shown}: {e}")),
                }
            }
            // A symbolic link or a special file: not indexed; whatever the store had there goes.
            Ok(_) => self.remove(&path, batch).await,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.gone_for_good(local) {
                    self.remove(&path, batch).await;
                }
            }
            Err(e) => batch.failures.push(format!("{shown}: {e}")),
        }
    }

    async fn remove(&self, path: &FsPath, batch: &mut WatchBatch) {
        match self
            .renamer(format!("rm -r {path}"))
            .remove(path, true)
            .await
        {
            Ok(report) => batch.removed += report.rewritten,
            Err(RenameError::SourceNotFound { .. }) => {}
            Err(e) => batch.failures.push(format!("rm -r {path}: {e}")),
        }
    }
}

/// `to` followed by `rest` (`Path::join` of an empty `rest` would add a trailing slash, and
/// a file's path with one is no file's).
fn rebased(to: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        to.to_owned()
    } else {
        to.join(rest)
    }
}

/// The paths of `dirty` that no other one is above (or equal to), in order.
fn topmost(dirty: Vec<PathBuf>) -> Vec<PathBuf> {
    let all: BTreeSet<PathBuf> = dirty.into_iter().collect();
    all.iter()
        .filter(|p| !p.ancestors().skip(1).any(|a| all.contains(a)))
        .cloned()
        .collect()
}
