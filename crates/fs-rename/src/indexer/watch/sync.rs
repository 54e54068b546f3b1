//! Bringing one path in step with the disk: a file's document created or updated (its text
//! read where it needs it), a path gone from disk removed from the store.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use fs_model::{FsDoc, FsPath};
use fs_store::{BulkOp, Scope, SearchRequest};

use super::super::content::{self, Plan};
use super::super::one::{describe_one, index_one, OneFile};
use super::super::sweep::sweep;
use super::{Applier, WatchBatch};
use crate::error::{RenameError, Result};
use crate::ops::{to_source, under_write_lock};
use crate::tree::Entry;

/// One path of a batch: where it is on disk, where its document goes in the store, and the
/// document the disk asks for (`None` when nothing there is indexed).
struct Wanted {
    local: PathBuf,
    path: FsPath,
    doc: Option<FsDoc>,
}

/// What [`Applier::sync_documents`] did: files written, documents removed, and the paths
/// left to [`Applier::sync`].
#[derive(Default)]
struct Synced {
    slow: Vec<PathBuf>,
    /// Directories gone from disk for good, for [`sweep`].
    gone_dirs: Vec<FsPath>,
    /// Of those, what [`sweep`] left to a journaled `rm -r`.
    too_large: Vec<FsPath>,
    /// What could not be swept, and why.
    failed: Vec<String>,
    files: u64,
    removed: u64,
}

impl Applier<'_> {
    /// The document to write for the entry `found` at `local` when the store holds `stored`
    /// at its path, with its text read if it needs it (see `content.rs`); `None` if the
    /// document is up to date. The file is read here, under the lock, like its metadata: a
    /// batch of the watcher holds few files.
    pub(super) fn with_text(
        &self,
        local: &Path,
        stored: Option<&FsDoc>,
        found: &FsDoc,
    ) -> Option<FsDoc> {
        let max = self.index.content;
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
    pub(super) async fn sync_documents(
        &self,
        locals: &[PathBuf],
        batch: &mut WatchBatch,
    ) -> Result<Vec<PathBuf>> {
        let wanted = self.describe_locals(locals, batch);
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let client = self
            .index
            .locks
            .client(self.tree, format!("index --watch {}", self.root.display()));
        let guard = client.lock_tree(self.at).await?;
        let tree = self.tree;
        let synced = under_write_lock(tree, guard, async {
            tree.refresh().await?;
            let mut synced = Synced::default();
            for chunk in wanted.chunks(500) {
                let stored = self.read_stored(chunk).await?;
                let ops = self.plan_chunk(chunk, stored, &mut synced)?;
                self.write_ops(ops).await?;
            }
            // Every directory gone at once (`rm -rf` of hundreds of them): a few requests,
            // not a journaled `rm -r` job each.
            if !synced.gone_dirs.is_empty() {
                tree.refresh().await?;
                let swept = sweep(tree, std::mem::take(&mut synced.gone_dirs)).await;
                synced.removed += swept.removed;
                synced.failed.extend(
                    swept
                        .failed
                        .into_iter()
                        .map(|(path, why)| format!("rm -r {path}: {why}")),
                );
                synced.too_large = swept.too_large;
            }
            tree.refresh().await?;
            Ok(synced)
        })
        .await?;
        batch.files += synced.files;
        batch.removed += synced.removed;
        batch.failures.extend(synced.failed);
        // Too large to sweep in memory: a journaled `rm -r` each, after the lock.
        for path in synced.too_large {
            self.remove(&path, batch).await;
        }
        Ok(synced.slow)
    }

    /// The document each of `locals` asks for on disk (`None` for a path gone, a symbolic link
    /// or a special file), paths outside the target left out; a path that cannot be read is
    /// noted in `batch` as unreadable and left out too (what the store holds there is kept).
    fn describe_locals(&self, locals: &[PathBuf], batch: &mut WatchBatch) -> Vec<Wanted> {
        let mut wanted = Vec::new();
        for local in locals {
            let Some(path) = self.store_path(local) else {
                continue;
            };
            let doc = match std::fs::symlink_metadata(local) {
                Ok(meta) if meta.is_dir() || meta.is_file() => Some(describe_one(&path, &meta)),
                // Symbolic links and special files are not indexed.
                Ok(_) => None,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.forget_unreadable(local);
                    None
                }
                // There, but not to be read: what the store holds there is kept (and said
                // once, not by every batch that looks at it).
                Err(e) => {
                    self.note_unreadable(batch, local, &e.to_string());
                    continue;
                }
            };
            wanted.push(Wanted {
                local: local.clone(),
                path,
                doc,
            });
        }
        wanted
    }

    /// The stored entries at the paths of `chunk`, by path, in one search.
    async fn read_stored(&self, chunk: &[Wanted]) -> Result<HashMap<FsPath, Entry>> {
        let paths: Vec<FsPath> = chunk.iter().map(|wanted| wanted.path.clone()).collect();
        self.read_at(&paths).await
    }

    /// The stored entries at `paths` (not what is under them), by path, in one search.
    pub(super) async fn read_at(&self, paths: &[FsPath]) -> Result<HashMap<FsPath, Entry>> {
        let tree = self.tree;
        let scopes = paths.iter().cloned().map(Scope::Exact).collect();
        let request = SearchRequest::single_page(Scope::AnyOf(scopes), paths.len() * 2 + 1);
        let context = format!("reading {} documents", paths.len());
        let page = tree
            .store()
            .search(tree.index(), request)
            .await
            .map_err(RenameError::store(context))?;
        let mut stored = HashMap::new();
        for doc in page.docs {
            let entry = Entry::from_stored(tree.index(), doc)?;
            stored.insert(entry.doc.path.clone(), entry);
        }
        Ok(stored)
    }

    /// The bulk operations that bring the documents of `chunk` in step with the disk, given
    /// what the store holds at their paths; counts them in `synced`, and leaves there the
    /// paths that need more than one document written.
    fn plan_chunk(
        &self,
        chunk: &[Wanted],
        mut stored: HashMap<FsPath, Entry>,
        synced: &mut Synced,
    ) -> Result<Vec<BulkOp>> {
        let tree = self.tree;
        let mut ops = Vec::new();
        let mut known: HashSet<FsPath> = stored.keys().cloned().collect();
        for Wanted { local, path, doc } in chunk {
            match (stored.remove(path), doc) {
                (Some(entry), Some(doc)) if entry.doc.kind != doc.kind => {
                    synced.slow.push(local.clone())
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
                    synced.files += u64::from(!doc.is_dir());
                }
                (None, Some(doc)) => {
                    // Its parent must be there: in the store already, or in this
                    // chunk before it (parents sort first).
                    let parent_known = doc
                        .parent
                        .as_ref()
                        .is_none_or(|p| known.contains(p) || p == self.at || !p.is_inside(self.at));
                    if !parent_known {
                        synced.slow.push(local.clone());
                        continue;
                    }
                    let id = FsDoc::new_id();
                    let doc = self.with_text(local, None, doc).unwrap_or(doc.clone());
                    ops.push(BulkOp::Create {
                        source: to_source(tree, &id, &doc)?,
                        id,
                    });
                    known.insert(path.clone());
                    synced.files += u64::from(!doc.is_dir());
                }
                // Gone from disk (not a symbolic link or a special file put there):
                // forgotten once a later batch confirms it.
                (Some(_), None)
                    if local.symlink_metadata().is_err() && !self.gone_for_good(local) => {}
                // A directory gone takes its subtree: swept after the chunks, deepest first.
                (Some(entry), None) if entry.doc.is_dir() => synced.gone_dirs.push(entry.doc.path),
                (Some(entry), None) => {
                    ops.push(BulkOp::Delete {
                        id: entry.id,
                        if_version: Some(entry.version),
                    });
                    synced.removed += 1;
                }
                (None, None) => {}
            }
        }
        Ok(ops)
    }

    /// Sends `ops` in one bulk request; the first operation refused fails the whole.
    async fn write_ops(&self, ops: Vec<BulkOp>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let tree = self.tree;
        let context = format!("writing {} documents", ops.len());
        let results = tree
            .store()
            .bulk(tree.index(), ops)
            .await
            .map_err(RenameError::store(context.clone()))?;
        if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
            return Err(RenameError::store(context)(e));
        }
        Ok(())
    }

    /// Brings the store in step with the disk at `local`.
    pub(super) async fn sync(&self, local: &Path, batch: &mut WatchBatch) {
        let Some(path) = self.store_path(local) else {
            return;
        };
        let shown = local.display();
        match std::fs::symlink_metadata(local) {
            Ok(meta) if meta.is_dir() => self.index_subtree(local, batch).await,
            Ok(meta) if meta.is_file() => {
                let mut outcome = index_one(self.tree, (local, &meta), &path, self.index).await;
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
                    outcome = index_one(self.tree, (local, &meta), &path, self.index).await;
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
                self.forget_unreadable(local);
                if self.gone_for_good(local) {
                    self.remove(&path, batch).await;
                }
            }
            // There, but not to be read: what the store holds there is kept.
            Err(e) => self.note_unreadable(batch, local, &e.to_string()),
        }
    }

    pub(super) async fn remove(&self, path: &FsPath, batch: &mut WatchBatch) {
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
