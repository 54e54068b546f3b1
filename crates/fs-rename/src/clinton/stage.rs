//! Where and how a scenario runs: on which store, how slowly, and who is told as it goes.
//!
//! The two jobs are cued by [`RenameHooks`] so that each run shows its interleaving every
//! time; a [`Pace`] slows them for someone to watch (`fsrename demo --serve`), and a
//! [`Narrator`] hears every line of the timeline, and the jobs' progress, as they happen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fs_locks::TreeLockRequest;
use fs_model::FsPath;
use fs_store::SharedStore;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::judge::judge;
use super::{
    build_clinton_tree, Scenario, ScenarioOutcome, TimelineEntry, CLINTON, GORMLEY,
    README_ASCIIDOC, README_TXT,
};
use crate::error::{RenameError, Result};
use crate::fsck::fsck;
use crate::job::{RenameOutcome, Renamer};
use crate::report::{RenameEvent, RenameHooks};
use crate::strategy::Strategy;
use crate::tree::{Entry, FsTree};

/// Documents per scan page: small enough that where job A stops is visible.
const PAGE_SIZE: usize = 250;

/// How slowly the jobs go. The default does not slow them at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pace {
    /// How long a job that took its locks holds them before it goes on, and again once the
    /// other job is seen waiting: long enough to see who holds what.
    pub hold: Duration,
    /// A pause before each page of writes, so that a move is seen under way.
    pub per_page: Duration,
}

impl Pace {
    /// The pace of `fsrename demo --serve` at `factor` (1.0: a few seconds per step).
    pub fn watchable(factor: f64) -> Pace {
        let scaled = |ms: f64| Duration::from_secs_f64((ms * factor).max(0.0) / 1e3);
        Pace {
            hold: scaled(2_500.0),
            per_page: scaled(400.0),
        }
    }

    /// How long a job may wait for its locks: the default, or longer when the other job's
    /// whole run is slowed (`pages` pages of writes, each paused).
    fn wait(self, pages: usize) -> Duration {
        let slowed = self.hold * 4 + self.per_page * u32::try_from(pages).unwrap_or(u32::MAX);
        Duration::from_secs(30) + slowed * 2
    }
}

/// What a narrated run tells as it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Narration {
    /// The tree is built afresh, with this many documents; the jobs start next.
    Ready {
        /// Documents in the tree.
        documents: u64,
    },
    /// A line of the timeline, as it is written.
    Step(TimelineEntry),
    /// A job's documents written so far.
    Progress {
        /// `A` or `B`.
        job: char,
        /// Written.
        done: u64,
        /// To write.
        total: u64,
    },
}

/// Hears a run's [`Narration`]; it runs on the jobs' tasks, so keep it quick.
pub type Narrator = Arc<dyn Fn(Narration) + Send + Sync>;

/// A store and an index to run scenarios on, at a pace, perhaps narrated.
pub struct Stage {
    store: SharedStore,
    index: String,
    pace: Pace,
    narrator: Option<Narrator>,
    /// Every job task holds one of its receivers, until the task is dropped (see
    /// [`Stage::jobs_gone`]).
    jobs: watch::Sender<()>,
}

impl Stage {
    /// Runs scenarios in `index` of `store`. Each run deletes the index first: give it one
    /// that holds nothing else.
    pub fn new(store: SharedStore, index: impl Into<String>) -> Stage {
        Stage {
            store,
            index: index.into(),
            pace: Pace::default(),
            narrator: None,
            jobs: watch::channel(()).0,
        }
    }

    /// Slows the jobs down.
    #[must_use]
    pub fn pace(mut self, pace: Pace) -> Stage {
        self.pace = pace;
        self
    }

    /// Tells `narrator` of each step as it happens.
    #[must_use]
    pub fn narrator(mut self, narrator: Narrator) -> Stage {
        self.narrator = Some(narrator);
        self
    }

    /// Deletes the index, builds the tree afresh with `files` files under `/clinton`, and runs
    /// `scenario` on it.
    ///
    /// # Errors
    /// [`RenameError::Store`] if the store fails while setting up or inspecting the tree (the
    /// jobs' own failures are part of the outcome).
    pub async fn run(&self, scenario: Scenario, files: usize) -> Result<ScenarioOutcome> {
        let store = &self.store;
        let index = self.index.as_str();
        store
            .delete_index(index)
            .await
            .map_err(RenameError::store(format!("clearing `{index}`")))?;
        let tree = FsTree::new(Arc::clone(store), index);
        tree.ensure_indices().await?;
        let before = build_clinton_tree(&tree, files).await?;
        let readme = FsPath::parse(README_TXT)?;
        let readme_id =
            tree.find(&readme)
                .await?
                .map(|e| e.id)
                .ok_or_else(|| RenameError::SourceNotFound {
                    path: readme.clone(),
                })?;

        if let Some(narrator) = &self.narrator {
            narrator(Narration::Ready { documents: before });
        }
        let timeline = Timeline {
            started: Instant::now(),
            entries: Arc::default(),
            narrator: self.narrator.clone(),
        };
        let pages = usize::try_from(before).unwrap_or(usize::MAX) / PAGE_SIZE + 1;
        let (a, b) = self
            .run_jobs(scenario, pages, &readme_id, &timeline)
            .await?;

        tree.refresh().await?;
        let after = tree.count_under(&FsPath::root()).await?;
        let left_under_clinton = tree.count_under(&FsPath::parse(CLINTON)?).await?;
        let readme_at = store
            .get(index, &readme_id)
            .await
            .map_err(RenameError::store("reading README's document"))?
            .and_then(|d| {
                d.source
                    .get("path")
                    .and_then(|p| p.as_str())
                    .map(str::to_owned)
            });
        let report = fsck(Arc::clone(store), index, &FsPath::root()).await?;
        let mut outcome = ScenarioOutcome {
            scenario,
            timeline: timeline.take(),
            a,
            b,
            documents: (before, after),
            readme_at,
            left_under_clinton,
            fsck: report,
            as_expected: false,
            verdict: String::new(),
        };
        (outcome.as_expected, outcome.verdict) = judge(&outcome);
        Ok(outcome)
    }

    /// Waits until no job task of this stage is left. A run dropped before its end (the demo
    /// stopped by Ctrl-C) aborts its jobs: each then drops what it holds (its lock guards
    /// start their releases in the background, `fs_locks::settle_background_releases` waits
    /// for those), at once if it was waiting, or when the store call it is making returns.
    /// Wait for this before the process ends: a job still running while the runtime is torn
    /// down has its store calls fail under it, and says so in warnings.
    pub async fn jobs_gone(&self) {
        self.jobs.closed().await;
    }

    /// Runs the two jobs of `scenario` on their own tasks, cued by each other, and waits for
    /// both: job A moves `/clinton`, job B renames its README (the document `readme_id`);
    /// the other job's run may take `pages` pages of writes.
    async fn run_jobs(
        &self,
        scenario: Scenario,
        pages: usize,
        readme_id: &str,
        timeline: &Timeline,
    ) -> Result<(RenameOutcome, RenameOutcome)> {
        let store = &self.store;
        let index = self.index.as_str();
        let cues = Arc::new(Cues::default());
        // The leader starts at once; the follower starts on the leader's cue.
        let (leader, follower) = match scenario {
            Scenario::TreeLocksBFirst => ('B', 'A'),
            _ => ('A', 'B'),
        };
        let renamer = |job: char, from: &FsPath, to: &FsPath| {
            let (events, cue) = (timeline.clone(), Arc::clone(&cues));
            let plan = LockPlan::of(scenario, from, to);
            Renamer::builder(Arc::clone(store), index)
                .strategy(scenario.strategy())
                .versioned(scenario.versioned())
                .page_size(PAGE_SIZE)
                .wait(self.pace.wait(pages))
                .holder(format!("job {job}"))
                .progress(Arc::new(move |event| {
                    if job == follower && matches!(event, RenameEvent::Waiting { attempts: 1, .. })
                    {
                        cue.other_waiting.notify_one();
                    }
                    events.heard(job, &event, &plan);
                }))
                .hooks(Arc::new(JobHooks {
                    scenario,
                    leader: job == leader,
                    pace: self.pace,
                    cues: Arc::clone(&cues),
                    readme_id: readme_id.to_owned(),
                    timeline: timeline.clone(),
                    job,
                }))
                .build()
        };
        let run = |job: char, from: FsPath, to: FsPath| {
            let renamer = renamer(job, &from, &to);
            let (timeline, cues) = (timeline.clone(), Arc::clone(&cues));
            let alive = self.jobs.subscribe();
            JobTask(tokio::spawn(async move {
                let _alive = alive;
                if job == follower {
                    cues.start_other.notified().await;
                }
                timeline.push(job, format!("starts: rename {from} → {to}"));
                let outcome = renamer.rename_reporting(&from, &to).await;
                timeline.push(job, describe_outcome(&outcome));
                if job == follower {
                    cues.other_done.notify_one();
                }
                outcome
            }))
        };
        let (clinton, gormley) = (FsPath::parse(CLINTON)?, FsPath::parse(GORMLEY)?);
        let (readme, asciidoc) = (FsPath::parse(README_TXT)?, FsPath::parse(README_ASCIIDOC)?);
        let mut a = run('A', clinton, gormley);
        let mut b = run('B', readme, asciidoc);
        Ok((joined((&mut a.0).await)?, joined((&mut b.0).await)?))
    }
}

/// A scenario job's task, aborted when the run that started it is dropped before its end: a
/// task merely detached would go on moving documents and holding locks, unseen, until the
/// runtime is torn down under it.
struct JobTask(tokio::task::JoinHandle<RenameOutcome>);

impl Drop for JobTask {
    fn drop(&mut self) {
        // Nothing to abort once the task has ended.
        self.0.abort();
    }
}

/// The outcome of a scenario job's task; a task that panicked or was cancelled is a failure
/// of the run, not of the job.
fn joined(
    task: std::result::Result<RenameOutcome, tokio::task::JoinError>,
) -> Result<RenameOutcome> {
    task.map_err(|e| RenameError::Store {
        context: "running a scenario job".to_owned(),
        cause: fs_store::StoreError::Backend {
            context: "join".into(),
            message: e.to_string(),
        },
    })
}

/// Records timeline entries from both jobs, and tells the narrator.
#[derive(Clone)]
struct Timeline {
    started: Instant,
    entries: Arc<Mutex<Vec<TimelineEntry>>>,
    narrator: Option<Narrator>,
}

impl Timeline {
    fn push(&self, job: char, what: impl Into<String>) {
        let entry = TimelineEntry {
            at: self.started.elapsed(),
            job,
            what: what.into(),
        };
        if let Some(narrator) = &self.narrator {
            narrator(Narration::Step(entry.clone()));
        }
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
    }

    /// Writes down what a job reported, if the timeline shows it.
    fn heard(&self, job: char, event: &RenameEvent, plan: &LockPlan) {
        if let (Some(narrator), RenameEvent::Progress { done, total }) = (&self.narrator, event) {
            narrator(Narration::Progress {
                job,
                done: *done,
                total: *total,
            });
        }
        if let Some(what) = describe_event(event, plan) {
            self.push(job, what);
        }
    }

    fn take(&self) -> Vec<TimelineEntry> {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Cues between the two jobs, so that each run shows its interleaving every time.
#[derive(Default)]
struct Cues {
    /// The other job may start.
    start_other: Notify,
    /// The other job has been refused a lock (it is waiting).
    other_waiting: Notify,
    /// The other job has finished.
    other_done: Notify,
}

/// Each job's hooks: the pace for both, the cues for the job that goes first.
struct JobHooks {
    scenario: Scenario,
    leader: bool,
    pace: Pace,
    cues: Arc<Cues>,
    readme_id: String,
    timeline: Timeline,
    job: char,
}

#[async_trait]
impl RenameHooks for JobHooks {
    async fn locked(&self) {
        let locking = self.scenario.strategy() == Strategy::Tree;
        if locking {
            // Let the locks be seen before anything else happens.
            tokio::time::sleep(self.pace.hold).await;
        }
        if self.leader && locking {
            // Hold the locks until the other job has been refused, so the wait shows.
            self.cues.start_other.notify_one();
            self.cues.other_waiting.notified().await;
            tokio::time::sleep(self.pace.hold).await;
        }
    }

    async fn before_write(&self, page: &[Entry]) {
        tokio::time::sleep(self.pace.per_page).await;
        let unlocked = self.scenario.strategy() == Strategy::None;
        if self.leader && unlocked && page.iter().any(|e| e.id == self.readme_id) {
            // A has read README.txt (and its version) and is about to write it back moved:
            // let B rename it in between, as a faster concurrent job would.
            self.timeline.push(
                self.job,
                "has read README.txt; the demo holds A here and runs B now, before A writes it back (forced, so that the race shows every time; a real one needs only bad timing)",
            );
            self.cues.start_other.notify_one();
            self.cues.other_done.notified().await;
        }
    }
}

/// The locks a job of the scenario takes, in the order it takes them, for the timeline.
struct LockPlan {
    /// `IX /clinton`, ..., `X /clinton/projects/elasticsearch/README.txt`: intention locks
    /// root first, then the targets.
    taken: Vec<String>,
}

impl LockPlan {
    fn of(scenario: Scenario, from: &FsPath, to: &FsPath) -> LockPlan {
        let items = match scenario.strategy() {
            Strategy::Tree => TreeLockRequest::rename(from, to)
                .and_then(|request| request.items())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        LockPlan {
            taken: items
                .iter()
                .map(|item| format!("{} {}", item.mode, item.label()))
                .collect(),
        }
    }

    /// The locks as taken, or, `released`, as given back (the reverse: deepest first).
    fn list(&self, released: bool) -> String {
        let mut locks: Vec<&str> = self.taken.iter().map(String::as_str).collect();
        if released {
            locks.reverse();
        }
        locks.join(", ")
    }
}

fn describe_event(event: &RenameEvent, plan: &LockPlan) -> Option<String> {
    match event {
        RenameEvent::Waiting { blocker, attempts } if *attempts == 1 => Some(format!(
            "waits: blocked by the {}",
            without_process(blocker)
        )),
        RenameEvent::Waiting { .. } => None,
        RenameEvent::Locked {
            round_trips,
            waited,
        } if *round_trips > 0 => Some(format!(
            "holds its locks, taken root first: {} ({round_trips} round trip{}, waited {:.1} ms)",
            plan.list(false),
            if *round_trips == 1 { "" } else { "s" },
            waited.as_secs_f64() * 1e3
        )),
        RenameEvent::Locked { .. } => Some("takes no locks".to_owned()),
        RenameEvent::Checked { total } => Some(format!(
            "checks pass: {} to move",
            fs_model::plural(*total, "document", "documents")
        )),
        RenameEvent::Progress { .. }
        | RenameEvent::Retrying { .. }
        | RenameEvent::Journaled { .. }
        | RenameEvent::Closed { .. } => None,
        RenameEvent::Released => Some(format!(
            "releases its locks, deepest first: {}",
            plan.list(true)
        )),
    }
}

fn describe_outcome(outcome: &RenameOutcome) -> String {
    match &outcome.result {
        Ok(()) => format!(
            "done: moved {} ({})",
            fs_model::plural(outcome.report.rewritten, "document", "documents"),
            fs_model::plural(outcome.report.round_trips, "round trip", "round trips")
        ),
        Err(e) => format!(
            "FAILED after moving {}: {e}",
            fs_model::plural(outcome.report.rewritten, "document", "documents")
        ),
    }
}

/// `blocker` without its holder's process id (`… held by job A (process 2009fcc7-…)`): in the
/// demo the job's name says who holds it, and a 36-character id on a line adds nothing.
fn without_process(blocker: &str) -> String {
    match blocker.find(" (process ") {
        Some(start) => match blocker[start..].find(')') {
            Some(len) => format!("{}{}", &blocker[..start], &blocker[start + len + 1..]),
            None => blocker[..start].to_owned(),
        },
        None => blocker.to_owned(),
    }
}
