//! [`ServerRename`]: a rename the server carries out itself, as a task (Elasticsearch's
//! `_update_by_query` with fsrename's stored rename script, [`fs_model::rename_script`]), the
//! first part of a delete likewise (`_delete_by_query` of every document of a subtree but its
//! directories, [`SubtreeDelete`]), and the task's state as the tasks API reports it.
//!
//! The caller holds the locks, the journal entry and the check around it: the store only runs
//! the task, reports on it, cancels it, and finds the tasks a job started (on Elasticsearch by
//! the journal id the request sends as its `X-Opaque-Id`, which the server keeps with the task:
//! found even where the job died before it could write the task's id anywhere), for a recovery that must stop a dead job's task before it finishes
//! the rename. Every write the task makes is conditional on the version its snapshot read
//! (`conflicts=abort`), so a task can only move documents nobody wrote since it started: a
//! foreign write stops it with a conflict, and a task that outlives its job can only make the
//! very writes a recovery would.

use async_trait::async_trait;
use fs_model::FsPath;

use crate::error::Result;

/// A rename for the server to carry out: every document at or under `from` moved under `to`,
/// by the job whose journal id is `job`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixMove {
    /// The source of the rename.
    pub from: FsPath,
    /// The destination.
    pub to: FsPath,
    /// The journal id of the job, which the server keeps with the task (`X-Opaque-Id`), so
    /// that a recovery can find the task.
    pub job: String,
}

/// The first part of a delete for the server to carry out: every document at or under `path`
/// that is not a directory, by the job whose journal id is `job`.
///
/// Only what holds nothing: a file goes in any order without leaving anything without its
/// parent, where one task deleting a directory and what it holds would delete them in the
/// order the shards happen to run (a reader, or a job that stops there, would see documents
/// whose parent is gone). The directories that remain are few (one per thousand files in a
/// tree of directories of a thousand) and go after, deepest first, as the client deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtreeDelete {
    /// The root of the subtree.
    pub path: FsPath,
    /// The journal id of the job (kept with the task, as for a rename).
    pub job: String,
}

/// A task the server runs, by the id it gave it (`node:number` on Elasticsearch).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskId(pub String);

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the server says of a task.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskState {
    /// Whether it has ended (done, failed or cancelled).
    pub done: bool,
    /// How many documents it found to rewrite (0 until it has counted them).
    pub total: u64,
    /// How many it has rewritten (a rename) or deleted (a delete).
    pub updated: u64,
    /// Why it stopped short, once it has ended; `None` for a task that did everything.
    pub failure: Option<TaskFailure>,
    /// The id of the document the failure is about, where it is about one (a conflict).
    pub failed_id: Option<String>,
}

/// Why a task stopped short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskFailure {
    /// A document changed after the task read it (a foreign write under the locks, or
    /// another task of the same rename): the task stopped there.
    #[error("a document changed while the server rewrote it: {0}")]
    Conflict(String),
    /// The script refused a document: not one the rename's check saw (see
    /// [`fs_model::rename_script`]).
    #[error("the server's rename script refused a document: {0}")]
    Refused(String),
    /// Cancelled (by this job, or by a recovery).
    #[error("the task was cancelled: {0}")]
    Cancelled(String),
    /// Anything else the server reported.
    #[error("the task failed: {0}")]
    Failed(String),
}

/// Renames carried out by the server, as tasks.
#[async_trait]
pub trait ServerRename: Send + Sync {
    /// Runs the rename `job` of the documents of `index` on the server and returns when it has
    /// ended, with what it did (the task refreshes the index as it ends). Meanwhile the task
    /// is listed by [`ServerRename::running_renames`], with its progress, and can be cancelled;
    /// it then ends early, which the answer says ([`TaskFailure::Cancelled`]).
    ///
    /// The task runs on whatever becomes of the caller: dropping the future (or losing the
    /// connection) leaves it running on the server.
    ///
    /// # Errors
    /// [`StoreError::Rejected`](crate::StoreError::Rejected) where the server runs no
    /// painless (nothing was started); transient and backend failures, after which the task
    /// may or may not be running.
    async fn rename_on_server(&self, index: &str, job: &PrefixMove) -> Result<TaskState>;

    /// Deletes, by one task on the server, every document of `index` at or under `job.path`
    /// that is not a directory, and returns when it has ended, with what it did. The task does
    /// not refresh the index: the caller deletes the directories next, read by
    /// [`Scope::SubtreeDirs`](crate::Scope::SubtreeDirs) (which no file delete changes), and one
    /// refresh after those makes both searchable. Every delete is conditional on the version the task's
    /// snapshot read (the first conflict stops it). Listed, cancelled and outliving its caller
    /// as [`ServerRename::rename_on_server`]'s task is.
    ///
    /// # Errors
    /// As [`ServerRename::rename_on_server`]: transient and backend failures, after which the
    /// task may or may not be running.
    async fn delete_files_on_server(&self, index: &str, job: &SubtreeDelete) -> Result<TaskState>;

    /// Returns the renames and deletes of the job with journal id `job` that are still
    /// running, each with its progress.
    ///
    /// # Errors
    /// Transient and backend failures.
    async fn running_renames(&self, job: &str) -> Result<Vec<(TaskId, TaskState)>>;

    /// Asks the server to cancel `task`; one that already ended is left as it is. The task
    /// stops at the end of its current batch: it is listed by
    /// [`ServerRename::running_renames`] until then.
    ///
    /// # Errors
    /// Transient and backend failures.
    async fn cancel_task(&self, task: &TaskId) -> Result<()>;
}
