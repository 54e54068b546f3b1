//! The heartbeat of an instance, and the takeover of the jobs of an instance that died.
//!
//! Every instance writes its heartbeat to the jobs index every [`Liveness::beat`] (a third
//! of the lease). An instance whose heartbeat is older than [`Liveness::dead_after`] (two
//! leases), or that stopped cleanly, is dead: its unfinished jobs are taken over by the first
//! live instance that claims each of them (a conditional write of the job document, so one
//! instance wins). What the new owner does depends on how far the job got, which it reads
//! from the job's journal id (stored when the job starts, and the job's first write waits for
//! it to be) and the journal:
//!
//! | the job document | the journal | taken over as |
//! | --- | --- | --- |
//! | no journal id (queued) | — | run again from the start: nothing was written |
//! | journal id | fenced, or nothing (then fenced by the new owner before its claim) | run again from the start: nothing was written, and the dead job can no longer write |
//! | journal id | open entry | left to recovery, which rolls it forward once its locks expire; `done` when the entry closes |
//! | journal id | closed | `done`: the dead instance finished it and died before saying so |
//!
//! A job run again waits for the dead instance's locks like any other job: they expire with
//! their lease, and recovery clears them.
//!
//! An instance cut off from the store for longer than `dead_after` but not dead may find
//! its jobs taken over. Its next write of such a job is refused (see `records.rs`), and it
//! stops writing the job's document and shows the job as its new owner stored it. Its own run
//! of the job cannot write: a job journals only once its journal id is stored with the job
//! (with its start, or by `StoreJournalId` in `jobs.rs`), and that write is refused once the
//! job is another instance's. Either the id was stored before the job was claimed (the new
//! owner finds it, and the table above applies: an id with no entry is fenced, so the old
//! run's entry cannot land, and its next attempt's id cannot be stored) or the old run stops
//! before its first write; the job runs once, by one of them. And a job's end is stored before it is shown, so no client is told
//! "failed" of a job that an adopter then runs from an older record. (Found by the
//! Jepsen-style test, `docs/reliability.md`: before, the job ran twice, and the second run
//! failed on the first one's effect.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fs_rename::{FenceOutcome, Journal, JournalState};
use fs_store::Version;
use tokio::sync::watch;

use super::jobs::Jobs;
use super::liveness::Liveness;
use super::records::{Heartbeat, RecordError};
use crate::contract::job::now_ms;
use crate::contract::{Job, JobState, Progress};

/// Beats until `stop` turns true, and takes over the jobs of dead instances until shutdown
/// begins. The caller says when to stop: after this instance's own jobs ended, so that its
/// heartbeat covers them to the last; then the last heartbeat (0) says it stopped, and its
/// queued jobs, if any, are taken over at once. The heartbeat has a task of its own: a long
/// takeover must not make this instance look dead.
pub async fn run(jobs: Jobs, listen: SocketAddr, mut stop: watch::Receiver<bool>) {
    let liveness = Liveness::for_lease(jobs.config().lease);
    let beat = |at: i64| Heartbeat {
        instance: jobs.instance().to_owned(),
        listen: listen.to_string(),
        heartbeat_at: at,
    };
    let adopter = tokio::spawn(adopt_until_closing(jobs.clone(), liveness));
    loop {
        if let Err(e) = jobs.records().beat(&beat(now_ms())).await {
            tracing::warn!(error = %e, "heartbeat failed: other instances may take this one for dead");
        }
        tokio::select! {
            () = tokio::time::sleep(liveness.beat) => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    let _ = adopter.await;
    if let Err(e) = jobs.records().beat(&beat(0)).await {
        tracing::warn!(error = %e, "could not record this instance's stop: its jobs left queued are taken over once its heartbeat is old");
    }
}

/// Looks for the jobs of dead instances every heartbeat, until shutdown begins.
async fn adopt_until_closing(jobs: Jobs, liveness: Liveness) {
    let mut closing = jobs.closing();
    while !*closing.borrow() {
        match take_over_dead(&jobs, liveness).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "took over the jobs of dead instances"),
            Err(e) => {
                tracing::warn!(error = %e, "looking for the jobs of dead instances failed; will retry")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(liveness.beat) => {}
            _ = closing.wait_for(|closing| *closing) => break,
        }
    }
}

/// How long the jobs index keeps a finished job.
const FINISHED_KEPT: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Claims and takes over every unfinished job of a dead instance; returns how many. Deletes
/// the jobs that finished more than [`FINISHED_KEPT`] ago on the way.
async fn take_over_dead(jobs: &Jobs, liveness: Liveness) -> Result<usize, RecordError> {
    let listing = jobs.records().list().await?;
    let now = now_ms();
    let dead_after = i64::try_from(liveness.dead_after.as_millis()).unwrap_or(i64::MAX);
    let kept = i64::try_from(FINISHED_KEPT.as_millis()).unwrap_or(i64::MAX);
    let journal = Journal::new(Arc::clone(jobs.store()), &jobs.config().index);
    let mut taken = 0;
    for (job, version) in listing.jobs {
        if job.state().finished() {
            if job
                .finished_at
                .is_some_and(|at| now.saturating_sub(at) > kept)
            {
                jobs.records().forget(&job.id, version).await?;
            }
            continue;
        }
        if job.instance == jobs.instance() {
            continue;
        }
        // An instance with no heartbeat at all is judged by the job's age.
        let seen = listing
            .heartbeats
            .get(&job.instance)
            .copied()
            .unwrap_or(job.submitted_at);
        if now.saturating_sub(seen) < dead_after {
            continue;
        }
        // Read before the claim: a job claimed and then not understood would be nobody's.
        let state = match &job.journal {
            None => None,
            Some(id) => match settled_state(&journal, id, jobs.instance(), &job.instance).await {
                Ok(state) => Some(state),
                Err(e) => {
                    tracing::warn!(job = %job.id, error = %e, "cannot read the journal of a dead instance's job; will retry");
                    continue;
                }
            },
        };
        let dead = job.instance.clone();
        let mut claimed = job;
        claimed.adopted_from = Some(dead.clone());
        claimed.instance = jobs.instance().to_owned();
        let version = match jobs.records().write(&claimed, version).await {
            Ok(version) => version,
            // Another instance claimed it first.
            Err(RecordError::Taken { .. }) => continue,
            Err(e) => return Err(e),
        };
        tracing::info!(job = %claimed.id, work = %claimed.work.describe(), %dead, "taking over a job of a dead instance");
        take_over(jobs, claimed, version, &dead, state).await;
        taken += 1;
    }
    Ok(taken)
}

/// The state of journal id `id` of a job of instance `dead`, which no longer changes: an id
/// with no entry is fenced first (by `me`), so that an entry its job is still sending (an
/// instance taken for dead but alive, its journal write resent by its store) can never land
/// after the job is run again from the start; the job's own next attempt then stops, its record
/// no longer its instance's. A fence that finds an entry, or a tombstone (the job may have
/// finished meanwhile), reads the state again.
///
/// # Errors
/// The journal cannot be read or written.
async fn settled_state(
    journal: &Journal,
    id: &str,
    me: &str,
    dead: &str,
) -> fs_rename::Result<JournalState> {
    match journal.state_of(id).await? {
        JournalState::Absent => {}
        settled => return Ok(settled),
    }
    let by = format!("instance `{me}` taking over a job of `{dead}`");
    match journal.fence(id, &by, now_ms()).await? {
        FenceOutcome::Fenced { new: true } => Ok(JournalState::Fenced),
        FenceOutcome::Fenced { new: false } | FenceOutcome::Open(_) => journal.state_of(id).await,
    }
}

/// Makes `job`, claimed at `version` from the dead instance `dead`, this instance's: see the
/// table of the module documentation.
async fn take_over(
    jobs: &Jobs,
    mut job: Job,
    version: Version,
    dead: &str,
    journal: Option<JournalState>,
) {
    let id = job.id.clone();
    match journal {
        None | Some(JournalState::Fenced | JournalState::Absent) => {
            job.warnings.push(format!(
                "instance `{dead}` died before the job wrote anything; run again from the start by `{}`",
                jobs.instance()
            ));
            job.enter(JobState::Queued);
            job.progress = Progress::default();
            job.journal = None;
            job.started_at = None;
            jobs.adopt(job, version);
            jobs.persist(&id).await;
            jobs.spawn_run(id);
        }
        Some(JournalState::Closed) => {
            job.warnings.push(format!(
                "instance `{dead}` finished the job and died before recording it; its report is lost"
            ));
            job.enter(JobState::Done);
            job.finished_at = Some(now_ms());
            jobs.adopt(job, version);
            jobs.persist(&id).await;
        }
        Some(JournalState::Open(_)) => {
            job.warnings.push(format!(
                "instance `{dead}` died in the middle of the job; recovery finishes it once its locks expire"
            ));
            job.enter(JobState::Rewriting);
            let journal_id = job.journal.clone().unwrap_or_default();
            jobs.adopt(job, version);
            jobs.persist(&id).await;
            jobs.follow_recovery(id, journal_id);
        }
    }
}
