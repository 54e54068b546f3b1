//! Following a job that stopped after its first write until recovery has finished it: one
//! taken over from an instance that died in the middle of it (`adopt.rs`), or one of this
//! instance's that lost its locks half-way (`RenameError::Unfinished`). Its journal entry
//! lets recovery roll it forward once its locks expire; the job is `done` when the entry
//! closes, not `failed` while its effect is still to come.

use std::sync::Arc;

use fs_rename::{Journal, JournalState, Recovery};

use super::job::{now_ms, JobState};
use super::jobs::Jobs;
use super::metrics::Metrics;

/// Waits until recovery has finished the journaled job `id` (its entry `journal_id` closed),
/// then records it `done`. Runs recovery itself every lease, for a service whose periodic
/// recovery is off (a recovery that finds nothing due does nothing). Stops at shutdown: the
/// job stays this instance's, unfinished, and is taken over again once it has stopped.
pub async fn until_recovered(jobs: Jobs, id: String, journal_id: String) {
    let c = jobs.config();
    let journal = Journal::new(Arc::clone(jobs.store()), &c.index);
    let recovery = Recovery::new(Arc::clone(jobs.store()), c.index.clone())
        .lease(c.lease)
        .wait(c.wait);
    let mut closing = jobs.closing();
    loop {
        tokio::select! {
            () = tokio::time::sleep(c.lease) => {}
            _ = closing.wait_for(|closing| *closing) => return,
        }
        let outcome = match journal.state_of(&journal_id).await {
            Ok(JournalState::Open(_)) => {
                if c.recover_every.is_none() {
                    if let Err(e) = recovery.run().await {
                        tracing::warn!(job = %id, error = %e, "recovery failed; will retry");
                    }
                }
                continue;
            }
            Ok(JournalState::Closed) => (JobState::Done, None),
            Ok(JournalState::Fenced | JournalState::Absent) => (
                JobState::Failed,
                Some(format!("the journal entry `{journal_id}` of the job vanished without being closed: check the tree with `fsrename fsck`")),
            ),
            Err(e) => {
                tracing::warn!(job = %id, error = %e, "cannot read the journal; will retry");
                continue;
            }
        };
        let m = jobs.metrics();
        match outcome.0 {
            JobState::Done => Metrics::add(&m.done, 1),
            _ => Metrics::add(&m.failed, 1),
        }
        jobs.finish(&id, |j| {
            j.state = outcome.0;
            j.error = outcome.1;
            j.finished_at = Some(now_ms());
        });
        jobs.persist(&id).await;
        jobs.forget_old();
        return;
    }
}
