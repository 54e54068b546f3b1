//! A small rename in one transaction with its journal entry, where the store can chain them
//! ([`fs_store::ChainedBulk::bulk_after`], the embedded store).
//!
//! When the check read the whole subtree and it fits one bulk request, the entry's `_create`
//! and the rewrite go in one request: the entry lands exactly when the writes do, so the
//! journal's rule (an entry exists whenever the tree may be half-renamed) holds with one round
//! trip fewer, and a fence at the job's id (see `crate::journal`) fails the `_create` and so
//! the whole transaction. A job whose entry did not land this way has written nothing, and
//! journals the usual way (`run.rs`), which also tells a fence from a missing index.

use fs_locks::LockClient;
use fs_model::FsPath;
use fs_store::{Chain, Chained, StoreError, Version};

use super::Renamer;
use crate::error::{RenameError, Result};
use crate::journal::{Journal, JournalEntry};
use crate::report::{RenameEvent, RenameReport};
use crate::tree::{Entry, FsTree};

/// How a rewrite sent with its journal entry ended.
#[derive(Debug)]
pub(super) enum Journaled {
    /// The entry landed at this version, with every write but `failed` (sent again by the
    /// usual rewrite).
    Landed {
        version: Version,
        failed: Vec<Entry>,
    },
    /// Nothing landed: the job journals and writes these the usual way.
    NotLanded(Vec<Entry>),
    /// The request failed in a way that leaves its outcome unknown: the job counts as
    /// journaled (its locks are left for recovery).
    Unknown(RenameError),
}

impl Renamer {
    /// Whether a rename of `entries` (the whole subtree, as the check read it) goes with its
    /// journal entry in one transaction.
    pub(super) fn chains_journal(&self, tree: &FsTree, entries: &[Entry]) -> bool {
        tree.store().chains_bulk() && !entries.is_empty() && entries.len() <= self.config.page_size
    }

    /// Sends the journal `entry` and the rewrite of `entries` in one transaction, refreshed.
    /// Counts into `report` the documents written. An error before anything was sent (the
    /// lease ran out, a cancellation) comes back as `Err`: nothing was written, no entry
    /// exists.
    pub(super) async fn rewrite_journaled(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        (from, to): (&FsPath, &FsPath),
        entries: Vec<Entry>,
        (entry, journal): (&JournalEntry, &Journal),
        report: &mut RenameReport,
    ) -> Result<Journaled> {
        let ops = self
            .whole_rename_ops((tree, locks), (from, to), &entries, report)
            .await?;
        let first = journal.open_write(entry)?;
        let sent = tree
            .store()
            .bulk_after(Chain {
                first_index: journal.index(),
                first,
                with_first: None,
                index: tree.index(),
                then: ops,
                refresh: true,
            })
            .await;
        let results = match sent {
            Ok(Chained::Ran(version, results)) => (version, results),
            Ok(Chained::FirstFailed(e)) => {
                tracing::debug!(error = %e, job = %entry.job_id, "the journal entry did not land with the writes; journaling alone");
                return Ok(Journaled::NotLanded(entries));
            }
            // Refused before it began (the database was busy): nothing landed.
            Err(StoreError::Transient { .. }) => return Ok(Journaled::NotLanded(entries)),
            Err(e) => {
                let context = format!("rewriting documents under `{from}` with the journal entry");
                return Ok(Journaled::Unknown(RenameError::store(context)(e)));
            }
        };
        let (version, results) = results;
        self.emit(RenameEvent::Journaled {
            job: entry.job_id.clone(),
        });
        let mut failed = Vec::new();
        for (entry, result) in entries.into_iter().zip(results) {
            match result {
                Ok(_) => {
                    report.found += 1;
                    report.rewritten += 1;
                }
                Err(_) => failed.push(entry),
            }
        }
        self.emit(RenameEvent::Progress {
            done: report.rewritten,
            total: report.rewritten + failed.len() as u64,
        });
        Ok(Journaled::Landed { version, failed })
    }
}
