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
//!   its document created or updated, a path gone from disk is removed from the store (all
//!   of a batch's at once, deepest first: `sweep.rs`). So a directory moved in is an index of
//!   that subtree, one moved out a delete, and a burst of writes to one file one update;
//! - a dirty path recorded before a rename of a directory above it is followed to its new
//!   place.
//! - what vanished from disk and turns up elsewhere in the batch by identity (a move whose
//!   second half inotify never saw, into a directory made an instant before; a rename the
//!   store could not follow) is renamed in the store, ids kept. A write before the move does
//!   not hide it: a file renamed away, or born before the store's copy was last written, is
//!   the same file, not a reused inode.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fs_model::FsPath;
use notify::event::{ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};
use serde::Serialize;

use super::{index_dir, IndexOptions, IndexReport, Skipped};
use crate::error::Result;
use crate::job::Renamer;
use crate::tree::FsTree;

mod apply;
mod sync;
#[cfg(test)]
mod tests;

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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct WatchBatch {
    /// Events in the batch that tell of a change (reads of the tree, the watcher's own
    /// included, are not counted). 0 for a batch that only applies what earlier batches left:
    /// removals confirmed, directories looked at again.
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
    /// What exists on disk but could not be read (`path: error`): what the store holds
    /// there is kept, not removed, until it can be read.
    pub unreadable: Vec<String>,
    /// Names on disk the store cannot hold (not UTF-8, a control character): not indexed,
    /// as `index` skips them. Each is said once a watch, when first seen.
    pub skipped: Vec<Skipped>,
}

impl WatchBatch {
    /// Whether the batch changed the store: renamed, indexed, wrote or removed something.
    pub fn changed(&self) -> bool {
        self.renames + self.indexed + self.files + self.removed > 0
    }

    /// Whether the batch changed nothing and has nothing to say: what reads of the tree
    /// (`find`, an editor opening files, the first run's own walk) make, and the wake-up for
    /// removals that turned out to have been renamed.
    pub fn changed_nothing(&self) -> bool {
        !self.rescan
            && !self.changed()
            && self.failures.is_empty()
            && self.unreadable.is_empty()
            && self.skipped.is_empty()
    }
}

/// What the watch did, until it stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
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
    /// Entries found unreadable, over all batches (the first run's are in `initial`).
    pub unreadable: u64,
    /// Names skipped, over all batches (the first run's are in `initial`).
    pub skipped: u64,
}

/// Told of the first run and of every batch.
pub enum WatchEvent<'a> {
    /// The first run is done; changes from now on are followed.
    Ready(&'a IndexReport),
    /// The first event of a batch was taken: the batch is gathered until the directory is
    /// quiet (a caught-up said before no longer holds).
    Gathering,
    /// A batch of `events` was gathered and is about to be applied (no event is taken from
    /// the watch meanwhile).
    Applying {
        /// Events in the batch.
        events: u64,
    },
    /// A batch was applied.
    Batch(&'a WatchBatch),
    /// The store is in step with every event received: none waits to be gathered, and no
    /// earlier batch left anything to look at again. Said after the first run and after every
    /// batch that ends so; a change made before it and seen by the kernel is in the store.
    CaughtUp,
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
/// `stop` is heeded at once: a batch being gathered is dropped, one being applied ends after
/// the change it is making (each change is whole in the store: a rename, a directory indexed,
/// a chunk of documents); what was left undone is found by the next run's first index.
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
        .map_err(|e| {
            // The recursive watch fails whole on one directory it may not read: name that one.
            let at = e.paths.first().cloned().unwrap_or_else(|| root.clone());
            let why = match &e.kind {
                notify::ErrorKind::Io(io) => io.to_string(),
                other => format!("{other:?}"),
            };
            super::local(
                &at,
                &format!("cannot watch it: {why} (nothing was indexed or removed)"),
            )
        })?;
    // Told to stop, every index run ends after the bulk request it is making.
    let stopping = Arc::new(AtomicBool::new(false));
    let index = IndexOptions {
        stop: Some(Arc::clone(&stopping)),
        ..options.index.clone()
    };
    tokio::pin!(stop);
    let initial = {
        let first = index_dir(tree, &root, at, &index, None);
        tokio::pin!(first);
        tokio::select! {
            initial = &mut first => initial?,
            () = &mut stop => {
                stopping.store(true, Ordering::Relaxed);
                let initial = first.await?;
                return Ok(WatchReport { initial, ..WatchReport::default() });
            }
        }
    };
    if let Some(sink) = &sink {
        sink(WatchEvent::Ready(&initial));
    }
    let mut report = WatchReport {
        initial,
        ..WatchReport::default()
    };
    let mut applier = Applier::new(tree, &root, at, &index, Arc::clone(&stopping));
    let caught_up = |applier: &Applier<'_>, rx: &Receiver| {
        if let Some(sink) = &sink {
            if rx.is_empty() && !applier.has_postponed() {
                sink(WatchEvent::CaughtUp);
            }
        }
    };
    caught_up(&applier, &rx);
    loop {
        // Removals waiting for the next batch get one after the debounce, events or not.
        let waiting = applier.has_postponed();
        let first = tokio::select! {
            event = rx.recv() => Some(event),
            () = tokio::time::sleep(options.debounce), if waiting => None,
            () = &mut stop => break,
        };
        let first = match first {
            Some(Some(first)) => Some(first),
            Some(None) => return Err(super::local(&root, "the watch ended by itself")),
            None => None,
        };
        if let Some(sink) = &sink {
            sink(WatchEvent::Gathering);
        }
        let Gathered {
            changes,
            events,
            quiet,
        } = tokio::select! {
            gathered = gather(&mut rx, first, options.debounce) => gathered,
            () = &mut stop => break,
        };
        if let Some(sink) = &sink {
            sink(WatchEvent::Applying { events });
        }
        // Told to stop while applying: the batch ends after the change it is making.
        let (mut batch, stopped) = {
            let applying = applier.apply(changes, quiet);
            tokio::pin!(applying);
            tokio::select! {
                batch = &mut applying => (batch, false),
                () = &mut stop => {
                    stopping.store(true, Ordering::Relaxed);
                    (applying.await, true)
                }
            }
        };
        batch.events = events;
        report.add(&batch);
        for failure in &batch.failures {
            tracing::warn!(%failure, "a change was not applied; the next change there or a rescan retries it");
        }
        if let Some(sink) = &sink {
            sink(WatchEvent::Batch(&batch));
        }
        if stopped {
            break;
        }
        caught_up(&applier, &rx);
    }
    drop(watcher);
    Ok(report)
}

/// What the watch hands to the batches.
type Receiver = tokio::sync::mpsc::Receiver<notify::Result<notify::Event>>;

/// One batch's events, gathered.
struct Gathered {
    changes: Vec<Change>,
    /// How many events there were.
    events: u64,
    /// Whether the batch ends because the directory was quiet for the debounce (or it is
    /// the wake-up for what earlier batches left), not because the events went on.
    quiet: bool,
}

/// Gathers the events of one batch from `rx`, after `first` (none for the wake-up of what
/// earlier batches left): until the directory is quiet for `debounce`, or for ten debounces
/// at most.
async fn gather(
    rx: &mut Receiver,
    first: Option<notify::Result<notify::Event>>,
    debounce: Duration,
) -> Gathered {
    let mut gathered = Gathered {
        changes: Vec::new(),
        events: 0,
        quiet: true,
    };
    if let Some(first) = first {
        gathered.events += u64::from(push(&mut gathered.changes, first));
    }
    let deadline = tokio::time::Instant::now() + debounce * 10;
    loop {
        tokio::select! {
            event = rx.recv() => match event {
                Some(event) => {
                    gathered.events += u64::from(push(&mut gathered.changes, event));
                }
                None => break,
            },
            () = tokio::time::sleep(debounce) => break,
            () = tokio::time::sleep_until(deadline) => {
                gathered.quiet = false;
                break;
            }
        }
    }
    gathered
}

impl WatchReport {
    /// Counts `batch` in the totals.
    fn add(&mut self, batch: &WatchBatch) {
        self.batches += 1;
        self.renames += batch.renames;
        self.indexed += batch.indexed;
        self.files += batch.files;
        self.removed += batch.removed;
        self.rescans += u64::from(batch.rescan);
        self.failures += batch.failures.len() as u64;
        self.unreadable += batch.unreadable.len() as u64;
        self.skipped += batch.skipped.len() as u64;
    }
}

/// Turns an event into changes; returns false for an event that tells of none (a read of the
/// tree: `find`, an editor, the watcher's own walks), which the batch does not count.
fn push(changes: &mut Vec<Change>, event: notify::Result<notify::Event>) -> bool {
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
            let told = !e.paths.is_empty();
            changes.extend(e.paths.into_iter().map(|p| Change::Dirty(p, None)));
            return told;
        }
        Err(e) => {
            changes.push(Change::Rescan(format!("the watch failed: {e}")));
            return true;
        }
    };
    if event.need_rescan() {
        changes.push(Change::Rescan("the kernel's event queue overflowed".into()));
        return true;
    }
    match event.kind {
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if event.paths.len() == 2 => {
            let tracker = event.tracker();
            let mut paths = event.paths.into_iter();
            if let (Some(from), Some(to)) = (paths.next(), paths.next()) {
                changes.push(Change::Rename(from, to, tracker));
            }
            true
        }
        _ => {
            let tracker = event.tracker();
            let told = !event.paths.is_empty();
            changes.extend(
                event
                    .paths
                    .into_iter()
                    .map(|path| Change::Dirty(path, tracker)),
            );
            told
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
    /// The watch's `index` options, told when the watch is told to stop.
    index: &'a IndexOptions,
    /// Renames on disk of the last [`RECENT`], oldest first.
    recent: std::collections::VecDeque<(PathBuf, PathBuf, tokio::time::Instant)>,
    /// Paths renamed away in the last [`RECENT`] whose other half never came (moved out, or
    /// into a directory not watched yet), and when: what was there still exists somewhere, so
    /// its inode is not free for another file (see [`Applier::pair_by_identity`]).
    renamed_away: std::collections::HashMap<PathBuf, tokio::time::Instant>,
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
    /// Set when the watch is told to stop: the batch ends after the change it is making.
    stopping: Arc<AtomicBool>,
    /// Names skipped (see [`WatchBatch::skipped`]) since the last batch was reported, and
    /// every name ever said, not to be said again.
    skipped: std::sync::Mutex<(Vec<Skipped>, HashSet<PathBuf>)>,
    /// Entries said unreadable (see [`WatchBatch::unreadable`]) and not found readable since:
    /// each is said, and counted, once, not again by every batch that looks at it (the next
    /// batch indexes a directory again, and finds it as unreadable as before). An index run
    /// that reads one forgets it: unreadable again later, it is said again.
    unreadable: std::sync::Mutex<HashSet<PathBuf>>,
    /// The dirty paths (and touched directories) of batches cut while the events went on,
    /// held for a quiet one (see [`Applier::apply`]), and since when.
    held: (
        Vec<PathBuf>,
        BTreeSet<PathBuf>,
        Option<tokio::time::Instant>,
    ),
}

impl<'a> Applier<'a> {
    /// An applier of the changes under `root` on disk to `at` in `tree`, with nothing
    /// remembered yet.
    fn new(
        tree: &'a FsTree,
        root: &'a Path,
        at: &'a FsPath,
        index: &'a IndexOptions,
        stopping: Arc<AtomicBool>,
    ) -> Applier<'a> {
        Applier {
            tree,
            root,
            at,
            index,
            recent: std::collections::VecDeque::new(),
            renamed_away: std::collections::HashMap::new(),
            postponed: std::sync::Mutex::default(),
            confirmed: HashSet::new(),
            recheck: std::sync::Mutex::default(),
            rechecking: HashSet::new(),
            stopping,
            skipped: std::sync::Mutex::default(),
            unreadable: std::sync::Mutex::default(),
            held: (Vec::new(), BTreeSet::new(), None),
        }
    }
}

impl Applier<'_> {
    /// The store path of the local path `local`; `None` outside the tree, or for a name the
    /// store cannot hold (not UTF-8, a control character), which is noted as skipped.
    fn store_path(&self, local: &Path) -> Option<FsPath> {
        if !local.starts_with(self.root) {
            return None;
        }
        match super::walk::store_path(self.root, self.at, local) {
            Ok(path) => Some(path),
            Err(why) => {
                self.note_skipped(local, &why);
                None
            }
        }
    }

    /// Notes `local` as skipped for `why`, unless it was said before.
    fn note_skipped(&self, local: &Path, why: &str) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        if skipped.1.insert(local.to_owned()) {
            skipped.0.push(Skipped {
                path: local.to_string_lossy().into_owned(),
                reason: why.to_owned(),
            });
        }
    }

    /// Notes what the index run `r` of the directory `dir`, made for `batch`, could not read
    /// (what it was not said before), what the store refused, and the names it skipped (not its
    /// symbolic links, which are never followed).
    fn note_index_run(&self, batch: &mut WatchBatch, dir: &Path, r: &IndexReport) {
        // What the run read under `dir` is readable again (when it listed all it could not
        // read: it lists the first hundred).
        if r.unread.len() as u64 == r.unreadable {
            let still: HashSet<&Path> = r.unread.iter().map(|s| Path::new(&s.path)).collect();
            self.unreadable_list()
                .retain(|p| !p.starts_with(dir) || still.contains(p.as_path()));
        }
        for s in &r.unread {
            self.note_unreadable(batch, Path::new(&s.path), &s.reason);
        }
        for s in r.skipped.iter().filter(|s| !s.is_symlink()) {
            if s.is_refused() {
                batch.failures.push(format!("{}: {}", s.path, s.reason));
            } else {
                self.note_skipped(Path::new(&s.path), &s.reason);
            }
        }
    }

    /// Notes in `batch` that `local` exists but could not be read (`why`), unless it was said
    /// before and has not been found readable since.
    pub(super) fn note_unreadable(&self, batch: &mut WatchBatch, local: &Path, why: &str) {
        if self.unreadable_list().insert(local.to_owned()) {
            batch.unreadable.push(format!("{}: {why}", local.display()));
        }
    }

    /// Forgets that `local`, and what was under it, could not be read: it is gone.
    pub(super) fn forget_unreadable(&self, local: &Path) {
        self.unreadable_list().retain(|p| !p.starts_with(local));
    }

    fn unreadable_list(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        self.unreadable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The names skipped since the last call.
    fn take_skipped(&self) -> Vec<Skipped> {
        std::mem::take(&mut self.skipped.lock().unwrap_or_else(|p| p.into_inner()).0)
    }

    /// Whether the watch was told to stop.
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
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
        let locks = &self.index.locks;
        Renamer::builder(Arc::clone(self.tree.store()), self.tree.index())
            .locks(locks)
            .holder(format!("index --watch {}: {what}", self.root.display()))
            .build()
    }
}
