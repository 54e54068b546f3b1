//! The rewrite the server carries out: one task (`_update_by_query` with fsrename's rename
//! script, [`fs_model::rename_script`]) in place of the client's pages, inside everything else
//! a rename does (the locks, the check, the journal entry, the count, the close, the release).
//!
//! The task starts once the journal entry has landed (it waits at the same gate as the
//! client's pages) and the locks are still the job's. The job then follows it until it ends,
//! reporting its progress, checking its lease as it would before each page, and cancelling it
//! when the job is cancelled or loses its locks. A task that stops short (a foreign write under
//! the locks makes it meet a conflict; the script refuses a document the check did not see) is
//! a failed job, left to recovery as any journaled job that stops half-way.
//!
//! A task outlives its job: a job killed while its task runs leaves it running. The task finds
//! documents by its own snapshot and writes each only if nobody wrote it since, so it can only
//! make the very writes that finish the rename; still, a recovery stops it before it finishes
//! the job itself ([`stop_server_renames`]), so that no task of a job runs once the job is
//! done and its locks are gone.

use std::sync::OnceLock;
use std::time::Duration;

use fs_model::FsPath;
use fs_store::{PrefixMove, ServerRename, StoreError, TaskId, TaskState};
use tokio::time::Instant;

use super::before_write::Hold;
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::rewrite_mode::Rewrite;
use crate::tree::FsTree;

/// The first pause before reading a task's state: short, so that a task of a few thousand
/// documents is seen ended soon after it ends.
const FIRST_POLL: Duration = Duration::from_millis(10);

/// The longest pause between two readings of a task's state (each pause doubles up to it).
const MOST_POLL: Duration = Duration::from_millis(200);

/// How long a cancelled task may take to stop: it stops at the end of its current batch.
const STOP_WITHIN: Duration = Duration::from_secs(60);

impl Renamer {
    /// Whether the rename of `total` documents (if known) is rewritten by the server:
    /// [`Rewrite::Server`] always; [`Rewrite::Auto`] where the store can and the subtree is
    /// larger than a page (what the check reads), where the server's one task saves the most
    /// round trips.
    pub(super) fn rewrites_on_server(&self, tree: &FsTree, total: Option<u64>) -> bool {
        match self.config.rewrite {
            Rewrite::Client => false,
            Rewrite::Server => true,
            Rewrite::Auto => {
                let page = self.config.page_size as u64;
                tree.store().server_rename().is_some() && total.is_none_or(|n| n > page)
            }
        }
    }

    /// Refuses, before any lock is taken, a rename asked to be rewritten by the server
    /// ([`Rewrite::Server`]) on a store that cannot: a setting, not a failure half-way.
    pub(super) fn can_rewrite(&self, task: &super::Task) -> Result<()> {
        let store = &self.config.store;
        let renames = matches!(task, super::Task::Rename { .. });
        if renames && self.config.rewrite == Rewrite::Server && store.server_rename().is_none() {
            return Err(RenameError::Store {
                context: format!("renaming `{}` on the server", task.from()),
                cause: no_server_rename(&store.describe()),
            });
        }
        Ok(())
    }

    /// Rewrites every document at or under `from` by one task on the server and waits for it
    /// to end. Returns false, having written nothing, where [`Rewrite::Auto`] chose the server
    /// and it turned out unable (it runs no painless): the caller rewrites on the client.
    /// `total` is the count the check or the journal's companion found, once known.
    pub(super) async fn rewrite_on_server(
        &self,
        hold: Hold<'_>,
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<bool> {
        let context = format!("rewriting `{from}` on the server");
        let Some(server) = hold.tree.store().server_rename() else {
            return Err(RenameError::Store {
                context,
                cause: no_server_rename(&hold.tree.store().describe()),
            });
        };
        // The gate (the journal entry landed), a cancellation, the lease: as before a page.
        self.before_page(hold, &[], from, (0, 0)).await?;
        let job = PrefixMove {
            from: from.clone(),
            to: to.clone(),
            job: job_id.to_owned(),
        };
        let task = match server.start_rename(hold.tree.index(), &job).await {
            Ok(task) => task,
            Err(e @ StoreError::Rejected { .. }) if self.config.rewrite == Rewrite::Auto => {
                tracing::debug!(error = %e, "the server cannot rewrite; the client does");
                return Ok(false);
            }
            Err(e) => return Err(RenameError::store(context)(e)),
        };
        tracing::debug!(%task, %from, %to, "the server rewrites");
        report.server_task = Some(task.0.clone());
        let state = self.follow(hold, server, (&task, from), total).await?;
        report.found += total.get().copied().unwrap_or(state.total);
        report.rewritten += state.updated;
        match state.failure {
            None => Ok(true),
            Some(failure) => Err(RenameError::ServerRewrite {
                from: from.to_string(),
                failure,
                rewritten: state.updated,
                found: state.total,
            }),
        }
    }

    /// Follows `task` until it ends, reporting its progress. Before each reading it checks
    /// what it would check before a page: a cancellation or a lost lease cancels the task,
    /// waits for it to stop, and fails the job.
    async fn follow(
        &self,
        hold: Hold<'_>,
        server: &dyn ServerRename,
        (task, from): (&TaskId, &FsPath),
        total: &OnceLock<u64>,
    ) -> Result<TaskState> {
        let context = || format!("following the server's task `{task}`");
        let mut pause = FIRST_POLL;
        let mut shown = None;
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MOST_POLL);
            let state = server
                .task_state(task)
                .await
                .map_err(RenameError::store(context()))?;
            if shown != Some(state.updated) && state.total > 0 {
                shown = Some(state.updated);
                let expected = total.get().copied().unwrap_or(0);
                self.emit(RenameEvent::Progress {
                    done: state.updated,
                    total: expected.max(state.total),
                });
            }
            if state.done {
                return Ok(state);
            }
            let progress = (state.updated, state.total);
            let held = self.still_ours(hold, from, progress).await;
            if let Err(e) = held {
                let stopped = stop_task(server, task).await;
                if let Err(stop) = stopped {
                    tracing::warn!(%task, error = %stop, "the server's task could not be stopped; recovery stops it");
                }
                return Err(e);
            }
        }
    }

    /// A cancellation or a lost lease, as [`Renamer::before_page`] checks them, while the
    /// server writes.
    async fn still_ours(
        &self,
        hold: Hold<'_>,
        from: &FsPath,
        (rewritten, found): (u64, u64),
    ) -> Result<()> {
        if self.config.cancel.as_ref().is_some_and(|c| *c.borrow()) {
            return Err(RenameError::Cancelled { rewritten, found });
        }
        hold.locks
            .ensure_held(from.as_str())
            .await
            .map_err(RenameError::from)
    }
}

/// Why a store cannot rewrite on the server.
fn no_server_rename(store: &str) -> StoreError {
    StoreError::Rejected {
        context: "a rename rewritten by the server".to_owned(),
        status: None,
        message: format!(
            "{store} cannot run one (only Elasticsearch with painless can): rewrite on the client"
        ),
    }
}

/// Stops the renames the job `job_id` started on the server that still run (a dead or
/// fenced-out owner's), waiting until each has stopped; returns how many there were. For a
/// recovery, before it finishes the job: no task of a job may run once the job is done.
pub(crate) async fn stop_server_renames(tree: &FsTree, job_id: &str) -> Result<usize> {
    let Some(server) = tree.store().server_rename() else {
        return Ok(0);
    };
    let context = format!("stopping the server's renames of job {job_id}");
    let running = server
        .running_renames(job_id)
        .await
        .map_err(RenameError::store(context.clone()))?;
    for task in &running {
        tracing::info!(%task, job = %job_id, "stopping a dead job's rename on the server");
        stop_task(server, task)
            .await
            .map_err(RenameError::store(context.clone()))?;
    }
    Ok(running.len())
}

/// Cancels `task` and waits until it has stopped (its current batch ends first).
async fn stop_task(server: &dyn ServerRename, task: &TaskId) -> fs_store::Result<()> {
    server.cancel_task(task).await?;
    let deadline = Instant::now() + STOP_WITHIN;
    let mut pause = FIRST_POLL;
    loop {
        match server.task_state(task).await {
            Ok(state) if state.done => return Ok(()),
            Ok(_) => {}
            // A task the server no longer knows is not running.
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        }
        if Instant::now() >= deadline {
            return Err(StoreError::Transient {
                context: format!("stopping the server's task `{task}`"),
                message: format!("still running {STOP_WITHIN:?} after it was cancelled"),
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MOST_POLL);
    }
}
