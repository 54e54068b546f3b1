//! Recovery: finishing the jobs (renames, copies, deletes) that died, and clearing the locks
//! they left.
//!
//! One run:
//!
//! 0. End the leases of holders proven gone: on this machine, a holder whose process no longer
//!    runs ([`fs_locks::OsProcess`]) has its expiry set to now, so that what it left is
//!    finished now rather than after its lease.
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
//! Nothing here acts on a lock before its lease has ended by this machine's clock (or its
//! holder is proven gone), and every
//! write is conditional on what was read, so a recovery racing a late-renewing holder, or
//! another recovery, loses cleanly. See `docs/recovery.md`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use fs_locks::{LeaseClock, LockClient, LockMode, Observed};
use fs_model::lock_index_name;
use fs_store::SharedStore;

use crate::claims::sweep_claims;
use crate::error::{RenameError, Result};
use crate::job::{journaled, Renamer};
use crate::journal::{Journal, JournalEntry, JournalState};
use crate::report::{ProgressSink, RenameHooks};

mod orphans;
mod report;
mod sweep;

pub use orphans::FinishOrphans;
pub use report::{Recovered, RecoveryReport, Running};

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

/// What recovery did with one journal entry.
enum Step {
    Finished(Recovered),
    /// Left alone: its owner's locks are leased (until then, epoch ms, where they say), or
    /// another recoverer claimed it.
    LeftAlone(Option<i64>),
    /// Nothing to do: closed (or withdrawn, or fenced) since the listing showed it open.
    Ended,
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
        // Leases are judged by the server's clock, not this machine's.
        fs_locks::LeaseClock::sync(self.store.as_ref()).await;
        let journal = Journal::new(Arc::clone(&self.store), &self.index);
        let mut report = RecoveryReport {
            dry_run: self.dry_run,
            ..RecoveryReport::default()
        };
        let mut spare: HashSet<String> = HashSet::new();
        if !self.dry_run {
            // Holders proven gone on this machine hold no lease any more: what they left is
            // finished in this run, not after their lease.
            let client = self.lock_client("recover: gone holders".to_owned(), None);
            report.leases_ended = client.end_all_gone_leases().await?;
        }
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
                // Its locks protect no open entry any more: the sweep clears them, as those
                // of a job that closed its entry and died before releasing them.
                Ok(Step::Ended) => {
                    tracing::debug!(job = %entry.job_id, "the entry listed open was closed meanwhile")
                }
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
        let claimed = claimed_by(entry, &client);
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
                return self.after_a_lost_claim(journal, &entry.job_id).await
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
            return self.after_a_lost_claim(journal, &entry.job_id).await;
        }
        let outcome = self
            .renamer_for(&claimed)
            .roll_forward(&client, &claimed)
            .await;
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

    /// What became of the entry `job_id`, listed open, whose claim failed (or no longer
    /// stands): still open, it is another recoverer's, and its owners' locks are left to it.
    /// A tombstone means the entry was closed after the listing: by a recoverer that
    /// finished the job, or by the job itself, killed with its close in flight (the close
    /// landed after the listing's refresh; a real Elasticsearch showed it in the crash test of
    /// `rm -r --rewrite server`). Either way nothing is left to finish, and its owners' locks
    /// are not spared: they protect nothing now, and the sweep clears them once expired (its
    /// fence finds the tombstone). Spared, they outlived the run, and the report called the
    /// finished job running.
    async fn after_a_lost_claim(&self, journal: &Journal, job_id: &str) -> Result<Step> {
        Ok(match journal.state_of(job_id).await? {
            JournalState::Open(_) => Step::LeftAlone(None),
            JournalState::Closed | JournalState::Fenced | JournalState::Absent => Step::Ended,
        })
    }

    /// The renamer that rolls the `claimed` job forward: its strategy, this recovery's
    /// lease, page size, hooks and progress.
    fn renamer_for(&self, claimed: &JournalEntry) -> Renamer {
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
        renamer.build()
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
}

/// How long a fence is kept by default: far beyond any request's time in flight.
const FENCE_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// How long foreign shares must stand unchanged before recovery removes them, by default.
const FOREIGN_LEASE: Duration = Duration::from_secs(60 * 60);

fn spare_owners(spare: &mut HashSet<String>, entry: &JournalEntry) {
    spare.insert(entry.owner.clone());
    spare.extend(entry.previous_owners.iter().cloned());
}

/// `entry` claimed by the owner of `client`: the last owner joins the previous ones (whose
/// locks the claimant adopts), and the count of recoveries goes up by one.
fn claimed_by(entry: &JournalEntry, client: &LockClient) -> JournalEntry {
    let mut claimed = entry.clone();
    claimed.previous_owners.push(claimed.owner.clone());
    claimed.owner = client.owner().process_id.clone();
    claimed.holder = client.owner().holder.clone();
    claimed.recoveries += 1;
    claimed
}
