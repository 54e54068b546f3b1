//! `fsck`: checks that a tree is well-formed and that no lock is left behind.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use fs_locks::{LockClient, LockInfo, Observed};
use fs_model::{DocKind, FsDoc, FsPath};
use fs_store::{Scan, Scope, SharedStore, StoreError, StoredDoc};
use serde::Serialize;

use crate::error::{RenameError, Result};
use crate::tree::FsTree;

const PAGE: usize = 1_000;

/// What `fsck` found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FsckReport {
    /// The checked subtree.
    pub scope: String,
    /// Documents checked.
    pub documents: u64,
    /// Of which directories.
    pub dirs: u64,
    /// Of which files.
    pub files: u64,
    /// How many problems were found.
    pub problem_count: u64,
    /// What is wrong with the tree, the first hundred; empty for a clean tree.
    pub problems: Vec<String>,
    /// Lock documents whose lease is running (or that record none): jobs at work.
    pub locks_active: usize,
    /// Lock documents whose lease has run out: left by a job that died.
    pub locks_expired: usize,
    /// Renames journaled and not finished: running, or left by a job that died (then
    /// `fsrename recover` finishes them).
    pub journals_open: usize,
}

impl FsckReport {
    /// Returns true if the tree is well-formed. Locks are not part of this: they are
    /// reported, since jobs may be running.
    pub fn is_clean(&self) -> bool {
        self.problem_count == 0
    }
}

impl fmt::Display for FsckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fsck {}: {} ({}, {}), {}",
            self.scope,
            fs_model::plural(self.documents, "document", "documents"),
            fs_model::plural(self.dirs, "directory", "directories"),
            fs_model::plural(self.files, "file", "files"),
            fs_model::plural(self.problem_count, "problem", "problems")
        )?;
        for problem in &self.problems {
            writeln!(f, "  problem: {problem}")?;
        }
        if self.locks_active > 0 {
            writeln!(
                f,
                "  {} lock document(s) held by running jobs",
                self.locks_active
            )?;
        }
        if self.journals_open > 0 {
            writeln!(
                f,
                "  {} unfinished rename(s) in the journal: running, or for `fsrename recover`",
                self.journals_open
            )?;
        }
        if self.locks_expired > 0 {
            writeln!(
                f,
                "  {} lock document(s) expired: left by a job that died",
                self.locks_expired
            )?;
        }
        Ok(())
    }
}

/// Problems beyond this many are counted, not listed.
const MAX_LISTED: usize = 100;

/// Checks the documents at or under `scope`: every document parses and its `parent`, `name`
/// and `depth` agree with its `path`; no two documents share a path; every document's parent
/// exists and is a directory. Also counts the lock documents left in the lock index.
///
/// # Errors
/// [`RenameError::Store`] if the store failed (a broken tree is a report, not an error).
pub async fn fsck(store: SharedStore, index: &str, scope: &FsPath) -> Result<FsckReport> {
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
    let mut check = TreeCheck::new(scope);
    let mut scan = Scan::new(
        Arc::clone(&store),
        index,
        Scope::Subtree(scope.clone()),
        PAGE,
    );
    // Nothing in the loop stops the scan early: a failed page ends it, closed.
    let context = || format!("checking under `{scope}`");
    while let Some(hits) = scan
        .next_page()
        .await
        .map_err(RenameError::store(context()))?
    {
        for hit in hits {
            check.document(hit);
        }
    }
    scan.close().await;
    check.parents(&tree, scope).await?;
    let mut report = check.into_report();
    let (active, expired) = count_locks(&store, &tree.lock_index(), ignore).await?;
    report.locks_active = active;
    report.locks_expired = expired;
    report.journals_open = crate::journal::Journal::new(Arc::clone(&store), index)
        .list()
        .await?
        .len();
    Ok(report)
}

/// The tree half of a check under way: the documents counted, the problems found so far,
/// and the kind of each path seen, for the parents' check once every page is read.
struct TreeCheck {
    report: FsckReport,
    problems: Vec<String>,
    kinds: HashMap<FsPath, DocKind>,
}

impl TreeCheck {
    fn new(scope: &FsPath) -> TreeCheck {
        TreeCheck {
            report: FsckReport {
                scope: scope.to_string(),
                ..FsckReport::default()
            },
            problems: Vec::new(),
            kinds: HashMap::new(),
        }
    }

    /// Counts the document `hit`, and checks that it parses, that its fields agree with its
    /// path, and that no document seen before has its path.
    fn document(&mut self, hit: StoredDoc) {
        let (report, problems) = (&mut self.report, &mut self.problems);
        report.documents += 1;
        let doc: FsDoc = match serde_json::from_value(hit.source) {
            Ok(doc) => doc,
            Err(e) => {
                problems.push(format!(
                    "document `{}` is not a valid tree document: {e}",
                    hit.id
                ));
                return;
            }
        };
        match doc.kind {
            DocKind::Dir => report.dirs += 1,
            DocKind::File => report.files += 1,
        }
        if !doc.is_consistent() {
            problems.push(format!(
                "`{}` (document `{}`): parent/name/depth ({:?}, {:?}, {}) disagree with the path",
                doc.path,
                hit.id,
                doc.parent.as_ref().map(FsPath::as_str),
                doc.name,
                doc.depth
            ));
        }
        if self.kinds.insert(doc.path.clone(), doc.kind).is_some() {
            problems.push(format!(
                "`{}` is stored twice (again as document `{}`)",
                doc.path, hit.id
            ));
        }
    }

    /// Checks that the parent of every path seen is a directory: seen in the scan, or, for
    /// the scope's own parent, read from `tree`.
    async fn parents(&mut self, tree: &FsTree, scope: &FsPath) -> Result<()> {
        let (kinds, problems) = (&self.kinds, &mut self.problems);
        if kinds.get(&FsPath::root()) == Some(&DocKind::File) {
            problems.push("the root `/` is stored as a file".to_owned());
        }
        let mut outside: HashMap<FsPath, Option<DocKind>> = HashMap::new();
        let mut paths: Vec<&FsPath> = kinds.keys().collect();
        paths.sort();
        for path in paths {
            let Some(parent) = path.parent() else {
                continue;
            };
            let kind = if parent.is_root() {
                Some(DocKind::Dir)
            } else if let Some(kind) = kinds.get(&parent) {
                Some(*kind)
            } else if !parent.is_inside(scope) {
                // Only the scope's own parent lies outside what was scanned.
                match outside.get(&parent) {
                    Some(kind) => *kind,
                    None => {
                        let kind = tree.kind_of(&parent).await?;
                        outside.insert(parent.clone(), kind);
                        kind
                    }
                }
            } else {
                None
            };
            match kind {
                None => problems.push(format!(
                    "`{path}`: parent directory `{parent}` does not exist"
                )),
                Some(DocKind::File) => {
                    problems.push(format!("`{path}`: parent `{parent}` is a file"))
                }
                Some(DocKind::Dir) => {}
            }
        }
        Ok(())
    }

    /// The report of the tree's check: the problems counted, and the first
    /// [`MAX_LISTED`] listed.
    fn into_report(self) -> FsckReport {
        let TreeCheck {
            mut report,
            mut problems,
            ..
        } = self;
        report.problem_count = problems.len() as u64;
        if problems.len() > MAX_LISTED {
            let more = problems.len() - MAX_LISTED;
            problems.truncate(MAX_LISTED);
            problems.push(format!("... and {more} more"));
        }
        report.problems = problems;
        report
    }
}

/// Counts lock documents with a running lease and with an expired one, but those held by
/// `ignore` alone.
async fn count_locks(
    store: &SharedStore,
    lock_index: &str,
    ignore: Option<&str>,
) -> Result<(usize, usize)> {
    let client = LockClient::builder(Arc::clone(store), lock_index).build();
    let locks = match client.list_locks().await {
        Ok(locks) => locks,
        Err(fs_locks::LockError::Store {
            cause: StoreError::IndexNotFound { .. },
            ..
        }) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let locks: Vec<LockInfo> = locks
        .into_iter()
        .filter(|l| !ignore.is_some_and(|pid| held_only_by(l, pid)))
        .collect();
    let now = fs_locks::LeaseClock::new().now_ms();
    let expired = locks.iter().filter(|l| is_expired(l, now)).count();
    Ok((locks.len() - expired, expired))
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

/// A lock is expired when it records leases and all of them have run out; foreign locks,
/// which record none, count as active.
fn is_expired(lock: &LockInfo, now: i64) -> bool {
    match &lock.observed {
        Observed::Exclusive {
            expires_at: Some(at),
            ..
        } => *at < now,
        Observed::Exclusive {
            expires_at: None, ..
        } => false,
        Observed::Group { holders, .. } => {
            lock.observed.foreign_shares() == 0
                && !holders.is_empty()
                && holders.values().all(|h| h.expires_at < now)
        }
    }
}
