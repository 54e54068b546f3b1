//! [`Jobs`]: accepted jobs (renames, copies, deletes), their states, and the tasks that run
//! them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fs_model::FsPath;
use fs_rename::{JobKind, RenameError, RenameEvent, RenameReport, Renamer, Strategy};
use fs_store::SharedStore;
use serde::Serialize;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::config::ServeConfig;
use super::metrics::Metrics;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Accepted, waiting for a free slot.
    Queued,
    /// Waiting for its locks.
    WaitingForLocks,
    /// Holding its locks, checking and writing (rewriting, copying or deleting).
    Rewriting,
    /// Finished successfully.
    Done,
    /// Finished with an error.
    Failed,
}

impl JobState {
    const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::WaitingForLocks,
        JobState::Rewriting,
        JobState::Done,
        JobState::Failed,
    ];

    fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::WaitingForLocks => "waiting_for_locks",
            JobState::Rewriting => "rewriting",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    fn finished(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed)
    }
}

/// What a job does, shown in its JSON as `kind` with its paths: `{"kind": "rename", "from",
/// "to"}`, `{"kind": "copy", "from", "to"}`, `{"kind": "delete", "path", "recursive"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Work {
    /// `mv FROM TO`.
    Rename { from: FsPath, to: FsPath },
    /// `cp -r FROM TO`.
    Copy { from: FsPath, to: FsPath },
    /// `rm [-r] PATH`.
    Delete { path: FsPath, recursive: bool },
}

impl Work {
    pub fn kind(&self) -> JobKind {
        match self {
            Work::Rename { .. } => JobKind::Rename,
            Work::Copy { .. } => JobKind::Copy,
            Work::Delete { .. } => JobKind::Delete,
        }
    }

    /// `mv FROM TO`, `cp -r FROM TO`, `rm [-r] PATH`: for labels and logs.
    pub fn describe(&self) -> String {
        match self {
            Work::Rename { from, to } => format!("mv {from} {to}"),
            Work::Copy { from, to } => format!("cp -r {from} {to}"),
            Work::Delete { path, recursive } => {
                format!("rm{} {path}", if *recursive { " -r" } else { "" })
            }
        }
    }
}

/// What `GET /jobs/{id}` (and `/renames/{id}`, `/copies/{id}`, `/deletes/{id}`) shows.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub id: String,
    #[serde(flatten)]
    pub work: Work,
    pub strategy: Strategy,
    pub state: JobState,
    /// Documents written (rewritten, copied, deleted) so far, and to write.
    pub progress: Progress,
    /// The lock that made it wait last, if any.
    pub waiting_for: Option<String>,
    pub report: Option<RenameReport>,
    pub error: Option<String>,
    /// What went wrong without making the job fail: a job that was complete but could not
    /// release its locks is `done`, and says here which locks it left to expire (also in
    /// `report.locks_left`).
    pub warnings: Vec<String>,
    /// Epoch milliseconds.
    pub submitted_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

/// Why a job was not accepted.
#[derive(Debug)]
pub enum Refusal {
    /// The queue is full.
    Full { limit: usize },
}

/// The accepted jobs. Cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

struct Inner {
    store: SharedStore,
    config: ServeConfig,
    /// A std mutex: held only for short, await-free updates.
    table: Mutex<Table>,
    slots: Arc<Semaphore>,
    tasks: Mutex<JoinSet<()>>,
    cancel_tx: watch::Sender<bool>,
    /// Turns true when shutdown begins: tasks waiting to clear locks stop waiting.
    closing_tx: watch::Sender<bool>,
    metrics: Metrics,
}

#[derive(Default)]
struct Table {
    jobs: HashMap<String, Job>,
    /// Job ids, oldest first, for `GET /jobs` and for forgetting old finished jobs.
    order: VecDeque<String>,
    unfinished: usize,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Jobs {
    pub fn new(store: SharedStore, config: ServeConfig) -> Jobs {
        let (cancel_tx, _) = watch::channel(false);
        let (closing_tx, _) = watch::channel(false);
        Jobs {
            inner: Arc::new(Inner {
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

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.inner.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Accepts a job and starts its task; it runs when a slot is free.
    pub fn submit(&self, work: Work, strategy: Strategy) -> Result<Job, Refusal> {
        let job = {
            let mut table = self.table();
            if table.unfinished >= self.inner.config.queue {
                Metrics::add(&self.inner.metrics.rejected_full, 1);
                return Err(Refusal::Full {
                    limit: self.inner.config.queue,
                });
            }
            let job = Job {
                id: uuid_like(),
                work,
                strategy,
                state: JobState::Queued,
                progress: Progress::default(),
                waiting_for: None,
                report: None,
                error: None,
                warnings: Vec::new(),
                submitted_at: now_ms(),
                started_at: None,
                finished_at: None,
            };
            table.unfinished += 1;
            table.order.push_back(job.id.clone());
            table.jobs.insert(job.id.clone(), job.clone());
            job
        };
        Metrics::add(&self.inner.metrics.submitted, 1);
        let jobs = self.clone();
        let id = job.id.clone();
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(async move { jobs.run(id).await });
        Ok(job)
    }

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
                    table.jobs.values().filter(|j| j.state == *s).count() as u64,
                )
            })
            .collect()
    }

    fn update(&self, id: &str, change: impl FnOnce(&mut Job)) {
        if let Some(job) = self.table().jobs.get_mut(id) {
            change(job);
        }
    }

    async fn run(&self, id: String) {
        // Closed only at shutdown, after the last job: acquire cannot fail before.
        let Ok(_slot) = Arc::clone(&self.inner.slots).acquire_owned().await else {
            return;
        };
        let Some(job) = self.get(&id) else { return };
        self.update(&id, |j| {
            j.state = JobState::WaitingForLocks;
            j.started_at = Some(now_ms());
        });
        let c = &self.inner.config;
        let sink_jobs = self.clone();
        let sink_id = id.clone();
        let renamer = Renamer::builder(Arc::clone(&self.inner.store), c.index.clone())
            .strategy(job.strategy)
            .lease(c.lease)
            .wait(c.wait)
            .lock_protocol(c.protocol)
            .holder(format!("serve job {id}: {}", job.work.describe()))
            .cancel(self.inner.cancel_tx.subscribe())
            .progress(Arc::new(move |event| sink_jobs.on_event(&sink_id, event)))
            .build();
        let outcome = match &job.work {
            Work::Rename { from, to } => renamer.rename_reporting(from, to).await,
            Work::Copy { from, to } => renamer.copy_reporting(from, to).await,
            Work::Delete { path, recursive } => renamer.remove_reporting(path, *recursive).await,
        };
        let m = &self.inner.metrics;
        Metrics::add(&m.retries, outcome.report.retries);
        Metrics::add(&m.documents, outcome.report.rewritten);
        let (state, error) = match &outcome.result {
            // Done even if its release failed: the job has happened (see
            // `RenameReport::locks_left`); what it left is cleared once it expires.
            Ok(()) => {
                Metrics::add(&m.done, 1);
                if !outcome.report.locks_left.is_empty() {
                    self.clear_when_expired(&id, &outcome.report.locks_left);
                }
                (JobState::Done, None)
            }
            Err(e) => {
                Metrics::add(&m.failed, 1);
                if matches!(e, RenameError::Conflict { .. }) {
                    Metrics::add(&m.conflicts, 1);
                }
                (JobState::Failed, Some(e.to_string()))
            }
        };
        tracing::info!(job = %id, work = %job.work.describe(), state = state.name(),
            documents = outcome.report.rewritten, error = error.as_deref().unwrap_or(""), "job finished");
        let mut table = self.table();
        if let Some(j) = table.jobs.get_mut(&id) {
            j.state = state;
            j.error = error;
            j.warnings.clone_from(&outcome.report.warnings);
            j.progress.done = outcome.report.rewritten;
            j.report = Some(outcome.report);
            j.finished_at = Some(now_ms());
        }
        table.unfinished = table.unfinished.saturating_sub(1);
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
                self.update(id, |j| {
                    j.state = JobState::WaitingForLocks;
                    j.waiting_for = Some(blocker);
                });
            }
            RenameEvent::Locked { .. } => self.update(id, |j| j.state = JobState::Rewriting),
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
    }
}

/// Forgets the oldest finished jobs beyond `history`.
fn forget_old(table: &mut Table, history: usize) {
    let mut finished = table.jobs.values().filter(|j| j.state.finished()).count();
    let mut keep = VecDeque::with_capacity(table.order.len());
    while let Some(id) = table.order.pop_front() {
        let done = table.jobs.get(&id).is_some_and(|j| j.state.finished());
        if done && finished > history {
            table.jobs.remove(&id);
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
