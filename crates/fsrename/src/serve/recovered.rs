//! Following a job that stopped after its first write until recovery has finished it: one
//! taken over from an instance that died in the middle of it (`adopt.rs`), or one of this
//! instance's that lost its locks half-way (`RenameError::Unfinished`). Its journal entry
//! lets recovery roll it forward once its locks expire; the job is `done` when the entry
//! closes, not `failed` while its effect is still to come.
//!
//! This file only watches the journal; `Jobs::follow_recovery` records what it finds, so
//! that the job table stays the one place that changes jobs.

use std::sync::Arc;

use fs_rename::{Journal, JournalState, Recovery};
use fs_store::SharedStore;
use tokio::sync::watch;

use super::config::ServeConfig;
use crate::contract::JobState;

/// Waits until recovery has finished the journaled job `id` (its entry `journal_id` closed)
/// and returns how the job ended: done, or failed with why. Runs recovery itself every lease,
/// for a service whose periodic recovery is off (a recovery that finds nothing due does
/// nothing). Returns `None` once `closing` says the service shuts down: the job stays this
/// instance's, unfinished, and is taken over again once it has stopped.
pub async fn until_recovered(
    store: &SharedStore,
    c: &ServeConfig,
    mut closing: watch::Receiver<bool>,
    id: &str,
    journal_id: &str,
) -> Option<(JobState, Option<String>)> {
    let journal = Journal::new(Arc::clone(store), &c.index);
    let recovery = Recovery::new(Arc::clone(store), c.index.clone())
        .lease(c.lease)
        .wait(c.wait);
    loop {
        tokio::select! {
            () = tokio::time::sleep(c.lease) => {}
            _ = closing.wait_for(|closing| *closing) => return None,
        }
        match journal.state_of(journal_id).await {
            Ok(JournalState::Open(_)) => {
                if c.recover_every.is_none() {
                    if let Err(e) = recovery.run().await {
                        tracing::warn!(job = %id, error = %e, "recovery failed; will retry");
                    }
                }
            }
            Ok(JournalState::Closed) => return Some((JobState::Done, None)),
            Ok(JournalState::Fenced | JournalState::Absent) => return Some((
                JobState::Failed,
                Some(format!("the journal entry `{journal_id}` of the job vanished without being closed: check the tree with `fsrename fsck`")),
            )),
            Err(e) => {
                tracing::warn!(job = %id, error = %e, "cannot read the journal; will retry");
            }
        }
    }
}
