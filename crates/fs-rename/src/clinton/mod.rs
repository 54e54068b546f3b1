//! The book's scenario: `/clinton` is renamed to `/gormley` (job A) while
//! `/clinton/projects/elasticsearch/README.txt` is renamed to `README.asciidoc` (job B).
//!
//! [`run_scenario`] runs it one of four ways on a fresh in-memory store in near-real-time mode,
//! forcing the interesting interleaving with hooks, and records a timeline:
//!
//! 1. tree locks, A first: B waits for A, then fails cleanly: its source has moved;
//! 2. tree locks, B first: A waits for B's shared locks, then moves everything, README
//!    included under its new name;
//! 3. no locks, no versions: A's write, computed from what it read before B's change, silently
//!    overwrites B's rename (a lost update);
//! 4. versions only (conditional writes, no locks): A hits B's change, stops on a version
//!    conflict and leaves the tree half-moved: the book's first failure mode.
//!
//! A [`Stage`] runs them on a store of the caller's, slowed to a [`Pace`] someone can watch
//! and told to a [`Narrator`] as they go: `fsrename demo --serve` runs them on the store its
//! live page shows.
//!
//! - `stage.rs`: the store, the pace, the narration, and the two jobs' cues;
//! - `judge.rs`: whether a run showed what it should, and how its outcome reads.

mod judge;
mod stage;

pub use stage::{Narration, Narrator, Pace, Stage};

use std::sync::Arc;
use std::time::Duration;

use fs_model::{FsDoc, FsPath};
use fs_store::{SharedStore, SqliteOptions, SqliteStore};

use crate::error::{RenameError, Result};
use crate::fsck::FsckReport;
use crate::job::RenameOutcome;
use crate::strategy::Strategy;
use crate::tree::FsTree;

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
    Stage::new(store, INDEX).run(scenario, files).await
}
