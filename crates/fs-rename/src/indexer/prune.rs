//! Step 4 with `--prune`: what is gone from disk is deleted from the store, a journaled
//! `rm -r` of each topmost stale document (a directory gone takes its subtree with it) under
//! its own tree locks, like any delete job: a delete that dies half-way is finished by
//! recovery, and no other job ever sees half of it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use fs_model::FsPath;

use super::{IndexOptions, IndexReport, Skipped};
use crate::error::{RenameError, Result};
use crate::job::Renamer;
use crate::tree::{Entry, FsTree};

/// Deletes the `stale` documents (found under the target, not on disk); returns how many
/// documents the deletes removed. A delete the store refuses is listed among the skipped.
///
/// # Errors
/// None of its own: failures of single deletes are reported.
pub(super) async fn prune(
    tree: &FsTree,
    dir: &Path,
    stale: Vec<Entry>,
    options: &IndexOptions,
    report: &mut IndexReport,
) -> Result<u64> {
    let paths: HashSet<FsPath> = stale.iter().map(|e| e.doc.path.clone()).collect();
    // Topmost: a stale document whose parent is not stale (a directory gone takes the rest).
    let mut topmost: Vec<&Entry> = stale
        .iter()
        .filter(|e| e.doc.path.parent().is_none_or(|p| !paths.contains(&p)))
        .collect();
    topmost.sort_by(|a, b| a.doc.path.cmp(&b.doc.path));
    let mut deleted = 0;
    for entry in topmost {
        let path = &entry.doc.path;
        let renamer = Renamer::builder(Arc::clone(tree.store()), tree.index())
            .locks(&options.locks)
            .holder(format!("index {}: rm -r {path}", dir.display()))
            .build();
        match renamer.remove(path, entry.doc.is_dir()).await {
            Ok(done) => deleted += done.rewritten,
            // Gone meanwhile (another job): nothing left to prune there.
            Err(RenameError::SourceNotFound { .. }) => {}
            Err(e) => {
                report.failed += 1;
                report.skip(Skipped {
                    path: path.to_string(),
                    reason: format!("could not prune it: {e}"),
                });
            }
        }
    }
    Ok(deleted)
}
