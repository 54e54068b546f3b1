//! The copy: every document under the source, page by page in path order (parents before
//! children), written under the destination with an id derived from the journal id and the
//! source document's id.
//!
//! Each page takes two bulk requests. The first *claims* the copies' ids with `_create`
//! ([`FsDoc::claim`]: a document with no path, so no part of the tree); the second, sent only
//! after a check that the locks are still this job's, writes each copy over its claim,
//! conditionally on the claim's version. A `_create` cannot be fenced, a conditional write
//! can: a job paused past its lease that wakes up and sends its creates after a recovery
//! finished the copy (and someone deleted it since) adds only claims, which nobody sees and
//! recovery sweeps, never a document of the tree.
//!
//! The derived ids make the copy idempotent. A claim that finds its id taken has found this
//! job's own claim or copy, made by an earlier send (an answer lost in a timeout) or by the
//! job a recovery is finishing: a claim goes on to be written over, a copy counts as done
//! once a read shows it is exactly the copy. Anything else there is a conflict, and the job
//! stops.

use std::sync::OnceLock;

use fs_locks::LockClient;
use fs_model::{FsDoc, FsPath};
use fs_store::{BulkOp, Scope, StoreError, Version};
use serde_json::Value;

use super::before_write::Hold;
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::tree::{next_entries, Entry, FsTree};

impl Renamer {
    /// Copies everything at or under `from` to `to`; `total` is the count the checks found
    /// (once known).
    pub(super) async fn copy_all(
        &self,
        hold: Hold<'_>,
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let page_size = self.config.page_size;
        // Under locks nothing is added under the source (as for a rename).
        let mut scan = self.subtree_scan(
            hold.tree,
            Scope::Subtree(from.clone()),
            total.get(),
            page_size,
        );
        let copied = async {
            let context = || format!("scanning under `{from}`");
            // The scan is in path order, so a directory's page is written (and acknowledged)
            // before the page of anything under it is sent.
            while let Some(page) = next_entries(&mut scan, hold.tree.index(), context).await? {
                let entries = page.collect::<Result<Vec<_>>>()?;
                report.found += entries.len() as u64;
                self.before_page(
                    hold,
                    &entries,
                    from,
                    (report.kind, report.rewritten, report.found),
                )
                .await?;
                self.copy_page(hold.tree, hold.locks, &entries, (from, to), job_id, report)
                    .await?;
                self.emit(RenameEvent::Progress {
                    done: report.rewritten,
                    total: total.get().copied().unwrap_or(0).max(report.found),
                });
            }
            Ok(())
        }
        .await;
        // However the copy ended, what the store keeps open for the scan is closed before the
        // locks are released.
        scan.close().await;
        copied
    }

    /// Copies one page in two bulk requests: claims on the copies' ids, then, once the
    /// locks are known to be still this job's, the copies over their claims.
    async fn copy_page(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        entries: &[Entry],
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        report: &mut RenameReport,
    ) -> Result<()> {
        let copies = copies_of(tree, entries, (from, to), job_id)?;
        let context = format!("copying documents under `{from}` to `{to}`");
        // Every item's fate is tallied before any failure is reported: the other items of a
        // bulk request are written whatever happens to one of them.
        let mut failure: Option<(usize, StoreError)> = None;
        // 1. Claims.
        let mut claimed = self
            .claim(tree, &copies, job_id, &context, &mut failure, report)
            .await?;
        if let Some((i, e)) = failure {
            return Err(copy_failure(entries, i, e, (from, to), report));
        }
        if claimed.is_empty() {
            return Ok(());
        }

        // 2. The copies, each conditional on its claim's version. A job paused after its
        //    claims were acknowledged and past its lease stops here; one paused after this
        //    check writes nothing a recovery has changed since (the version moved on), and
        //    nothing another job deleted (it is gone).
        locks.ensure_held(from.as_str()).await?;
        claimed.sort_unstable_by_key(|&(i, _)| i);
        let writes: Vec<BulkOp> = claimed
            .iter()
            .map(|&(i, version)| BulkOp::Index {
                id: copies[i].id.clone(),
                source: copies[i].source.clone(),
                if_version: Some(version),
            })
            .collect();
        let mut changed: Vec<(usize, StoreError)> = Vec::new();
        for answer in self.send_page(tree, writes, &context, report).await? {
            let i = claimed[answer.index].0;
            match answer.result {
                Ok(_) => report.rewritten += 1,
                Err(e) if e.is_conflict() => changed.push((i, e)),
                Err(e) => {
                    failure.get_or_insert((i, e));
                }
            }
        }
        // A conflict may be the first send having landed (`read_back` says how).
        for (i, found) in self.read_copies(tree, &copies, &changed).await? {
            match found {
                Found::Copy => report.rewritten += 1,
                Found::Claim(_) | Found::Other => {
                    failure.get_or_insert((i, conflict(tree, &copies[i])));
                }
            }
        }
        match failure {
            Some((i, e)) => Err(copy_failure(entries, i, e, (from, to), report)),
            None => Ok(()),
        }
    }

    /// Claims the id of each of `copies` in one bulk request; returns the claims to write
    /// over, by index in `copies`, with their versions. A claim already there is this job's
    /// (the id is derived from the job): an earlier send whose answer was lost, or the job a
    /// recovery is finishing. A copy found already there counts as written; the first other
    /// failure goes to `failure`.
    async fn claim(
        &self,
        tree: &FsTree,
        copies: &[Copy],
        job_id: &str,
        context: &str,
        failure: &mut Option<(usize, StoreError)>,
        report: &mut RenameReport,
    ) -> Result<Vec<(usize, Version)>> {
        let claims: Vec<BulkOp> = copies
            .iter()
            .map(|c| BulkOp::Create {
                id: c.id.clone(),
                source: FsDoc::claim(job_id),
            })
            .collect();
        let mut claimed: Vec<(usize, Version)> = Vec::new();
        let mut taken: Vec<(usize, StoreError)> = Vec::new();
        for answer in self.send_page(tree, claims, context, report).await? {
            match answer.result {
                Ok(version) => claimed.push((answer.index, version)),
                Err(e) if e.is_conflict() => taken.push((answer.index, e)),
                Err(e) => {
                    failure.get_or_insert((answer.index, e));
                }
            }
        }
        for (i, found) in self.read_copies(tree, copies, &taken).await? {
            match found {
                Found::Copy => report.rewritten += 1,
                Found::Claim(version) => claimed.push((i, version)),
                Found::Other => {
                    failure.get_or_insert((i, conflict(tree, &copies[i])));
                }
            }
        }
        Ok(claimed)
    }

    /// Reads the documents at the ids of `copies[i]` for each `(i, conflict)` of `which` in one
    /// request (none for none; again for those a lagging copy answered); returns, by `i`, what
    /// each holds.
    async fn read_copies(
        &self,
        tree: &FsTree,
        copies: &[Copy],
        which: &[(usize, StoreError)],
    ) -> Result<Vec<(usize, Found)>> {
        if which.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = which.iter().map(|(i, _)| copies[*i].id.clone()).collect();
        let conflicts: Vec<&StoreError> = which.iter().map(|(_, e)| e).collect();
        let found = super::read_back::read_back(tree, &ids, &conflicts).await?;
        Ok(which
            .iter()
            .map(|(i, _)| *i)
            .zip(found)
            .map(|(i, doc)| {
                let found = match doc {
                    Some(d) if d.source == copies[i].source => Found::Copy,
                    Some(d) if FsDoc::claim_job(&d.source).is_some() => Found::Claim(d.version),
                    _ => Found::Other,
                };
                (i, found)
            })
            .collect())
    }
}

/// One copy of a page: its id and its source.
struct Copy {
    id: String,
    source: Value,
}

/// The copies of `entries`, moved from under `from` to under `to`, with the ids derived
/// from `job_id` and each entry's id.
fn copies_of(
    tree: &FsTree,
    entries: &[Entry],
    (from, to): (&FsPath, &FsPath),
    job_id: &str,
) -> Result<Vec<Copy>> {
    let mut copies = Vec::with_capacity(entries.len());
    for entry in entries {
        // A copy is no file on disk: it has no identity (see `FsDoc::identity`).
        let copy = entry.doc.renamed(from, to)?.with_identity(None);
        let id = FsDoc::copy_id(job_id, &entry.id);
        let source = serde_json::to_value(&copy).map_err(|e| RenameError::BadDocument {
            index: tree.index().to_owned(),
            id: id.clone(),
            message: e.to_string(),
        })?;
        copies.push(Copy { id, source });
    }
    Ok(copies)
}

/// What is at a copy's id.
enum Found {
    /// Exactly the copy.
    Copy,
    /// A claim (necessarily this job's: the id derives from the job id), at this version.
    Claim(Version),
    /// Nothing, or something else.
    Other,
}

fn conflict(tree: &FsTree, copy: &Copy) -> StoreError {
    StoreError::Conflict {
        index: tree.index().to_owned(),
        id: copy.id.clone(),
        exists: true,
        current: None,
    }
}

/// The error that stops a copy at `entries[i]`.
fn copy_failure(
    entries: &[Entry],
    i: usize,
    e: StoreError,
    (from, to): (&FsPath, &FsPath),
    report: &RenameReport,
) -> RenameError {
    let path = entries[i].doc.path.to_string();
    match e {
        StoreError::Conflict { .. } => RenameError::Conflict {
            kind: report.kind,
            path: match entries[i].doc.renamed(from, to) {
                Ok(copy) => copy.path.to_string(),
                Err(_) => path,
            },
            rewritten: report.rewritten,
            found: report.found,
        },
        e => RenameError::store(format!("copying `{path}`"))(e),
    }
}
