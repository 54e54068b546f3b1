//! Step 4 with `--prune`: what is gone from disk is deleted from the store, under one tree
//! lock on the target, in bulk, deepest first (`sweep.rs`): a run that dies half-way leaves
//! a well-formed tree, and the next run finds the rest stale. A stale subtree too large to
//! hold in memory is a journaled `rm -r` of its own, under its own tree locks, like any
//! delete job: one that dies half-way is finished by recovery.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use fs_model::FsPath;

use super::sweep::sweep;
use super::{IndexOptions, IndexReport, Skipped};
use crate::error::{RenameError, Result};
use crate::job::Renamer;
use crate::ops::under_write_lock;
use crate::tree::{Entry, FsTree};

/// Deletes the `stale` documents (found under `at`, the target of the local `dir`, not on
/// disk); returns how many documents the deletes removed. What could not be deleted is
/// listed among the skipped.
///
/// # Errors
/// None of its own: failures, the lock's included, are reported.
pub(super) async fn prune(
    tree: &FsTree,
    (dir, at): (&Path, &FsPath),
    stale: Vec<Entry>,
    options: &IndexOptions,
    report: &mut IndexReport,
) -> Result<u64> {
    let paths: HashSet<&FsPath> = stale.iter().map(|e| &e.doc.path).collect();
    // Topmost: a stale document whose parent is not stale (a directory gone takes the rest).
    let mut topmost: Vec<FsPath> = stale
        .iter()
        .filter(|e| e.doc.path.parent().is_none_or(|p| !paths.contains(&p)))
        .map(|e| e.doc.path.clone())
        .collect();
    topmost.sort();
    let client = options
        .locks
        .client(tree, format!("index {}: prune", dir.display()));
    let swept = match client.lock_tree(at).await {
        Ok(guard) => {
            under_write_lock(tree, guard, async {
                tree.refresh().await?;
                let swept = sweep(tree, topmost.clone()).await;
                tree.refresh().await?;
                Ok(swept)
            })
            .await
        }
        Err(e) => Err(e.into()),
    };
    let swept = match swept {
        Ok(swept) => swept,
        Err(e) => {
            for path in topmost {
                could_not_prune(report, &path, &e);
            }
            return Ok(0);
        }
    };
    let mut deleted = swept.removed;
    for (path, why) in swept.failed {
        could_not_prune(report, &path, why);
    }
    for path in swept.too_large {
        let renamer = Renamer::builder(Arc::clone(tree.store()), tree.index())
            .locks(&options.locks)
            .holder(format!("index {}: rm -r {path}", dir.display()))
            .build();
        match renamer.remove(&path, true).await {
            Ok(done) => deleted += done.rewritten,
            // Gone meanwhile (another job): nothing left to prune there.
            Err(RenameError::SourceNotFound { .. }) => {}
            Err(e) => could_not_prune(report, &path, &e),
        }
    }
    Ok(deleted)
}

/// Notes in `report` that `path` could not be pruned, and why.
fn could_not_prune(report: &mut IndexReport, path: &FsPath, why: impl std::fmt::Display) {
    report.failed += 1;
    report.skip(Skipped {
        path: path.to_string(),
        reason: format!("could not prune it: {why}"),
    });
}
