//! The delete: every document at or under the path, each after everything under it, in bulk
//! requests that never hold a document and one of its ancestors, each delete conditional on
//! the version read.
//!
//! Why not everything in one request: a bulk request is not a transaction, and
//! Elasticsearch applies its items shard by shard in any order, so a request holding a
//! directory and its children could delete the directory first and then stop. Sending the
//! children, waiting for every answer, and only then sending their parents means that
//! whenever the job stops, every document still there has its parent still there: no
//! orphan, and fsck stays clean while recovery finishes the delete.
//!
//! The subtree is read once, in path order, and each document is held only until the scan
//! has passed what lies under it (`delete_order.rs`): memory does not grow with the subtree.

use std::sync::OnceLock;

use fs_model::FsPath;
use fs_store::{BulkOp, Scope, StoreError};

use super::before_write::Hold;
use super::delete_order::DeleteOrder;
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::tree::{next_entries, Entry, FsTree};

impl Renamer {
    /// Deletes everything at or under `path`, each document after everything under it;
    /// `total` is the count the checks found (once known).
    pub(super) async fn delete_all(
        &self,
        hold: Hold<'_>,
        path: &FsPath,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let scope = Scope::Subtree(path.clone());
        self.delete_scope(hold, (path, scope), total, report).await
    }

    /// Deletes the documents of `scope` (at or under `path`: the subtree, or what is left of
    /// it), each after everything under it.
    pub(super) async fn delete_scope(
        &self,
        hold: Hold<'_>,
        (path, scope): (&FsPath, Scope),
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let page_size = self.config.page_size;
        // Under locks nothing is added under the path; what is deleted is not read again (a
        // point in time, or a scan past it). `total` bounds the scope from above.
        let mut scan = self.subtree_scan(hold.tree, scope, total.get(), page_size);
        let deleted = async {
            let context = || format!("scanning under `{path}`");
            let mut order = DeleteOrder::new(page_size);
            while let Some(page) = next_entries(&mut scan, hold.tree.index(), context).await? {
                let entries = page.collect::<Result<Vec<_>>>()?;
                report.found += entries.len() as u64;
                for entry in entries {
                    for ready in order.add(entry) {
                        self.delete_ready(hold, &ready, path, total, report).await?;
                    }
                }
            }
            for ready in order.finish() {
                self.delete_ready(hold, &ready, path, total, report).await?;
            }
            Ok(())
        }
        .await;
        // However the delete ended, what the store keeps open for the scan is closed before
        // the locks are released.
        scan.close().await;
        deleted
    }

    /// Deletes `page`, once the job may still write, and says how far it is.
    async fn delete_ready(
        &self,
        hold: Hold<'_>,
        page: &[Entry],
        path: &FsPath,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        self.before_page(
            hold,
            page,
            path,
            (report.kind, report.rewritten, report.found),
        )
        .await?;
        self.delete_page(hold.tree, page, path, report).await?;
        self.emit(RenameEvent::Progress {
            done: report.rewritten,
            total: total.get().copied().unwrap_or(0).max(report.found),
        });
        Ok(())
    }

    /// Deletes one page (no document in it under another) in one bulk request.
    async fn delete_page(
        &self,
        tree: &FsTree,
        entries: &[Entry],
        path: &FsPath,
        report: &mut RenameReport,
    ) -> Result<()> {
        let ops = entries
            .iter()
            .map(|entry| BulkOp::Delete {
                id: entry.id.clone(),
                if_version: self.config.versioned.then_some(entry.version),
            })
            .collect();
        let context = format!("deleting documents under `{path}`");
        let answers = self.send_page(tree, ops, &context, report).await?;
        // Every item's fate is tallied before any failure is reported.
        let mut failure = None;
        for answer in answers {
            match answer.result {
                Ok(_) => report.rewritten += 1,
                // Gone already: what this delete wanted. An earlier send of it landed (its
                // answer was lost), or the job a recovery finishes deleted it just before.
                Err(StoreError::Conflict { exists: false, .. } | StoreError::NotFound { .. }) => {
                    report.rewritten += 1
                }
                Err(e) => {
                    failure.get_or_insert((answer.index, e));
                }
            }
        }
        if let Some((i, e)) = failure {
            let path = entries[i].doc.path.to_string();
            return Err(match e {
                StoreError::Conflict { .. } => RenameError::Conflict {
                    kind: report.kind,
                    path,
                    rewritten: report.rewritten,
                    found: report.found,
                },
                e => RenameError::store(format!("deleting `{path}`"))(e),
            });
        }
        Ok(())
    }
}
