//! A small rename in one transaction from its journal entry to its release, where the store
//! chains them (the embedded store).
//!
//! When the check read the whole subtree, it fits one bulk request, and the job holds one
//! guard, the entry, every write and the release of the locks go in one request
//! ([`LockGuard::release_after_or_keep`] with [`fs_locks::FirstWrite::with`]). The tree is
//! then never half-renamed, so the entry is written closed ([`Journal::closed_write`]); it is
//! written with `_create` all the same, so that a fence at the job's id (a recovery cleared
//! its expired locks) fails the transaction as it fails an open entry. Any write that does
//! not land rolls everything back, and the job goes on the usual way (`chained.rs`, then
//! `release.rs`), still holding its locks. One transaction instead of two saves a commit, a
//! journal write and a call on the store's one connection: on the embedded store that
//! connection bounds the service's rate (`docs/benchmarks.md`, section 6).

use std::sync::Arc;

use fs_locks::{LockClient, LockGuard, ReleasedOrKept};
use fs_model::FsPath;
use fs_store::WithFirst;
use tokio::time::Instant;

use super::left::unfinished;
use super::{Renamer, Task};
use crate::error::{RenameError, Result};
use crate::journal::{Journal, JournalState};
use crate::report::{RenameEvent, RenameReport};
use crate::tree::{Entry, FsTree};

/// How a rename sent whole with its entry and its release ended.
pub(super) enum AtOnce {
    /// Renamed, journaled and released (or only the release failed: then the locks left are
    /// in the report): the job is done.
    Done,
    /// Nothing landed: the job goes on the usual way with these entries, its guard back in
    /// its list.
    NotLanded(Vec<Entry>),
}

impl Renamer {
    /// Whether a rename of `entries` (the whole subtree, as the check read it) under `guards`
    /// goes in one transaction with its entry and its release.
    pub(super) async fn renames_at_once(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        entries: &[Entry],
        guards: &[LockGuard],
    ) -> bool {
        let hooks_allow = self
            .config
            .hooks
            .as_ref()
            .is_none_or(|hooks| !hooks.need_locks_after_writes());
        guards.len() == 1
            && hooks_allow
            && self.chains_journal(tree, entries)
            && locks.chains_release().await
    }

    /// Renames `entries` from `from` to `to`, with the closed entry `job_id` and the release
    /// of the last of `guards`, in one transaction. An `Err` before anything was sent (the
    /// lease ran out, a cancellation) leaves `guards` as they were; so does
    /// [`AtOnce::NotLanded`].
    pub(super) async fn rename_at_once(
        &self,
        tree: &FsTree,
        (locks, guards): (&LockClient, &mut Vec<LockGuard>),
        (task, job_id): (&Task, &str),
        (from, to): (&FsPath, &FsPath),
        entries: Vec<Entry>,
        report: &mut RenameReport,
    ) -> Result<AtOnce> {
        let started = Instant::now();
        let ops = self
            .whole_rename_ops((tree, locks), (from, to), &entries, report)
            .await?;
        let journal = Journal::new(Arc::clone(tree.store()), tree.index());
        let writes = WithFirst {
            index: tree.index().to_owned(),
            ops,
            refresh: true,
        };
        let first = journal.closed_write(job_id, writes)?;
        let Some(mut guard) = guards.pop() else {
            return Ok(AtOnce::NotLanded(entries));
        };
        // Dropped half-way, the job cannot tell whether its transaction landed: its locks
        // are left to expire, for recovery to sort out.
        guard.keep_on_drop();
        // Read before the release, which forgets the locks whether it succeeds or not.
        let held = locks.held_items().await;
        let released = match guard.release_after_or_keep(first).await {
            ReleasedOrKept::Kept(guard, why) => {
                tracing::debug!(error = %why, job = %job_id, "the rename did not land whole with its entry and release; going on the usual way");
                guards.push(guard);
                return Ok(AtOnce::NotLanded(entries));
            }
            ReleasedOrKept::Released(released) => released,
        };
        let n = entries.len() as u64;
        if let Err(release) = released {
            // The request failed as a whole (then nothing landed), or it landed and only the
            // release of a lock failed: the journal tells which.
            match journal.state_of(job_id).await {
                Ok(JournalState::Closed) => {
                    self.landed_at_once(job_id, n, started, report);
                    self.left_to_expire(tree, locks, &held, job_id, &release, report)
                        .await;
                }
                Ok(JournalState::Absent | JournalState::Fenced) => {
                    // Nothing written; the locks, no longer renewed, expire with their lease.
                    report.locks_left = held.iter().map(fs_locks::LockItem::label).collect();
                    return Err(RenameError::Lock(release));
                }
                Ok(JournalState::Open(_)) | Err(_) => {
                    let cause = RenameError::Lock(release);
                    return Err(unfinished(job_id, self.config.lease, cause, report));
                }
            }
        } else {
            self.landed_at_once(job_id, n, started, report);
            self.emit(RenameEvent::Released);
        }
        self.written_all(task, report).await?;
        Ok(AtOnce::Done)
    }

    /// Counts and tells a rename of `n` documents that landed whole with its entry.
    fn landed_at_once(&self, job_id: &str, n: u64, started: Instant, report: &mut RenameReport) {
        report.found += n;
        report.rewritten += n;
        report.phases.rewriting = started.elapsed();
        self.emit(RenameEvent::Journaled {
            job: job_id.to_owned(),
        });
        self.emit(RenameEvent::Progress {
            done: report.rewritten,
            total: report.rewritten,
        });
        self.emit(RenameEvent::Closed {
            job: job_id.to_owned(),
        });
    }
}
