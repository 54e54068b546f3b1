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
//! Where the store has write gates (`copy_gated.rs`), a copy of more than a page writes each
//! copy once, through the job's gate, instead: the gate is what fences it.
//!
//! The derived ids make the copy idempotent. A claim that finds its id taken has found this
//! job's own claim or copy, made by an earlier send (an answer lost in a timeout) or by the
//! job a recovery is finishing: a claim goes on to be written over, a copy counts as done
//! once a read shows it is exactly the copy. Anything else there is a conflict, and the job
//! stops.

use std::sync::OnceLock;

use fs_model::{FsDoc, FsPath};
use fs_store::{BulkOp, Scope, StoreError, Version};
use serde_json::Value;

use super::before_write::Hold;
use super::bulk::WriteTo;
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::tree::{next_entries, Entry, FsTree};

impl Renamer {
    /// Copies everything at or under `from` to `to`; `total` is the count the checks found
    /// (once known): through a write gate where the store has them and the copy is more than
    /// a page (`copy_gated.rs`), with claims otherwise.
    pub(super) async fn copy_all(
        &self,
        hold: Hold<'_>,
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let page_size = self.config.page_size;
        // Where the store has write gates, the copies go through one (one write a copy).
        let gate = self
            .open_copy_gate(hold.tree, job_id, total.get().copied())
            .await?;
        // Under locks nothing is added under the source (as for a rename).
        let mut scan = self.subtree_scan(
            hold.tree,
            Scope::Subtree(from.clone()),
            total.get(),
            page_size,
        );
        let copied = match gate.as_deref() {
            Some(gate) => {
                let target = (from, to, job_id);
                self.copy_through_gate(hold, &mut scan, target, gate, total, report)
                    .await
            }
            None => {
                self.copy_with_claims(hold, &mut scan, (from, to), job_id, total, report)
                    .await
            }
        };
        // However the copy ended, what the store keeps open for the scan is closed, and the
        // gate shut (its writes done), before the locks are released.
        scan.close().await;
        let shut = match gate {
            Some(_) => self.shut_copy_gates(hold.tree, job_id).await,
            None => Ok(()),
        };
        match (copied, shut) {
            (Err(e), Err(shut)) => {
                tracing::warn!(job = %job_id, error = %shut, "shutting the copy's write gate failed; recovery shuts it");
                Err(e)
            }
            (copied, shut) => copied.and(shut),
        }
    }

    /// The copy with a claim on each copy's id (stores without write gates, and copies of a
    /// page or less): a pipeline two pages deep. While the copies of one page are written
    /// over their claims, the next page is read and its claims sent. Claims are no part of
    /// the tree, so only the writes keep the path order (a page's written, and acknowledged,
    /// before the next page's are sent: no copy is ever seen without its parent), and the
    /// server has a second request to work on meanwhile, on its second core. At most two
    /// pages are held.
    async fn copy_with_claims(
        &self,
        hold: Hold<'_>,
        scan: &mut fs_store::Scan,
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let context = || format!("scanning under `{from}`");
        let index = hold.tree.index();
        let mut pending: Option<Claimed> = None;
        loop {
            let (mut write_retries, mut claim_retries) = (0, 0);
            let progress = (report.kind, report.rewritten, report.found);
            let write = async {
                match pending.take() {
                    Some(page) => self
                        .write_claimed(hold, page, (from, to), &mut write_retries)
                        .await
                        .map(Some),
                    None => Ok(None),
                }
            };
            let next = async {
                let Some(page) = next_entries(scan, index, context).await? else {
                    return Ok(None);
                };
                let entries = page.collect::<Result<Vec<_>>>()?;
                self.before_page(hold, &entries, from, progress).await?;
                self.claim_page(hold.tree, entries, (from, to), job_id, &mut claim_retries)
                    .await
                    .map(Some)
            };
            let (written, next): (Result<Option<Written>>, Result<Option<Claimed>>) =
                tokio::join!(write, next);
            report.retries += write_retries + claim_retries;
            if let Some(written) = written? {
                self.tally_written(written, (from, to), total, report)?;
            }
            let Some(claimed) = next? else {
                return Ok(());
            };
            report.found += claimed.entries.len() as u64;
            report.rewritten += claimed.done;
            if let Some((i, e)) = claimed.failure {
                let path = claimed.entries[i].doc.path.clone();
                return Err(copy_failure((path, (from, to)), e, report));
            }
            pending = Some(claimed);
        }
    }

    /// Counts a page's copies written into `report`, and says so (progress counts copies
    /// written, once they are: the last page's progress is the job's last write); the page's
    /// failure, if any, stops the copy.
    pub(super) fn tally_written(
        &self,
        written: Written,
        (from, to): (&FsPath, &FsPath),
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        report.rewritten += written.count;
        if let Some((path, e)) = written.failure {
            return Err(copy_failure((path, (from, to)), e, report));
        }
        self.emit(RenameEvent::Progress {
            done: report.rewritten,
            total: total.get().copied().unwrap_or(0).max(report.found),
        });
        Ok(())
    }

    /// The first half of a page's copy: claims on the copies' ids, in one bulk request.
    async fn claim_page(
        &self,
        tree: &FsTree,
        entries: Vec<Entry>,
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        retries: &mut u64,
    ) -> Result<Claimed> {
        let copies = copies_of(&entries, (from, to), job_id)?;
        let context = format!("copying documents under `{from}` to `{to}`");
        // Every item's fate is tallied before any failure is reported: the other items of a
        // bulk request are written whatever happens to one of them.
        let mut failure: Option<(usize, StoreError)> = None;
        let mut done = 0;
        let claimed = self
            .claim(
                tree,
                &copies,
                (job_id, &context),
                &mut failure,
                (&mut done, retries),
            )
            .await?;
        Ok(Claimed {
            entries,
            copies,
            claimed,
            done,
            failure,
        })
    }

    /// The second half: once the locks are known to be still this job's, the copies over
    /// their claims, in one bulk request. Returns how many were written, and the first
    /// failure with the path of the copy it stopped at.
    async fn write_claimed(
        &self,
        hold: Hold<'_>,
        page: Claimed,
        (from, to): (&FsPath, &FsPath),
        retries: &mut u64,
    ) -> Result<Written> {
        let Claimed {
            entries,
            copies,
            mut claimed,
            ..
        } = page;
        if claimed.is_empty() {
            return Ok(Written {
                count: 0,
                failure: None,
            });
        }
        let tree = hold.tree;
        let context = format!("copying documents under `{from}` to `{to}`");
        // The copies, each conditional on its claim's version. A job paused after its claims
        // were acknowledged and past its lease stops here; one paused after this check writes
        // nothing a recovery has changed since (the version moved on), and nothing another job
        // deleted (it is gone).
        hold.locks.ensure_held(from.as_str()).await?;
        claimed.sort_unstable_by_key(|&(i, _)| i);
        let to_index = WriteTo::Index { refresh: false };
        let (count, failure) = self
            .write_over_claims(tree, to_index, &copies, &claimed, &context, retries)
            .await?;
        Ok(Written {
            count,
            failure: failure.map(|(i, e)| (entries[i].doc.path.clone(), e)),
        })
    }

    /// Writes the copies `claims` name (by index in `copies`, with the version of the claim
    /// at each one's id) over their claims, each conditional on that version, in one bulk
    /// request to `to`. A conflict may be the first send having landed: what is there is
    /// read, and only this job's copy counts. Returns how many copies are there, and the
    /// first failure, by index in `copies`.
    ///
    /// The one conditional write of a copy, for both fences: the claims' copy (`write_claimed`)
    /// and the gated copy meeting a claim an earlier run made (`copy_gated.rs`).
    pub(super) async fn write_over_claims(
        &self,
        tree: &FsTree,
        to: WriteTo<'_>,
        copies: &[Copy],
        claims: &[(usize, Version)],
        context: &str,
        retries: &mut u64,
    ) -> Result<(u64, Option<(usize, StoreError)>)> {
        let mut written = 0;
        let mut failure: Option<(usize, StoreError)> = None;
        if claims.is_empty() {
            return Ok((written, failure));
        }
        let write = |n: usize| {
            let (i, version) = claims[n];
            Ok(BulkOp::Index {
                id: copies[i].id.clone(),
                source: copies[i].source(tree.index())?,
                if_version: Some(version),
            })
        };
        let mut changed: Vec<(usize, StoreError)> = Vec::new();
        let sent = (claims.len(), write);
        for answer in self.send_built_to(tree, to, sent, context, retries).await? {
            let i = claims[answer.index].0;
            match answer.result {
                Ok(_) => written += 1,
                Err(e) if e.is_conflict() => changed.push((i, e)),
                Err(e) => {
                    failure.get_or_insert((i, e));
                }
            }
        }
        for (i, found) in self.read_copies(tree, copies, &changed).await? {
            match found {
                Found::Copy => written += 1,
                Found::Claim(_) | Found::Other => {
                    failure.get_or_insert((i, conflict(tree, &copies[i])));
                }
            }
        }
        Ok((written, failure))
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
        (job_id, context): (&str, &str),
        failure: &mut Option<(usize, StoreError)>,
        (done, retries): (&mut u64, &mut u64),
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
        for answer in self.send_ops(tree, claims, context, retries).await? {
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
                Found::Copy => *done += 1,
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
    pub(super) async fn read_copies(
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
        which
            .iter()
            .map(|(i, _)| *i)
            .zip(found)
            .map(|(i, doc)| {
                let found = match doc {
                    Some(d) if d.source == copies[i].source(tree.index())? => Found::Copy,
                    Some(d) if FsDoc::claim_job(&d.source).is_some() => Found::Claim(d.version),
                    _ => Found::Other,
                };
                Ok((i, found))
            })
            .collect()
    }
}

/// A page whose claims are made: its documents, their copies, the claims to write over (by
/// index in `copies`, with their versions), the copies found already made, and the first
/// failure.
struct Claimed {
    entries: Vec<Entry>,
    copies: Vec<Copy>,
    claimed: Vec<(usize, Version)>,
    done: u64,
    failure: Option<(usize, StoreError)>,
}

/// What writing a page's copies did: how many were written, and the first failure with the
/// path it stopped at.
pub(super) struct Written {
    pub(super) count: u64,
    pub(super) failure: Option<(FsPath, StoreError)>,
}

/// One copy of a page: its id and the document.
///
/// The document is kept typed, and each send makes the JSON value it sends from it: a value
/// kept here besides would be one more deep copy of every source, and one more free of it,
/// in a client whose time is mostly spent allocating and freeing such values.
pub(super) struct Copy {
    pub(super) id: String,
    pub(super) doc: FsDoc,
}

impl Copy {
    /// The copy's source, as sent and as stored.
    pub(super) fn source(&self, index: &str) -> Result<Value> {
        serde_json::to_value(&self.doc).map_err(|e| RenameError::BadDocument {
            index: index.to_owned(),
            id: self.id.clone(),
            message: e.to_string(),
        })
    }
}

/// The copies of `entries`, moved from under `from` to under `to`, with the ids derived
/// from `job_id` and each entry's id.
pub(super) fn copies_of(
    entries: &[Entry],
    (from, to): (&FsPath, &FsPath),
    job_id: &str,
) -> Result<Vec<Copy>> {
    let mut copies = Vec::with_capacity(entries.len());
    for entry in entries {
        // A copy is no file on disk: it has no identity (see `FsDoc::identity`).
        let doc = entry.doc.renamed(from, to)?.with_identity(None);
        let id = FsDoc::copy_id(job_id, &entry.id);
        copies.push(Copy { id, doc });
    }
    Ok(copies)
}

/// What is at a copy's id.
pub(super) enum Found {
    /// Exactly the copy.
    Copy,
    /// A claim (necessarily this job's: the id derives from the job id), at this version.
    Claim(Version),
    /// Nothing, or something else.
    Other,
}

pub(super) fn conflict(tree: &FsTree, copy: &Copy) -> StoreError {
    StoreError::Conflict {
        index: tree.index().to_owned(),
        id: copy.id.clone(),
        exists: true,
        current: None,
    }
}

/// The error that stops a copy at the document at `path` (under `from`, copied under `to`).
fn copy_failure(
    (path, (from, to)): (FsPath, (&FsPath, &FsPath)),
    e: StoreError,
    report: &RenameReport,
) -> RenameError {
    match e {
        StoreError::Conflict { .. } => RenameError::Conflict {
            kind: report.kind,
            path: match path.rebase(from, to) {
                Ok(copy) => copy.to_string(),
                Err(_) => path.to_string(),
            },
            rewritten: report.rewritten,
            found: report.found,
        },
        e => RenameError::store(format!("copying `{path}`"))(e),
    }
}
