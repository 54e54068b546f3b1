//! Indexing a local directory tree into the tree index, and keeping it in step with the disk.
//!
//! A run has four steps:
//!
//! 1. the walk (`walk.rs`: in path order, on the blocking pool, never following symbolic links),
//!    which records each entry's identity on disk (device and inode), and sends its entries
//!    a thousand at a time through a channel a few chunks deep while step 2 takes its lock
//!    and reads the store;
//! 2. under the tree lock on the target (no rename can move it, or anything above it,
//!    meanwhile), one read of what the store holds there, merged with the walk as both
//!    come (`merge.rs`: what is up to date is forgotten); in what differs, an identity
//!    found at a new path whose old path is gone was moved on disk (`moves.rs`). Documents
//!    are matched by path, those the moves will carry by the path they will have:
//!    unchanged ones left alone, changed ones rewritten (conditional on the version read),
//!    new ones created; what is new or changed where the moves go is left for after them;
//! 3. the moves: each document moved is renamed in the store (a tree-locked, journaled
//!    rename: ids and every field kept), not deleted and created again; if they left
//!    anything to do, a second pass like step 2 does it;
//! 4. documents with no counterpart on disk are reported, and with `prune` deleted under
//!    one tree lock on the target, in bulk and deepest first (`prune.rs`, `sweep.rs`; a
//!    subtree too large to hold is a journaled `rm -r` of its own). What lies
//!    at or under an entry the walk could not read (a directory it may not list) is unknown,
//!    not gone: it is kept, and counted in [`IndexReport::kept_unread`].
//!
//! A directory moved, and nothing else changed, is thus one read of the target, made while
//! the walk runs, and one rename that does not read the subtree again (on the embedded
//! store: see `known_subtrees`).
//!
//! What a run remembers (issue 49). A first index (the store holds nothing under the
//! target: nothing to match, no move to find, nothing stale) is streamed: each chunk of the
//! walk is written as it comes, in batches, and neither the walk nor the paths written are
//! kept; the walk runs at most a few chunks ahead (21 MB peak RSS for 1 000 000 entries on
//! the embedded store, where keeping them took 378 MB). Any other run merges the walk with
//! one scan of the store, both in path order (`merge.rs`): what is up to date is counted
//! and forgotten, and only the residue (what is new, changed or gone, a moved subtree on
//! both sides) is kept, matched and searched for moves. A re-index of the same 1 000 000
//! entries, all unchanged, took 20.8 MB and 9.6 s, where keeping every entry took 809 MB
//! and 45 s.
//!
//! `docs/indexing.md` describes what is and is not detected.

mod content;
mod locked;
mod merge;
mod moves;
mod one;
mod prune;
mod sweep;
mod walk;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::FsPath;
use serde::Serialize;

use crate::error::{RenameError, Result};
use crate::ops::{mkdir, LockSettings};
use crate::tree::{Entry, FsTree};
pub use content::DEFAULT_CONTENT_MAX;
use locked::{locked_pass, second_pass, Pass};
pub use moves::Move;
use walk::Walk;
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
    /// Once set, the run ends after the bulk request it is making, marked
    /// [`IndexReport::interrupted`]: it then makes no move and finds nothing stale (what it
    /// did not reach is not gone), and the next run takes up where it stopped. What it wrote
    /// is well-formed: parents are written before what they hold. Default: `None`.
    pub stop: Option<Arc<AtomicBool>>,
}

impl IndexOptions {
    /// Whether the run was told to stop (see [`IndexOptions::stop`]).
    fn stopping(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

impl Default for IndexOptions {
    fn default() -> IndexOptions {
        IndexOptions {
            batch_size: 1_000,
            prune: false,
            content: None,
            locks: LockSettings::default(),
            stop: None,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Skipped {
    /// The local path (non-UTF-8 bytes shown as U+FFFD).
    pub path: String,
    /// Why it was skipped.
    pub reason: String,
}

impl Skipped {
    /// Whether it is a symbolic link, never followed.
    pub fn is_symlink(&self) -> bool {
        self.reason == walk::NOT_FOLLOWED
    }

    /// Whether the store refused its document (a failure, not a skip of the walk's).
    pub fn is_refused(&self) -> bool {
        self.reason.starts_with(locked::REFUSED)
    }
}

/// What an indexing run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
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
    /// The run was told to stop ([`IndexOptions::stop`]) and ended early: what it did not
    /// reach is neither written nor found stale.
    pub interrupted: bool,
    /// Symbolic links (not followed, not indexed).
    pub symlinks: u64,
    /// Entries that exist but could not be read: directories whose entries could not be
    /// listed (the top one among them), entries whose metadata could not be read. What the
    /// store holds at and under them is kept, never pruned.
    pub unreadable: u64,
    /// The first hundred unreadable entries, with the error.
    pub unread: Vec<Skipped>,
    /// Documents at or under unreadable entries, kept in the store although the walk could
    /// not see them on disk.
    pub kept_unread: u64,
    /// Entries skipped for any other reason (names that are not UTF-8, special files),
    /// symbolic links included.
    pub skipped_count: u64,
    /// The first hundred skipped entries.
    pub skipped: Vec<Skipped>,
    /// Writes the store refused.
    pub failed: u64,
    /// Wall time (in JSON `elapsed_ms`, whole milliseconds).
    #[serde(rename = "elapsed_ms", serialize_with = "fs_model::millis::serialize")]
    #[schemars(with = "u64")]
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

    fn not_read(&mut self, unread: Skipped) {
        self.unreadable += 1;
        if self.unread.len() < 100 {
            self.unread.push(unread);
        }
    }
}

/// A callback told of progress after every batch.
pub type IndexProgressSink = Arc<dyn Fn(IndexProgress) + Send + Sync>;

/// Indexes the local directory `dir` at `at` in the tree, creating `at`'s missing parents.
///
/// # Errors
/// [`RenameError::Local`] if `dir` is not a directory; lock and store failures. Unreadable
/// entries (the top directory among them), names that are not UTF-8 and symbolic links are
/// not errors: they are counted and listed in the report, and what the store holds under an
/// unreadable entry is kept ([`IndexReport::unreadable`]); the caller decides whether a run
/// that could not read everything failed.
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
    index_prepared(Target { tree, dir, at }, options, progress).await
}

/// Where a run of the indexer goes: the local directory `dir`, indexed at `at` in `tree`.
#[derive(Clone, Copy)]
struct Target<'a> {
    tree: &'a FsTree,
    dir: &'a Path,
    at: &'a FsPath,
}

/// [`index_dir`] on a tree whose indices and mapping are known to be ready: the watcher's
/// later runs (a subtree, a rescan), which need not ask again each time.
async fn index_prepared(
    target: Target<'_>,
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
) -> Result<IndexReport> {
    let Target { tree, dir, at } = target;
    let started = Instant::now();
    let (mut report, stale) = index_unpruned(target, options, progress).await?;
    if options.prune && !stale.is_empty() {
        report.pruned = prune::prune(tree, (dir, at), stale, options, &mut report).await?;
        tree.refresh().await?;
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Steps 1 to 3 of [`index_prepared`]; returns the report and what is stale, whatever
/// `options.prune` says (the watcher decides for itself when to remove what it found gone).
async fn index_unpruned(
    target: Target<'_>,
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
) -> Result<(IndexReport, Vec<Entry>)> {
    let Target { tree, dir, at } = target;
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
    let pass = Pass {
        tree,
        dir,
        at,
        options,
        find_moves: true,
    };
    let locked = locked_pass(pass, &mut walk, progress, &mut report).await?;
    if report.interrupted {
        report.elapsed = started.elapsed();
        return Ok((report, Vec::new()));
    }
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
            moves::Taken::Refuse,
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
            stale = second_pass(tree, (dir, at), options, &mut report).await?;
        }
    }
    report.stale = stale.len() as u64;
    tree.refresh().await?;
    report.elapsed = started.elapsed();
    Ok((report, stale))
}

fn local(path: &Path, message: &str) -> RenameError {
    RenameError::Local {
        path: path.display().to_string(),
        message: message.to_owned(),
    }
}
