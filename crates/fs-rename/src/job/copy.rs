//! The copy: every document under the source, page by page in path order (parents before
//! children), created under the destination with an id derived from the journal id and the
//! source document's id.
//!
//! The derived ids make the copy idempotent. A create that finds its id taken has found its
//! own copy, made by an earlier send of this job (an answer lost in a timeout), or by the job
//! a recovery is finishing: it counts as done once a read shows that document is exactly the
//! copy. Anything else there is a conflict, and the job stops.

use std::collections::HashMap;
use std::sync::Arc;

use fs_locks::LockClient;
use fs_model::{FsDoc, FsPath};
use fs_store::{BulkOp, Scan, Scope, StoreError};
use serde_json::Value;

use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::strategy::Strategy;
use crate::tree::{Entry, FsTree};

impl Renamer {
    /// Copies everything at or under `from` to `to`; `total` is the count the checks found.
    pub(super) async fn copy_all(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        total: u64,
        report: &mut RenameReport,
    ) -> Result<()> {
        let store = tree.store();
        let index = tree.index();
        let scope = Scope::Subtree(from.clone());
        let page_size = self.config.page_size;
        // Under locks nothing is added under the source, so a subtree that fits in one page
        // needs no point in time on Elasticsearch (as for a rename).
        let locked = self.config.strategy != Strategy::None;
        let mut scan = if locked && total < page_size as u64 {
            Scan::single_page(Arc::clone(store), index, scope, page_size)
        } else {
            Scan::new(Arc::clone(store), index, scope, page_size)
        };
        let copied = async {
            let context = || format!("scanning under `{from}`");
            // The scan is in path order, so a directory's page is written (and acknowledged)
            // before the page of anything under it is sent.
            while let Some(docs) = scan
                .next_page()
                .await
                .map_err(RenameError::store(context()))?
            {
                let entries = docs
                    .into_iter()
                    .map(|d| Entry::from_stored(index, d))
                    .collect::<Result<Vec<_>>>()?;
                report.found += entries.len() as u64;
                self.before_page(locks, &entries, from, report).await?;
                self.copy_page(tree, &entries, (from, to), job_id, report)
                    .await?;
                self.emit(RenameEvent::Progress {
                    done: report.rewritten,
                    total: total.max(report.found),
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

    /// What every page of a copy or a delete goes through before its write: the hook, a
    /// cancellation, and the check that the locks are still this job's (a page read while
    /// they were is written only if they still are).
    pub(super) async fn before_page(
        &self,
        locks: &LockClient,
        entries: &[Entry],
        path: &FsPath,
        report: &RenameReport,
    ) -> Result<()> {
        if let Some(hooks) = &self.config.hooks {
            hooks.before_write(entries).await;
        }
        if self.config.cancel.as_ref().is_some_and(|c| *c.borrow()) {
            return Err(RenameError::Cancelled {
                rewritten: report.rewritten,
                found: report.found,
            });
        }
        if let Some(lost) = locks.lost_locks().borrow().first() {
            return Err(fs_locks::LockError::LeaseLost { path: lost.clone() }.into());
        }
        if locks.lease_left().await.is_some_and(|left| left.is_zero()) {
            return Err(fs_locks::LockError::LeaseLost {
                path: path.to_string(),
            }
            .into());
        }
        Ok(())
    }

    /// Creates the copies of one page in one bulk request.
    async fn copy_page(
        &self,
        tree: &FsTree,
        entries: &[Entry],
        (from, to): (&FsPath, &FsPath),
        job_id: &str,
        report: &mut RenameReport,
    ) -> Result<()> {
        let mut ops = Vec::with_capacity(entries.len());
        for entry in entries {
            let copy = entry.doc.renamed(from, to)?;
            let id = FsDoc::copy_id(job_id, &entry.id);
            let source = serde_json::to_value(&copy).map_err(|e| RenameError::BadDocument {
                index: tree.index().to_owned(),
                id: id.clone(),
                message: e.to_string(),
            })?;
            ops.push(BulkOp::Create { id, source });
        }
        let context = format!("copying documents under `{from}` to `{to}`");
        let answers = self.send_page(tree, ops.clone(), &context, report).await?;
        // Every item's fate is tallied before any failure is reported: the other items of a
        // bulk request are written whatever happens to one of them.
        let mut taken: Vec<usize> = Vec::new();
        let mut failure = None;
        for answer in answers {
            match answer.result {
                Ok(()) => report.rewritten += 1,
                Err(e) if e.is_conflict() => taken.push(answer.index),
                Err(e) => {
                    failure.get_or_insert((answer.index, e));
                }
            }
        }
        if !taken.is_empty() {
            let own = self.own_copies(tree, &ops, &taken).await?;
            for i in taken {
                if own.get(&i).copied().unwrap_or(false) {
                    report.rewritten += 1;
                } else {
                    failure.get_or_insert((
                        i,
                        StoreError::Conflict {
                            index: tree.index().to_owned(),
                            id: ops[i].id().to_owned(),
                            exists: true,
                            current: None,
                        },
                    ));
                }
            }
        }
        if let Some((i, e)) = failure {
            let path = entries[i].doc.path.to_string();
            return Err(match e {
                StoreError::Conflict { .. } => RenameError::Conflict {
                    path: match entries[i].doc.renamed(from, to) {
                        Ok(copy) => copy.path.to_string(),
                        Err(_) => path,
                    },
                    rewritten: report.rewritten,
                    found: report.found,
                },
                e => RenameError::store(format!("copying `{path}`"))(e),
            });
        }
        Ok(())
    }

    /// Reads the documents at the ids of `ops[i]` for each `i` of `taken` (creates that found
    /// their id taken) in one request; returns, by `i`, whether each holds exactly the copy.
    async fn own_copies(
        &self,
        tree: &FsTree,
        ops: &[BulkOp],
        taken: &[usize],
    ) -> Result<HashMap<usize, bool>> {
        let ids: Vec<String> = taken.iter().map(|&i| ops[i].id().to_owned()).collect();
        let found = tree
            .store()
            .mget(tree.index(), &ids)
            .await
            .map_err(RenameError::store(format!(
                "re-reading {} copies already there",
                ids.len()
            )))?;
        Ok(taken
            .iter()
            .zip(found)
            .map(|(&i, doc)| {
                let wanted: Option<&Value> = match &ops[i] {
                    BulkOp::Create { source, .. } => Some(source),
                    _ => None,
                };
                (i, doc.is_some_and(|d| Some(&d.source) == wanted))
            })
            .collect())
    }
}
