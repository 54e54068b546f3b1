//! The copy through a write gate (see [`fs_store::WriteGates`]): each copy written once, by a
//! `_create` through the job's gate, where the claims of `copy.rs` take two writes.
//!
//! The fence is the gate. A run of the job opens a gate of its own (`<index>-gate-<job>-<run>`),
//! after shutting the gates of the job's earlier runs and waiting for what was sent through
//! them: a recovery that finishes the copy therefore starts only once nothing of the run it
//! replaces can land, and a run paused past its lease that wakes up afterwards is refused
//! whatever it sends. Each page is written only after a check that the locks are still the
//! job's (a run that lost them stops there), so a write that lands is the job's, sent while
//! it held the tree.
//!
//! The rest is the claims' copy: ids derived from the job and the source (a create that finds
//! its id taken has found this job's copy, made by an earlier send or run, or a claim an
//! earlier run made, written over here), the path order kept by writing a page only once the
//! one before is acknowledged, and the next page read while one is written.

use std::sync::OnceLock;

use fs_model::{FsDoc, FsPath};
use fs_store::{BulkOp, Scan, StoreError};

use super::before_write::Hold;
use super::bulk::WriteTo;
use super::copy::{conflict, copies_of, Copy, Found, Written};
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::RenameReport;
use crate::tree::{next_entries, Entry, FsTree};

/// The start of the names of the gates of the copy job `job_id` onto `index`.
fn gate_prefix(index: &str, job_id: &str) -> String {
    format!("{index}-gate-{job_id}-")
}

impl Renamer {
    /// Shuts the gates of the job's earlier runs (waiting for their writes), then, for a
    /// copy of more than a page (or of a size not known yet) on a store with gates, opens
    /// this run's; returns its name, or `None` to copy with claims.
    pub(super) async fn open_copy_gate(
        &self,
        tree: &FsTree,
        job_id: &str,
        total: Option<u64>,
    ) -> Result<Option<String>> {
        let Some(gates) = tree.store().write_gates() else {
            return Ok(None);
        };
        self.shut_copy_gates(tree, job_id).await?;
        // Opening and shutting a gate are two changes of the cluster state: for a page or
        // less, two writes a copy cost less.
        if total.is_some_and(|n| n <= self.config.page_size as u64) {
            return Ok(None);
        }
        let gate = format!("{}{}", gate_prefix(tree.index(), job_id), FsDoc::new_id());
        match gates.open_gate(tree.index(), &gate).await {
            Ok(opened) => Ok(opened.then_some(gate)),
            Err(e) => {
                // Its answer lost, the gate may stand: shut it, so that a job that stops here
                // (and withdraws its entry, having written nothing) leaves none behind.
                if let Err(shut) = self.shut_copy_gates(tree, job_id).await {
                    tracing::warn!(job = %job_id, error = %shut, "shutting a gate whose opening failed failed too");
                }
                Err(RenameError::store(format!(
                    "opening the copy's write gate `{gate}`"
                ))(e))
            }
        }
    }

    /// Shuts every gate of the copy job `job_id` and waits until nothing sent through one is
    /// still being written.
    pub(super) async fn shut_copy_gates(&self, tree: &FsTree, job_id: &str) -> Result<()> {
        let Some(gates) = tree.store().write_gates() else {
            return Ok(());
        };
        let prefix = gate_prefix(tree.index(), job_id);
        gates
            .shut_gates(tree.index(), &prefix)
            .await
            .map_err(RenameError::store(format!(
                "shutting the write gates of copy job {job_id}"
            )))
    }

    /// The copy through `gate`: a pipeline two pages deep, as the claims' copy, one write a
    /// copy.
    pub(super) async fn copy_through_gate(
        &self,
        hold: Hold<'_>,
        scan: &mut Scan,
        (from, to, job_id): (&FsPath, &FsPath, &str),
        gate: &str,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let context = || format!("scanning under `{from}`");
        let index = hold.tree.index();
        let mut pending: Option<Prepared> = None;
        loop {
            let mut retries = 0;
            let progress = (report.kind, report.rewritten, report.found);
            let write = async {
                match pending.take() {
                    Some(page) => self
                        .write_through_gate(hold, (gate, job_id), page, (from, to), &mut retries)
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
                let copies = copies_of(hold.tree, &entries, (from, to), job_id)?;
                Ok(Some(Prepared { entries, copies }))
            };
            let (written, next): (Result<Option<Written>>, Result<Option<Prepared>>) =
                tokio::join!(write, next);
            report.retries += retries;
            if let Some(written) = written? {
                self.tally_written(written, (from, to), total, report)?;
            }
            let Some(prepared) = next? else {
                return Ok(());
            };
            report.found += prepared.entries.len() as u64;
            pending = Some(prepared);
        }
    }

    /// Writes a page's copies through `gate` once the locks are known to be still this
    /// job's: one bulk request of creates; a create that finds its id taken reads what is
    /// there (this job's copy counts as written, this job's claim is written over, through
    /// the gate, conditionally on its version; anything else stops the copy).
    async fn write_through_gate(
        &self,
        hold: Hold<'_>,
        (gate, job_id): (&str, &str),
        page: Prepared,
        (from, to): (&FsPath, &FsPath),
        retries: &mut u64,
    ) -> Result<Written> {
        let Prepared { entries, copies } = page;
        let tree = hold.tree;
        let context = format!("copying documents under `{from}` to `{to}`");
        hold.locks.ensure_held(from.as_str()).await?;
        let creates: Vec<BulkOp> = copies
            .iter()
            .map(|c| BulkOp::Create {
                id: c.id.clone(),
                source: c.source.clone(),
            })
            .collect();
        let mut written = 0;
        let mut failure: Option<(usize, StoreError)> = None;
        let mut taken: Vec<(usize, StoreError)> = Vec::new();
        let to_gate = WriteTo::Gate(gate);
        for answer in self
            .send_ops_to(tree, to_gate, creates, &context, retries)
            .await?
        {
            match answer.result {
                Ok(_) => written += 1,
                Err(StoreError::IndexNotFound { index }) if index == gate => {
                    // Shut: a recovery took the job over (this run lost its lease, paused or cut
                    // off), and finishes it.
                    return Err(RenameError::TakenOver {
                        job: job_id.to_owned(),
                        by: format!("a recovery, which shut the copy's write gate `{gate}`"),
                    });
                }
                Err(e) if e.is_conflict() => taken.push((answer.index, e)),
                Err(e) => {
                    failure.get_or_insert((answer.index, e));
                }
            }
        }
        let mut claims = Vec::new();
        for (i, found) in self.read_copies(tree, &copies, &taken).await? {
            match found {
                Found::Copy => written += 1,
                Found::Claim(version) => claims.push((i, version)),
                Found::Other => {
                    failure.get_or_insert((i, conflict(tree, &copies[i])));
                }
            }
        }
        if !claims.is_empty() {
            let writes: Vec<BulkOp> = claims
                .iter()
                .map(|&(i, version)| BulkOp::Index {
                    id: copies[i].id.clone(),
                    source: copies[i].source.clone(),
                    if_version: Some(version),
                })
                .collect();
            let mut changed = Vec::new();
            for answer in self
                .send_ops_to(tree, to_gate, writes, &context, retries)
                .await?
            {
                let i = claims[answer.index].0;
                match answer.result {
                    Ok(_) => written += 1,
                    Err(e) if e.is_conflict() => changed.push((i, e)),
                    Err(e) => {
                        failure.get_or_insert((i, e));
                    }
                }
            }
            for (i, found) in self.read_copies(tree, &copies, &changed).await? {
                match found {
                    Found::Copy => written += 1,
                    Found::Claim(_) | Found::Other => {
                        failure.get_or_insert((i, conflict(tree, &copies[i])));
                    }
                }
            }
        }
        Ok(Written {
            count: written,
            failure: failure.map(|(i, e)| (entries[i].doc.path.clone(), e)),
        })
    }
}

/// A page read and its copies made, to be written.
struct Prepared {
    entries: Vec<Entry>,
    copies: Vec<Copy>,
}
