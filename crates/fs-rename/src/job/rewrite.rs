//! The rewrite: every document under the source, page by page, each written conditionally on
//! the version its page read; transient item failures sent again, a conflict a stop.

use std::sync::Arc;
use std::time::Duration;

use fs_locks::LockClient;
use fs_model::FsPath;
use fs_store::{BulkOp, Scan, Scope, StoreError};

use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::strategy::Strategy;
use crate::tree::{Entry, FsTree};

/// How many times a transiently failed bulk item is sent again.
const ITEM_RETRIES: u32 = 6;

impl Renamer {
    pub(super) async fn rewrite(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        from: &FsPath,
        to: &FsPath,
        total: u64,
        report: &mut RenameReport,
    ) -> Result<()> {
        let store = tree.store();
        let index = tree.index();
        let scope = Scope::Subtree(from.clone());
        // Under locks the count cannot grow, so a subtree that fits in one page needs no
        // point in time on Elasticsearch (opening one costs more than a small scan).
        let locked = self.config.strategy != Strategy::None;
        let page_size = self.config.page_size;
        let mut scan = if locked && total < page_size as u64 {
            Scan::single_page(Arc::clone(store), index, scope, page_size)
        } else {
            Scan::new(Arc::clone(store), index, scope, page_size)
        };
        let rewritten = async {
            let context = || format!("scanning under `{from}`");
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
                // The page was read while the locks were ours only if they still are now: past
                // this point a recoverer may have taken over, and what was read may be stale.
                self.before_page(locks, &entries, from, report).await?;
                self.write_page(tree, &entries, from, to, report).await?;
                self.emit(RenameEvent::Progress {
                    done: report.rewritten,
                    total: total.max(report.found),
                });
            }
            Ok(())
        }
        .await;
        // However the rewrite ended (the last page, a failure, a cancellation, a lost lease),
        // what the store keeps open for the scan is closed before the locks are released.
        scan.close().await;
        rewritten
    }

    /// Rewrites `entries`, every document under `from`, read under the locks by the check:
    /// one bulk request, which also makes its writes searchable (the refresh after the
    /// rewrite, in the same request on Elasticsearch).
    pub(super) async fn rewrite_known(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        (from, to): (&FsPath, &FsPath),
        entries: Vec<Entry>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let total = entries.len() as u64;
        for page in entries.chunks(self.config.page_size.max(1)) {
            report.found += page.len() as u64;
            self.before_page(locks, page, from, report).await?;
            let last = report.found == total;
            self.write_page_then(tree, page, (from, to), last, report)
                .await?;
            self.emit(RenameEvent::Progress {
                done: report.rewritten,
                total,
            });
        }
        if entries.is_empty() {
            tree.refresh().await?;
        }
        Ok(())
    }

    /// Rewrites one page in one bulk request; resends transiently failed items with backoff.
    async fn write_page(
        &self,
        tree: &FsTree,
        entries: &[Entry],
        from: &FsPath,
        to: &FsPath,
        report: &mut RenameReport,
    ) -> Result<()> {
        self.write_page_then(tree, entries, (from, to), false, report)
            .await
    }

    /// [`Renamer::write_page`]; with `refresh`, the page is searchable once written.
    async fn write_page_then(
        &self,
        tree: &FsTree,
        entries: &[Entry],
        (from, to): (&FsPath, &FsPath),
        refresh: bool,
        report: &mut RenameReport,
    ) -> Result<()> {
        let mut pending: Vec<(usize, BulkOp)> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let moved = entry.doc.renamed(from, to)?;
            let source = serde_json::to_value(&moved).map_err(|e| RenameError::BadDocument {
                index: tree.index().to_owned(),
                id: entry.id.clone(),
                message: e.to_string(),
            })?;
            let if_version = self.config.versioned.then_some(entry.version);
            pending.push((
                i,
                BulkOp::Index {
                    id: entry.id.clone(),
                    source,
                    if_version,
                },
            ));
        }
        let mut attempt = 0;
        while !pending.is_empty() {
            if attempt > 0 {
                report.retries += pending.len() as u64;
                self.emit(RenameEvent::Retrying {
                    items: pending.len(),
                });
                tokio::time::sleep(Duration::from_millis(10 << attempt.min(6))).await;
            }
            let ops: Vec<BulkOp> = pending.iter().map(|(_, op)| op.clone()).collect();
            let context = format!("rewriting documents under `{from}`");
            let written = if refresh {
                tree.store().bulk_refreshed(tree.index(), ops).await
            } else {
                tree.store().bulk(tree.index(), ops).await
            };
            let results = match written {
                Ok(results) => results,
                Err(e) if e.is_retryable() && attempt < ITEM_RETRIES => {
                    pending.iter().map(|_| Err(e.clone())).collect()
                }
                Err(e) => return Err(RenameError::store(context)(e)),
            };
            // Every item's fate is tallied before any failure is reported: the other items of
            // a bulk request are written whatever happens to one of them.
            let mut again = Vec::new();
            let mut failure = None;
            for ((i, op), result) in pending.into_iter().zip(results) {
                match result {
                    Ok(_) => report.rewritten += 1,
                    Err(e) if e.is_retryable() && attempt < ITEM_RETRIES => again.push((i, op)),
                    // After a resend, a conflict may be our own earlier write having landed.
                    Err(e) if e.is_conflict() && attempt > 0 && self.landed(tree, &op).await? => {
                        report.rewritten += 1
                    }
                    Err(e) => {
                        failure.get_or_insert((i, e));
                    }
                }
            }
            if let Some((i, e)) = failure {
                let path = entries[i].doc.path.to_string();
                return Err(match e {
                    StoreError::Conflict { .. } => RenameError::Conflict {
                        path,
                        rewritten: report.rewritten,
                        found: report.found,
                    },
                    e => RenameError::store(format!("rewriting `{path}`"))(e),
                });
            }
            pending = again;
            attempt += 1;
        }
        Ok(())
    }

    /// Returns true if the document already holds exactly what `op` would write.
    async fn landed(&self, tree: &FsTree, op: &BulkOp) -> Result<bool> {
        let BulkOp::Index { id, source, .. } = op else {
            return Ok(false);
        };
        let current = tree
            .store()
            .get(tree.index(), id)
            .await
            .map_err(RenameError::store(format!("re-reading `{id}`")))?;
        Ok(current.is_some_and(|d| &d.source == source))
    }
}
