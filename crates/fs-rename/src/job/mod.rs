//! [`Renamer`]: the jobs that change a subtree under locks: rename (`mv`), copy (`cp -r`) and
//! delete (`rm -r`), from locks to release.
//!
//! Steps, the same for every kind ([`run`](self) holds them): take the locks → check, now
//! that nobody else can change the answer (a rename's check also reads the first page of its
//! source) → journal, while the first pages are read; their writes wait for the entry
//! (`before_write.rs`) → write, page by page (the next page read while earlier ones are
//! written) → check the count → close the journal and refresh, at once → release. What the writes are depends on
//! the kind:
//!
//! - a rename (`rewrite.rs`) pages through the source and bulk-rewrites `path`, `parent`,
//!   `name`, `depth` (ids stay), each item conditional on the version the scan read;
//! - a copy (`copy.rs`) pages through the source in path order (parents before children) and
//!   bulk-creates copies whose ids derive from the journal id and the source's id, so a
//!   create that finds its copy already there (sent before, by this job or the one it
//!   recovers) counts as done;
//! - a delete (`delete.rs`) reads the subtree once in path order and deletes each document
//!   after everything under it (`delete_order.rs`), never a document and one of its ancestors
//!   in one bulk request, each item conditional on the version read, so no directory is
//!   deleted before everything under it is: a job that stops leaves no orphan.
//!
//! Between the checks and the first write the job writes a [journal entry](crate::journal)
//! recording its kind and its locks, and it deletes the entry after the last write. Before the
//! entry exists every exit path releases the locks; once it exists, a job that stops half-way
//! abandons them instead ([`RenameError::Unfinished`]): they expire, and recovery takes them
//! over and rolls the job forward ([`Renamer::roll_forward`]). Before each write the job
//! checks that its lease is still good, and every write is conditional on what it read, so a
//! job paused past its lease (a zombie) stops at its first write instead of damaging the tree.
//!
//! Where the store makes several writes in one transaction (the embedded store), a rename
//! whose check read its whole (small) subtree sends its entry with its writes
//! (`chained.rs`), and a job whose writes are searchable closes its entry with the release
//! (`release.rs`): the same guarantees, two round trips fewer. A small rename holding one
//! guard goes further: entry, rewrite and release in one transaction (`at_once.rs`), three
//! round trips fewer; what a job that cannot give everything back leaves is `left.rs`.
//!
//! A job whose entry is closed has happened, so a release that fails afterwards does not make
//! it fail: it is reported done, with the locks it left in [`RenameReport::locks_left`] and a
//! warning; they expire with their lease and the recovery sweep deletes them (`release.rs`).
//!
//! The entry's id is chosen before the first lock and written into every lock, so that a
//! recovery clearing the job's expired locks fences the id first. A job paused past its lease
//! before journaling therefore either stops at its own lease check or meets the fence when it
//! writes the entry ([`RenameError::Fenced`]); having written nothing, it starts over with new
//! locks (up to three times).

use std::sync::Arc;

use fs_locks::LockClient;
use fs_model::FsPath;
use fs_store::{CountingStore, SharedStore};

mod at_once;
mod before_write;
mod builder;
mod bulk;
mod chained;
mod copy;
mod copy_gated;
mod delete;
mod delete_order;
mod document_locks;
mod journaling;
mod left;
mod read_back;
mod release;
mod rewrite;
mod run;
mod server_delete;
mod server_rewrite;
mod task;

pub use builder::{RenamerBuilder, DEFAULT_IN_FLIGHT};
pub(crate) use task::Task;

use crate::error::{RenameError, Result};
use crate::journal::JournalEntry;
use crate::kind::JobKind;
use crate::report::{RenameEvent, RenameReport};
use crate::tree::FsTree;

/// Runs renames, copies and deletes on one tree with one configuration. Each job is its own
/// lock owner.
#[derive(Clone)]
pub struct Renamer {
    config: RenamerBuilder,
}

impl std::fmt::Debug for Renamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renamer")
            .field("index", &self.config.index)
            .field("strategy", &self.config.strategy)
            .field("versioned", &self.config.versioned)
            .finish_non_exhaustive()
    }
}

/// The result of a job together with its report, which is kept on failure too.
#[derive(Debug, Clone)]
pub struct RenameOutcome {
    /// What the job did and cost, as far as it got.
    pub report: RenameReport,
    /// How it ended.
    pub result: Result<()>,
}

impl Renamer {
    /// Renames `from` to `to`.
    ///
    /// # Errors
    /// The check that failed ([`RenameError::SourceNotFound`], [`RenameError::DestinationExists`],
    /// ...), a lock timeout, a version conflict, or a store failure.
    pub async fn rename(&self, from: &FsPath, to: &FsPath) -> Result<RenameReport> {
        let outcome = self.rename_reporting(from, to).await;
        outcome.result.map(|()| outcome.report)
    }

    /// Renames `from` to `to` and returns the report whatever the outcome.
    pub async fn rename_reporting(&self, from: &FsPath, to: &FsPath) -> RenameOutcome {
        self.run(Task::Rename {
            from: from.clone(),
            to: to.clone(),
        })
        .await
    }

    /// Copies `from` (a file, or a directory and everything under it) to `to`: every document
    /// at or under `from` gets a copy under `to`, with a new id and the same kind, size and
    /// modification time. The source is untouched.
    ///
    /// With [`Strategy::Tree`](crate::Strategy::Tree) the job holds a shared lock on `from`
    /// (nothing under it may change meanwhile) and an exclusive one on `to`. Under the locks it
    /// checks that `from` exists, `to` does not, and `to`'s parent is a directory. It copies
    /// in path order, so a directory is copied before what it holds.
    ///
    /// The copies' ids derive from the job's journal id and the source documents' ids
    /// ([`fs_model::FsDoc::copy_id`]): a copy interrupted after its journal entry is finished
    /// by [`Recovery`](crate::Recovery), which creates the copies still missing and
    /// recognises those already made.
    ///
    /// # Errors
    /// [`RenameError::CopyIntoItself`] if `to` is `from` or lies inside it; the check that
    /// failed ([`RenameError::SourceNotFound`], [`RenameError::DestinationExists`],
    /// [`RenameError::DestinationParentMissing`], [`RenameError::DestinationParentNotDir`]);
    /// a lock timeout; [`RenameError::Conflict`] if a document holds a copy's id but not the
    /// copy; a store failure; [`RenameError::Unfinished`] if it stopped after journaling.
    pub async fn copy(&self, from: &FsPath, to: &FsPath) -> Result<RenameReport> {
        let outcome = self.copy_reporting(from, to).await;
        outcome.result.map(|()| outcome.report)
    }

    /// Copies `from` to `to` (see [`Renamer::copy`]) and returns the report whatever the
    /// outcome.
    pub async fn copy_reporting(&self, from: &FsPath, to: &FsPath) -> RenameOutcome {
        self.run(Task::Copy {
            from: from.clone(),
            to: to.clone(),
        })
        .await
    }

    /// Removes `path`: a file, an empty directory, or, with `recursive`, a directory and
    /// everything under it.
    ///
    /// With [`Strategy::Tree`](crate::Strategy::Tree) the job holds an exclusive lock on
    /// `path`. It deletes deepest first, one depth per bulk request, each delete conditional on
    /// the version it read: a directory is deleted only after everything under it, so a job
    /// that stops half-way leaves no document whose parent is gone, and
    /// [`Recovery`](crate::Recovery) finishes the delete.
    ///
    /// # Errors
    /// [`RenameError::RootCannotDelete`] for `/`; [`RenameError::SourceNotFound`] if nothing
    /// is at `path`; [`RenameError::DirectoryNotEmpty`] for a directory with entries without
    /// `recursive`; a lock timeout; [`RenameError::Conflict`] if a document changed since it
    /// was read; a store failure; [`RenameError::Unfinished`] if it stopped after journaling.
    pub async fn remove(&self, path: &FsPath, recursive: bool) -> Result<RenameReport> {
        let outcome = self.remove_reporting(path, recursive).await;
        outcome.result.map(|()| outcome.report)
    }

    /// Removes `path` (see [`Renamer::remove`]) and returns the report whatever the outcome.
    pub async fn remove_reporting(&self, path: &FsPath, recursive: bool) -> RenameOutcome {
        self.run(Task::Delete {
            path: path.clone(),
            recursive,
        })
        .await
    }

    /// Finishes the job a journal entry records, under `locks` (the entry's locks, taken over
    /// by a recoverer): a rename rewrites whatever still lies under the source; a copy creates
    /// the copies still missing (those already made, with the ids the entry's job id gives
    /// them, count as done); a delete deletes whatever is left under the path, deepest first.
    /// Idempotent: what was already done is skipped or found done.
    pub async fn roll_forward(&self, locks: &LockClient, entry: &JournalEntry) -> RenameOutcome {
        let c = &self.config;
        let index = c.index.clone();
        let (from, to) = match entry.paths(&index) {
            Ok(paths) => paths,
            Err(e) => {
                let root = FsPath::root();
                return RenameOutcome {
                    report: RenameReport::new(entry.kind, &root, &root, entry.strategy),
                    result: Err(e),
                };
            }
        };
        let task = Task::journaled(entry.kind, from.clone(), to.clone());
        let mut report = RenameReport::new(entry.kind, &from, &to, entry.strategy);
        let counted = CountingStore::new(Arc::clone(&c.store));
        let store: SharedStore = Arc::new(counted.clone());
        let tree = FsTree::new(store, index);
        let result = async {
            // A task the dead job started on the server may still be running: it is stopped
            // before the job is finished (see `server_rewrite.rs`).
            server_rewrite::stop_server_renames(&tree, &entry.job_id).await?;
            // Nor may a page the dead copy sent through its write gate land once the copy is
            // finished: its gates are shut, and what went through them written, first (see
            // `copy_gated.rs`). Only a recovery needs this: a first run has no earlier gates.
            if entry.kind == JobKind::Copy {
                self.shut_copy_gates(&tree, &entry.job_id).await?;
            }
            tree.refresh().await?;
            let total = tree.count_under(&from).await?;
            self.emit(RenameEvent::Checked { total });
            // A journaled job: its writes wait for nothing.
            self.finish(
                before_write::Hold::open(&tree, locks),
                &task,
                &entry.job_id,
                (&std::sync::OnceLock::from(total), run::Read::default()),
                &mut report,
            )
            .await?
            .make(&tree)
            .await
        }
        .await;
        report.round_trips = counted.round_trips();
        RenameOutcome { report, result }
    }

    fn emit(&self, event: RenameEvent) {
        if let Some(sink) = &self.config.progress {
            sink(event);
        }
    }
}

/// Runs a journal write, sending it again after a transient failure. The writes themselves
/// make a resend safe: [`Journal::open`](crate::Journal::open) recognises its own earlier
/// entry, and [`Journal::close`](crate::Journal::close) takes a tombstone already there as
/// closed.
pub(crate) async fn journaled<F, Fut, T>(write: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    crate::resend::JOURNAL
        .retry(write, RenameError::is_retryable)
        .await
}
