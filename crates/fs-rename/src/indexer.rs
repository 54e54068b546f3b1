//! Indexing a local directory tree into the tree index.
//!
//! The walk (walkdir, never following symbolic links) runs on the blocking pool and hands
//! batches to the writer over a bounded channel, so a slow store slows the walk instead of
//! filling memory. The whole run holds the tree lock on the target path: no rename can move
//! it, or anything above it, meanwhile.
//!
//! Re-indexing is idempotent: existing documents are matched by path; unchanged ones are left
//! alone, changed ones rewritten (conditional on the version read), new ones created. Documents
//! with no counterpart on disk any more are reported, and deleted only when asked (they may be
//! the result of renames made in the store).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use fs_model::{FsDoc, FsPath};
use fs_store::BulkOp;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::{RenameError, Result};
use crate::ops::{mkdir, to_source, under_write_lock, LockSettings};
use crate::tree::{Entry, FsTree};

/// How [`index_dir`] works.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Documents per bulk request. Default: 1 000.
    pub batch_size: usize,
    /// Delete documents under the target that are no longer on disk. Default: false.
    pub prune: bool,
    /// The locks' lease and wait.
    pub locks: LockSettings,
}

impl Default for IndexOptions {
    fn default() -> IndexOptions {
        IndexOptions {
            batch_size: 1_000,
            prune: false,
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

/// What the walker hands the writer.
enum Walked {
    Doc(FsDoc),
    Skipped(Skipped),
    Symlink(Skipped),
}

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
    let meta = std::fs::metadata(dir).map_err(|e| local(dir, &e.to_string()))?;
    if !meta.is_dir() {
        return Err(local(dir, "not a directory"));
    }
    tree.ensure_indices().await?;
    if let Some(parent) = at.parent() {
        mkdir(tree, &options.locks, &parent, true).await?;
    }
    let client = options
        .locks
        .client(tree, format!("index {} as {at}", dir.display()));
    let guard = client.lock_tree(at).await?;
    under_write_lock(tree, guard, locked_index(tree, dir, at, options, progress)).await
}

fn local(path: &Path, message: &str) -> RenameError {
    RenameError::Local {
        path: path.display().to_string(),
        message: message.to_owned(),
    }
}

async fn locked_index(
    tree: &FsTree,
    dir: &Path,
    at: &FsPath,
    options: &IndexOptions,
    progress: Option<IndexProgressSink>,
) -> Result<IndexReport> {
    let started = Instant::now();
    let mut report = IndexReport {
        dir: dir.to_owned(),
        at: at.to_string(),
        ..IndexReport::default()
    };
    tree.refresh().await?;
    let mut existing: HashMap<FsPath, Entry> = HashMap::new();
    tree.for_each_page(at, 1_000, |page| {
        existing.extend(page.into_iter().map(|e| (e.doc.path.clone(), e)));
        Ok(())
    })
    .await?;

    let batch_size = options.batch_size.max(1);
    let (batch_tx, mut batch_rx) = mpsc::channel::<Vec<Walked>>(4);
    let (root, at_walk) = (dir.to_owned(), at.clone());
    // Filesystem walks block: they run on the blocking pool. A send error means the writer
    // stopped (it failed), so the walk stops too.
    let walker = tokio::task::spawn_blocking(move || walk(&root, &at_walk, batch_size, &batch_tx));

    let mut walked = 0u64;
    let mut written = 0u64;
    while let Some(batch) = batch_rx.recv().await {
        walked += batch.len() as u64;
        let mut ops = Vec::new();
        let mut paths = Vec::new();
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
            match existing.remove(&doc.path) {
                Some(entry) if entry.doc == doc => report.unchanged += 1,
                Some(entry) => {
                    let source = to_source(tree, &entry.id, &doc)?;
                    ops.push(BulkOp::Index {
                        id: entry.id,
                        source,
                        if_version: Some(entry.version),
                    });
                    paths.push((doc.path, false));
                }
                None => {
                    let id = FsDoc::new_id();
                    let source = to_source(tree, &id, &doc)?;
                    ops.push(BulkOp::Create { id, source });
                    paths.push((doc.path, true));
                }
            }
        }
        if !ops.is_empty() {
            let context = format!("indexing under `{at}`");
            let results = tree
                .store()
                .bulk(tree.index(), ops)
                .await
                .map_err(RenameError::store(context))?;
            for ((path, created), result) in paths.into_iter().zip(results) {
                match result {
                    Ok(_) if created => report.created += 1,
                    Ok(_) => report.updated += 1,
                    Err(e) => {
                        report.failed += 1;
                        report.skip(Skipped {
                            path: path.to_string(),
                            reason: format!("the store refused it: {e}"),
                        });
                    }
                }
            }
            written = report.created + report.updated;
        }
        if let Some(sink) = &progress {
            sink(IndexProgress { walked, written });
        }
    }
    walker.await.map_err(|e| RenameError::Local {
        path: dir.display().to_string(),
        message: format!("the walk failed: {e}"),
    })?;

    report.stale = existing.len() as u64;
    if options.prune && !existing.is_empty() {
        let ops: Vec<BulkOp> = existing
            .into_values()
            .map(|e| BulkOp::Delete {
                id: e.id,
                if_version: Some(e.version),
            })
            .collect();
        for chunk in ops.chunks(batch_size) {
            let context = format!("pruning under `{at}`");
            let results = tree
                .store()
                .bulk(tree.index(), chunk.to_vec())
                .await
                .map_err(RenameError::store(context))?;
            report.pruned += results.iter().filter(|r| r.is_ok()).count() as u64;
        }
    }
    tree.refresh().await?;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Walks `root` and sends batches of what it finds; stops early if the writer has gone.
fn walk(root: &Path, at: &FsPath, batch_size: usize, batch_tx: &mpsc::Sender<Vec<Walked>>) {
    let mut batch = Vec::with_capacity(batch_size);
    let send = |batch: &mut Vec<Walked>| {
        let full = std::mem::replace(batch, Vec::with_capacity(batch_size));
        batch_tx.blocking_send(full).is_ok()
    };
    let mut entries = walkdir::WalkDir::new(root).follow_links(false).into_iter();
    while let Some(next) = entries.next() {
        let item = match next {
            Err(e) => {
                let path = e.path().unwrap_or(root).to_string_lossy().into_owned();
                let reason = e
                    .io_error()
                    .map_or_else(|| e.to_string(), |io| format!("unreadable: {io}"));
                Walked::Skipped(Skipped { path, reason })
            }
            Ok(entry) => {
                let shown = entry.path().to_string_lossy().into_owned();
                let is_dir = entry.file_type().is_dir();
                match describe(root, at, &entry) {
                    Ok(item) => item,
                    Err(reason) => {
                        if is_dir {
                            // Nothing under a directory that cannot be indexed can be either.
                            entries.skip_current_dir();
                        }
                        Walked::Skipped(Skipped {
                            path: shown,
                            reason,
                        })
                    }
                }
            }
        };
        batch.push(item);
        if batch.len() >= batch_size && !send(&mut batch) {
            return;
        }
    }
    if !batch.is_empty() {
        send(&mut batch);
    }
}

/// Turns a walked entry into a document, or says why it cannot be one.
fn describe(
    root: &Path,
    at: &FsPath,
    entry: &walkdir::DirEntry,
) -> std::result::Result<Walked, String> {
    let file_type = entry.file_type();
    let relative = entry.path().strip_prefix(root).map_err(|e| e.to_string())?;
    let mut path = at.clone();
    for component in relative.components() {
        let name = component
            .as_os_str()
            .to_str()
            .ok_or_else(|| "the name is not UTF-8".to_owned())?;
        path = path.join(name).map_err(|e| e.to_string())?;
    }
    if file_type.is_symlink() {
        let shown = entry.path().to_string_lossy().into_owned();
        return Ok(Walked::Symlink(Skipped {
            path: shown,
            reason: "symbolic link (not followed)".into(),
        }));
    }
    let meta = entry.metadata().map_err(|e| format!("unreadable: {e}"))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Ok(Walked::Doc(if file_type.is_dir() {
        FsDoc::dir(path, modified)
    } else {
        FsDoc::file(path, meta.len(), modified)
    }))
}
