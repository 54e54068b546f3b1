//! Moves on disk become renames in the store.
//!
//! Before anything is written, the walk is matched against what the store holds under the
//! target: an entry whose identity (device, inode, kind; for files also size and
//! modification time, which tell a reused inode from the same file) belongs to a document at
//! another path, whose own path is gone from disk (or holds another file now), was moved. The
//! document is renamed there with [`Renamer`]: under tree locks, journaled and recoverable like
//! any rename, every field and every id under it kept. Entries inside a directory that moved
//! with it are covered by its rename; an entry moved again after (a file moved out of a moved
//! directory) is renamed from where the first rename put it.
//!
//! Conservative where identity cannot be trusted: an identity seen twice on disk (hard links)
//! or held by two documents is not used, and a rename the store refuses (its destination is
//! taken, say) is reported and left to the rest of the run: the new path is created, and the
//! old one is stale (deleted with `--prune`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use fs_model::{FsDoc, FsPath, Identity};

use super::walk::{identity_of, local_path, Walked};
use super::IndexOptions;
use crate::error::Result;
use crate::job::Renamer;
use crate::ops::mkdir;
use crate::tree::{Entry, FsTree};

/// A rename the index run made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Move {
    /// Where the document was.
    pub from: FsPath,
    /// Where it is now, as on disk.
    pub to: FsPath,
    /// Documents renamed (the subtree of a directory).
    pub documents: u64,
}

/// What the moves came to.
#[derive(Debug, Default)]
pub(super) struct Moves {
    pub done: Vec<Move>,
    /// Renames that failed, with the reason: their entries are indexed as new.
    pub failed: Vec<String>,
}

/// Same file: same identity and kind, and for a file the same size and modification time.
fn same_file(stored: &FsDoc, found: &FsDoc) -> bool {
    stored.kind == found.kind
        && (found.is_dir() || (stored.size == found.size && stored.modified == found.modified))
}

/// True if the local path that `path` stands for no longer holds the file `identity`.
fn gone_from_disk(root: &Path, at: &FsPath, path: &FsPath, identity: Identity) -> bool {
    let Some(local) = local_path(root, at, path) else {
        return false;
    };
    match std::fs::symlink_metadata(&local) {
        Ok(meta) => identity_of(&meta) != Some(identity),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Where a document that was at `path` is after `moves`, in order.
fn after(moves: &[Move], path: &FsPath) -> FsPath {
    moves.iter().fold(path.clone(), |path, m| {
        if path.is_inside(&m.from) {
            path.rebase(&m.from, &m.to).unwrap_or(path)
        } else {
            path
        }
    })
}

/// Finds the moves between `existing` (the store under `at`, by path) and `walked` (the disk,
/// parents first), and applies them as renames.
///
/// # Errors
/// Store failures while creating a destination's parent; a rename's own failure is reported
/// in [`Moves::failed`], not returned.
pub(super) async fn apply_moves(
    tree: &FsTree,
    (root, at): (&Path, &FsPath),
    existing: &HashMap<FsPath, Entry>,
    walked: &[Walked],
    options: &IndexOptions,
) -> Result<Moves> {
    let mut on_disk: HashMap<Identity, usize> = HashMap::new();
    for item in walked {
        if let Walked::Doc(FsDoc {
            identity: Some(identity),
            ..
        }) = item
        {
            *on_disk.entry(*identity).or_default() += 1;
        }
    }
    let mut stored: HashMap<Identity, Option<&Entry>> = HashMap::new();
    for entry in existing.values() {
        if let Some(identity) = entry.doc.identity {
            stored
                .entry(identity)
                .and_modify(|e| *e = None) // held twice: not to be trusted
                .or_insert(Some(entry));
        }
    }
    let mut moves = Moves::default();
    for item in walked {
        let Walked::Doc(found) = item else { continue };
        let Some(identity) = found.identity else {
            continue;
        };
        if on_disk.get(&identity) != Some(&1) {
            continue; // a hard link: the same file at two paths
        }
        let Some(Some(entry)) = stored.get(&identity) else {
            continue;
        };
        if entry.doc.path == found.path || !same_file(&entry.doc, found) {
            continue;
        }
        if !gone_from_disk(root, at, &entry.doc.path, identity) {
            continue; // still there: a copy, not a move
        }
        let from = after(&moves.done, &entry.doc.path);
        if from == found.path {
            continue; // moved with a directory already renamed
        }
        if let Some(parent) = found.path.parent() {
            // A destination in a directory new on disk: made now, indexed fully later.
            mkdir(tree, &options.locks, &parent, true).await?;
        }
        let renamer = Renamer::builder(Arc::clone(tree.store()), tree.index())
            .lease(options.locks.lease)
            .wait(options.locks.wait)
            .lock_protocol(options.locks.protocol)
            .holder(format!(
                "index {}: mv {from} {}",
                root.display(),
                found.path
            ))
            .build();
        match renamer.rename(&from, &found.path).await {
            Ok(report) => {
                tracing::info!(%from, to = %found.path, documents = report.rewritten, "moved on disk: renamed in the store");
                moves.done.push(Move {
                    from,
                    to: found.path.clone(),
                    documents: report.rewritten,
                });
            }
            Err(e) => moves
                .failed
                .push(format!("{from} → {}: {e} (indexed as new)", found.path)),
        }
    }
    Ok(moves)
}
