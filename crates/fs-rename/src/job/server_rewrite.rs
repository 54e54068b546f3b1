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

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use fs_model::FsPath;
use fs_store::{PrefixMove, ServerRename, StoreError, TaskFailure, TaskState};
use tokio::time::Instant;

use super::before_write::Hold;
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::kind::JobKind;
use crate::report::{RenameEvent, RenameReport};
use crate::rewrite_mode::Rewrite;
use crate::tree::FsTree;

/// The first look at a running task (its progress, the job's lease and cancellation): most
/// renames of a few thousand documents have ended by then, and cost no look at all.
const FIRST_LOOK: Duration = Duration::from_millis(100);

/// The longest pause between two looks at a running task (each pause doubles up to it): how
/// often progress is shown, and how soon a cancellation or a lost lease stops the task.
const MOST_LOOK: Duration = Duration::from_millis(500);

/// How often a task being stopped is asked again to stop (it may not be listed yet when the
/// job is told to stop: the server lists it once it has started).
const STOP_EVERY: Duration = Duration::from_millis(50);

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

    /// Refuses, before any lock is taken, a rename (or a recursive delete) asked to be carried
    /// out by the server ([`Rewrite::Server`]) on a store that cannot: a setting, not a failure
    /// half-way.
    pub(super) fn can_rewrite(&self, task: &super::Task) -> Result<()> {
        let store = &self.config.store;
        let doing = match task {
            super::Task::Rename { .. } => "renaming",
            super::Task::Delete {
                recursive: true, ..
            } => "deleting",
            _ => return Ok(()),
        };
        if self.config.rewrite == Rewrite::Server && store.server_rename().is_none() {
            return Err(RenameError::Store {
                context: format!("{doing} `{}` on the server", task.from()),
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
        self.before_page(hold, &[], from, (JobKind::Rename, 0, 0))
            .await?;
        let job = PrefixMove {
            from: from.clone(),
            to: to.clone(),
            job: job_id.to_owned(),
        };
        let run = server.rename_on_server(hold.tree.index(), &job);
        let watched = (JobKind::Rename, from, job_id);
        let state = match self.watch(hold, server, (watched, run), total).await {
            Ok(state) => state,
            Err(RenameError::Store {
                cause: e @ StoreError::Rejected { .. },
                ..
            }) if self.config.rewrite == Rewrite::Auto => {
                tracing::debug!(error = %e, "the server cannot rewrite; the client does");
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        report.on_server = true;
        report.found += total.get().copied().unwrap_or(state.total);
        report.rewritten += state.updated;
        let failure = match (state.failure, &state.failed_id) {
            (Some(TaskFailure::Conflict(reason)), Some(id))
                if own_write(hold.tree, id, to).await =>
            {
                // On a cluster whose node died under the task, the new primary can be sent
                // the task's own write again, and answer it with a conflict: the document
                // moved all the same. The rest of the rename is still the job's to do.
                Some(TaskFailure::Failed(format!(
                    "its own write of `{id}` came back as a conflict ({reason})"
                )))
            }
            (failure, _) => failure,
        };
        match failure {
            None => Ok(true),
            Some(failure) => Err(RenameError::ServerRewrite {
                from: from.to_string(),
                failure,
                rewritten: state.updated,
                found: state.total,
            }),
        }
    }

    /// Waits for `run`, the task of the job `job_id` (a `kind` of job on `from`), to end;
    /// meanwhile looks at it now and then, as the client does before each page: shows its
    /// progress, and where the job is cancelled or its lease lost, stops the task and fails
    /// the job.
    pub(super) async fn watch(
        &self,
        hold: Hold<'_>,
        server: &dyn ServerRename,
        ((kind, from, job_id), run): (
            (JobKind, &FsPath, &str),
            impl Future<Output = fs_store::Result<TaskState>>,
        ),
        total: &OnceLock<u64>,
    ) -> Result<TaskState> {
        let context = || format!("the {kind} of `{from}` on the server");
        tokio::pin!(run);
        let mut pause = FIRST_LOOK;
        let mut shown = None;
        loop {
            tokio::select! {
                ended = &mut run => return ended.map_err(RenameError::store(context())),
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(MOST_LOOK);
            let running = server
                .running_renames(job_id)
                .await
                .map_err(RenameError::store(context()))?;
            let progress = running
                .first()
                .map_or((0, 0), |(_, state)| (state.updated, state.total));
            if shown != Some(progress.0) && progress.1 > 0 {
                shown = Some(progress.0);
                let expected = total.get().copied().unwrap_or(0);
                self.emit(RenameEvent::Progress {
                    done: progress.0,
                    total: expected.max(progress.1),
                });
            }
            if let Err(e) = self.still_ours(hold, (kind, from), progress).await {
                let stopped = stop(server, job_id, Some(run.as_mut())).await;
                if let Err(stop) = stopped {
                    tracing::warn!(job = %job_id, error = %stop, "the server's task could not be stopped; recovery stops it");
                }
                return Err(e);
            }
        }
    }

    /// Finishes on the client a rename whose task on the server was lost (`why`: its node died
    /// under it, or the connection to it; see [`lost_the_task`]): stops what may still run of it,
    /// then rewrites what is still under `from` as the client does, conditionally on what it
    /// reads, and counts what the task moved (everything under `to`, which did not exist
    /// before the job) as found and rewritten. The job goes on under its locks and journal
    /// entry, so a node lost under the task costs time, not the job.
    pub(super) async fn finish_on_client(
        &self,
        hold: Hold<'_>,
        (from, to): (&FsPath, &FsPath),
        (job_id, why): (&str, RenameError),
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        tracing::warn!(job = %job_id, error = %why, "the server's rewrite was lost; the client finishes the rename");
        stop_server_renames(hold.tree, job_id).await?;
        let tree = hold.tree;
        tree.refresh().await?;
        let moved = tree.count_under(to).await?;
        report.found = 0;
        report.rewritten = 0;
        report.on_server = false;
        self.rewrite(hold, (from, to), (total, Vec::new()), report)
            .await?;
        report.found += moved;
        report.rewritten += moved;
        report.on_server = true;
        Ok(())
    }

    /// A cancellation or a lost lease, as [`Renamer::before_page`] checks them, while the
    /// server writes.
    async fn still_ours(
        &self,
        hold: Hold<'_>,
        (kind, from): (JobKind, &FsPath),
        (rewritten, found): (u64, u64),
    ) -> Result<()> {
        if self.config.cancel.as_ref().is_some_and(|c| *c.borrow()) {
            return Err(RenameError::Cancelled {
                kind,
                rewritten,
                found,
            });
        }
        hold.locks
            .ensure_held(from.as_str())
            .await
            .map_err(RenameError::from)
    }
}

/// Why a store cannot rewrite on the server.
pub(super) fn no_server_rename(store: &str) -> StoreError {
    StoreError::Rejected {
        context: "a rename rewritten by the server".to_owned(),
        status: None,
        message: format!(
            "{store} cannot run one (only Elasticsearch with painless can): rewrite on the client"
        ),
    }
}

/// Whether the document `id` that a task's write met in conflict already lies under `to`,
/// moved: the task's own write, landed and sent again, rather than someone else's.
async fn own_write(tree: &FsTree, id: &str, to: &FsPath) -> bool {
    let read = tree.store().get(tree.index(), id).await;
    let path = read
        .ok()
        .flatten()
        .and_then(|doc| doc.source.get("path")?.as_str().map(str::to_owned));
    path.and_then(|p| FsPath::parse(&p).ok())
        .is_some_and(|p| p.is_inside(to))
}

/// Whether `e`, the failure of a rename on the server, lost the task rather than stopped it
/// on purpose: the request or the task list failed (a node or the connection died under it),
/// or the task failed on its own (a shard's search or bulk failed). Not a conflict (a foreign
/// write), a refusal of the script or a cancellation: those stop the job.
pub(super) fn lost_the_task(e: &RenameError) -> bool {
    match e {
        RenameError::Store { cause, .. } => !matches!(cause, StoreError::Rejected { .. }),
        RenameError::ServerRewrite { failure, .. } => {
            matches!(failure, fs_store::TaskFailure::Failed(_))
        }
        _ => false,
    }
}

/// Stops the renames the job `job_id` started on the server that still run (a dead or
/// fenced-out owner's), waiting until they have stopped; returns how many there were. For a
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
    if running.is_empty() {
        return Ok(0);
    }
    tracing::info!(job = %job_id, tasks = running.len(), "stopping a dead job's renames on the server");
    stop(
        server,
        job_id,
        None::<std::pin::Pin<&mut std::future::Ready<_>>>,
    )
    .await
    .map_err(RenameError::store(context))?;
    Ok(running.len())
}

/// Cancels the renames of job `job` on the server until none is listed, or until `run` (the
/// request that waits for one) has answered.
async fn stop<F>(
    server: &dyn ServerRename,
    job: &str,
    mut run: Option<std::pin::Pin<&mut F>>,
) -> fs_store::Result<()>
where
    F: Future<Output = fs_store::Result<TaskState>>,
{
    let deadline = Instant::now() + STOP_WITHIN;
    loop {
        let running = server.running_renames(job).await?;
        for (task, _) in &running {
            server.cancel_task(task).await?;
        }
        let pause = tokio::time::sleep(STOP_EVERY);
        match run.as_mut() {
            // The request answers once its task has stopped.
            Some(run) => tokio::select! {
                _ = run.as_mut() => return Ok(()),
                () = pause => {}
            },
            None if running.is_empty() => return Ok(()),
            None => pause.await,
        }
        if Instant::now() >= deadline {
            return Err(StoreError::Transient {
                context: format!("stopping the server's renames of job {job}"),
                message: format!("still running {STOP_WITHIN:?} after they were cancelled"),
            });
        }
    }
}
