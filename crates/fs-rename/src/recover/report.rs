//! What a recovery run reports: the jobs it finished, those it left running, and its counts.

use std::time::Duration;

use fs_locks::LeaseClock;
use serde::Serialize;

use crate::kind::JobKind;

/// A job (a rename, a copy or a delete) that recovery finished (or, in a dry run, would
/// finish).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Recovered {
    /// The journal entry.
    pub job_id: String,
    /// What the job was doing.
    pub kind: JobKind,
    /// The source (a delete's path).
    pub from: String,
    /// The destination (a delete's path again).
    pub to: String,
    /// Documents this recovery moved, copied or deleted (0 in a dry run). A copy counts the
    /// copies the dead job had made too, since it finds them again.
    pub rewritten: u64,
    /// How many recoverers have claimed the entry, this one included.
    pub recoveries: u32,
}

/// A journaled job recovery left alone: its owner's locks are still leased.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Running {
    /// The journal entry (the job id).
    pub job_id: String,
    /// The job, as `mv /a /b`.
    pub job: String,
    /// When the last of its owner's leases runs out, epoch ms, as the lock documents said
    /// (none for a lock with no lease, or an entry another recoverer claimed meanwhile). A
    /// run after that finishes it, unless its owner is alive and renews them.
    pub leased_until: Option<i64>,
}

impl Running {
    /// How long from `now_ms` until its leases run out, if it says.
    pub fn lease_left(&self, now_ms: i64) -> Option<Duration> {
        self.leased_until
            .map(|until| Duration::from_millis(u64::try_from(until - now_ms).unwrap_or(0)))
    }
}

/// What a recovery run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RecoveryReport {
    /// True if nothing was changed: the report says what a real run would do.
    pub dry_run: bool,
    /// Jobs rolled forward: renames, copies and deletes (each says its kind).
    pub finished: Vec<Recovered>,
    /// Journal entries whose owner still holds valid locks: jobs at work (or dead, with
    /// their lease still running), left alone.
    pub running: Vec<Running>,
    /// Journal entries that could not be finished now, with the reason; a later run retries.
    pub failed: Vec<String>,
    /// Expired exclusive locks deleted by the sweep.
    pub locks_released: usize,
    /// Expired shares removed from shared locks by the sweep.
    pub shares_reaped: usize,
    /// Expired waiter registrations removed by the sweep (requests that died or gave up
    /// while waiting their turn; they blocked nobody once expired).
    pub waiters_reaped: usize,
    /// Journal ids the sweep fenced before clearing the expired locks that named them (see
    /// [`Journal::fence`](crate::journal::Journal::fence)): jobs whose locks expired before they journaled, which may never
    /// journal now, and jobs that finished and closed their entry but could not release their
    /// locks, for which the fence is only a tombstone.
    pub fenced: usize,
    /// Fences removed after the retention.
    pub fences_removed: usize,
    /// Claims on copy ids removed: late creates of a copy job paused past its lease, which
    /// nobody sees (see `FsDoc::claim`).
    pub claims_removed: usize,
    /// Foreign shares (a book client's `lock_count++`, which records no owner and no lease)
    /// unchanged for the foreign lease, removed: a retried increment counted twice, or a
    /// client that died holding its share (see `fs_locks::ForeignShares`).
    pub foreign_cleared: i64,
    /// Paths where foreign shares are being watched (noted, not yet stale).
    pub foreign_watched: usize,
    /// Leases ended before their time because their holder's process was proven gone (it
    /// ran on this machine and runs no more).
    pub leases_ended: usize,
}

impl RecoveryReport {
    /// Adds what a `later` run did to this report: its jobs finished and its counts on top,
    /// and its view of what is still running or not finished in place of this one's.
    pub fn absorb(&mut self, later: RecoveryReport) {
        self.finished.extend(later.finished);
        self.running = later.running;
        self.failed = later.failed;
        self.locks_released += later.locks_released;
        self.shares_reaped += later.shares_reaped;
        self.waiters_reaped += later.waiters_reaped;
        self.fenced += later.fenced;
        self.fences_removed += later.fences_removed;
        self.claims_removed += later.claims_removed;
        self.foreign_cleared += later.foreign_cleared;
        self.foreign_watched = later.foreign_watched;
        self.leases_ended += later.leases_ended;
    }

    /// When the last lease of the jobs left running runs out, epoch ms: the moment a run can
    /// finish them all, if their owners are dead. `None` if none is running or one says no
    /// time.
    pub fn running_until(&self) -> Option<i64> {
        let mut until = None;
        for r in &self.running {
            until = Some(until.unwrap_or(i64::MIN).max(r.leased_until?));
        }
        until
    }

    /// Returns the finished jobs of `kind`.
    pub fn finished_of(&self, kind: JobKind) -> impl Iterator<Item = &Recovered> {
        self.finished.iter().filter(move |r| r.kind == kind)
    }

    /// Returns true if the run found nothing to do and nothing left undone.
    pub fn is_idle(&self) -> bool {
        self.finished.is_empty()
            && self.failed.is_empty()
            && self.locks_released == 0
            && self.shares_reaped == 0
            && self.waiters_reaped == 0
            && self.fenced == 0
            && self.fences_removed == 0
            && self.claims_removed == 0
            && self.foreign_cleared == 0
            && self.leases_ended == 0
    }
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verbs = if self.dry_run {
            ("would finish", "would release", "would remove")
        } else {
            ("finished", "released", "removed")
        };
        self.write_finished(f, verbs.0)?;
        self.write_running(f)?;
        for failure in &self.failed {
            writeln!(f, "not finished: {failure}")?;
        }
        self.write_counts(f, verbs)
    }
}

impl RecoveryReport {
    /// Writes a line for each job finished (`finish`: "finished", or what a dry run would).
    fn write_finished(&self, f: &mut std::fmt::Formatter<'_>, finish: &str) -> std::fmt::Result {
        for r in &self.finished {
            let done = match r.kind {
                JobKind::Rename => "moved",
                JobKind::Copy => "copied",
                JobKind::Delete => "deleted",
            };
            writeln!(
                f,
                "{finish} {} (journal {}, recovery #{}): {} {done}",
                r.kind.describe(&r.from, &r.to),
                r.job_id,
                r.recoveries,
                fs_model::plural(r.rewritten, "document", "documents")
            )?;
        }
        Ok(())
    }

    /// Writes a line for each job left running, with how long its owner's leases last.
    fn write_running(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let now = LeaseClock::new().now_ms();
        for r in &self.running {
            match r.lease_left(now) {
                Some(left) => writeln!(
                    f,
                    "running: {} (journal {}): its owner's locks are leased for {} more; a run after \
                     that finishes it unless the owner is alive and renews them (`fsrename recover \
                     --wait` waits for them)",
                    r.job,
                    r.job_id,
                    fs_model::short_duration(left)
                )?,
                None => writeln!(
                    f,
                    "running: {} (journal {}): its owner's locks are valid",
                    r.job, r.job_id
                )?,
            }
        }
        Ok(())
    }

    /// Writes the counts, on one line: jobs, then what the sweep cleared (`finish`,
    /// `release` and `reap`: the verbs of a real run or a dry one).
    fn write_counts(
        &self,
        f: &mut std::fmt::Formatter<'_>,
        (finish, release, reap): (&str, &str, &str),
    ) -> std::fmt::Result {
        let count = |kind| self.finished_of(kind).count();
        write!(
            f,
            "{} rename(s), {} copy(ies), {} delete(s) {finish}, {} running, {} not finished; {release} {} expired lock(s), {reap} {} expired share(s)",
            count(JobKind::Rename),
            count(JobKind::Copy),
            count(JobKind::Delete),
            self.running.len(),
            self.failed.len(),
            self.locks_released,
            self.shares_reaped
        )?;
        if self.waiters_reaped > 0 {
            write!(f, ", {reap} {} expired waiter(s)", self.waiters_reaped)?;
        }
        if self.fenced > 0 {
            write!(
                f,
                "; fenced {} journal id(s) whose expired locks were cleared outside an open entry",
                self.fenced
            )?;
        }
        if self.fences_removed > 0 {
            write!(f, "; removed {} old fence(s)", self.fences_removed)?;
        }
        if self.leases_ended > 0 {
            write!(
                f,
                "; ended {} lease(s) early: their holders ran on this machine and run no more",
                self.leases_ended
            )?;
        }
        if self.foreign_cleared > 0 {
            write!(
                f,
                "; removed {} foreign share(s) unchanged for the foreign lease",
                self.foreign_cleared
            )?;
        }
        if self.foreign_watched > 0 {
            write!(
                f,
                "; watching foreign shares on {} path(s)",
                self.foreign_watched
            )?;
        }
        if self.claims_removed > 0 {
            let remove = if self.dry_run {
                "would remove"
            } else {
                "removed"
            };
            write!(
                f,
                "; {remove} {} claim(s) a paused copy job sent too late",
                self.claims_removed
            )?;
        }
        Ok(())
    }
}
