//! The copy through a write gate (see [`fs_store::WriteGates`]): each copy written once, by a
//! `_create` through the job's gate, where the claims of `copy.rs` take two writes.
//!
//! The fence is the gate. A run of the job opens a gate of its own (`<index>-gate-<job>-<run>`);
//! a recovery, before it finishes the copy, shuts the gates of the job's earlier runs and waits
//! for what was sent through them ([`Renamer::roll_forward`]): it therefore starts only once
//! nothing of the run it replaces can land, and a run paused past its lease that wakes up afterwards is refused
//! whatever it sends. Each page is written only after a check that the locks are still the
//! job's (a run that lost them stops there), so a write that lands is the job's, sent while
//! it held the tree.
//!
//! The rest is the claims' copy: ids derived from the job and the source (a create that finds
//! its id taken has found this job's copy, made by an earlier send or run, or a claim an
//! earlier run made, written over here), and no copy sent before its parent's is
//! acknowledged. The order costs less than the claims' copy pays for it: there, a page waits
//! for the page before; here, only a page's directories wait for the directories of the page
//! before (a small request, and none for a page of files only), and the files of up to
//! `in_flight` pages are written at once, while the next page is read.

use std::ops::ControlFlow;
use std::sync::OnceLock;

use fs_model::{FsDoc, FsPath};
use fs_store::{BulkOp, Scan, StoreError, StoredDoc};

use super::before_write::Hold;
use super::bulk::WriteTo;
use super::copy::{conflict, copies_of, Copy, Found, Written};
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::kind::JobKind;
use crate::report::RenameReport;
use crate::tree::{Entry, FsTree};

/// The start of the names of the gates of the copy job `job_id` onto `index`.
fn gate_prefix(index: &str, job_id: &str) -> String {
    format!("{index}-gate-{job_id}-")
}

impl Renamer {
    /// For a copy of more than a page (or of a size not known yet) on a store with gates,
    /// opens this run's gate; returns its name, or `None` to copy with claims. A first run has
    /// no earlier gates; a recovery shut them before it came here.
    pub(super) async fn open_copy_gate(
        &self,
        tree: &FsTree,
        job_id: &str,
        total: Option<u64>,
    ) -> Result<Option<String>> {
        let Some(gates) = tree.store().write_gates() else {
            return Ok(None);
        };
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

    /// The copy through `gate`, up to `in_flight` pages at once. A copy is sent only once
    /// its parent's copy is acknowledged: each page writes its directories first, in turn
    /// (a page's directories wait for those of the page before it, one small request), and
    /// then its files, beside the other pages' files. Files, most of a tree, have no
    /// children: nothing waits on them, and the node has requests for each of its cores.
    pub(super) async fn copy_through_gate(
        &self,
        hold: Hold<'_>,
        scan: &mut Scan,
        (from, to, job_id): (&FsPath, &FsPath, &str),
        gate: &str,
        total: &OnceLock<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let turns = DirTurns::default();
        let mut next_page = 0u64;
        let mut failure: Option<RenameError> = None;
        let scanned = scan
            .pipeline(
                self.config.in_flight,
                |docs| {
                    let page = next_page;
                    next_page += 1;
                    let turns = &turns;
                    async move {
                        let mut retries = 0;
                        let target = (from, to, job_id, gate);
                        let written = self
                            .copy_page_through_gate(hold, target, (docs, page), turns, &mut retries)
                            .await;
                        (written, retries)
                    }
                },
                |(written, retries)| {
                    report.retries += retries;
                    let outcome = written.and_then(|page| match page {
                        // An earlier page failed: its failure is the one to report.
                        PageCopy::Skipped => Ok(()),
                        PageCopy::Written { found, written } => {
                            report.found += found;
                            self.tally_written(written, (from, to), total, report)
                        }
                    });
                    match outcome {
                        Ok(()) => ControlFlow::Continue(()),
                        Err(e) => {
                            failure.get_or_insert(e);
                            ControlFlow::Break(())
                        }
                    }
                },
            )
            .await;
        // Every page under way has ended by now: a failure reports the final counts.
        if let Some(e) = failure {
            return Err(super::rewrite::recounted(e, report));
        }
        scanned.map_err(RenameError::store(format!("scanning under `{from}`")))
    }

    /// One page of [`Renamer::copy_through_gate`]: its directories once the page before has
    /// written its own, then its files. A failure (or a page that cannot be read) ends the
    /// turns: the pages after it write nothing.
    async fn copy_page_through_gate(
        &self,
        hold: Hold<'_>,
        (from, to, job_id, gate): (&FsPath, &FsPath, &str, &str),
        (docs, page): (Vec<StoredDoc>, u64),
        turns: &DirTurns,
        retries: &mut u64,
    ) -> Result<PageCopy> {
        let prepared = async {
            let index = hold.tree.index();
            let entries = docs
                .into_iter()
                .map(|d| Entry::from_stored(index, d))
                .collect::<Result<Vec<_>>>()?;
            // The counts in a cancellation are set right by the caller.
            self.before_page(hold, &entries, from, (JobKind::Copy, 0, 0))
                .await?;
            let copies = copies_of(&entries, (from, to), job_id)?;
            Ok::<_, RenameError>(Prepared { entries, copies })
        }
        .await;
        if !turns.wait_for(page).await {
            return Ok(PageCopy::Skipped);
        }
        let (dirs, files) = match prepared {
            Ok(prepared) => prepared.split_dirs(),
            Err(e) => {
                turns.fail();
                return Err(e);
            }
        };
        let found = (dirs.entries.len() + files.entries.len()) as u64;
        let target = (gate, job_id);
        let mut written = match dirs.entries.is_empty() {
            true => Written {
                count: 0,
                failure: None,
            },
            false => match self
                .write_through_gate(hold, target, dirs, (from, to), retries)
                .await
            {
                Ok(written) => written,
                Err(e) => {
                    turns.fail();
                    return Err(e);
                }
            },
        };
        if written.failure.is_some() {
            turns.fail();
            return Ok(PageCopy::Written { found, written });
        }
        turns.done(page);
        if !files.entries.is_empty() {
            let more = self
                .write_through_gate(hold, target, files, (from, to), retries)
                .await?;
            written.count += more.count;
            written.failure = more.failure;
        }
        Ok(PageCopy::Written { found, written })
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
        let create = |i: usize| {
            Ok(BulkOp::Create {
                id: copies[i].id.clone(),
                source: copies[i].source(tree.index())?,
            })
        };
        let mut written = 0;
        let mut failure: Option<(usize, StoreError)> = None;
        let mut taken: Vec<(usize, StoreError)> = Vec::new();
        let to_gate = WriteTo::Gate(gate);
        let creates = (copies.len(), create);
        for answer in self
            .send_built_to(tree, to_gate, creates, &context, retries)
            .await?
        {
            match answer.result {
                Ok(_) => written += 1,
                Err(e) => {
                    shut_under(gate, job_id, &e)?;
                    match e.is_conflict() {
                        true => taken.push((answer.index, e)),
                        false => {
                            failure.get_or_insert((answer.index, e));
                        }
                    }
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
        // Claims an earlier run of the job made (it copied with claims), written over
        // through the gate.
        let (over, failed) = self
            .write_over_claims(tree, to_gate, &copies, &claims, &context, retries)
            .await?;
        written += over;
        if let Some((i, e)) = failed {
            shut_under(gate, job_id, &e)?;
            failure.get_or_insert((i, e));
        }
        Ok(Written {
            count: written,
            failure: failure.map(|(i, e)| (entries[i].doc.path.clone(), e)),
        })
    }
}

/// The error a write through `gate` met where the gate is shut: a recovery took the job
/// `job_id` over (this run lost its lease, paused or cut off), and finishes it. Nothing for
/// any other failure.
fn shut_under(gate: &str, job_id: &str, e: &StoreError) -> Result<()> {
    match e {
        StoreError::IndexNotFound { index } if index == gate => Err(RenameError::TakenOver {
            job: job_id.to_owned(),
            by: format!("a recovery, which shut the copy's write gate `{gate}`"),
        }),
        _ => Ok(()),
    }
}

/// A page read and its copies made, to be written.
struct Prepared {
    entries: Vec<Entry>,
    copies: Vec<Copy>,
}

impl Prepared {
    /// The directories of the page and its files, each in the page's (path) order.
    fn split_dirs(self) -> (Prepared, Prepared) {
        let (mut dirs, mut files) = (Prepared::empty(), Prepared::empty());
        for (entry, copy) in self.entries.into_iter().zip(self.copies) {
            let to = if entry.doc.is_dir() {
                &mut dirs
            } else {
                &mut files
            };
            to.entries.push(entry);
            to.copies.push(copy);
        }
        (dirs, files)
    }

    fn empty() -> Prepared {
        Prepared {
            entries: Vec::new(),
            copies: Vec::new(),
        }
    }
}

/// How a page of the copy ended.
enum PageCopy {
    /// Its documents were found and this was written of them.
    Written { found: u64, written: Written },
    /// Nothing done: a page before it failed.
    Skipped,
}

/// Whose turn it is to write its directories: the pages take turns in the scan's order, so
/// that a directory's copy is acknowledged before any copy under it is sent.
#[derive(Default)]
struct DirTurns {
    /// How many pages have written their directories (`u64::MAX` once one failed).
    done: tokio::sync::watch::Sender<u64>,
}

impl DirTurns {
    /// Waits until the pages before `page` have written their directories; false if one of
    /// them failed (the copy stops, and `page` writes nothing).
    async fn wait_for(&self, page: u64) -> bool {
        let mut done = self.done.subscribe();
        let reached = match done.wait_for(|&n| n >= page).await {
            Ok(n) => *n != u64::MAX,
            // The sender lives as long as the copy: not reached.
            Err(_) => false,
        };
        reached
    }

    /// `page` has written its directories: the next page's turn.
    fn done(&self, page: u64) {
        self.done.send_if_modified(|n| {
            let changed = *n == page;
            if changed {
                *n = page + 1;
            }
            changed
        });
    }

    /// A page failed: no page after it writes.
    fn fail(&self) {
        self.done.send_replace(u64::MAX);
    }
}
