//! The rewrite: every document under the source, page by page, each written conditionally on
//! the version its page read; transient item failures sent again, a conflict a stop.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::{Arc, OnceLock};

use fs_model::FsPath;
use fs_store::{BulkOp, Scan, Scope, StoreError, StoredDoc};
use serde_json::Value;

use super::before_write::Hold;
use super::bulk::{ItemAnswer, Unanswered};
use super::run::Refresh;
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::kind::JobKind;
use crate::report::{RenameEvent, RenameReport};
use crate::strategy::Strategy;
use crate::tree::{Entry, FsTree};

/// The path of a document as read, for a scan to start from it.
fn stored_path(index: &str, doc: &StoredDoc) -> Result<FsPath> {
    let bad = |message: String| RenameError::BadDocument {
        index: index.to_owned(),
        id: doc.id.clone(),
        message,
    };
    let path = doc
        .source
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no `path` field".to_owned()))?;
    FsPath::parse(path).map_err(|e| bad(e.to_string()))
}

/// Where [`Renamer::rewrite`]'s scan starts, given what the check read.
struct Resume {
    /// What the scan reads: the whole subtree, or what comes after the check's first page.
    scope: Scope,
    /// The check's first page, written as it is; empty if the check read a page or less.
    first: Vec<StoredDoc>,
    /// The ids of `first` that the scan reads again, to leave out.
    again: HashSet<String>,
}

impl Resume {
    /// Where to start under `from`, `read` being what the check read there.
    ///
    /// The check read a page and more: its first page is written as it is, and the scan
    /// starts at the first document after it (under the locks nothing but this job changes
    /// the subtree, so nothing need be kept open between the two reads). Only documents
    /// sharing that path with the page (a tree with duplicate paths) come twice: those
    /// already in the page are left out, by id.
    fn after(
        index: &str,
        from: &FsPath,
        mut read: Vec<StoredDoc>,
        page_size: usize,
    ) -> Result<Resume> {
        if read.len() <= page_size {
            return Ok(Resume {
                scope: Scope::Subtree(from.clone()),
                first: Vec::new(),
                again: HashSet::new(),
            });
        }
        let rest = read.split_off(page_size);
        let start = stored_path(index, &rest[0])?;
        let again = read
            .iter()
            .filter(|d| d.source.get("path").and_then(Value::as_str) == Some(start.as_str()))
            .map(|d| d.id.clone())
            .collect();
        let scope = Scope::SubtreeFrom {
            root: from.clone(),
            start,
        };
        Ok(Resume {
            scope,
            first: read,
            again,
        })
    }
}

impl Renamer {
    /// Rewrites every document at or under `from`: first what the check read of them, if
    /// anything (`read`: more than a page), then the rest, scanned from where that stopped.
    /// `total` is how many there are, once known (for progress).
    pub(super) async fn rewrite(
        &self,
        hold: Hold<'_>,
        (from, to): (&FsPath, &FsPath),
        (total, read): (&OnceLock<u64>, Vec<StoredDoc>),
        report: &mut RenameReport,
    ) -> Result<()> {
        let page_size = self.config.page_size.max(1);
        let Resume {
            scope,
            first,
            again,
        } = Resume::after(hold.tree.index(), from, read, page_size)?;
        // A subtree the check read more than a page of does not fit in one.
        let known = if first.is_empty() { total.get() } else { None };
        let mut scan = self.subtree_scan(hold.tree, scope, known, page_size);
        // The next page is read while the pages before it are written, up to `in_flight` bulk
        // requests at once: each document is written conditionally on the version its own
        // page read, so the pages need no order among themselves.
        let mut failure: Option<RenameError> = None;
        let again = &again;
        // The first page handed out is the check's (if any), which keeps all of its documents.
        let mut checks_page = !first.is_empty();
        let scanned = scan
            .pipeline_after(
                first,
                self.config.in_flight,
                |mut docs| {
                    let scanned = !std::mem::take(&mut checks_page);
                    async move {
                        if scanned && !again.is_empty() {
                            docs.retain(|d| !again.contains(&d.id));
                        }
                        self.write_scanned_page(hold, (from, to), docs).await
                    }
                },
                |(found, written, result)| {
                    report.found += found;
                    written.add_to(report);
                    match result {
                        // A page that held only documents already written.
                        Ok(()) if found == 0 => ControlFlow::Continue(()),
                        Ok(()) => {
                            self.emit(RenameEvent::Progress {
                                done: report.rewritten,
                                total: total.get().copied().unwrap_or(0).max(report.found),
                            });
                            ControlFlow::Continue(())
                        }
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
            return Err(recounted(e, report));
        }
        scanned.map_err(RenameError::store(format!("scanning under `{from}`")))
    }

    /// A scan of `scope`, a subtree, in pages of `page_size`. Under locks the count cannot
    /// grow, so a subtree `known` to fit in one page needs no point in time on
    /// Elasticsearch (opening one costs more than a small scan).
    pub(super) fn subtree_scan(
        &self,
        tree: &FsTree,
        scope: Scope,
        known: Option<&u64>,
        page_size: usize,
    ) -> Scan {
        let (store, index) = (Arc::clone(tree.store()), tree.index());
        let locked = self.config.strategy != Strategy::None;
        if locked && known.is_some_and(|&n| n < page_size as u64) {
            Scan::single_page(store, index, scope, page_size)
        } else {
            Scan::new(store, index, scope, page_size)
        }
    }

    /// One page of [`Renamer::rewrite`]'s pipeline, as the scan read it: its documents
    /// found, what was written, and how it ended.
    async fn write_scanned_page(
        &self,
        hold: Hold<'_>,
        (from, to): (&FsPath, &FsPath),
        docs: Vec<StoredDoc>,
    ) -> (u64, Written, Result<()>) {
        let found = docs.len() as u64;
        if found == 0 {
            return (found, Written::default(), Ok(()));
        }
        let entries = docs
            .into_iter()
            .map(|d| Entry::from_stored(hold.tree.index(), d))
            .collect::<Result<Vec<_>>>();
        match entries {
            // The page was read while the locks were ours only if they still are now: past
            // this point a recoverer may have taken over, and what was read may be stale
            // (the check before the page's writes says which).
            Ok(entries) => self.write_known_page(hold, (from, to), &entries).await,
            Err(e) => (found, Written::default(), Err(e)),
        }
    }

    /// Rewrites `entries`, every document under `from`, read under the locks (by the check, or
    /// by the caller: [`RenamerBuilder::known_subtree`](super::RenamerBuilder::known_subtree)).
    /// One page is one bulk request, which also makes its writes searchable (the refresh after
    /// the rewrite, in the same request on Elasticsearch). More pages go up to `in_flight` at
    /// once, as a scan's do (the next page's items are built while the last is written), and a
    /// refresh follows them. With [`refresh_apart`](super::RenamerBuilder::refresh_apart), on a
    /// store that refreshes a bulk in its request, the writes are not refreshed here: returns
    /// [`Refresh::Needed`], and the caller sends the refresh beside the journal's close.
    pub(super) async fn rewrite_known(
        &self,
        hold: Hold<'_>,
        (from, to): (&FsPath, &FsPath),
        entries: Vec<Entry>,
        report: &mut RenameReport,
    ) -> Result<Refresh> {
        use futures::StreamExt;
        let total = entries.len() as u64;
        let page_size = self.config.page_size.max(1);
        // Elsewhere a refreshed bulk is a bulk and a refresh anyway, and the embedded store
        // closes and releases in one transaction only after writes already searchable.
        let apart =
            self.config.refresh_apart && hold.tree.store().capabilities().refreshed_bulk.is_some();
        if entries.len() <= page_size {
            report.found += total;
            self.before_page(
                hold,
                &entries,
                from,
                (report.kind, report.rewritten, report.found),
            )
            .await?;
            let mut written = Written::default();
            let result = if entries.is_empty() {
                hold.tree.refresh().await
            } else {
                self.write_page(hold.tree, &entries, (from, to), !apart, &mut written)
                    .await
            };
            written.add_to(report);
            result.map_err(|e| recounted(e, report))?;
            self.emit(RenameEvent::Progress {
                done: report.rewritten,
                total,
            });
            return Ok(if apart && !entries.is_empty() {
                Refresh::Needed
            } else {
                Refresh::Done
            });
        }
        let writes: Vec<_> = entries
            .chunks(page_size)
            .map(|page| self.write_known_page(hold, (from, to), page))
            .collect();
        let mut pages = futures::stream::iter(writes).buffered(self.config.in_flight.max(1));
        let mut failure: Option<RenameError> = None;
        while let Some((found, written, result)) = pages.next().await {
            report.found += found;
            written.add_to(report);
            match result {
                Ok(()) => self.emit(RenameEvent::Progress {
                    done: report.rewritten,
                    total,
                }),
                Err(e) => {
                    // The pages under way end first, so that the counts are final.
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            return Err(recounted(e, report));
        }
        if apart {
            return Ok(Refresh::Needed);
        }
        hold.tree.refresh().await.map(|()| Refresh::Done)
    }

    /// One page of [`Renamer::rewrite_known`]'s pipeline: its documents found, what was
    /// written, and how it ended.
    async fn write_known_page(
        &self,
        hold: Hold<'_>,
        (from, to): (&FsPath, &FsPath),
        page: &[Entry],
    ) -> (u64, Written, Result<()>) {
        let mut written = Written::default();
        let result = match self
            .before_page(hold, page, from, (JobKind::Rename, 0, 0))
            .await
        {
            Ok(()) => {
                self.write_page(hold.tree, page, (from, to), false, &mut written)
                    .await
            }
            Err(e) => Err(e),
        };
        (page.len() as u64, written, result)
    }

    /// Rewrites one page in one bulk request, and resends transiently failed items with
    /// backoff; with `refresh`, the page is searchable once written. Tallies into `written`
    /// (a page's own, so that pages can be written at once); the counts of a failure are the
    /// page's, for the caller to replace ([`recounted`]).
    async fn write_page(
        &self,
        tree: &FsTree,
        entries: &[Entry],
        (from, to): (&FsPath, &FsPath),
        refresh: bool,
        written: &mut Written,
    ) -> Result<()> {
        // Each send builds its items afresh from the entries: a clone of every item kept for
        // a resend would cost as much as building the few that are resent.
        let op_for = |i: usize| -> Result<BulkOp> { self.rename_op(tree, &entries[i], (from, to)) };
        let context = format!("rewriting documents under `{from}`");
        let mut unanswered = Unanswered::new(entries.len());
        while !unanswered.is_empty() {
            let round = self.send_round(
                tree,
                &mut unanswered,
                op_for,
                super::bulk::WriteTo::Index { refresh },
                &context,
                &mut written.retries,
            );
            let answers = round.await?;
            // Every item's fate is tallied before any failure is reported: the other items of
            // a bulk request are written whatever happens to one of them.
            let mut failure = None;
            // A conflict may be our own earlier write having landed: a resend after a lost
            // answer, or, on a cluster, the coordinating node sending the items again to a
            // promoted replica, which answers 409 to the very first send (`read_back`). Those
            // are read back together, below; under the locks nobody else writes here.
            let mut ours = Vec::new();
            for ItemAnswer { index: i, result } in answers {
                match result {
                    Ok(_) => written.rewritten += 1,
                    Err(e) if e.is_conflict() => ours.push((i, e)),
                    Err(e) => {
                        failure.get_or_insert((i, e));
                    }
                }
            }
            if !ours.is_empty() {
                let ops = ours
                    .iter()
                    .map(|(i, _)| op_for(*i))
                    .collect::<Result<Vec<BulkOp>>>()?;
                let conflicts: Vec<&StoreError> = ours.iter().map(|(_, e)| e).collect();
                let landed = self.landed(tree, &ops, &conflicts).await?;
                for ((i, e), landed) in ours.into_iter().zip(landed) {
                    if landed {
                        written.rewritten += 1;
                        written.resolved += 1;
                    } else {
                        failure.get_or_insert((i, e));
                    }
                }
            }
            if let Some((i, e)) = failure {
                let path = entries[i].doc.path.to_string();
                return Err(match e {
                    StoreError::Conflict { .. } => RenameError::Conflict {
                        kind: JobKind::Rename,
                        path,
                        rewritten: written.rewritten,
                        found: entries.len() as u64,
                    },
                    e => RenameError::store(format!("rewriting `{path}`"))(e),
                });
            }
        }
        Ok(())
    }

    /// The writes that move the whole of a small subtree (`entries`, as the check read it)
    /// in one request, once the checks before a page passed (`before_page`): for the paths
    /// that send them in one transaction with more (`chained.rs`, `at_once.rs`). An `Err`
    /// comes before anything was sent.
    pub(super) async fn whole_rename_ops(
        &self,
        (tree, locks): (&FsTree, &fs_locks::LockClient),
        (from, to): (&FsPath, &FsPath),
        entries: &[Entry],
        report: &RenameReport,
    ) -> Result<Vec<BulkOp>> {
        self.before_page(
            Hold::open(tree, locks),
            entries,
            from,
            (report.kind, report.rewritten, report.found),
        )
        .await?;
        entries
            .iter()
            .map(|e| self.rename_op(tree, e, (from, to)))
            .collect()
    }

    /// The write that moves `entry` from under `from` to under `to`: conditional on the
    /// version read (unless the job writes unversioned).
    pub(super) fn rename_op(
        &self,
        tree: &FsTree,
        entry: &Entry,
        (from, to): (&FsPath, &FsPath),
    ) -> Result<BulkOp> {
        let moved = entry.doc.renamed(from, to)?;
        let source = serde_json::to_value(&moved).map_err(|e| RenameError::BadDocument {
            index: tree.index().to_owned(),
            id: entry.id.clone(),
            message: e.to_string(),
        })?;
        Ok(BulkOp::Index {
            id: entry.id.clone(),
            source,
            if_version: self.config.versioned.then_some(entry.version),
        })
    }

    /// Returns, for each of `ops`, whether its document already holds exactly what it would
    /// write: one `mget` for them all (again for those a lagging copy answered, whose
    /// `conflicts` said the primary had more).
    async fn landed(
        &self,
        tree: &FsTree,
        ops: &[BulkOp],
        conflicts: &[&StoreError],
    ) -> Result<Vec<bool>> {
        let ids: Vec<String> = ops
            .iter()
            .map(|op| match op {
                BulkOp::Index { id, .. }
                | BulkOp::Create { id, .. }
                | BulkOp::Delete { id, .. } => id.clone(),
            })
            .collect();
        let current = super::read_back::read_back(tree, &ids, conflicts).await?;
        Ok(ops
            .iter()
            .zip(current)
            .map(|(op, current)| match op {
                BulkOp::Index { source, .. } => current.is_some_and(|d| &d.source == source),
                _ => false,
            })
            .collect())
    }
}

/// What one page's write did, tallied apart from the report while pages are written at once.
#[derive(Debug, Default)]
struct Written {
    rewritten: u64,
    retries: u64,
    /// Conflicts of a resend that were our own first send, found landed.
    resolved: u64,
}

impl Written {
    fn add_to(&self, report: &mut RenameReport) {
        report.rewritten += self.rewritten;
        report.retries += self.retries;
        report.ambiguous_resolved += self.resolved;
    }
}

/// `e` with the job's counts where it carries a page's own.
pub(super) fn recounted(e: RenameError, report: &RenameReport) -> RenameError {
    let (kind, rewritten, found) = (report.kind, report.rewritten, report.found);
    match e {
        RenameError::Conflict { path, .. } => RenameError::Conflict {
            kind,
            path,
            rewritten,
            found,
        },
        RenameError::Cancelled { .. } => RenameError::Cancelled {
            kind,
            rewritten,
            found,
        },
        e => e,
    }
}
