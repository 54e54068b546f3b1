//! [`Renamer`]: the rename job, from locks to release.
//!
//! Steps: take the locks (source and destination) → refresh → check, now that nobody else can
//! change the answer → page through the source and everything under it → bulk-rewrite `path`,
//! `parent`, `name`, `depth` (ids stay), each item conditional on the version the scan read →
//! retry transient item failures, stop at a conflict → check the count → refresh → release.
//!
//! Between the checks and the first rewrite the job writes a [journal entry](crate::journal)
//! listing its locks, and it deletes the entry after the last rewrite. Before the entry exists
//! every exit path releases the locks; once it exists, a job that stops half-way abandons them
//! instead ([`RenameError::Unfinished`]): they expire, and recovery takes them over and rolls
//! the rename forward. Before each write the job checks that its lease is still good, and
//! every write is conditional on the version it read, so a job paused past its lease (a
//! zombie) stops at its first write instead of damaging the tree.
//!
//! A rename whose entry is closed has happened, so a release that fails afterwards does not
//! make it fail: it is reported done, with the locks it left in
//! [`RenameReport::locks_left`] and a warning; they expire with their lease and the recovery
//! sweep deletes them.
//!
//! The entry's id is chosen before the first lock and written into every lock, so that a
//! recovery clearing the job's expired locks fences the id first. A job paused past its lease
//! before journaling therefore either stops at its own lease check or meets the fence when it
//! writes the entry ([`RenameError::Fenced`]); having rewritten nothing, it starts over with
//! new locks (up to three times).

use std::sync::Arc;
use std::time::Duration;

use fs_locks::{LockClient, LockEvent, LockGuard, LockProtocol};
use fs_model::FsPath;
use fs_store::{CountingStore, SharedStore};
use tokio::time::Instant;

mod document_locks;
mod release;
mod rewrite;

use crate::error::{RenameError, Result};
use crate::journal::{Journal, JournalEntry, JournalLock};
use crate::report::{ProgressSink, RenameEvent, RenameHooks, RenameReport};
use crate::strategy::Strategy;
use crate::tree::FsTree;

/// How many times a job fenced off before journaling starts over (see [`Journal::fence`]).
const FENCED_RESTARTS: u32 = 3;

/// How many times a journal write is sent again after a transient failure.
const JOURNAL_RETRIES: u32 = 4;

/// Builds a [`Renamer`].
#[derive(Clone)]
pub struct RenamerBuilder {
    store: SharedStore,
    index: String,
    strategy: Strategy,
    versioned: bool,
    page_size: usize,
    lease: Duration,
    wait: Duration,
    holder: Option<String>,
    progress: Option<ProgressSink>,
    hooks: Option<Arc<dyn RenameHooks>>,
    protocol: LockProtocol,
    cancel: Option<tokio::sync::watch::Receiver<bool>>,
}

impl RenamerBuilder {
    /// Stops the job when `cancel` turns true: while it waits for locks, or before its next
    /// page; it then releases its locks and fails with [`RenameError::Cancelled`] (or a lock
    /// error saying so). Default: never cancelled.
    pub fn cancel(mut self, cancel: tokio::sync::watch::Receiver<bool>) -> RenamerBuilder {
        self.cancel = Some(cancel);
        self
    }

    /// Sets how lock documents are written. Default: [`LockProtocol::Auto`].
    pub fn lock_protocol(mut self, protocol: LockProtocol) -> RenamerBuilder {
        self.protocol = protocol;
        self
    }

    /// Sets the locking scheme. Default: [`Strategy::Tree`].
    pub fn strategy(mut self, strategy: Strategy) -> RenamerBuilder {
        self.strategy = strategy;
        self
    }

    /// Makes every rewrite conditional on the version read (`if_seq_no`/`if_primary_term`).
    /// Turn it off only to show the lost update it prevents. Default: true.
    pub fn versioned(mut self, yes: bool) -> RenamerBuilder {
        self.versioned = yes;
        self
    }

    /// Sets how many documents are read and rewritten per round trip. Default: 1 000.
    pub fn page_size(mut self, size: usize) -> RenamerBuilder {
        self.page_size = size.max(1);
        self
    }

    /// Sets the lease of the job's locks. Default: 30 s.
    pub fn lease(mut self, lease: Duration) -> RenamerBuilder {
        self.lease = lease;
        self
    }

    /// Sets how long the job waits for its locks. Default: 30 s.
    pub fn wait(mut self, wait: Duration) -> RenamerBuilder {
        self.wait = wait;
        self
    }

    /// Sets the label written into lock documents. Default: `mv FROM TO`.
    pub fn holder(mut self, holder: impl Into<String>) -> RenamerBuilder {
        self.holder = Some(holder.into());
        self
    }

    /// Calls `sink` with every [`RenameEvent`]. Default: none.
    pub fn progress(mut self, sink: ProgressSink) -> RenamerBuilder {
        self.progress = Some(sink);
        self
    }

    /// Steps into the job at its [`RenameHooks`]. Default: none.
    pub fn hooks(mut self, hooks: Arc<dyn RenameHooks>) -> RenamerBuilder {
        self.hooks = Some(hooks);
        self
    }

    /// Returns the renamer.
    pub fn build(self) -> Renamer {
        Renamer { config: self }
    }
}

/// Runs renames on one tree with one configuration. Each rename is its own lock owner.
#[derive(Clone)]
pub struct Renamer {
    config: RenamerBuilder,
}

impl std::fmt::Debug for Renamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renamer")
            .field("index", &self.config.index)
            .field("strategy", &self.config.strategy)
            .field("versioned", &self.config.versioned)
            .finish_non_exhaustive()
    }
}

/// The result of a rename together with its report, which is kept on failure too.
#[derive(Debug, Clone)]
pub struct RenameOutcome {
    /// What the job did and cost, as far as it got.
    pub report: RenameReport,
    /// How it ended.
    pub result: Result<()>,
}

impl Renamer {
    /// Starts building a renamer for the tree index `index` on `store`.
    pub fn builder(store: SharedStore, index: impl Into<String>) -> RenamerBuilder {
        RenamerBuilder {
            store,
            index: index.into(),
            strategy: Strategy::Tree,
            versioned: true,
            page_size: 1_000,
            lease: Duration::from_secs(30),
            wait: Duration::from_secs(30),
            holder: None,
            progress: None,
            hooks: None,
            protocol: LockProtocol::Auto,
            cancel: None,
        }
    }

    /// Renames `from` to `to`.
    ///
    /// # Errors
    /// The check that failed ([`RenameError::SourceNotFound`], [`RenameError::DestinationExists`],
    /// ...), a lock timeout, a version conflict, or a store failure.
    pub async fn rename(&self, from: &FsPath, to: &FsPath) -> Result<RenameReport> {
        let outcome = self.rename_reporting(from, to).await;
        outcome.result.map(|()| outcome.report)
    }

    /// Renames `from` to `to` and returns the report whatever the outcome.
    pub async fn rename_reporting(&self, from: &FsPath, to: &FsPath) -> RenameOutcome {
        let c = &self.config;
        let mut report = RenameReport::new(from, to, c.strategy);
        if from.is_root() {
            return RenameOutcome {
                report,
                result: Err(RenameError::RootCannotMove),
            };
        }
        if to.is_inside(from) {
            let error = RenameError::MoveIntoItself {
                from: from.clone(),
                to: to.clone(),
            };
            return RenameOutcome {
                report,
                result: Err(error),
            };
        }
        // The root always exists, so this answer needs no lock (and the root is never locked).
        if to.is_root() {
            return RenameOutcome {
                report,
                result: Err(RenameError::DestinationExists { path: to.clone() }),
            };
        }
        let mut restarts = 0;
        loop {
            let result = self.run_once(from, to, &mut report).await;
            match result {
                // Nothing was rewritten and the locks are released: starting over is safe.
                Err(RenameError::Fenced { job, by }) if restarts < FENCED_RESTARTS => {
                    restarts += 1;
                    report.restarts = restarts;
                    tracing::info!(%job, %by, %from, %to, "fenced off before journaling (the locks expired meanwhile); starting over");
                }
                result => return RenameOutcome { report, result },
            }
        }
    }

    /// One run of the rename, from taking the locks to releasing them.
    async fn run_once(&self, from: &FsPath, to: &FsPath, report: &mut RenameReport) -> Result<()> {
        let c = &self.config;
        let counted = CountingStore::new(Arc::clone(&c.store));
        let store: SharedStore = Arc::new(counted.clone());
        let tree = FsTree::new(Arc::clone(&store), c.index.clone());
        // The journal id is chosen before any lock is taken, and every lock records it: a
        // recovery that clears these locks after they expire fences this id first.
        let job_id = fs_model::entropy::uuid();
        let locks = self.lock_client(store, &tree, from, to, &job_id);

        let started = Instant::now();
        let guards = self.lock(&locks, &tree, from, to).await;
        report.phases.locking += started.elapsed();
        let result = match guards {
            Ok(guards) => {
                report.lock_attempts = guards.iter().map(|g| g.grant().attempts).max().unwrap_or(0);
                let mut guards = guards;
                let result = self
                    .locked_work(&tree, &locks, &mut guards, (from, to), &job_id, report)
                    .await;
                let started = Instant::now();
                let result = self
                    .end(&tree, &locks, guards, result, &job_id, report)
                    .await;
                report.phases.releasing += started.elapsed();
                result
            }
            Err(e) => Err(e),
        };
        report.round_trips += counted.round_trips();
        result
    }

    fn emit(&self, event: RenameEvent) {
        if let Some(sink) = &self.config.progress {
            sink(event);
        }
    }

    fn lock_client(
        &self,
        store: SharedStore,
        tree: &FsTree,
        from: &FsPath,
        to: &FsPath,
        job_id: &str,
    ) -> LockClient {
        let c = &self.config;
        let holder = c
            .holder
            .clone()
            .unwrap_or_else(|| format!("mv {from} {to}"));
        let mut builder = LockClient::builder(store, tree.lock_index())
            .holder(holder)
            .job(job_id)
            .lease(c.lease)
            .wait(c.wait)
            .protocol(c.protocol);
        if let Some(cancel) = c.cancel.clone() {
            builder = builder.cancel(cancel);
        }
        if let Some(sink) = c.progress.clone() {
            builder = builder.on_event(Arc::new(move |event| {
                sink(match event {
                    LockEvent::Refused {
                        blocker, attempts, ..
                    } => RenameEvent::Waiting {
                        blocker: blocker.to_string(),
                        attempts,
                    },
                    LockEvent::Granted { grant, .. } => RenameEvent::Locked {
                        round_trips: grant.round_trips,
                        waited: grant.waited,
                    },
                })
            }));
        }
        builder.build()
    }

    /// Takes the strategy's locks; returns the guards to release, in acquisition order.
    async fn lock(
        &self,
        locks: &LockClient,
        tree: &FsTree,
        from: &FsPath,
        to: &FsPath,
    ) -> Result<Vec<LockGuard>> {
        match self.config.strategy {
            Strategy::Tree => Ok(vec![locks.lock_rename(from, to).await?]),
            Strategy::Global => Ok(vec![locks.lock_global().await?]),
            Strategy::Document => self.lock_documents(locks, tree, from, to).await,
            Strategy::None => {
                self.emit(RenameEvent::Locked {
                    round_trips: 0,
                    waited: Duration::ZERO,
                });
                Ok(Vec::new())
            }
        }
    }

    async fn locked_work(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        guards: &mut [LockGuard],
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        report: &mut RenameReport,
    ) -> Result<()> {
        if let Some(hooks) = &self.config.hooks {
            hooks.locked().await;
        }
        let started = Instant::now();
        tree.refresh().await?;
        check(tree, from, to).await?;
        let total = tree.count_under(from).await?;
        report.phases.checking += started.elapsed();
        self.emit(RenameEvent::Checked { total });
        if self.config.strategy == Strategy::None {
            return self.finish(tree, locks, from, to, total, report).await;
        }
        // A job paused past its lease (by its own clock, less the allowed skew) stops here,
        // before journaling: a recovery may already be clearing its locks. A pause after this
        // check is caught by the fence (see `crate::journal`).
        if let Some(lost) = locks.lost_locks().borrow().first() {
            return Err(fs_locks::LockError::LeaseLost { path: lost.clone() }.into());
        }
        if locks.lease_left().await.is_some_and(|left| left.is_zero()) {
            return Err(fs_locks::LockError::LeaseLost {
                path: from.to_string(),
            }
            .into());
        }
        if let Some(hooks) = &self.config.hooks {
            hooks.journaling().await;
        }
        let entry = self.journal_entry(locks, from, to, job_id).await;
        let journal = Journal::new(Arc::clone(tree.store()), tree.index());
        let job_id = entry.job_id.clone();
        let unfinished = |cause: RenameError, report: &RenameReport| RenameError::Unfinished {
            job: job_id.clone(),
            rewritten: report.rewritten,
            found: report.found,
            cause: Box::new(cause),
        };
        for guard in guards.iter_mut() {
            guard.keep_on_drop();
        }
        // Until this write is known to have landed or not, the rename may be journaled: an
        // unknown outcome counts as journaled, so the locks are left for recovery to resolve.
        // A fence means it was not and never will be: nothing was rewritten, so the locks
        // (what is left of them) are released.
        match journaled(|| async { journal.open(&entry).await.map(|_| ()) }).await {
            Ok(()) => {}
            Err(fenced @ RenameError::Fenced { .. }) => return Err(fenced),
            Err(e) => return Err(unfinished(e, report)),
        }
        self.emit(RenameEvent::Journaled {
            job: job_id.clone(),
        });
        if let Err(e) = self.finish(tree, locks, from, to, total, report).await {
            return Err(unfinished(e, report));
        }
        if let Err(e) = journaled(|| journal.close(&job_id)).await {
            return Err(unfinished(e, report));
        }
        self.emit(RenameEvent::Closed { job: job_id });
        Ok(())
    }

    /// Rewrites everything under `from` and checks the count: the part of a rename that a
    /// recovery repeats.
    async fn finish(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        from: &FsPath,
        to: &FsPath,
        total: u64,
        report: &mut RenameReport,
    ) -> Result<()> {
        let started = Instant::now();
        let rewritten = self.rewrite(tree, locks, from, to, total, report).await;
        report.phases.rewriting = started.elapsed();
        rewritten?;
        if report.rewritten != report.found {
            return Err(RenameError::CountMismatch {
                rewritten: report.rewritten,
                found: report.found,
            });
        }
        tree.refresh().await?;
        if let Some(hooks) = &self.config.hooks {
            hooks.rewritten().await;
            hooks.committed(from, to).await;
        }
        Ok(())
    }

    async fn journal_entry(
        &self,
        locks: &LockClient,
        from: &FsPath,
        to: &FsPath,
        job_id: &str,
    ) -> JournalEntry {
        let owner = locks.owner();
        JournalEntry {
            job_id: job_id.to_owned(),
            from: from.as_str().to_owned(),
            to: to.as_str().to_owned(),
            strategy: self.config.strategy,
            state: "running".to_owned(),
            owner: owner.process_id.clone(),
            previous_owners: Vec::new(),
            holder: owner.holder.clone(),
            started_at: fs_locks::LeaseClock::new().now_ms(),
            lease_ms: u64::try_from(self.config.lease.as_millis()).unwrap_or(u64::MAX),
            recoveries: 0,
            locks: locks
                .held_items()
                .await
                .iter()
                .map(JournalLock::from)
                .collect(),
        }
    }

    /// Finishes the rename a journal entry records, under `locks` (the entry's locks, taken
    /// over by a recoverer): rewrites whatever still lies under the source. Idempotent: what
    /// was already moved is no longer under the source.
    pub async fn roll_forward(&self, locks: &LockClient, entry: &JournalEntry) -> RenameOutcome {
        let c = &self.config;
        let index = c.index.clone();
        let (from, to) = match entry.paths(&index) {
            Ok(paths) => paths,
            Err(e) => {
                let root = FsPath::root();
                return RenameOutcome {
                    report: RenameReport::new(&root, &root, entry.strategy),
                    result: Err(e),
                };
            }
        };
        let mut report = RenameReport::new(&from, &to, entry.strategy);
        let counted = CountingStore::new(Arc::clone(&c.store));
        let store: SharedStore = Arc::new(counted.clone());
        let tree = FsTree::new(store, index);
        let result = async {
            tree.refresh().await?;
            let total = tree.count_under(&from).await?;
            self.emit(RenameEvent::Checked { total });
            self.finish(&tree, locks, &from, &to, total, &mut report)
                .await
        }
        .await;
        report.round_trips = counted.round_trips();
        RenameOutcome { report, result }
    }
}

/// The checks a rename makes once its locks are held; before that their answers are stale.
async fn check(tree: &FsTree, from: &FsPath, to: &FsPath) -> Result<()> {
    if tree.find(from).await?.is_none() {
        return Err(RenameError::SourceNotFound { path: from.clone() });
    }
    if tree.find(to).await?.is_some() {
        return Err(RenameError::DestinationExists { path: to.clone() });
    }
    let Some(parent) = to.parent() else {
        return Err(RenameError::DestinationExists { path: to.clone() });
    };
    match tree.kind_of(&parent).await? {
        None => Err(RenameError::DestinationParentMissing { path: parent }),
        Some(fs_model::DocKind::File) => Err(RenameError::DestinationParentNotDir { path: parent }),
        Some(fs_model::DocKind::Dir) => Ok(()),
    }
}

/// Runs a journal write, sending it again after a transient failure. The writes themselves
/// make a resend safe: [`Journal::open`] recognises its own earlier entry, and
/// [`Journal::close`] takes an entry already gone as closed.
pub(crate) async fn journaled<F, Fut>(write: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut attempt = 0;
    loop {
        match write().await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_retryable() && attempt < JOURNAL_RETRIES => {
                tokio::time::sleep(Duration::from_millis(10 << attempt)).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
