//! The book's scenario: `/clinton` is renamed to `/gormley` (job A) while
//! `/clinton/projects/elasticsearch/README.txt` is renamed to `README.asciidoc` (job B).
//!
//! [`run_scenario`] runs it one of four ways on a fresh in-memory store in near-real-time mode,
//! forcing the interesting interleaving with [`RenameHooks`], and records a timeline:
//!
//! 1. tree locks, A first: B waits for A, then fails cleanly: its source has moved;
//! 2. tree locks, B first: A waits for B's shared locks, then moves everything, README
//!    included under its new name;
//! 3. no locks, no versions: A's write, computed from what it read before B's change, silently
//!    overwrites B's rename (a lost update);
//! 4. versions only (conditional writes, no locks): A hits B's change, stops on a version
//!    conflict and leaves the tree half-moved: the book's first failure mode.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fs_model::{FsDoc, FsPath};
use fs_store::{SharedStore, SqliteOptions, SqliteStore};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{RenameError, Result};
use crate::fsck::{fsck, FsckReport};
use crate::job::{RenameOutcome, Renamer};
use crate::report::{RenameEvent, RenameHooks};
use crate::strategy::Strategy;
use crate::tree::{Entry, FsTree};

/// The tree index the scenario uses.
pub const INDEX: &str = "fs";
/// Job A's source.
pub const CLINTON: &str = "/clinton";
/// Job A's destination.
pub const GORMLEY: &str = "/gormley";
/// Job B's source.
pub const README_TXT: &str = "/clinton/projects/elasticsearch/README.txt";
/// Job B's destination.
pub const README_ASCIIDOC: &str = "/clinton/projects/elasticsearch/README.asciidoc";

/// Files per directory in the generated tree.
const FILES_PER_DIR: usize = 500;

/// Documents per scan page: small enough that where job A stops is visible.
const PAGE_SIZE: usize = 250;

/// One way of running the scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Tree locks; A takes its locks first.
    TreeLocksAFirst,
    /// Tree locks; B takes its locks first.
    TreeLocksBFirst,
    /// No locks, unconditional writes.
    NoLocksNoVersions,
    /// No locks, writes conditional on the version read.
    VersionsOnly,
}

impl Scenario {
    /// All four, in the order the demo runs them.
    pub const ALL: [Scenario; 4] = [
        Scenario::TreeLocksAFirst,
        Scenario::TreeLocksBFirst,
        Scenario::NoLocksNoVersions,
        Scenario::VersionsOnly,
    ];

    /// Returns a one-line title.
    pub fn title(self) -> &'static str {
        match self {
            Scenario::TreeLocksAFirst => "tree locks, A first",
            Scenario::TreeLocksBFirst => "tree locks, B first",
            Scenario::NoLocksNoVersions => "no locks, no versions",
            Scenario::VersionsOnly => "version numbers only (conditional writes, no locks)",
        }
    }

    /// Returns what should happen.
    pub fn expectation(self) -> &'static str {
        match self {
            Scenario::TreeLocksAFirst => {
                "B waits for A, then fails cleanly: its source has moved; nothing is lost"
            }
            Scenario::TreeLocksBFirst => {
                "A waits for B's shared locks, then moves everything, README.asciidoc included"
            }
            Scenario::NoLocksNoVersions => {
                "both report success, but A silently overwrites B's rename (a lost update)"
            }
            Scenario::VersionsOnly => {
                "A stops half-way on a version conflict and leaves a half-moved tree"
            }
        }
    }

    fn strategy(self) -> Strategy {
        match self {
            Scenario::TreeLocksAFirst | Scenario::TreeLocksBFirst => Strategy::Tree,
            Scenario::NoLocksNoVersions | Scenario::VersionsOnly => Strategy::None,
        }
    }

    fn versioned(self) -> bool {
        self != Scenario::NoLocksNoVersions
    }
}

/// One line of a timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineEntry {
    /// Time since the scenario started.
    pub at: Duration,
    /// `A` or `B`.
    pub job: char,
    /// What happened.
    pub what: String,
}

/// Builds the book's tree under `/clinton` with `files` files (at least 1): directories of
/// 500 files (`/clinton/docsN` and `/clinton/workN`), and
/// `/clinton/projects/elasticsearch/README.txt`.
/// Returns the number of documents written.
///
/// # Errors
/// [`RenameError::Store`] if the store refuses a write.
pub async fn build_clinton_tree(tree: &FsTree, files: usize) -> Result<u64> {
    let p = |s: &str| FsPath::parse(s).map_err(RenameError::from);
    let mut docs = vec![
        FsDoc::dir(p(CLINTON)?, 0),
        FsDoc::dir(p("/clinton/projects")?, 0),
        FsDoc::dir(p("/clinton/projects/elasticsearch")?, 0),
        FsDoc::file(p(README_TXT)?, 1_024, 0),
    ];
    let others = files.saturating_sub(1);
    for d in 0..others.div_ceil(FILES_PER_DIR) {
        // Half the directories sort before `projects` and half after, so a scan in path order
        // meets README.txt half-way through.
        let name = if d % 2 == 0 { "docs" } else { "work" };
        let dir = p(&format!("/clinton/{name}{d:03}"))?;
        docs.push(FsDoc::dir(dir.clone(), 0));
        let first = d * FILES_PER_DIR;
        for f in first..others.min(first + FILES_PER_DIR) {
            docs.push(FsDoc::file(
                dir.join(&format!("file{f:06}.txt"))?,
                (f % 4096) as u64,
                0,
            ));
        }
    }
    let written = docs.len() as u64;
    tree.insert_all(docs).await?;
    tree.refresh().await?;
    Ok(written)
}

/// How one run of the scenario ended.
#[derive(Debug, Clone)]
pub struct ScenarioOutcome {
    /// Which run.
    pub scenario: Scenario,
    /// What happened, in order.
    pub timeline: Vec<TimelineEntry>,
    /// Job A's outcome.
    pub a: RenameOutcome,
    /// Job B's outcome.
    pub b: RenameOutcome,
    /// Documents before and after.
    pub documents: (u64, u64),
    /// Where README's document (followed by id) ended up.
    pub readme_at: Option<String>,
    /// Documents still under `/clinton` afterwards.
    pub left_under_clinton: u64,
    /// The tree check afterwards.
    pub fsck: FsckReport,
    /// Whether the run showed what it is meant to show.
    pub as_expected: bool,
    /// Why it did or did not.
    pub verdict: String,
}

/// Records timeline entries from both jobs.
#[derive(Clone)]
struct Timeline {
    started: Instant,
    entries: Arc<Mutex<Vec<TimelineEntry>>>,
}

impl Timeline {
    fn push(&self, job: char, what: impl Into<String>) {
        let entry = TimelineEntry {
            at: self.started.elapsed(),
            job,
            what: what.into(),
        };
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
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

/// Hooks of the job that goes first.
struct LeaderHooks {
    scenario: Scenario,
    cues: Arc<Cues>,
    readme_id: String,
    timeline: Timeline,
    job: char,
}

#[async_trait]
impl RenameHooks for LeaderHooks {
    async fn locked(&self) {
        if self.scenario.strategy() == Strategy::Tree {
            // Hold the locks until the other job has been refused, so the wait shows.
            self.cues.start_other.notify_one();
            self.cues.other_waiting.notified().await;
        }
    }

    async fn before_write(&self, page: &[Entry]) {
        let unlocked = self.scenario.strategy() == Strategy::None;
        if unlocked && page.iter().any(|e| e.id == self.readme_id) {
            // A has read README.txt (and its version) and is about to write it back moved:
            // let B rename it in between, as a faster concurrent job would.
            self.timeline.push(
                self.job,
                "has read README.txt; B runs before A writes it back",
            );
            self.cues.start_other.notify_one();
            self.cues.other_done.notified().await;
        }
    }
}

fn describe_event(event: &RenameEvent) -> Option<String> {
    match event {
        RenameEvent::Waiting { blocker, attempts } if *attempts == 1 => {
            Some(format!("waits: blocked by the {blocker}"))
        }
        RenameEvent::Waiting { .. } => None,
        RenameEvent::Locked {
            round_trips,
            waited,
        } if *round_trips > 0 => Some(format!(
            "holds its locks ({round_trips} round trips, waited {:.1} ms)",
            waited.as_secs_f64() * 1e3
        )),
        RenameEvent::Locked { .. } => Some("takes no locks".to_owned()),
        RenameEvent::Checked { total } => Some(format!("checks pass: {total} documents to move")),
        RenameEvent::Progress { .. }
        | RenameEvent::Retrying { .. }
        | RenameEvent::Journaled { .. }
        | RenameEvent::Closed { .. } => None,
        RenameEvent::Released => Some("releases its locks".to_owned()),
    }
}

fn describe_outcome(outcome: &RenameOutcome) -> String {
    match &outcome.result {
        Ok(()) => format!(
            "done: moved {} documents ({} round trips)",
            outcome.report.rewritten, outcome.report.round_trips
        ),
        Err(e) => format!(
            "FAILED after moving {} documents: {e}",
            outcome.report.rewritten
        ),
    }
}

/// Runs one scenario on a fresh in-memory store with `files` files under `/clinton`.
///
/// # Errors
/// [`RenameError::Store`] if the store fails while setting up or inspecting the tree (the
/// jobs' own failures are part of the outcome).
pub async fn run_scenario(scenario: Scenario, files: usize) -> Result<ScenarioOutcome> {
    let store: SharedStore = Arc::new(
        SqliteStore::in_memory_with(SqliteOptions::new().near_real_time(true))
            .map_err(RenameError::store("opening the in-memory store"))?,
    );
    let tree = FsTree::new(Arc::clone(&store), INDEX);
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

    let timeline = Timeline {
        started: Instant::now(),
        entries: Arc::default(),
    };
    let cues = Arc::new(Cues::default());
    // The leader starts at once; the follower starts on the leader's cue.
    let (leader, follower) = match scenario {
        Scenario::TreeLocksBFirst => ('B', 'A'),
        _ => ('A', 'B'),
    };
    let renamer = |job: char| {
        let (events, cue) = (timeline.clone(), Arc::clone(&cues));
        let mut builder = Renamer::builder(Arc::clone(&store), INDEX)
            .strategy(scenario.strategy())
            .versioned(scenario.versioned())
            .page_size(PAGE_SIZE)
            .holder(format!("job {job}"))
            .progress(Arc::new(move |event| {
                if job == follower && matches!(event, RenameEvent::Waiting { attempts: 1, .. }) {
                    cue.other_waiting.notify_one();
                }
                if let Some(what) = describe_event(&event) {
                    events.push(job, what);
                }
            }));
        if job == leader {
            builder = builder.hooks(Arc::new(LeaderHooks {
                scenario,
                cues: Arc::clone(&cues),
                readme_id: readme_id.clone(),
                timeline: timeline.clone(),
                job,
            }));
        }
        builder.build()
    };
    let (clinton, gormley) = (FsPath::parse(CLINTON)?, FsPath::parse(GORMLEY)?);
    let asciidoc = FsPath::parse(README_ASCIIDOC)?;
    let run = |job: char, from: FsPath, to: FsPath| {
        let (renamer, timeline, cues) = (renamer(job), timeline.clone(), Arc::clone(&cues));
        tokio::spawn(async move {
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
        })
    };
    let a = run('A', clinton.clone(), gormley);
    let b = run('B', readme.clone(), asciidoc);
    let joined = |r: std::result::Result<RenameOutcome, tokio::task::JoinError>| {
        r.map_err(|e| RenameError::Store {
            context: "running a scenario job".to_owned(),
            cause: fs_store::StoreError::Backend {
                context: "join".into(),
                message: e.to_string(),
            },
        })
    };
    let (a, b) = (joined(a.await)?, joined(b.await)?);

    tree.refresh().await?;
    let after = tree.count_under(&FsPath::root()).await?;
    let left_under_clinton = tree.count_under(&clinton).await?;
    let readme_at = store
        .get(INDEX, &readme_id)
        .await
        .map_err(RenameError::store("reading README's document"))?
        .and_then(|d| {
            d.source
                .get("path")
                .and_then(|p| p.as_str())
                .map(str::to_owned)
        });
    let report = fsck(Arc::clone(&store), INDEX, &FsPath::root()).await?;
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

/// Decides whether a run showed what it is meant to show.
fn judge(o: &ScenarioOutcome) -> (bool, String) {
    let readme = o.readme_at.as_deref().unwrap_or("<gone>");
    let same_count = o.documents.0 == o.documents.1;
    let locks_left = o.fsck.locks_active + o.fsck.locks_expired;
    let tidy = same_count && o.fsck.is_clean() && locks_left == 0;
    let moved_all = o.left_under_clinton == 0;
    match o.scenario {
        Scenario::TreeLocksAFirst => {
            let b_clean = matches!(o.b.result, Err(RenameError::SourceNotFound { .. }));
            let ok = tidy
                && o.a.result.is_ok()
                && b_clean
                && moved_all
                && readme == "/gormley/projects/elasticsearch/README.txt";
            (
                ok,
                format!("README is at {readme}; B failed cleanly: {b_clean}; tree clean: {tidy}"),
            )
        }
        Scenario::TreeLocksBFirst => {
            let ok = tidy
                && o.a.result.is_ok()
                && o.b.result.is_ok()
                && moved_all
                && readme == "/gormley/projects/elasticsearch/README.asciidoc";
            (
                ok,
                format!("README is at {readme}: both renames took effect; tree clean: {tidy}"),
            )
        }
        Scenario::NoLocksNoVersions => {
            let lost = o.a.result.is_ok()
                && o.b.result.is_ok()
                && readme == "/gormley/projects/elasticsearch/README.txt";
            (lost && same_count, format!(
                "both jobs reported success, yet README is at {readme}: B's rename was silently lost"
            ))
        }
        Scenario::VersionsOnly => {
            let conflict = matches!(o.a.result, Err(RenameError::Conflict { .. }));
            let half = o.left_under_clinton > 0 && o.a.report.rewritten > 0;
            let ok = conflict && half && same_count && !o.fsck.is_clean();
            (ok, format!(
                "A stopped on a conflict: {conflict}; {} documents moved, {} left under /clinton; fsck finds {} problem(s)",
                o.a.report.rewritten, o.left_under_clinton, o.fsck.problem_count
            ))
        }
    }
}

impl fmt::Display for ScenarioOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "── {} ──", self.scenario.title())?;
        writeln!(f, "expected: {}", self.scenario.expectation())?;
        for entry in &self.timeline {
            writeln!(
                f,
                "  {:>9.2} ms  {}  {}",
                entry.at.as_secs_f64() * 1e3,
                entry.job,
                entry.what
            )?;
        }
        writeln!(
            f,
            "documents: {} before, {} after",
            self.documents.0, self.documents.1
        )?;
        let problems = self.fsck.problem_count;
        if problems > 0 {
            let first = self.fsck.problems.first().map(String::as_str).unwrap_or("");
            writeln!(f, "fsck: {problems} problem(s), e.g. {first}")?;
        } else {
            writeln!(f, "fsck: clean")?;
        }
        let verdict = if self.as_expected {
            "as expected"
        } else {
            "NOT AS EXPECTED"
        };
        writeln!(f, "{verdict}: {}", self.verdict)
    }
}
