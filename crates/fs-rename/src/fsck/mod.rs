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
use serde::Serialize;

use crate::error::{RenameError, Result};
use crate::tree::FsTree;

mod tree_check;

use tree_check::TreeCheck;

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
    let mut check = TreeCheck::new(&tree, scope);
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
    let (active, expired) = count_locks(&store, &tree.lock_index(), ignore).await?;
    report.locks_active = active;
    report.locks_expired = expired;
    report.journals_open = crate::journal::Journal::new(Arc::clone(&store), index)
        .list()
        .await?
        .len();
    Ok(report)
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
