//! How a run gives its locks back: released after any end but an unfinished job (rename, copy
//! or delete), which abandons them for recovery; and a complete job whose release fails is
//! still done, with the locks it left named in its report.

use std::sync::Arc;

use fs_locks::{LockClient, LockError, LockGuard, ReleasedAfter};

use super::left::unfinished;
use super::run::PendingClose;
use super::{journaled, Renamer};
use crate::error::{RenameError, Result};
use crate::journal::Journal;
use crate::report::{RenameEvent, RenameReport};
use crate::tree::FsTree;

impl Renamer {
    /// Ends a run that took `guards`, given how its locked work ended: an unfinished rename
    /// abandons its locks to expire (recovery takes them over and finishes it); any other end
    /// releases them.
    ///
    /// A release that fails after a complete rename does not make the rename fail. `Ok` from
    /// the locked work means every document was rewritten and the journal entry is closed:
    /// the rename has happened, and recovery will neither redo nor undo it. Reporting it
    /// failed would send clients to retry a rename whose source is already gone. So it is
    /// reported done, with the locks it left ([`RenameReport::locks_left`]) and a warning:
    /// they are no longer renewed, so they expire with their lease, and the recovery sweep
    /// then fences the (closed) journal id and deletes them.
    pub(super) async fn end(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        mut guards: Vec<LockGuard>,
        result: Result<Option<PendingClose>>,
        job_id: &str,
        report: &mut RenameReport,
    ) -> Result<()> {
        let result = match result {
            Ok(Some(close)) => match guards.pop() {
                Some(guard) if guards.is_empty() => {
                    return self
                        .close_and_release(tree, locks, guard, close, report)
                        .await
                }
                // Chained only with one guard (`locked_work`); were there more, the entry is
                // closed first, as everywhere else.
                last => {
                    guards.extend(last);
                    let journal = Journal::new(Arc::clone(tree.store()), tree.index());
                    match journaled(|| journal.close(&close.job_id, close.version)).await {
                        Ok(()) => {
                            self.emit(RenameEvent::Closed { job: close.job_id });
                            Ok(())
                        }
                        Err(e) => Err(unfinished(&close.job_id, self.config.lease, e, report)),
                    }
                }
            },
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if matches!(result, Err(RenameError::Unfinished { .. })) {
            for guard in guards.into_iter().rev() {
                guard.abandon().await;
            }
            return result;
        }
        if guards.is_empty() {
            return result;
        }
        // Read before the release, which forgets the locks whether it succeeds or not.
        let held = locks.held_items().await;
        let mut released = Ok(());
        for guard in guards.into_iter().rev() {
            // Every guard is released even after one failed: each holds its own locks.
            if let Err(e) = guard.release().await {
                if released.is_ok() {
                    released = Err(e);
                }
            }
        }
        match (result, released) {
            (result, Ok(())) => {
                self.emit(RenameEvent::Released);
                result
            }
            (Err(e), Err(release)) => {
                tracing::warn!(error = %release, "releasing after a failed rename also failed; the leases expire what is left");
                Err(e)
            }
            (Ok(()), Err(release)) => {
                self.left_to_expire(tree, locks, &held, job_id, &release, report)
                    .await;
                Ok(())
            }
        }
    }

    /// Closes the journal entry and releases the locks in one transaction
    /// ([`LockGuard::release_after`]). If the close does not land, it is tried alone (as
    /// [`Journal::close`], which tells a recoverer's claim from a close already made): the
    /// locks, no longer renewed, are left to expire either way.
    async fn close_and_release(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        guard: LockGuard,
        close: PendingClose,
        report: &mut RenameReport,
    ) -> Result<()> {
        let journal = Journal::new(Arc::clone(tree.store()), tree.index());
        let job_id = close.job_id.as_str();
        let first = match journal.close_write(job_id, close.version) {
            Ok(first) => first,
            Err(e) => {
                guard.abandon().await;
                return Err(unfinished(job_id, self.config.lease, e, report));
            }
        };
        let held = locks.held_items().await;
        match guard.release_after(first).await {
            ReleasedAfter::Released(released) => {
                self.emit(RenameEvent::Closed {
                    job: job_id.to_owned(),
                });
                match released {
                    Ok(_) => self.emit(RenameEvent::Released),
                    Err(release) => {
                        self.left_to_expire(tree, locks, &held, job_id, &release, report)
                            .await;
                    }
                }
                Ok(())
            }
            ReleasedAfter::FirstFailed(why) => {
                match journaled(|| journal.close(job_id, close.version)).await {
                    // Closed after all (by this try, or by a recoverer that finished the job):
                    // done, with its locks left to expire.
                    Ok(()) => {
                        self.emit(RenameEvent::Closed {
                            job: job_id.to_owned(),
                        });
                        let release = LockError::Store {
                            context: "closing the journal entry with the release".to_owned(),
                            cause: why,
                        };
                        self.left_to_expire(tree, locks, &held, job_id, &release, report)
                            .await;
                        Ok(())
                    }
                    Err(e) => Err(unfinished(job_id, self.config.lease, e, report)),
                }
            }
        }
    }
}
