//! Indexing one entry, for the watcher: a file created or written, or a directory whose
//! entries changed (its modification time with them), brings its one document up to date
//! (created, or rewritten conditional on the version read) under the tree lock on its path,
//! its parent directories created first. A directory's entries are not looked at.

use std::path::Path;
use std::time::UNIX_EPOCH;

use fs_model::{FsDoc, FsPath};
use fs_store::BulkOp;

use super::content::{self, Plan};
use super::walk::identity_of;
use super::IndexOptions;
use crate::error::{RenameError, Result};
use crate::ops::{mkdir, to_source, under_write_lock};
use crate::tree::FsTree;

/// The document of the entry at `path` that `meta` describes: a file, or a directory alone.
pub(super) fn describe_one(path: &FsPath, meta: &std::fs::Metadata) -> FsDoc {
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    if meta.is_dir() {
        FsDoc::dir(path.clone(), modified)
    } else {
        FsDoc::file(path.clone(), meta.len(), modified)
    }
    .with_identity(identity_of(meta))
}

/// What [`index_one`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OneFile {
    Created,
    Updated,
    Unchanged,
    /// The store holds an entry of the other kind there: it must go first (the caller
    /// removes it).
    OtherKind,
}

/// Brings the document of the local entry `local` (described by `meta`) at `path` up to
/// date: a file, or a directory alone.
///
/// # Errors
/// Lock and store failures.
pub(super) async fn index_one(
    tree: &FsTree,
    (local, meta): (&Path, &std::fs::Metadata),
    path: &FsPath,
    options: &IndexOptions,
) -> Result<OneFile> {
    if let Some(parent) = path.parent() {
        mkdir(tree, &options.locks, &parent, true).await?;
    }
    let doc = describe_one(path, meta);
    let client = options
        .locks
        .client(tree, format!("index {}", local.display()));
    let guard = client.lock_tree(path).await?;
    under_write_lock(tree, guard, async {
        tree.refresh().await?;
        let stored = tree.find(path).await?;
        if stored.as_ref().is_some_and(|e| e.doc.kind != doc.kind) {
            return Ok(OneFile::OtherKind);
        }
        let plan = content::plan(stored.as_ref().map(|e| &e.doc), &doc, options.content);
        let text = match (plan, options.content) {
            (Plan::Unchanged, _) => return Ok(OneFile::Unchanged),
            (Plan::Write { read: true } | Plan::Fill, Some(max)) => {
                let local = local.to_owned();
                tokio::task::spawn_blocking(move || content::read_text(&local, max))
                    .await
                    .ok()
                    .flatten()
            }
            _ => None,
        };
        if plan == Plan::Fill && text.is_none() {
            return Ok(OneFile::Unchanged);
        }
        let doc = doc.clone().with_content(text);
        let (op, outcome) = match stored {
            Some(entry) => (
                BulkOp::Index {
                    source: to_source(tree, &entry.id, &doc)?,
                    id: entry.id,
                    if_version: Some(entry.version),
                },
                OneFile::Updated,
            ),
            None => {
                let id = FsDoc::new_id();
                (
                    BulkOp::Create {
                        source: to_source(tree, &id, &doc)?,
                        id,
                    },
                    OneFile::Created,
                )
            }
        };
        let context = format!("indexing `{path}`");
        let results = tree
            .store()
            .bulk(tree.index(), vec![op])
            .await
            .map_err(RenameError::store(context.clone()))?;
        match results.into_iter().next() {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(RenameError::store(context)(e)),
            None => {}
        }
        tree.refresh().await?;
        Ok(outcome)
    })
    .await
}
