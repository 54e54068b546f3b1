//! The delete the server carries out: the files of the subtree by one task
//! (`_delete_by_query`, sliced over the shards, [`fs_store::SubtreeDelete`]), then the
//! directories that remain as the client deletes them (`delete.rs`: deepest first, each after
//! everything under it), under the same locks, check, journal entry and release.
//!
//! **No orphan, ever.** One task deleting the whole subtree would delete a directory and what
//! it holds in the order its slices and shards happen to run: a reader, or a job that stops
//! there, would see documents whose parent is gone. A file holds nothing, so the task deletes
//! only files, in any order; what is left is directories, few (one per thousand files in a
//! tree of directories of a thousand), which go after, deepest first, each page acknowledged
//! before its parents are sent. Whenever the job stops, every document still there has its
//! parent still there, as with the client's delete.
//!
//! **One refresh.** The task does not refresh the index as it ends: the directories are read
//! by a scope of their own ([`fs_store::Scope::SubtreeDirs`]), which the deleted files, still
//! searchable, are not in, and the job's refresh before its release shows the files and the
//! directories gone at once (on one node and shard, 30-50 ms of the 0.6 s a delete of 20 000
//! takes). Nor is a search shown an orphan it would not be shown otherwise: a refresh shows a
//! shard's writes in the order it applied them, so one that shows a directory gone shows the
//! files under it (on the same shard) gone; across shards, each refreshes on its own
//! schedule, as during the client's delete.
//!
//! The task is found by the job's journal id, which it carries (`X-Opaque-Id`), as a rename's:
//! the journal entry names the task, though the job may die before the server names it. It is
//! watched as a rename's (its progress, the job's lease and cancellation; a job fenced out
//! stops it), stopped by a recovery before the recovery finishes the delete, and every delete
//! it makes is conditional on the version its snapshot read.

use std::sync::OnceLock;

use fs_model::FsPath;
use fs_store::{Scope, SubtreeDelete};

use super::before_write::Hold;
use super::server_rewrite::{no_server_rename, stop_server_renames};
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::kind::JobKind;
use crate::report::RenameReport;
use crate::rewrite_mode::Rewrite;

impl Renamer {
    /// Deletes every file at or under `path` by one task on the server and waits for it to end,
    /// counting what it found and deleted into `report`. Returns false, having deleted
    /// nothing, where [`Rewrite::Auto`] chose the server and it turned out unable: the client
    /// deletes everything.
    pub(super) async fn delete_files_on_server(
        &self,
        hold: Hold<'_>,
        path: &FsPath,
        job_id: &str,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<bool> {
        let context = format!("deleting the files under `{path}` on the server");
        let Some(server) = hold.tree.store().server_rename() else {
            return Err(RenameError::Store {
                context,
                cause: no_server_rename(&hold.tree.store().describe()),
            });
        };
        // The gate (the journal entry landed), a cancellation, the lease: as before a page.
        self.before_page(hold, &[], path, (JobKind::Delete, 0, 0))
            .await?;
        let job = SubtreeDelete {
            path: path.clone(),
            job: job_id.to_owned(),
        };
        let run = server.delete_files_on_server(hold.tree.index(), &job);
        let watched = (JobKind::Delete, path, job_id);
        let state = match self.watch(hold, server, (watched, run), total).await {
            Ok(state) => state,
            Err(RenameError::Store {
                cause: e @ fs_store::StoreError::Rejected { .. },
                ..
            }) if self.config.rewrite == Rewrite::Auto => {
                tracing::debug!(error = %e, "the server cannot delete; the client does");
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        report.on_server = true;
        report.found += state.total;
        report.rewritten += state.updated;
        match state.failure {
            None => Ok(true),
            Some(failure) => Err(RenameError::ServerRewrite {
                from: path.to_string(),
                failure,
                rewritten: state.updated,
                found: state.total,
            }),
        }
    }

    /// Deletes everything at or under `path`: the files by the server where it is chosen
    /// ([`Renamer::rewrites_on_server`]), then whatever is left by the client, deepest first.
    /// A task lost under the job (its node or the connection died) costs time, not the job:
    /// what may still run of it is stopped, and the client deletes what is left.
    pub(super) async fn delete_subtree(
        &self,
        hold: Hold<'_>,
        path: &FsPath,
        job_id: &str,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        // The check of a delete reads no document under the path: where the size decides
        // (`auto`, a server that can), it is counted, if the count beside the journal entry
        // has not come in yet.
        let mut known = total.get().copied();
        let decides = self.config.rewrite == Rewrite::Auto;
        if known.is_none() && decides && self.rewrites_on_server(hold.tree, None) {
            let counted = hold.tree.count_under(path).await?;
            let _ = total.set(counted);
            known = Some(counted);
        }
        if !self.rewrites_on_server(hold.tree, known) {
            return self.delete_all(hold, path, total, report).await;
        }
        match self
            .delete_files_on_server(hold, path, job_id, total, report)
            .await
        {
            // The task did not refresh: what is left are the directories, which it did not
            // touch, read as they are searchable; the job's refresh after them shows both.
            Ok(true) => {
                let left = Scope::SubtreeDirs(path.clone());
                self.delete_scope(hold, (path, left), total, report).await
            }
            Ok(false) => self.delete_all(hold, path, total, report).await,
            Err(e) if super::server_rewrite::lost_the_task(&e) => {
                tracing::warn!(job = %job_id, error = %e, "the server's delete was lost; the client finishes it");
                stop_server_renames(hold.tree, job_id).await?;
                hold.tree.refresh().await?;
                // What the task deleted is not known; everything the check counted will be
                // gone once the client has deleted what is left.
                report.found = 0;
                report.rewritten = 0;
                self.delete_all(hold, path, total, report).await?;
                let counted = total.get().copied().unwrap_or(0).max(report.found);
                report.found = counted;
                report.rewritten = counted;
                report.on_server = true;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
