//! Recovery's steps on the lock index and the journal's fences: clearing what has expired,
//! fencing the jobs whose locks it clears first, and removing old fences.

use std::collections::{HashMap, HashSet};

use fs_locks::{
    borrowed_from, is_hold, ExpiredHolder, ForeignShares, LeaseClock, LockClient, LockError,
    LockInfo, Observed, Reaped,
};

use super::{Recovery, RecoveryReport};
use crate::error::{RenameError, Result};
use crate::journal::{FenceOutcome, Journal};
use crate::resend;

impl Recovery {
    /// Deletes expired exclusive locks and removes expired shares, sparing `spare`'s, and
    /// fencing the journal id of every rename whose lock it clears.
    pub(super) async fn sweep(
        &self,
        journal: &Journal,
        spare: &HashSet<String>,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let client = self.lock_client("recover: sweep".to_owned(), None);
        // Before the listing: what it shows was written before this instant.
        let listed_at = LeaseClock::new().now_ms();
        let locks = match client.list_locks().await {
            Ok(locks) => locks,
            Err(LockError::Store {
                cause: fs_store::StoreError::IndexNotFound { .. },
                ..
            }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if !self.dry_run && !locks.is_empty() {
            self.refresh_before_clearing().await?;
        }
        let expiry = Expiry {
            now: LeaseClock::new().now_ms(),
            spare,
        };
        let borrowers = Borrowers::of(&locks, listed_at, &client);
        // Each job is fenced once per run, however many of its locks are cleared.
        let mut fenced: HashMap<String, bool> = HashMap::new();
        for lock in locks {
            if !self.dry_run && lock.observed.foreign_shares() > 0 {
                match client.settle_foreign(&lock.id, self.foreign_lease).await {
                    Ok(ForeignShares::Cleared(n)) => report.foreign_cleared += n,
                    Ok(ForeignShares::Watching { .. }) => report.foreign_watched += 1,
                    Ok(ForeignShares::None) => {}
                    Err(e) => {
                        tracing::debug!(lock = %lock.id, error = %e, "foreign shares not settled")
                    }
                }
            }
            let dead_waiters = expiry.dead_waiters(&lock.observed);
            if dead_waiters == 0 && !expiry.has_clearable_holder(&lock.observed) {
                continue;
            }
            if self.dry_run {
                report.waiters_reaped += dead_waiters;
                match &lock.observed {
                    Observed::Exclusive { .. } => report.locks_released += 1,
                    Observed::Group { .. } => {
                        report.shares_reaped += expiry.clearable_shares(&lock.observed)
                    }
                }
                continue;
            }
            // Read again: what to clear is decided on this version, and cleared only if the
            // document is still at it (a holder that renewed meanwhile keeps its lock). A
            // failure (an answer lost on the way, a write made since) is answered by reading
            // again and deciding anew, a few times; what is still left waits for the next run.
            let mut backoff = resend::SWEEP.start();
            loop {
                let cleared = self
                    .clear_expired(
                        (&client, journal, &borrowers),
                        &lock.id,
                        spare,
                        &mut fenced,
                        report,
                    )
                    .await;
                match cleared {
                    Ok(Reaped::Exclusive(_)) => report.locks_released += 1,
                    Ok(Reaped::Shares(pids)) => {
                        report.shares_reaped += pids.len();
                        report.waiters_reaped += dead_waiters;
                    }
                    Ok(Reaped::Nothing) => {}
                    Err(e) => {
                        let attempt = backoff.attempt() + 1;
                        tracing::debug!(lock = %lock.id, attempt, error = %e, "not swept");
                        if backoff.wait().await {
                            continue;
                        }
                    }
                }
                break;
            }
        }
        Ok(())
    }

    /// Makes the writes of every holder searchable before any of their locks is cleared.
    ///
    /// A holder may have died between its last write and the refresh that makes it
    /// searchable (a job whose journal entry is closed refreshes beside the close; a
    /// `mkdir` refreshes after its write). Whoever takes a lock after this sweep checks
    /// by search, so the writes of the holders whose locks it clears are made searchable
    /// first: the rule "searchable before released", kept for the dead.
    async fn refresh_before_clearing(&self) -> Result<()> {
        match self.store.refresh(&self.index).await {
            Ok(()) | Err(fs_store::StoreError::IndexNotFound { .. }) => Ok(()),
            Err(e) => Err(RenameError::store(format!(
                "refreshing `{}` before clearing expired locks",
                self.index
            ))(e)),
        }
    }

    /// Clears what has expired on the lock `id`, read afresh: each expired holder whose job
    /// (if it names one) is fenced first, except the holders in `spare`; an expired hold (an
    /// intention lock a process lent to its jobs) only once none of its borrowers may act.
    /// `fenced` keeps, for each job fenced in this run, whether its locks may be cleared.
    async fn clear_expired(
        &self,
        (client, journal, borrowers): (&LockClient, &Journal, &Borrowers),
        id: &str,
        spare: &HashSet<String>,
        fenced: &mut HashMap<String, bool>,
        report: &mut RecoveryReport,
    ) -> Result<Reaped> {
        let Some(expired) = client.read_expired(id).await? else {
            return Ok(Reaped::Nothing);
        };
        let fencer = format!("recovery {}", client.owner().process_id);
        let journal = (journal, fencer.as_str());
        let mut reap: Vec<&str> = Vec::new();
        for holder in &expired.expired {
            if spare.contains(&holder.process_id) {
                continue;
            }
            if is_hold(&holder.process_id) {
                if self
                    .hold_may_go(journal, borrowers, holder, fenced, report)
                    .await?
                {
                    reap.push(&holder.process_id);
                }
                continue;
            }
            let Some(job) = &holder.job else {
                // A lock that protects no journaled rename: nothing to fence.
                reap.push(&holder.process_id);
                continue;
            };
            if self
                .fence_once(journal, job, &holder.process_id, fenced, report)
                .await?
            {
                reap.push(&holder.process_id);
            }
        }
        Ok(client.reap_expired_holders(&expired, &reap).await?)
    }

    /// Whether the expired hold `hold` may be cleared: it expired before the listing began
    /// (clocks' skew included), so every lock document a borrower wrote while the hold was
    /// its own is listed (a borrower checks its hold's lease after writing its own locks, and
    /// before it journals), and each borrower listed is fenced, or has no journal and its own
    /// locks are over. A borrower that journaled keeps the hold for its recovery.
    async fn hold_may_go(
        &self,
        journal: (&Journal, &str),
        borrowers: &Borrowers,
        hold: &ExpiredHolder,
        fenced: &mut HashMap<String, bool>,
        report: &mut RecoveryReport,
    ) -> Result<bool> {
        if hold.expires_at.saturating_add(borrowers.skew) >= borrowers.listed_at {
            return Ok(false);
        }
        for borrower in borrowers.of_hold(&hold.process_id) {
            let Some(job) = &borrower.job else {
                if borrower.expires_at >= borrowers.listed_at {
                    return Ok(false);
                }
                continue;
            };
            if !self
                .fence_once(journal, job, &hold.process_id, fenced, report)
                .await?
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Fences `job` (as `journal.1`) unless this run did already; returns whether its locks
    /// may be cleared (false if it journaled: its locks protect a rename the next run
    /// recovers).
    async fn fence_once(
        &self,
        journal: (&Journal, &str),
        job: &str,
        holder: &str,
        fenced: &mut HashMap<String, bool>,
        report: &mut RecoveryReport,
    ) -> Result<bool> {
        if let Some(known) = fenced.get(job) {
            return Ok(*known);
        }
        let (journal, fencer) = journal;
        let may_clear = match journal
            .fence(job, fencer, LeaseClock::new().now_ms())
            .await?
        {
            FenceOutcome::Fenced { new } => {
                if new {
                    report.fenced += 1;
                    tracing::info!(job = %job, holder = %holder, "fenced a journal id before clearing its expired locks (its job died before journaling, or finished without releasing them)");
                }
                true
            }
            FenceOutcome::Open(_) => false,
        };
        fenced.insert(job.to_owned(), may_clear);
        Ok(may_clear)
    }

    /// Removes the fences older than the retention.
    pub(super) async fn remove_old_fences(
        &self,
        journal: &Journal,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let retention = i64::try_from(self.fence_retention.as_millis()).unwrap_or(i64::MAX);
        let cutoff = LeaseClock::new().now_ms().saturating_sub(retention);
        for (fence, version) in journal.fences().await? {
            if fence.fenced_at >= cutoff {
                continue;
            }
            if self.dry_run {
                report.fences_removed += 1;
                continue;
            }
            match journal.remove_fence(&fence.job_id, version).await {
                Ok(()) => report.fences_removed += 1,
                Err(e) => tracing::debug!(job = %fence.job_id, error = %e, "fence not removed"),
            }
        }
        Ok(())
    }
}

/// A holder of a lock that borrowed its intention locks from a hold, as listed.
struct Borrower {
    job: Option<String>,
    expires_at: i64,
}

/// The borrowers of every hold, as the listing of a sweep shows them, and when that listing
/// began.
struct Borrowers {
    listed_at: i64,
    skew: i64,
    by_hold: HashMap<String, Vec<Borrower>>,
}

impl Borrowers {
    fn of(locks: &[LockInfo], listed_at: i64, client: &LockClient) -> Borrowers {
        let mut by_hold: HashMap<String, Vec<Borrower>> = HashMap::new();
        let mut add = |pid: &str, job: &Option<String>, expires_at: i64| {
            if let Some(hold) = borrowed_from(pid) {
                by_hold.entry(hold.to_owned()).or_default().push(Borrower {
                    job: job.clone(),
                    expires_at,
                });
            }
        };
        for lock in locks {
            match &lock.observed {
                Observed::Exclusive {
                    process_id: Some(pid),
                    job,
                    expires_at,
                    ..
                } => add(pid, job, expires_at.unwrap_or(i64::MAX)),
                Observed::Exclusive { .. } => {}
                Observed::Group { holders, .. } => {
                    for (pid, h) in holders {
                        add(pid, &h.job, h.expires_at);
                    }
                }
            }
        }
        let skew = i64::try_from(client.max_clock_skew().as_millis()).unwrap_or(i64::MAX);
        Borrowers {
            listed_at,
            skew,
            by_hold,
        }
    }

    fn of_hold(&self, hold: &str) -> &[Borrower] {
        self.by_hold.get(hold).map_or(&[], Vec::as_slice)
    }
}

/// What a sweep may clear: leases ended before `now`, except the holders' in `spare`.
struct Expiry<'a> {
    now: i64,
    spare: &'a HashSet<String>,
}

impl Expiry<'_> {
    /// The waiters of `observed` whose lease has ended.
    fn dead_waiters(&self, observed: &Observed) -> usize {
        observed
            .waiters()
            .values()
            .filter(|w| w.expires_at < self.now)
            .count()
    }

    /// Whether `observed` has a holder whose lease has ended and who is not spared.
    fn has_clearable_holder(&self, observed: &Observed) -> bool {
        match observed {
            Observed::Exclusive {
                process_id,
                expires_at,
                ..
            } => {
                expires_at.is_some_and(|t| t > 0 && t < self.now)
                    && !process_id.as_ref().is_some_and(|p| self.spare.contains(p))
            }
            Observed::Group { .. } => self.clearable_shares(observed) > 0,
        }
    }

    /// The holders of the group lock `observed` whose lease has ended and who are not
    /// spared; none for an exclusive lock.
    fn clearable_shares(&self, observed: &Observed) -> usize {
        match observed {
            Observed::Exclusive { .. } => 0,
            Observed::Group { holders, .. } => holders
                .iter()
                .filter(|(pid, h)| h.expires_at < self.now && !self.spare.contains(*pid))
                .count(),
        }
    }
}
