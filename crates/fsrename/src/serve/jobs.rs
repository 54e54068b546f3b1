//! [`Jobs`]: accepted jobs (renames, copies, deletes), their states, and the tasks that run
//! them. Each job is also a document of the jobs index ([`Records`]), written at every step
//! that another instance needs to see: accepted, started, about to write (with its journal
//! id), finished. The table here is this instance's view of its own jobs, fresher than the
//! index (it follows progress page by page).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fs_rename::{
    FinishOrphans, JobKind, RenameError, RenameEvent, RenameHooks, RenameOutcome, Renamer, Strategy,
};
use fs_store::{SharedStore, Version};
use tokio::sync::{watch, OwnedMutexGuard, Semaphore};
use tokio::task::JoinSet;

use super::config::ServeConfig;
use super::liveness::Liveness;
use super::metrics::Metrics;
use super::records::{RecordError, Records};
use super::recovered;
use crate::contract::job::now_ms;
use crate::contract::{Job, JobState, Progress, Work};

/// The pauses between writes of a job's record after its first three tries failed.
const STORE_AGAIN: fs_store::RetryPolicy =
    fs_store::RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(2))
        .jitter(fs_store::Jitter::Equal);

/// Why a job was not accepted.
#[derive(Debug)]
pub enum Refusal {
    /// The queue is full.
    Full { limit: usize },
    /// The job could not be stored in the jobs index (so no other instance could see it).
    Store(RecordError),
}

/// A place in the queue, taken for a job not stored yet ([`Jobs::reserve`]).
pub struct Reserved {
    jobs: Jobs,
    job: Option<Job>,
}

impl Reserved {
    /// The job, as it will be stored.
    pub fn job(&self) -> Option<&Job> {
        self.job.as_ref()
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        // Not stored: its place goes back to the queue.
        if self.job.is_some() {
            self.jobs.table().unfinished -= 1;
        }
    }
}

/// The accepted jobs. Cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

struct Inner {
    store: SharedStore,
    records: Records,
    config: ServeConfig,
    /// A std mutex: held only for short, await-free updates.
    table: Mutex<Table>,
    slots: Arc<Semaphore>,
    tasks: Mutex<JoinSet<()>>,
    cancel_tx: watch::Sender<bool>,
    /// Turns true when shutdown begins: tasks waiting to clear locks stop waiting.
    closing_tx: watch::Sender<bool>,
    metrics: Metrics,
    /// What a job refused by a dead job's locks does: finish that job (one recovery at a
    /// time for the whole instance), rather than wait out its lease.
    orphans: Arc<FinishOrphans>,
    /// The intention locks the instance lends its jobs, if it shares them.
    shared: Option<fs_locks::SharedIntentions>,
    /// The lock protocol as the first job decided it, for every later job (`Auto` reads a
    /// stored script to decide).
    protocol: fs_locks::ProtocolMemo,
}

#[derive(Default)]
struct Table {
    jobs: HashMap<String, Job>,
    /// The version of each job's document in the jobs index, as this instance last wrote it.
    versions: HashMap<String, Version>,
    /// Job ids, oldest first, for `GET /jobs` and for forgetting old finished jobs.
    order: VecDeque<String>,
    unfinished: usize,
    /// Whose turn it is to write each job's record: one write at a time, each conditional on
    /// the version the one before returned.
    turns: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// Jobs whose end could not be stored yet: shown as the jobs index has them until it is
    /// (`Jobs::find`), since an instance that adopts the job reads that record, not this one.
    unstored: std::collections::HashSet<String>,
    /// The journal id in each job's record as this instance last stored it.
    stored_journals: HashMap<String, String>,
}

impl Jobs {
    pub fn new(store: SharedStore, config: ServeConfig) -> Jobs {
        let (cancel_tx, _) = watch::channel(false);
        let (closing_tx, _) = watch::channel(false);
        // One decision of the lock protocol for the instance: its jobs' and its holds'.
        let protocol = fs_locks::ProtocolMemo::new();
        Jobs {
            inner: Arc::new(Inner {
                records: Records::new(Arc::clone(&store), &config.index),
                orphans: FinishOrphans::new(
                    Arc::clone(&store),
                    &config.index,
                    config.lease,
                    config.wait,
                ),
                shared: config
                    .share_intentions
                    .then(|| shared_intentions(&store, &config, protocol.clone())),
                protocol,
                store,
                slots: Arc::new(Semaphore::new(config.max_jobs)),
                config,
                table: Mutex::default(),
                tasks: Mutex::new(JoinSet::new()),
                cancel_tx,
                closing_tx,
                metrics: Metrics::default(),
            }),
        }
    }

    pub fn store(&self) -> &SharedStore {
        &self.inner.store
    }

    pub fn config(&self) -> &ServeConfig {
        &self.inner.config
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    pub fn records(&self) -> &Records {
        &self.inner.records
    }

    /// This instance's name.
    pub fn instance(&self) -> &str {
        &self.inner.config.instance
    }

    /// Turns true when shutdown begins.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.inner.closing_tx.subscribe()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.inner.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a place in the queue for `work`, submitted by the token `submitted_by` (if the
    /// service has tokens): the job, with its id, not stored yet. [`Jobs::store_and_run`] stores and
    /// runs it; dropped, it gives its place back. Between the two, the job's line goes into
    /// the audit trail, so that no instance can run a job the trail does not hold.
    ///
    /// # Errors
    /// [`Refusal::Full`] when `queue` jobs are unfinished.
    pub fn reserve(
        &self,
        work: Work,
        strategy: Strategy,
        submitted_by: Option<String>,
    ) -> Result<Reserved, Refusal> {
        let instance = self.instance().to_owned();
        let mut table = self.table();
        if table.unfinished >= self.inner.config.queue {
            Metrics::add(&self.inner.metrics.rejected_full, 1);
            return Err(Refusal::Full {
                limit: self.inner.config.queue,
            });
        }
        // Counted now, so that concurrent submissions cannot overfill the queue while this one
        // is being stored.
        table.unfinished += 1;
        let mut job = Job::accepted(uuid_like(), work, strategy, instance);
        job.submitted_by = submitted_by;
        Ok(Reserved {
            jobs: self.clone(),
            job: Some(job),
        })
    }

    /// Stores the job `reserved` in the jobs index (so that every instance can show it) and
    /// starts its task; it runs when a slot is free.
    ///
    /// # Errors
    /// [`Refusal::Store`] if it could not be stored: the job is not accepted.
    pub async fn store_and_run(&self, mut reserved: Reserved) -> Result<Job, Refusal> {
        let Some(job) = reserved.job.take() else {
            return Err(Refusal::Full {
                limit: self.inner.config.queue,
            });
        };
        let version = match self.inner.records.create(&job).await {
            Ok(version) => version,
            Err(e) => {
                self.table().unfinished -= 1;
                return Err(Refusal::Store(e));
            }
        };
        Metrics::add(&self.inner.metrics.submitted, 1);
        self.insert(job.clone(), version);
        self.spawn_run(job.id.clone());
        Ok(job)
    }

    /// Adds `job` (at `version` in the jobs index) to the table; the caller counted it as
    /// unfinished if it is.
    fn insert(&self, job: Job, version: Version) {
        let mut table = self.table();
        table.order.push_back(job.id.clone());
        table.versions.insert(job.id.clone(), version);
        table.jobs.insert(job.id.clone(), job);
    }

    /// Takes over `job`, claimed in the jobs index at `version`: it becomes this instance's.
    /// Unfinished, it counts against the queue (which may overfill: the job was accepted
    /// already).
    pub fn adopt(&self, job: Job, version: Version) {
        if !job.state().finished() {
            self.table().unfinished += 1;
        }
        Metrics::add(&self.inner.metrics.adopted, 1);
        self.insert(job, version);
    }

    /// Starts the task that runs job `id` of the table.
    pub fn spawn_run(&self, id: String) {
        let jobs = self.clone();
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(async move { jobs.run(id).await });
    }

    /// Starts `task` beside the jobs: shutdown waits for it as for a job.
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(task);
    }

    /// Job `id`: this instance's view if the job is its own, otherwise the jobs index's (a
    /// job of another instance, or one taken over from this one).
    ///
    /// # Errors
    /// The jobs index could not be read.
    pub async fn find(&self, id: &str) -> Result<Option<Job>, RecordError> {
        let own = {
            let table = self.table();
            table
                .jobs
                .get(id)
                .filter(|_| table.versions.contains_key(id) && !table.unstored.contains(id))
                .cloned()
        };
        if let Some(job) = own {
            return Ok(Some(job));
        }
        Ok(self.inner.records.get(id).await?.map(|(job, _)| job))
    }

    /// Job `id` as this instance sees it.
    pub fn get(&self, id: &str) -> Option<Job> {
        self.table().jobs.get(id).cloned()
    }

    /// The most recent jobs of `kind` (of every kind if `None`), newest first.
    pub fn recent(&self, kind: Option<JobKind>, limit: usize) -> Vec<Job> {
        let table = self.table();
        table
            .order
            .iter()
            .rev()
            .filter_map(|id| table.jobs.get(id))
            .filter(|job| kind.is_none_or(|k| job.work.kind() == k))
            .take(limit)
            .cloned()
            .collect()
    }

    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        let table = self.table();
        JobState::ALL
            .iter()
            .map(|s| {
                (
                    s.name(),
                    table.jobs.values().filter(|j| j.state() == *s).count() as u64,
                )
            })
            .collect()
    }

    pub fn update(&self, id: &str, change: impl FnOnce(&mut Job)) {
        if let Some(job) = self.table().jobs.get_mut(id) {
            change(job);
        }
    }

    /// Writes job `id` as this instance sees it to the jobs index. A failure is logged, not
    /// fatal: the job goes on, and other instances show its last stored state until the next
    /// write. A job taken over by another instance is no longer written from here.
    pub async fn persist(&self, id: &str) {
        self.persist_in_turn(id, None).await;
    }

    /// [`Jobs::persist`], in the record's turn `held` if given (taken before).
    async fn persist_in_turn(&self, id: &str, held: Option<OwnedMutexGuard<()>>) {
        if !self.table().versions.contains_key(id) {
            return;
        }
        let held = match held {
            Some(held) => held,
            None => self.turn(id).lock_owned().await,
        };
        match self
            .store_changed_in_turn(id, |_| {}, Duration::ZERO, held)
            .await
        {
            Ok(()) => {}
            Err(e @ RecordError::Taken { .. }) => {
                tracing::warn!(job = %id, error = %e, "this instance was taken for dead: the job is no longer written from here");
            }
            Err(e) => {
                tracing::warn!(job = %id, error = %e, "could not store the job's state; other instances show its last stored state");
            }
        }
    }

    /// Writes job `id` to the jobs index, three tries at least and more, with pauses, for
    /// `patience`, until it is stored. A job forgotten here is not written.
    ///
    /// # Errors
    /// [`RecordError::Taken`] if another instance took the job over (now, or before: it is
    /// no longer written from here); the last failure if the tries ran out.
    async fn store_state(&self, id: &str, patience: Duration) -> Result<(), RecordError> {
        self.store_changed(id, |_| {}, patience).await
    }

    /// [`Jobs::store_state`] of job `id` with `change` applied, before it is applied here:
    /// for a state that clients must not see before it is stored.
    async fn store_changed(
        &self,
        id: &str,
        change: impl FnOnce(&mut Job),
        patience: Duration,
    ) -> Result<(), RecordError> {
        let held = self.turn(id).lock_owned().await;
        self.store_changed_in_turn(id, change, patience, held).await
    }

    /// Whose turn it is to write job `id`'s record.
    fn turn(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(self.table().turns.entry(id.to_owned()).or_default())
    }

    /// [`Jobs::store_changed`] in the record's turn, `_turn`.
    async fn store_changed_in_turn(
        &self,
        id: &str,
        change: impl FnOnce(&mut Job),
        patience: Duration,
        _turn: OwnedMutexGuard<()>,
    ) -> Result<(), RecordError> {
        let (job, version) = {
            let table = self.table();
            let Some(mut job) = table.jobs.get(id).cloned() else {
                return Ok(());
            };
            change(&mut job);
            let Some(version) = table.versions.get(id).copied() else {
                return Err(RecordError::Taken {
                    id: id.to_owned(),
                    by: "another instance, earlier".to_owned(),
                });
            };
            (job, version)
        };
        let until = tokio::time::Instant::now() + patience;
        let mut pauses = STORE_AGAIN.start();
        let mut tries = 0;
        loop {
            tries += 1;
            match self.inner.records.write(&job, version).await {
                Ok(version) => {
                    let mut table = self.table();
                    table.versions.insert(id.to_owned(), version);
                    match &job.journal {
                        Some(journal) => {
                            table.stored_journals.insert(id.to_owned(), journal.clone())
                        }
                        None => table.stored_journals.remove(id),
                    };
                    return Ok(());
                }
                Err(e @ RecordError::Taken { .. }) => {
                    self.table().versions.remove(id);
                    return Err(e);
                }
                Err(e) if tries >= 3 && tokio::time::Instant::now() >= until => return Err(e),
                Err(e) => {
                    tracing::debug!(job = %id, error = %e, "storing the job's state again");
                    if tries >= 3 {
                        tokio::time::sleep(pauses.next_pause()).await;
                    }
                }
            }
        }
    }

    /// Stores job `id`'s end, which could not be stored when it came, every `every` until it
    /// is (then this instance shows it), the job is another instance's, or shutdown begins.
    fn store_end_later(&self, id: String, every: Duration) {
        let jobs = self.clone();
        let mut closing = self.closing();
        self.spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    _ = closing.wait_for(|closing| *closing) => return,
                }
                match jobs.store_state(&id, Duration::ZERO).await {
                    Ok(()) | Err(RecordError::Taken { .. }) => break,
                    Err(e) => {
                        tracing::debug!(job = %id, error = %e, "the job's end is still not stored")
                    }
                }
            }
            jobs.table().unstored.remove(&id);
        });
    }

    /// [`Jobs::persist`] in the background: a write the job need not wait for. It still goes
    /// out before any later write of the same record: it takes the record's turn now, if no
    /// write has it (otherwise it waits for its turn), and shutdown waits for it.
    pub fn persist_soon(&self, id: &str) {
        let (jobs, id) = (self.clone(), id.to_owned());
        let held = self.turn(&id).try_lock_owned().ok();
        self.spawn(async move { jobs.persist_in_turn(&id, held).await });
    }

    /// Whether job `id`'s record, as this instance stored it last, holds `journal_id` (and the
    /// job is still this instance's to write): waits for a write of the record under way.
    async fn journal_stored(&self, id: &str, journal_id: &str) -> bool {
        let _turn = self.turn(id).lock_owned().await;
        let table = self.table();
        table.versions.contains_key(id)
            && table.stored_journals.get(id).map(String::as_str) == Some(journal_id)
    }

    async fn run(&self, id: String) {
        // Closed only at shutdown, after the last job: acquire cannot fail before.
        let Ok(_slot) = Arc::clone(&self.inner.slots).acquire_owned().await else {
            return;
        };
        let Some(job) = self.get(&id) else { return };
        // The journal id of the job's first attempt goes out with its start: stored while the
        // job waits for its locks, it is there when the job is about to journal, which then
        // needs no write of its own (`StoreJournalId`). An instance that adopts the job
        // meanwhile finds the id with no entry, and fences it (`adopt.rs`).
        let journal_id = fs_model::entropy::uuid();
        self.update(&id, |j| {
            j.enter(JobState::WaitingForLocks);
            j.started_at = Some(now_ms());
            j.journal = Some(journal_id.clone());
        });
        // The job goes on meanwhile. Its one write on the critical path is the journal id's,
        // before its first write (`StoreJournalId`), which an instance that adopts the job
        // must find: usually this one, done by then.
        self.persist_soon(&id);
        let renamer = self.renamer(&id, &job, journal_id);
        let outcome = match &job.work {
            Work::Rename { from, to } => renamer.rename_reporting(from, to).await,
            Work::Copy { from, to } => renamer.copy_reporting(from, to).await,
            Work::Delete { path, recursive } => renamer.remove_reporting(path, *recursive).await,
        };
        let (state, error, follow) = self.settle(&id, &outcome);
        tracing::info!(job = %id, work = %job.work.describe(), state = state.name(),
            documents = outcome.report.rewritten, error = error.as_deref().unwrap_or(""), "job finished");
        let report = Some(outcome.report.clone());
        let stopped = match (&follow, &outcome.result) {
            (Some(_), Err(e)) => Some(format!("{e}; recovery finishes it")),
            _ => None,
        };
        let finished_at = state.finished().then(now_ms);
        let change = |j: &mut Job| {
            j.enter(state);
            j.error.clone_from(&error);
            // After the warnings of a takeover, if any.
            j.warnings.extend(outcome.report.warnings.iter().cloned());
            j.warnings.extend(stopped.iter().cloned());
            j.progress.done = outcome.report.rewritten;
            j.report.clone_from(&report);
            if finished_at.is_some() {
                j.finished_at = finished_at;
            }
        };
        // The end is stored before it is shown: a client told "failed" by this instance must
        // not see the job run again by an instance that adopts it from an older record after
        // this one died (`adopt.rs`). Tried for as long as this instance counts as alive;
        // past that, the job is shown as the jobs index has it until its end is stored.
        let liveness = Liveness::for_lease(self.inner.config.lease);
        // At shutdown, one try: the instance is going, and its grace is short.
        let patience = if *self.closing().borrow() {
            Duration::ZERO
        } else {
            liveness.dead_after
        };
        let stored = self.store_changed(&id, &change, patience).await;
        let unstored = match &stored {
            Ok(()) | Err(RecordError::Taken { .. }) => false,
            Err(e) => {
                tracing::warn!(job = %id, error = %e, "could not store the job's end; it is shown as stored until it is, and stored again every heartbeat");
                self.table().unstored.insert(id.clone());
                true
            }
        };
        match &follow {
            None => self.finish(&id, change),
            Some(_) => self.update(&id, change),
        }
        if unstored {
            self.store_end_later(id.clone(), liveness.beat);
        }
        match follow {
            Some(journal_id) => {
                self.follow_recovery(id, journal_id);
            }
            None => self.forget_old(),
        }
    }

    /// The renamer that runs job `id`: the service's settings, its events into the job's
    /// record, its journal id stored with it, cancelled at shutdown.
    fn renamer(&self, id: &str, job: &Job, journal_id: String) -> Renamer {
        let c = &self.inner.config;
        let (sink_jobs, sink_id) = (self.clone(), id.to_owned());
        let mut builder = Renamer::builder(Arc::clone(&self.inner.store), c.index.clone());
        if let Some(shared) = &self.inner.shared {
            builder = builder.share_intentions(shared.clone());
        }
        builder
            .strategy(job.strategy)
            .lease(c.lease)
            .wait(c.wait)
            .lock_protocol(c.protocol)
            .protocol_memo(self.inner.protocol.clone())
            .rewrite(c.rewrite)
            // Many jobs at once: their refreshes off the server's write threads.
            .refresh_apart(true)
            .holder(format!("serve job {id}: {}", job.work.describe()))
            .cancel(self.inner.cancel_tx.subscribe())
            .orphans(Arc::clone(&self.inner.orphans) as Arc<dyn fs_locks::Orphans>)
            .progress(Arc::new(move |event| sink_jobs.on_event(&sink_id, event)))
            .hooks(Arc::new(StoreJournalId {
                jobs: self.clone(),
                id: id.to_owned(),
            }))
            .first_journal_id(journal_id)
            .build()
    }

    /// Counts job `id`'s outcome in the metrics and returns its state, its error and, for a
    /// job that stopped after its first write, the journal entry recovery finishes it from:
    /// such a job is not over, and is `done` when the entry closes.
    fn settle(
        &self,
        id: &str,
        outcome: &RenameOutcome,
    ) -> (JobState, Option<String>, Option<String>) {
        let m = &self.inner.metrics;
        Metrics::add(&m.retries, outcome.report.retries);
        Metrics::add(&m.documents, outcome.report.rewritten);
        match &outcome.result {
            // Done even if its release failed: the job has happened (see
            // `RenameReport::locks_left`); what it left is cleared once it expires.
            Ok(()) => {
                Metrics::add(&m.done, 1);
                if !outcome.report.locks_left.is_empty() {
                    self.clear_when_expired(id, &outcome.report.locks_left);
                }
                (JobState::Done, None, None)
            }
            Err(e @ RenameError::Unfinished { job, .. }) => {
                tracing::warn!(job = %id, error = %e, "the job stopped half-way; recovery finishes it");
                (JobState::Rewriting, None, Some(job.clone()))
            }
            Err(e) => {
                Metrics::add(&m.failed, 1);
                if matches!(e, RenameError::Conflict { .. }) {
                    Metrics::add(&m.conflicts, 1);
                }
                (JobState::Failed, Some(e.to_string()), None)
            }
        }
    }

    /// Follows job `id`, which stopped after its first write, until recovery has finished it
    /// (its journal entry `journal_id` closed), then records it done (or failed, if the entry
    /// vanished). At shutdown it stops following and leaves the job unfinished.
    pub fn follow_recovery(&self, id: String, journal_id: String) {
        let jobs = self.clone();
        self.spawn(async move {
            let (store, config) = (jobs.store(), jobs.config());
            let ended =
                recovered::until_recovered(store, config, jobs.closing(), &id, &journal_id).await;
            let Some((state, error)) = ended else {
                return;
            };
            let m = jobs.metrics();
            match state {
                JobState::Done => Metrics::add(&m.done, 1),
                _ => Metrics::add(&m.failed, 1),
            }
            jobs.finish(&id, |j| {
                j.enter(state);
                j.error = error;
                j.finished_at = Some(now_ms());
            });
            jobs.persist(&id).await;
            jobs.forget_old();
        });
    }

    /// Applies `change`, which ends job `id`, and counts the job out of the queue in the same
    /// step: a client that reads the job finished may submit the next one at once, even
    /// while the finished job is still being written to the jobs index.
    pub fn finish(&self, id: &str, change: impl FnOnce(&mut Job)) {
        let mut table = self.table();
        if let Some(job) = table.jobs.get_mut(id) {
            change(job);
        }
        table.unfinished = table.unfinished.saturating_sub(1);
    }

    /// Forgets the oldest finished jobs beyond the history kept.
    pub fn forget_old(&self) {
        let mut table = self.table();
        forget_old(&mut table, self.inner.config.history);
    }

    /// Clears the locks a complete rename could not release (`locks`), once their lease has
    /// run out: runs recovery, whose sweep fences the job's closed journal id and deletes them.
    /// Nothing renews them any more, so they expire within a lease of the failed release;
    /// until then they only keep other jobs off the paths just renamed. The periodic recovery
    /// (`recover_every`, started in `serve/mod.rs`) clears them too, up to a period later;
    /// this run is as soon as they expire, and covers a service whose periodic recovery is
    /// off. At shutdown the wait is cut short, and the recovery the service runs when it
    /// starts (or `fsrename recover`) clears them instead.
    fn clear_when_expired(&self, id: &str, locks: &[String]) {
        let c = &self.inner.config;
        let mut closing = self.inner.closing_tx.subscribe();
        if *closing.borrow() {
            tracing::warn!(job = %id, ?locks, "shutting down: the locks left by this job are cleared by the next recovery");
            return;
        }
        let recovery = fs_rename::Recovery::new(Arc::clone(&self.inner.store), c.index.clone())
            .lease(c.lease)
            .wait(c.wait);
        // The last renewal was at most a lease before the release: past this pause, the
        // sweep finds every lock left expired.
        let pause = c.lease + c.lease / 10 + Duration::from_millis(100);
        let (id, locks) = (id.to_owned(), locks.to_vec());
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = closing.wait_for(|closing| *closing) => {
                        tracing::warn!(job = %id, ?locks, "shutting down: the locks left by this job are cleared by the next recovery");
                        return;
                    }
                }
                match recovery.run().await {
                    Ok(report) => {
                        tracing::info!(job = %id, ?locks, %report, "recovery run for the locks a finished job could not release")
                    }
                    Err(e) => {
                        tracing::warn!(job = %id, ?locks, error = %e, "recovery for the locks a finished job could not release failed; the periodic recovery or `fsrename recover` clears them")
                    }
                }
            });
    }

    fn on_event(&self, id: &str, event: RenameEvent) {
        match event {
            RenameEvent::Waiting { blocker, .. } => {
                Metrics::add(&self.inner.metrics.lock_waits, 1);
                self.update(id, |j| j.wait_for(blocker));
            }
            RenameEvent::Locked { .. } => self.update(id, |j| j.enter(JobState::Rewriting)),
            RenameEvent::Checked { total } => self.update(id, |j| j.progress.total = total),
            RenameEvent::Progress { done, total } => {
                self.update(id, |j| j.progress = Progress { done, total })
            }
            RenameEvent::Retrying { .. }
            | RenameEvent::Released
            | RenameEvent::Journaled { .. }
            | RenameEvent::Closed { .. } => {}
        }
    }

    /// Lets running jobs finish within the grace period, then cancels the rest (they stop at
    /// their next page or lock attempt and release their locks), and waits for them. Tasks
    /// still waiting for the locks of a finished job to expire stop at once (see
    /// [`Jobs::clear_when_expired`]).
    pub async fn shut_down(&self) {
        self.inner.closing_tx.send_replace(true);
        let mut tasks =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        let grace = self.inner.config.grace;
        let drained =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(
                ?grace,
                left = tasks.len(),
                "grace period over: cancelling the remaining jobs"
            );
            self.inner.cancel_tx.send_replace(true);
            // Cancelled jobs release their locks within a lock attempt or a page.
            let hard = tokio::time::timeout(Duration::from_secs(60), async {
                while tasks.join_next().await.is_some() {}
            });
            if hard.await.is_err() {
                tracing::error!("jobs did not stop after cancellation; their locks will expire with their leases");
            }
        }
        self.inner.slots.close();
        // The intention locks kept for the next job: there is none.
        if let Some(shared) = &self.inner.shared {
            shared.release_idle().await;
        }
    }
}

/// Forgets the oldest finished jobs beyond `history`.
fn forget_old(table: &mut Table, history: usize) {
    let mut finished = table.jobs.values().filter(|j| j.state().finished()).count();
    let mut keep = VecDeque::with_capacity(table.order.len());
    while let Some(id) = table.order.pop_front() {
        let done = table.jobs.get(&id).is_some_and(|j| j.state().finished());
        if done && finished > history {
            table.jobs.remove(&id);
            table.versions.remove(&id);
            table.turns.remove(&id);
            table.unstored.remove(&id);
            table.stored_journals.remove(&id);
            finished -= 1;
        } else {
            keep.push_back(id);
        }
    }
    table.order = keep;
}

fn uuid_like() -> String {
    fs_model::FsDoc::new_id()
}

/// Stores a job's journal id in the jobs index before its first write, and waits until it is
/// stored: an instance that takes the job over after this one died then reads in the
/// journal whether its writes happened (see `adopt.rs`).
struct StoreJournalId {
    jobs: Jobs,
    id: String,
}

#[async_trait]
impl RenameHooks for StoreJournalId {
    /// Only `journaling` is implemented: nothing needs the locks after the writes.
    fn need_locks_after_writes(&self) -> bool {
        false
    }

    /// The job journals only once its journal id is stored: an instance that adopts the job
    /// after this one died must find the id, or it would run the job again from the start
    /// over what it wrote (found by the Jepsen-style test, `docs/reliability.md`, anomaly 4:
    /// a partition kept the id from the jobs index, the instance was killed after the copy,
    /// and its adopter copied again into "destination already exists").
    async fn journaling(&self, journal_id: &str) -> Result<(), String> {
        self.jobs.update(&self.id, |j| {
            j.enter(JobState::Rewriting);
            j.journal = Some(journal_id.to_owned());
        });
        // The first attempt's id went out with the job's start (`Jobs::run`): once that write
        // is stored, the job may journal. Other instances show the job waiting for its locks
        // until its next write. A restart after a fence has an id of its own, written here.
        if self.jobs.journal_stored(&self.id, journal_id).await {
            return Ok(());
        }
        // Tried for as long as other instances take this one for alive: past that, the job
        // may be adopted anyway.
        let patience = Liveness::for_lease(self.jobs.config().lease).dead_after;
        self.jobs
            .store_state(&self.id, patience)
            .await
            .map_err(|e| match e {
                RecordError::Taken { .. } => {
                    format!("the job is no longer this instance's to run ({e})")
                }
                e => format!(
                    "its journal id could not be stored with the job in {} (another instance adopting the job would not know that it wrote): {e}",
                    fs_model::short_duration(patience)
                ),
            })
    }
}

/// The intention locks an instance lends its jobs (`--share-intentions`), leased as theirs.
fn shared_intentions(
    store: &SharedStore,
    config: &ServeConfig,
    memo: fs_locks::ProtocolMemo,
) -> fs_locks::SharedIntentions {
    let lock_index = fs_model::lock_index_name(&config.index);
    fs_locks::SharedIntentions::new(
        fs_locks::LockClient::builder(Arc::clone(store), lock_index)
            .holder(format!(
                "serve {}: intention locks lent to its jobs",
                config.instance
            ))
            .lease(config.lease)
            .protocol(config.protocol)
            .protocol_memo(memo),
    )
}
