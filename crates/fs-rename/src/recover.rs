//! Recovery: finishing the jobs (renames, copies, deletes) that died, and clearing the locks
//! they left.
//!
//! One run:
//!
//! 1. For each [journal entry](crate::journal) whose locks have all expired (its owner died or
//!    stopped renewing): claim the entry (a conditional write, so one recoverer wins), take
//!    over its whole lock set ([`LockClient::adopt`]), roll the job forward by its kind
//!    ([`Renamer::roll_forward`]: a rename rewrites whatever still lies under the source, a
//!    copy creates the copies still missing, a delete deletes what is left, deepest first;
//!    each idempotent), close the entry, release the locks.
//!    An entry whose locks are still valid belongs to a live job and is left alone.
//! 2. Sweep the lock index: expired exclusive locks are deleted and expired shares removed
//!    from shared locks, except those of owners of entries still open (they protect a
//!    half-done rename until it is finished). A lock that names a rename (`job`) is cleared
//!    only after that rename's journal id is fenced ([`Journal::fence`]): if the job has
//!    journaled meanwhile, its locks are left for the next run to recover; if not, it never
//!    will, so a job that was only paused cannot journal a rename whose locks are gone. The
//!    same goes for the locks of a job that finished, closed its entry and then failed to
//!    release them: no entry protects them, so the fence (a harmless tombstone, since the job
//!    never journals again) is followed by their deletion.
//! 3. Remove the claims on copy ids whose copy job has no open entry (sent late by a copy job
//!    paused past its lease; see [`fs_model::FsDoc::claim`]).
//! 4. Remove fences older than the retention (24 h by default).
//!
//! Nothing here acts on a lock before its lease has ended by this machine's clock, and every
//! write is conditional on what was read, so a recovery racing a late-renewing holder, or
//! another recovery, loses cleanly. See `docs/recovery.md`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use fs_locks::{ForeignShares, LeaseClock, LockClient, LockError, LockMode, Observed, Reaped};
use fs_model::lock_index_name;
use fs_store::SharedStore;
use serde::Serialize;

use crate::claims::sweep_claims;
use crate::error::{RenameError, Result};
use crate::job::{journaled, Renamer};
use crate::journal::{FenceOutcome, Journal, JournalEntry};
use crate::kind::JobKind;
use crate::report::{ProgressSink, RenameHooks};
use crate::resend;

/// Runs recovery on one tree. Build it with [`Recovery::new`] and the setters.
#[derive(Clone)]
pub struct Recovery {
    store: SharedStore,
    index: String,
    lease: Duration,
    wait: Duration,
    page_size: usize,
    dry_run: bool,
    fence_retention: Duration,
    foreign_lease: Duration,
    hooks: Option<Arc<dyn RenameHooks>>,
    progress: Option<ProgressSink>,
}

impl std::fmt::Debug for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recovery")
            .field("index", &self.index)
            .field("lease", &self.lease)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

/// A job (a rename, a copy or a delete) that recovery finished (or, in a dry run, would
/// finish).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

/// What recovery did with one journal entry.
enum Step {
    Finished(Recovered),
    /// Left alone: its owner's locks are leased (until then, epoch ms, where they say), or
    /// another recoverer claimed it.
    LeftAlone(Option<i64>),
}

/// What a recovery run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
    /// [`Journal::fence`]): jobs whose locks expired before they journaled, which may never
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
    }
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (finish, release, reap) = if self.dry_run {
            ("would finish", "would release", "would remove")
        } else {
            ("finished", "released", "removed")
        };
        for r in &self.finished {
            let done = match r.kind {
                JobKind::Rename => "moved",
                JobKind::Copy => "copied",
                JobKind::Delete => "deleted",
            };
            writeln!(
                f,
                "{finish} {} (journal {}, recovery #{}): {} documents {done}",
                r.kind.describe(&r.from, &r.to),
                r.job_id,
                r.recoveries,
                r.rewritten
            )?;
        }
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
                    crate::duration::short_duration(left)
                )?,
                None => writeln!(
                    f,
                    "running: {} (journal {}): its owner's locks are valid",
                    r.job, r.job_id
                )?,
            }
        }
        for failure in &self.failed {
            writeln!(f, "not finished: {failure}")?;
        }
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

impl Recovery {
    /// Recovery for the tree index `index` on `store`, with a 30 s lease for the locks it
    /// takes over and 10 s to wait for them.
    pub fn new(store: SharedStore, index: impl Into<String>) -> Recovery {
        Recovery {
            store,
            index: index.into(),
            lease: Duration::from_secs(30),
            wait: Duration::from_secs(10),
            page_size: 1_000,
            dry_run: false,
            fence_retention: FENCE_RETENTION,
            foreign_lease: FOREIGN_LEASE,
            hooks: None,
            progress: None,
        }
    }

    /// Sets the lease of the locks recovery takes over while it finishes a rename.
    pub fn lease(mut self, lease: Duration) -> Recovery {
        self.lease = lease;
        self
    }

    /// Sets how long taking over a journal's locks may wait (a lock in the set held by a
    /// live job, or contended). Default: 10 s.
    pub fn wait(mut self, wait: Duration) -> Recovery {
        self.wait = wait;
        self
    }

    /// Sets the page size of the rewrite. Default: 1 000.
    pub fn page_size(mut self, size: usize) -> Recovery {
        self.page_size = size.max(1);
        self
    }

    /// Sets how long a fence is kept before a run removes it. A fence must outlive any
    /// journal write its job may still have in flight, so keep it far above the longest time
    /// a request can take to reach the store. Default: 24 h.
    pub fn fence_retention(mut self, retention: Duration) -> Recovery {
        self.fence_retention = retention;
        self
    }

    /// Sets how long foreign shares (the book's `lock_count++`, which records no lease) must
    /// stand unchanged before a run removes them as left behind: a retried increment counted
    /// twice, or a client that died holding its share. Keep it far above the longest lock a
    /// foreign client holds. Default: 1 h.
    pub fn foreign_lease(mut self, lease: Duration) -> Recovery {
        self.foreign_lease = lease;
        self
    }

    /// Only reports what a run would do. Default: false.
    pub fn dry_run(mut self, yes: bool) -> Recovery {
        self.dry_run = yes;
        self
    }

    /// Steps into the renames recovery finishes (tests, fault injection).
    pub fn hooks(mut self, hooks: Arc<dyn RenameHooks>) -> Recovery {
        self.hooks = Some(hooks);
        self
    }

    /// Reports the progress of the renames recovery finishes.
    pub fn progress(mut self, sink: ProgressSink) -> Recovery {
        self.progress = Some(sink);
        self
    }

    /// Runs once: finishes what expired journals record, then sweeps expired locks.
    ///
    /// # Errors
    /// [`RenameError::Store`] if the journal or the lock index cannot be read. A journal
    /// entry that cannot be finished is reported in [`RecoveryReport::failed`], not an error.
    pub async fn run(&self) -> Result<RecoveryReport> {
        let journal = Journal::new(Arc::clone(&self.store), &self.index);
        let mut report = RecoveryReport {
            dry_run: self.dry_run,
            ..RecoveryReport::default()
        };
        let mut spare: HashSet<String> = HashSet::new();
        let entries = journal.list().await?;
        if self.dry_run {
            // Entries a real run would finish keep their locks until then, so a dry run
            // spares all of them.
            for (entry, _) in &entries {
                spare_owners(&mut spare, entry);
            }
        }
        for (entry, version) in entries {
            match self.recover_one(&journal, &entry, version).await {
                Ok(Step::Finished(done)) => report.finished.push(done),
                Ok(Step::LeftAlone(leased_until)) => {
                    report.running.push(Running {
                        job_id: entry.job_id.clone(),
                        job: entry.kind.describe(&entry.from, &entry.to),
                        leased_until,
                    });
                    spare_owners(&mut spare, &entry);
                }
                Err(e) => {
                    tracing::warn!(job = %entry.job_id, kind = %entry.kind, error = %e, "could not finish a journaled job");
                    report.failed.push(format!(
                        "journal {} ({}): {e}",
                        entry.job_id,
                        entry.kind.describe(&entry.from, &entry.to)
                    ));
                    spare_owners(&mut spare, &entry);
                }
            }
        }
        self.sweep(&journal, &spare, &mut report).await?;
        report.claims_removed = sweep_claims(
            &self.store,
            &self.index,
            &journal,
            self.page_size,
            self.dry_run,
        )
        .await?;
        self.remove_old_fences(&journal, &mut report).await?;
        Ok(report)
    }

    /// A lock client of this recovery's; `job` names the journal entry its locks protect.
    fn lock_client(&self, holder: String, job: Option<&str>) -> LockClient {
        let builder = LockClient::builder(Arc::clone(&self.store), lock_index_name(&self.index))
            .holder(holder)
            .lease(self.lease)
            .wait(self.wait);
        match job {
            Some(job) => builder.job(job),
            None => builder,
        }
        .build()
    }

    /// Finishes one entry; `None` if its owner is alive or another recoverer claimed it.
    async fn recover_one(
        &self,
        journal: &Journal,
        entry: &JournalEntry,
        version: fs_store::Version,
    ) -> Result<Step> {
        if let Some(until) = self.owner_alive(entry).await? {
            return Ok(Step::LeftAlone(until));
        }
        let described = entry.kind.describe(&entry.from, &entry.to);
        let client = self.lock_client(format!("recover {described}"), Some(&entry.job_id));
        let mut claimed = entry.clone();
        claimed.previous_owners.push(claimed.owner.clone());
        claimed.owner = client.owner().process_id.clone();
        claimed.holder = client.owner().holder.clone();
        claimed.recoveries += 1;
        let mut done = Recovered {
            job_id: entry.job_id.clone(),
            kind: entry.kind,
            from: entry.from.clone(),
            to: entry.to.clone(),
            rewritten: 0,
            recoveries: claimed.recoveries,
        };
        if self.dry_run {
            return Ok(Step::Finished(done));
        }
        let version = match journal.claim(&claimed, version).await {
            Ok(version) => version,
            Err(RenameError::Store { cause, .. }) if cause.is_conflict() => {
                return Ok(Step::LeftAlone(None))
            }
            Err(e) => return Err(e),
        };
        let items = claimed.locks.iter().map(|l| l.item()).collect();
        let wanted = format!("the locks of journal {} ({described})", entry.job_id);
        let mut guard = client
            .adopt(wanted, items, &claimed.previous_owners)
            .await?;
        guard.keep_on_drop();
        // Held locks make the claim good only if it still stands: a recoverer paused between
        // its claim and its locks looked dead (it held nothing), so another may have claimed
        // the entry, finished the job and closed it meanwhile, and the locks just taken may
        // be new ones on paths that other jobs have used since (simulation seed 24894: a copy
        // finished twice, the second time after `rm -r` had removed it). Past this check the
        // locks are this recoverer's, and a pause that outlasts them stops it at its next
        // lease check.
        if !journal.is_still(&claimed.job_id, version).await? {
            if let Err(e) = guard.release().await {
                tracing::warn!(error = %e, "releasing the locks of a job another recoverer claimed failed");
            }
            return Ok(Step::LeftAlone(None));
        }
        let mut renamer = Renamer::builder(Arc::clone(&self.store), self.index.clone())
            .strategy(claimed.strategy)
            .lease(self.lease)
            .page_size(self.page_size);
        if let Some(hooks) = &self.hooks {
            renamer = renamer.hooks(Arc::clone(hooks));
        }
        if let Some(progress) = &self.progress {
            renamer = renamer.progress(Arc::clone(progress));
        }
        let outcome = renamer.build().roll_forward(&client, &claimed).await;
        done.rewritten = outcome.report.rewritten;
        let closed = match outcome.result {
            Ok(()) => journaled(|| journal.close(&claimed.job_id, version)).await,
            Err(e) => Err(e),
        };
        match closed {
            Ok(()) => {
                if let Err(e) = guard.release().await {
                    // The rename is finished and recorded; what is left expires and is swept.
                    tracing::warn!(error = %e, "releasing recovered locks failed");
                }
                tracing::info!(job = %done.job_id, kind = %done.kind, from = %done.from, to = %done.to, written = done.rewritten, "finished a job left by a job that died");
                Ok(Step::Finished(done))
            }
            Err(e) => {
                guard.abandon().await;
                Err(e)
            }
        }
    }

    /// True if any exclusive lock of the entry is still valid (its owner renews it), or was
    /// written by a client that records no lease.
    /// If the owner of `entry` still holds a valid lock, returns `Some` with when the last of
    /// them runs out (`None` inside for a lock with no lease); `None` if it holds none.
    async fn owner_alive(&self, entry: &JournalEntry) -> Result<Option<Option<i64>>> {
        let ids: Vec<String> = entry
            .locks
            .iter()
            .filter(|l| l.mode == LockMode::Exclusive)
            .map(|l| l.id.clone())
            .collect();
        let lock_index = lock_index_name(&self.index);
        let now = LeaseClock::new().now_ms();
        let mut alive: Option<Option<i64>> = None;
        for chunk in ids.chunks(1_000) {
            let docs = self
                .store
                .mget(&lock_index, chunk)
                .await
                .map_err(RenameError::store(format!(
                    "reading the locks of journal {}",
                    entry.job_id
                )))?;
            for doc in docs.into_iter().flatten() {
                let until = match Observed::from_source(&doc.source) {
                    Observed::Exclusive { expires_at, .. } => {
                        expires_at.map_or(Some(None), |t| (t >= now).then_some(Some(t)))
                    }
                    Observed::Group { holders, .. } => holders
                        .values()
                        .map(|h| h.expires_at)
                        .filter(|&t| t >= now)
                        .max()
                        .map(Some),
                };
                alive = match (alive, until) {
                    (a, None) => a,
                    (None, u) => u,
                    // A lock with no lease keeps the job alive for good.
                    (Some(None), _) | (_, Some(None)) => Some(None),
                    (Some(Some(a)), Some(Some(b))) => Some(Some(a.max(b))),
                };
            }
        }
        Ok(alive)
    }

    /// Deletes expired exclusive locks and removes expired shares, sparing `spare`'s, and
    /// fencing the journal id of every rename whose lock it clears.
    async fn sweep(
        &self,
        journal: &Journal,
        spare: &HashSet<String>,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let client = self.lock_client("recover: sweep".to_owned(), None);
        let locks = match client.list_locks().await {
            Ok(locks) => locks,
            Err(LockError::Store {
                cause: fs_store::StoreError::IndexNotFound { .. },
                ..
            }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        // A holder may have died between its last write and the refresh that makes it
        // searchable (a job whose journal entry is closed refreshes beside the close; a
        // `mkdir` refreshes after its write). Whoever takes a lock after this sweep checks
        // by search, so the writes of the holders whose locks it clears are made searchable
        // first: the rule "searchable before released", kept for the dead.
        if !self.dry_run && !locks.is_empty() {
            match self.store.refresh(&self.index).await {
                Ok(()) | Err(fs_store::StoreError::IndexNotFound { .. }) => {}
                Err(e) => {
                    return Err(RenameError::store(format!(
                        "refreshing `{}` before clearing expired locks",
                        self.index
                    ))(e))
                }
            }
        }
        let now = LeaseClock::new().now_ms();
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
            let dead_waiters = lock
                .observed
                .waiters()
                .values()
                .filter(|w| w.expires_at < now)
                .count();
            let candidate = dead_waiters > 0
                || match &lock.observed {
                    Observed::Exclusive {
                        process_id,
                        expires_at,
                        ..
                    } => {
                        expires_at.is_some_and(|t| t > 0 && t < now)
                            && !process_id.as_ref().is_some_and(|p| spare.contains(p))
                    }
                    Observed::Group { holders, .. } => holders
                        .iter()
                        .any(|(pid, h)| h.expires_at < now && !spare.contains(pid)),
                };
            if !candidate {
                continue;
            }
            if self.dry_run {
                report.waiters_reaped += dead_waiters;
                match &lock.observed {
                    Observed::Exclusive { .. } => report.locks_released += 1,
                    Observed::Group { holders, .. } => {
                        report.shares_reaped += holders
                            .iter()
                            .filter(|(pid, h)| h.expires_at < now && !spare.contains(*pid))
                            .count()
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
                    .clear_expired(&client, journal, &lock.id, spare, &mut fenced, report)
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

    /// Clears what has expired on the lock `id`, read afresh: each expired holder whose job
    /// (if it names one) is fenced first, except the holders in `spare`. `fenced` keeps, for
    /// each job fenced in this run, whether its locks may be cleared.
    async fn clear_expired(
        &self,
        client: &LockClient,
        journal: &Journal,
        id: &str,
        spare: &HashSet<String>,
        fenced: &mut HashMap<String, bool>,
        report: &mut RecoveryReport,
    ) -> Result<Reaped> {
        let Some(expired) = client.read_expired(id).await? else {
            return Ok(Reaped::Nothing);
        };
        let fencer = format!("recovery {}", client.owner().process_id);
        let mut reap: Vec<&str> = Vec::new();
        for holder in &expired.expired {
            if spare.contains(&holder.process_id) {
                continue;
            }
            let Some(job) = &holder.job else {
                // A lock that protects no journaled rename: nothing to fence.
                reap.push(&holder.process_id);
                continue;
            };
            let may_clear = match fenced.get(job) {
                Some(known) => *known,
                None => {
                    let may_clear = match journal
                        .fence(job, &fencer, LeaseClock::new().now_ms())
                        .await?
                    {
                        FenceOutcome::Fenced { new } => {
                            if new {
                                report.fenced += 1;
                                tracing::info!(job = %job, holder = %holder.process_id, "fenced a journal id before clearing its expired locks (its job died before journaling, or finished without releasing them)");
                            }
                            true
                        }
                        // It journaled after all: its locks protect a rename the next run
                        // recovers.
                        FenceOutcome::Open(_) => false,
                    };
                    fenced.insert(job.clone(), may_clear);
                    may_clear
                }
            };
            if may_clear {
                reap.push(&holder.process_id);
            }
        }
        Ok(client.reap_expired_holders(&expired, &reap).await?)
    }

    /// Removes the fences older than the retention.
    async fn remove_old_fences(
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

/// How long a fence is kept by default: far beyond any request's time in flight.
const FENCE_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// How long foreign shares must stand unchanged before recovery removes them, by default.
const FOREIGN_LEASE: Duration = Duration::from_secs(60 * 60);

fn spare_owners(spare: &mut HashSet<String>, entry: &JournalEntry) {
    spare.insert(entry.owner.clone());
    spare.extend(entry.previous_owners.iter().cloned());
}
