//! Indexing a local directory tree into the tree index, and keeping it in step with the disk.
//!
//! A run has four steps:
//!
//! 1. the walk (`walk.rs`: walkdir on the blocking pool, never following symbolic links),
//!    which records each entry's identity on disk (device and inode);
//! 2. the moves (`moves.rs`): an identity found at a new path whose old path is gone was moved
//!    on disk, and its document is renamed in the store (a tree-locked, journaled rename:
//!    ids and every field kept), not deleted and created again;
//! 3. under the tree lock on the target (no rename can move it, or anything above it,
//!    meanwhile), existing documents are matched by path: unchanged ones left alone, changed
//!    ones rewritten (conditional on the version read), new ones created;
//! 4. documents with no counterpart on disk are reported, and with `prune` deleted, a
//!    journaled `rm -r` of each topmost one under its own tree locks (`prune.rs`).
//!
//! `docs/indexing.md` describes what is and is not detected.

mod content;
mod moves;
mod one;
mod prune;
mod walk;
mod watch;

use std::collections::HashMap;
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
use walk::Walked;
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
    let (root, at_walk) = (dir.to_owned(), at.clone());
    let walked = tokio::task::spawn_blocking(move || walk::walk_all(&root, &at_walk))
        .await
        .map_err(|e| local(dir, &format!("the walk failed: {e}")))?;

    let existing = existing_under(tree, at).await?;
    let moves = moves::apply_moves(tree, (dir, at), &existing, &walked, options).await?;
    drop(existing);
    report.moves = moves.done.len() as u64;
    report.moved = moves.done.iter().map(|m| m.documents).sum();
    report.move_list = moves.done.into_iter().take(100).collect();
    report.moves_failed = moves.failed;

    let client = options
        .locks
        .client(tree, format!("index {} as {at}", dir.display()));
    let guard = client.lock_tree(at).await?;
    let stale = under_write_lock(
        tree,
        guard,
        locked_index(tree, walked, (dir, at), options, progress, &mut report),
    )
    .await?;
    report.stale = stale.len() as u64;
    if options.prune && !stale.is_empty() {
        report.pruned = prune::prune(tree, dir, stale, options, &mut report).await?;
    }
    tree.refresh().await?;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The documents under `at`, by path, as the store has them now.
async fn existing_under(tree: &FsTree, at: &FsPath) -> Result<HashMap<FsPath, Entry>> {
    tree.refresh().await?;
    let mut existing: HashMap<FsPath, Entry> = HashMap::new();
    tree.for_each_page(at, 1_000, |page| {
        existing.extend(page.into_iter().map(|e| (e.doc.path.clone(), e)));
        Ok(())
    })
    .await?;
    Ok(existing)
}

fn local(path: &Path, message: &str) -> RenameError {
    RenameError::Local {
        path: path.display().to_string(),
        message: message.to_owned(),
    }
}

/// Step 3, under the tree lock on `at`: creates and updates what the walk found, with the
/// text of the files that need it read (see `content.rs`); returns the documents under `at`
/// that it did not find (stale).
async fn locked_index(
    tree: &FsTree,
    walked: Vec<Walked>,
    (dir, at): (&Path, &FsPath),
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
    report: &mut IndexReport,
) -> Result<Vec<Entry>> {
    let mut existing = existing_under(tree, at).await?;
    let batch_size = options.batch_size.max(1);
    let mut walked_so_far = 0u64;
    let mut items = walked.into_iter().peekable();
    while items.peek().is_some() {
        let batch: Vec<Walked> = items.by_ref().take(batch_size).collect();
        walked_so_far += batch.len() as u64;
        // What each entry needs; the files whose text is wanted are read together, off the
        // runtime's threads, before the batch is written.
        let mut planned: Vec<(Option<Entry>, FsDoc, Plan)> = Vec::new();
        for item in batch {
            let doc = match item {
                Walked::Doc(doc) => doc,
                Walked::Symlink(s) => {
                    report.symlinks += 1;
                    report.skip(s);
                    continue;
                }
                Walked::Skipped(s) => {
                    report.skip(s);
                    continue;
                }
            };
            if doc.is_dir() {
                report.dirs += 1;
            } else {
                report.files += 1;
                report.bytes += doc.size;
            }
            let entry = existing.remove(&doc.path);
            let plan = content::plan(entry.as_ref().map(|e| &e.doc), &doc, options.content);
            if plan == Plan::Unchanged {
                report.unchanged += 1;
                continue;
            }
            planned.push((entry, doc, plan));
        }
        let texts = read_texts(dir, at, &planned, options.content).await?;
        let mut ops = Vec::new();
        let mut paths = Vec::new();
        for ((entry, doc, plan), text) in planned.into_iter().zip(texts) {
            let had_text = text.is_some();
            let doc = match (plan, entry) {
                // The file holds no text: its document stays as it is.
                (Plan::Fill, _) if !had_text => {
                    report.unchanged += 1;
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
                    }
                    Err(e) => {
                        report.failed += 1;
                        report.skip(Skipped {
                            path: path.to_string(),
                            reason: format!("the store refused it: {e}"),
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
    Ok(existing.into_values().collect())
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
