//! How a job journals itself and writes: with its writes in one transaction, where the store
//! chains them and the check read the whole subtree (`chained.rs`); else alongside its first
//! reads, each page's write waiting at the gate until the entry landed (`before_write.rs`).

use std::sync::OnceLock;

use fs_locks::LockClient;
use fs_store::Version;
use tokio::time::Instant;

use super::before_write::{Gate, Hold, Keeper};
use super::chained::Journaled;
use super::run::{Read, Refresh};
use super::{journaled, Renamer, Task};
use crate::error::Result;
use crate::journal::{Journal, JournalEntry};
use crate::report::{RenameEvent, RenameReport};
use crate::tree::{Entry, FsTree};

/// How a journaled job's entry and writes ended ([`Renamer::journal_and_write`]).
pub(super) struct Written {
    /// Whether the entry landed: its version, or why not (a fence, or an outcome unknown,
    /// which counts as journaled).
    pub opened: Result<Version>,
    /// How the writes ended.
    pub finished: Result<Refresh>,
    /// False only if no write was ever sent: the tree is as the job found it.
    pub sent_any: bool,
}

impl Renamer {
    /// Journals the job (`entry`) and makes its writes; says how both ended. An `Err` is a
    /// stop before anything was sent: nothing written, no entry.
    pub(super) async fn journal_and_write(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        task: &Task,
        (entry, journal): (&JournalEntry, &Journal),
        (total, read): (&OnceLock<u64>, Read),
        report: &mut RenameReport,
    ) -> Result<Written> {
        // A rename whose check read it all, on a store that chains writes: the entry and the
        // writes in one transaction (`chained.rs`).
        let mut read = read;
        let mut landed = None;
        if let (Task::Rename { from, to }, Some(entries)) = (task, read.known.take()) {
            if self.chains_journal(tree, &entries) {
                let started = Instant::now();
                let sent = self
                    .rewrite_journaled(tree, locks, (from, to), entries, (entry, journal), report)
                    .await?;
                match sent {
                    Journaled::Landed { version, failed } => {
                        if failed.is_empty() {
                            report.phases.rewriting = started.elapsed();
                        }
                        landed = Some((version, failed));
                    }
                    Journaled::NotLanded(entries) => read.known = Some(entries),
                    // The outcome is unknown: the job counts as journaled.
                    Journaled::Unknown(e) => {
                        return Ok(Written {
                            opened: Err(e),
                            finished: Ok(Refresh::Done),
                            sent_any: true,
                        })
                    }
                }
            } else {
                read.known = Some(entries);
            }
        }
        Ok(match landed {
            Some((version, failed)) => {
                let finished = self
                    .finish_chained(tree, locks, task, &entry.job_id, (total, failed), report)
                    .await;
                Written {
                    opened: Ok(version),
                    finished,
                    sent_any: true,
                }
            }
            None => {
                // The entry goes out (with the count, if the check did not read the whole
                // subtree) while the first pages are read; their writes wait for it at the
                // gate (`before_write.rs`).
                let (keeper, gate) = Gate::shut();
                let (opened, finished) = tokio::join!(
                    self.open_entry(tree, task, (entry, journal), total, keeper),
                    self.finish(
                        Hold {
                            tree,
                            locks,
                            gate: &gate,
                        },
                        task,
                        &entry.job_id,
                        (total, read),
                        report
                    )
                );
                Written {
                    opened,
                    finished,
                    sent_any: gate.let_any_through(),
                }
            }
        })
    }

    /// Ends a job whose entry and writes landed in one transaction: the items that `failed`
    /// in it go again, the usual way, and the job is done once they are written.
    async fn finish_chained(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        task: &Task,
        job_id: &str,
        (total, failed): (&OnceLock<u64>, Vec<Entry>),
        report: &mut RenameReport,
    ) -> Result<Refresh> {
        if failed.is_empty() {
            return self.written_all(task, report).await.map(|()| Refresh::Done);
        }
        let again = Read {
            known: Some(failed),
            first: Vec::new(),
        };
        self.finish(
            Hold::open(tree, locks),
            task,
            job_id,
            (total, again),
            report,
        )
        .await
    }

    /// Opens the journal `entry`, counting the documents to write at the same time if
    /// `total` is not known yet, and tells `keeper` whether the entry landed, for the writes
    /// waiting at its gate.
    async fn open_entry(
        &self,
        tree: &FsTree,
        task: &Task,
        (entry, journal): (&JournalEntry, &Journal),
        total: &OnceLock<u64>,
        keeper: Keeper,
    ) -> Result<Version> {
        let count = async {
            match total.get() {
                Some(_) => None,
                None => Some(tree.count_under(task.from()).await),
            }
        };
        let (opened, counted) = tokio::join!(journaled(|| journal.open(entry)), count);
        match counted {
            Some(Ok(n)) => {
                let _ = total.set(n);
                self.emit(RenameEvent::Checked { total: n });
            }
            // Only the progress's total is missing: the job goes on without it.
            Some(Err(e)) => {
                tracing::warn!(error = %e, from = %task.from(), "counting the documents to write failed; progress goes on without a total");
            }
            None => {}
        }
        if opened.is_ok() {
            self.emit(RenameEvent::Journaled {
                job: entry.job_id.clone(),
            });
        }
        keeper.decide(opened.is_ok());
        opened
    }
}
