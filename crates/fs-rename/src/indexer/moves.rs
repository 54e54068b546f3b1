//! Moves on disk become renames in the store.
//!
//! The walk is matched against what the store holds under the target (read once, under the
//! tree lock on the target, see `mod.rs`): an entry whose identity (device, inode, kind; for files also size and
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

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use fs_model::{FsDoc, FsPath, Identity};

use super::walk::{identity_of, local_path, Walked};
use super::IndexOptions;
use crate::error::{RenameError, Result};
use crate::job::Renamer;
use crate::ops::mkdir;
use crate::tree::{Entry, FsTree};

/// A rename the index run made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
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

/// A move found: the document at `from` (where the moves before it put it) goes to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Planned {
    pub from: FsPath,
    pub to: FsPath,
}

/// Where a document that was at `path` is after `moves` (done or planned), in order.
pub(super) fn after<'m>(
    moves: impl IntoIterator<Item = (&'m FsPath, &'m FsPath)>,
    path: &FsPath,
) -> FsPath {
    moves.into_iter().fold(path.clone(), |path, (from, to)| {
        if path.is_inside(from) {
            path.rebase(from, to).unwrap_or(path)
        } else {
            path
        }
    })
}

/// Whether the move `m` takes `old` to `new` (both under it, at the same place), without a
/// new path made.
fn carried_by(m: &Planned, old: &FsPath, new: &FsPath) -> bool {
    old.is_inside(&m.from)
        && new.is_inside(&m.to)
        && old.as_str()[m.from.as_str().len()..] == new.as_str()[m.to.as_str().len()..]
}

/// Finds the moves between `existing` (the store under `at`) and `walked` (the disk,
/// parents first), in the order they are to be made: a directory before what moved out of it.
pub(super) fn find_moves<'e>(
    (root, at): (&Path, &FsPath),
    existing: impl IntoIterator<Item = &'e Entry>,
    walked: &[Walked],
) -> Vec<Planned> {
    let mut on_disk: HashMap<Identity, usize> = HashMap::with_capacity(walked.len());
    for item in walked {
        if let Walked::Doc(
            FsDoc {
                identity: Some(identity),
                ..
            },
            _,
        ) = item
        {
            *on_disk.entry(*identity).or_default() += 1;
        }
    }
    let mut stored: HashMap<Identity, Option<&Entry>> = HashMap::with_capacity(on_disk.len());
    for entry in existing {
        if let Some(identity) = entry.doc.identity {
            stored
                .entry(identity)
                .and_modify(|e| *e = None) // held twice: not to be trusted
                .or_insert(Some(entry));
        }
    }
    let mut planned: Vec<Planned> = Vec::new();
    for item in walked {
        let Walked::Doc(found, _) = item else {
            continue;
        };
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
        if planned
            .iter()
            .any(|m| carried_by(m, &entry.doc.path, &found.path))
        {
            continue; // moved with a directory already renamed (the common case: no stat)
        }
        if !gone_from_disk(root, at, &entry.doc.path, identity) {
            continue; // still there: a copy, not a move
        }
        // From where the moves before it put it: a file moved out of a directory that moved
        // is renamed from inside the directory's new place.
        let from = after(planned.iter().map(|m| (&m.from, &m.to)), &entry.doc.path);
        if from == found.path {
            continue; // moved with a directory already renamed
        }
        planned.push(Planned {
            from,
            to: found.path.clone(),
        });
    }
    planned
}

/// What a move does with a destination the store already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Taken {
    /// Refused: the move fails, and the entry is indexed as new (an index run, where the
    /// store's documents there are as good as the disk's).
    Refuse,
    /// Replaced, as rename(2) replaces its destination: the watcher's, whose events come
    /// after the disk has moved on, so that what it indexed at the destination ahead of the
    /// move's event (new documents, new ids) gives way to the documents that moved.
    Replace,
}

/// Applies the `planned` moves as renames, in order. `present` holds paths known to be in the
/// store (a destination's parent among them needs no `mkdir -p`); `taken` says what to do
/// with a destination the store holds.
///
/// # Errors
/// Store failures while creating a destination's parent; a rename's own failure is reported
/// in [`Moves::failed`], not returned.
pub(super) async fn apply_moves(
    tree: &FsTree,
    (root, at): (&Path, &FsPath),
    (planned, known): (&[Planned], Vec<Option<Vec<Entry>>>),
    present: &HashSet<FsPath>,
    options: &IndexOptions,
    taken: Taken,
) -> Result<Moves> {
    let mut moves = Moves::default();
    let mut known = known.into_iter();
    for plan in planned {
        let subtree = known.next().flatten();
        // If a move before it failed, its source is not there: this rename fails too, and
        // the second pass indexes what the moves did not bring up to date.
        let (from, to) = (plan.from.clone(), &plan.to);
        match to.parent() {
            Some(parent) if !present.contains(&parent) && parent != *at => {
                // A destination in a directory the store does not hold yet (new on disk,
                // inside a directory moved): made now, indexed fully later.
                mkdir(tree, &options.locks, &parent, true).await?;
            }
            _ => {}
        }
        let mut renamer = Renamer::builder(Arc::clone(tree.store()), tree.index())
            .locks(&options.locks)
            .holder(format!("index {}: mv {from} {to}", root.display()));
        if let Some(entries) = subtree {
            renamer = renamer.known_subtree(entries);
        }
        let renamer = renamer.build();
        let mut outcome = renamer.rename(&from, to).await;
        if taken == Taken::Replace {
            if let Err(RenameError::DestinationExists { .. }) = outcome {
                outcome = match renamer.remove(to, true).await {
                    Ok(_) => renamer.rename(&from, to).await,
                    Err(e) => Err(e),
                };
            }
        }
        match outcome {
            Ok(report) => {
                tracing::info!(%from, %to, documents = report.rewritten, "moved on disk: renamed in the store");
                moves.done.push(Move {
                    from,
                    to: to.clone(),
                    documents: report.rewritten,
                });
            }
            Err(e) => moves
                .failed
                .push(format!("{from} → {to}: {e} (indexed as new)")),
        }
    }
    Ok(moves)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fs_model::{FsDoc, FsPath};
    use fs_store::{SharedStore, SqliteStore};

    use crate::job::Renamer;
    use crate::tree::{Entry, FsTree};

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).expect("path")
    }

    async fn tree_with(paths: &[&str]) -> FsTree {
        let store: SharedStore = Arc::new(SqliteStore::in_memory().expect("store"));
        let tree = FsTree::new(store, "fs");
        tree.ensure_indices().await.expect("indices");
        let docs = paths
            .iter()
            .map(|s| {
                if s.ends_with(".txt") {
                    FsDoc::file(p(s), 1, 0)
                } else {
                    FsDoc::dir(p(s), 0)
                }
            })
            .collect();
        tree.insert_all(docs).await.expect("insert");
        tree.refresh().await.expect("refresh");
        tree
    }

    async fn under(tree: &FsTree, path: &str) -> Vec<Entry> {
        let mut all = Vec::new();
        tree.for_each_page(&p(path), 100, |page| {
            all.extend(page);
            Ok(())
        })
        .await
        .expect("read");
        all
    }

    async fn paths(tree: &FsTree) -> Vec<String> {
        let mut all: Vec<String> = under(tree, "/")
            .await
            .into_iter()
            .map(|e| e.doc.path.to_string())
            .collect();
        all.sort();
        all
    }

    /// A rename given its subtree as read writes it without reading it again; one that finds
    /// the subtree changed since (a document added) reads it as usual, and moves it all.
    #[tokio::test]
    async fn a_known_subtree_is_used_only_while_it_is_what_the_store_holds() {
        let tree = tree_with(&["/a", "/a/x.txt", "/a/y.txt", "/a/d", "/a/d/z.txt"]).await;
        let known = under(&tree, "/a").await;
        let renamer = Renamer::builder(Arc::clone(tree.store()), tree.index())
            .known_subtree(known)
            .build();
        let report = renamer.rename(&p("/a"), &p("/b")).await.expect("rename");
        assert_eq!(report.rewritten, 5);
        assert_eq!(
            paths(&tree).await,
            ["/b", "/b/d", "/b/d/z.txt", "/b/x.txt", "/b/y.txt"]
        );

        let stale = under(&tree, "/b").await;
        tree.insert_all(vec![FsDoc::file(p("/b/new.txt"), 1, 0)])
            .await
            .expect("insert");
        tree.refresh().await.expect("refresh");
        let renamer = Renamer::builder(Arc::clone(tree.store()), tree.index())
            .known_subtree(stale)
            .build();
        let report = renamer.rename(&p("/b"), &p("/c")).await.expect("rename");
        assert_eq!(report.rewritten, 6, "the added document moved too");
        assert_eq!(
            paths(&tree).await,
            [
                "/c",
                "/c/d",
                "/c/d/z.txt",
                "/c/new.txt",
                "/c/x.txt",
                "/c/y.txt"
            ]
        );
        assert_eq!(
            tree.store()
                .count(tree.index(), &fs_store::Scope::All)
                .await
                .ok(),
            Some(6)
        );

        // Known documents over several pages go several bulk requests at once.
        let known = under(&tree, "/c").await;
        let renamer = Renamer::builder(Arc::clone(tree.store()), tree.index())
            .page_size(2)
            .known_subtree(known)
            .build();
        let report = renamer.rename(&p("/c"), &p("/e")).await.expect("rename");
        assert_eq!(report.rewritten, 6);
        assert_eq!(
            paths(&tree).await,
            [
                "/e",
                "/e/d",
                "/e/d/z.txt",
                "/e/new.txt",
                "/e/x.txt",
                "/e/y.txt"
            ]
        );
    }
}
