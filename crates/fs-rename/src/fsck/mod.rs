//! `fsck`: checks that a tree is well-formed and that no lock is left behind.
//!
//! The tree is read once, in path order, and checked as it is read (`tree_check.rs`): what is
//! remembered is the chain of directories the rest of the scan can still reach, not the tree,
//! so the check takes the same memory at ten documents and at ten million.

use std::fmt;
use std::sync::Arc;

use fs_locks::{LockClient, LockInfo, Observed};
use fs_model::FsPath;
use fs_store::{Scan, Scope, SharedStore, StoreError, READ_PAGE};
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::{RenameError, Result};
use crate::journal::JournalEntry;
use crate::kind::JobKind;
use crate::tree::FsTree;

mod leftovers;
mod tree_check;

use leftovers::{unfinished_jobs, LockCounts};
pub use leftovers::{Holding, UnfinishedJob};
use tree_check::TreeCheck;

/// What `fsck` found: the tree's verdict, the problems that make it broken, the jobs left
/// half-way (whose problems are theirs, not the tree's), and the lock documents by where they
/// stand.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct FsckReport {
    /// The checked subtree.
    pub scope: String,
    /// Documents checked.
    pub documents: u64,
    /// Of which directories.
    pub dirs: u64,
    /// Of which files.
    pub files: u64,
    /// `clean`, `unfinished` or `broken`: see [`Verdict`].
    pub verdict: Verdict,
    /// Problems that no unfinished job explains: the tree is broken. 0 for a tree that is
    /// not.
    pub problem_count: u64,
    /// The first hundred of them (and a last line counting the others).
    pub problems: Vec<String>,
    /// Jobs (renames, copies, deletes) journaled and not finished that touch the subtree:
    /// at work, or left by a job that died or was stopped, with the problems they leave
    /// while half-way and the command that finishes them.
    pub unfinished: Vec<UnfinishedJob>,
    /// Lock documents held by a job at work (a lease running, its process not proven gone),
    /// or recording no lease (the book's clients).
    pub locks_active: usize,
    /// Lock documents whose holders' process ran on this machine and runs no more, their
    /// lease still running: `fsrename recover` clears them (and finishes their job) now.
    pub locks_gone: usize,
    /// Lock documents whose lease has run out: left by a job that died.
    pub locks_expired: usize,
}

/// What a check says of a tree, in one word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Well-formed, no job half-way, no lock left by a job that died.
    #[default]
    Clean,
    /// Not broken, but not finished: a journaled job is half-way (at work, or left by a job
    /// that died, for `fsrename recover`), or a job that died left locks. Every problem of
    /// the tree lies under such a job.
    Unfinished,
    /// Problems that no unfinished job explains.
    Broken,
}

impl FsckReport {
    /// Returns true if the tree is well-formed as it stands: no problem at all, not even
    /// under a job half-way. Locks are not part of this: they are reported, since jobs may be
    /// running.
    pub fn is_clean(&self) -> bool {
        self.problem_count == 0 && self.unfinished.iter().all(|j| j.problem_count == 0)
    }

    /// Returns true if the tree has problems that no unfinished job explains.
    pub fn is_broken(&self) -> bool {
        self.problem_count > 0
    }

    /// Journal entries not finished (jobs at work, or left for recovery).
    pub fn journals_open(&self) -> usize {
        self.unfinished.len()
    }

    /// Decides [`FsckReport::verdict`] from the rest.
    fn decide(&mut self) {
        self.verdict = if self.is_broken() {
            Verdict::Broken
        } else if !self.unfinished.is_empty() || self.locks_gone + self.locks_expired > 0 {
            Verdict::Unfinished
        } else {
            Verdict::Clean
        };
    }

    /// Attributes a problem at `path` (none for a document that does not parse) to the first
    /// unfinished job under which it lies, or else to the tree.
    fn problem(&mut self, path: Option<&FsPath>, problem: String) {
        if let Some(job) = path.and_then(|p| self.unfinished.iter_mut().find(|j| j.covers(p))) {
            job.problem(problem);
            return;
        }
        self.problem_count += 1;
        if self.problems.len() < MAX_LISTED {
            self.problems.push(problem);
        }
    }

    /// Adds the count of the problems not listed as a last line.
    fn close_problems(&mut self) {
        let listed = self.problems.len() as u64;
        if self.problem_count > listed {
            let more = self.problem_count - listed;
            self.problems.push(format!("... and {more} more"));
        }
    }
}

/// Problems of the tree beyond this many are counted, not listed.
const MAX_LISTED: usize = 100;

impl fmt::Display for FsckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.verdict {
            Verdict::Clean => "clean".to_owned(),
            Verdict::Unfinished => {
                format!("not broken, but unfinished: {}", self.unfinished_in_words())
            }
            Verdict::Broken => format!(
                "BROKEN: {}",
                fs_model::plural(self.problem_count, "problem", "problems")
            ),
        };
        writeln!(
            f,
            "fsck {}: {} ({}, {}): {verdict}",
            self.scope,
            fs_model::plural(self.documents, "document", "documents"),
            fs_model::plural(self.dirs, "directory", "directories"),
            fs_model::plural(self.files, "file", "files"),
        )?;
        for job in &self.unfinished {
            let state = match job.state {
                Holding::Live => "at work (its locks are leased and renewed)".to_owned(),
                Holding::HolderGone => {
                    "left by a process that is gone (stopped or killed)".to_owned()
                }
                Holding::LeaseExpired => {
                    "left by a job that died (its locks' lease ran out)".to_owned()
                }
            };
            writeln!(
                f,
                "  unfinished {} (journal {}): {state}",
                job.describe(),
                job.job_id
            )?;
            if job.problem_count > 0 {
                writeln!(
                    f,
                    "    {} out of place under it while it is half-way, for example:",
                    fs_model::plural(job.problem_count, "document", "documents")
                )?;
                for problem in &job.problems {
                    writeln!(f, "      {problem}")?;
                }
            }
            writeln!(f, "    finish it: {}", job.finish)?;
        }
        for problem in &self.problems {
            writeln!(f, "  problem: {problem}")?;
        }
        if self.locks_active > 0 {
            writeln!(
                f,
                "  {} held by jobs at work",
                fs_model::plural(self.locks_active as u64, "lock document", "lock documents")
            )?;
        }
        if self.locks_gone > 0 {
            writeln!(
                f,
                "  {} held by processes that ran on this machine and run no more: `fsrename recover` clears them now",
                fs_model::plural(self.locks_gone as u64, "lock document", "lock documents")
            )?;
        }
        if self.locks_expired > 0 {
            writeln!(
                f,
                "  {} expired, left by a job that died: `fsrename recover` clears them",
                fs_model::plural(self.locks_expired as u64, "lock document", "lock documents")
            )?;
        }
        Ok(())
    }
}

impl FsckReport {
    /// `1 rename left for recovery`, `1 copy at work and 1 delete left for recovery`, or
    /// `locks left by a job that died`.
    fn unfinished_in_words(&self) -> String {
        let mut parts = Vec::new();
        for (left, how) in [(false, "at work"), (true, "left for `fsrename recover`")] {
            for kind in [JobKind::Rename, JobKind::Copy, JobKind::Delete] {
                let n = self
                    .unfinished
                    .iter()
                    .filter(|j| j.kind == kind && j.is_left() == left)
                    .count() as u64;
                if n > 0 {
                    let (one, many) = match kind {
                        JobKind::Rename => ("rename", "renames"),
                        JobKind::Copy => ("copy", "copies"),
                        JobKind::Delete => ("delete", "deletes"),
                    };
                    parts.push(format!("{} {how}", fs_model::plural(n, one, many)));
                }
            }
        }
        if parts.is_empty() {
            "locks left by a job that died, for `fsrename recover`".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Checks the documents at or under `scope`: every document parses and its `parent`, `name`
/// and `depth` agree with its `path`; no two documents share a path; every document's parent
/// exists and is a directory. A problem under a job journaled and not finished (a rename
/// half-way leaves documents whose parent is not moved yet) is that job's, not the tree's.
/// Also counts the lock documents in the lock index by where they stand.
///
/// # Errors
/// [`RenameError::Store`] if the store failed (a broken tree is a report, not an error).
pub async fn fsck(store: SharedStore, index: &str, scope: &FsPath) -> Result<FsckReport> {
    // Leases are judged by the server's clock, not this machine's.
    fs_locks::LeaseClock::sync(store.as_ref()).await;
    fsck_ignoring(store, index, scope, None).await
}

/// [`fsck`], leaving out of the lock counts the lock documents held by `ignore` alone (the
/// owner of the shared lock a consistent check holds while it runs).
pub(crate) async fn fsck_ignoring(
    store: SharedStore,
    index: &str,
    scope: &FsPath,
    ignore: Option<&str>,
) -> Result<FsckReport> {
    let tree = FsTree::new(Arc::clone(&store), index);
    tree.refresh().await?;
    // The journal and the locks first: a problem met during the scan is a job's if it lies
    // under one journaled before the scan began.
    let entries: Vec<JournalEntry> = crate::journal::Journal::new(Arc::clone(&store), index)
        .list()
        .await?
        .into_iter()
        .map(|(entry, _)| entry)
        .collect();
    let locks = list_locks(&store, &tree.lock_index(), ignore).await?;
    let now = fs_locks::LeaseClock::new().now_ms();
    let counts = LockCounts::of(&locks, now);
    let report = FsckReport {
        scope: scope.to_string(),
        unfinished: unfinished_jobs(&entries, &locks, scope, now),
        locks_active: counts.live,
        locks_gone: counts.gone,
        locks_expired: counts.expired,
        ..FsckReport::default()
    };
    let mut check = TreeCheck::new(&tree, scope, report);
    // Read a page ahead: the server finds the next page while this one is checked (at 1 M
    // documents on Elasticsearch the two took about as long as each other).
    let mut pages = Scan::new(
        Arc::clone(&store),
        index,
        Scope::Subtree(scope.clone()),
        READ_PAGE,
    )
    .read_ahead();
    let context = || format!("checking under `{scope}`");
    let checked = async {
        while let Some(hits) = pages
            .next_page()
            .await
            .map_err(RenameError::store(context()))?
        {
            for hit in hits {
                check.document(hit).await?;
            }
        }
        Ok::<_, RenameError>(())
    }
    .await;
    // A failed page ended the scan, closed; a check that cannot go on closes it here.
    pages.close().await;
    checked?;
    let mut report = check.into_report();
    report.decide();
    Ok(report)
}

/// The lock documents of `lock_index` (none if it does not exist), but those held by `ignore`
/// alone.
async fn list_locks(
    store: &SharedStore,
    lock_index: &str,
    ignore: Option<&str>,
) -> Result<Vec<LockInfo>> {
    let client = LockClient::builder(Arc::clone(store), lock_index).build();
    let locks = match client.list_locks().await {
        Ok(locks) => locks,
        Err(fs_locks::LockError::Store {
            cause: StoreError::IndexNotFound { .. },
            ..
        }) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    Ok(locks
        .into_iter()
        .filter(|l| !ignore.is_some_and(|pid| held_only_by(l, pid)))
        .collect())
}

/// True if `process_id` is the lock's only holder.
fn held_only_by(lock: &LockInfo, process_id: &str) -> bool {
    match &lock.observed {
        Observed::Exclusive {
            process_id: owner, ..
        } => owner.as_deref() == Some(process_id),
        Observed::Group { holders, .. } => {
            lock.observed.foreign_shares() == 0
                && !holders.is_empty()
                && holders.keys().all(|holder| holder == process_id)
        }
    }
}
