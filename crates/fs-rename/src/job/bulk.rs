//! Sending one page of a copy or a delete: one bulk request, then the transiently failed items
//! again with backoff, until each item has its final answer.

use std::time::Duration;

use fs_store::{BulkOp, StoreError, Version};

use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::tree::FsTree;

/// How many times a transiently failed bulk item is sent again.
const ITEM_RETRIES: u32 = 6;

/// The final answer to one item of a page.
#[derive(Debug)]
pub(super) struct ItemAnswer {
    /// The item's position in the page.
    pub index: usize,
    /// What the store said last: the version written, or why not (a conflict, or a failure
    /// that resends did not cure). After a resend a conflict may be the first send having
    /// landed: the callers check what is there.
    pub result: Result<Version, StoreError>,
}

impl Renamer {
    /// Sends `ops` to the tree index in one bulk request and resends the items that failed
    /// transiently, with backoff; returns every item's final answer in page order. Fails only
    /// if the whole request fails for good.
    pub(super) async fn send_page(
        &self,
        tree: &FsTree,
        ops: Vec<BulkOp>,
        context: &str,
        report: &mut RenameReport,
    ) -> Result<Vec<ItemAnswer>> {
        let mut answers: Vec<ItemAnswer> = Vec::with_capacity(ops.len());
        let mut pending: Vec<(usize, BulkOp)> = ops.into_iter().enumerate().collect();
        let mut attempt = 0;
        while !pending.is_empty() {
            if attempt > 0 {
                report.retries += pending.len() as u64;
                self.emit(RenameEvent::Retrying {
                    items: pending.len(),
                });
                tokio::time::sleep(Duration::from_millis(10 << attempt.min(6))).await;
            }
            let batch: Vec<BulkOp> = pending.iter().map(|(_, op)| op.clone()).collect();
            let results = match tree.store().bulk(tree.index(), batch).await {
                Ok(results) => results,
                Err(e) if e.is_retryable() && attempt < ITEM_RETRIES => {
                    pending.iter().map(|_| Err(e.clone())).collect()
                }
                Err(e) => return Err(RenameError::store(context)(e)),
            };
            let mut again = Vec::new();
            for ((index, op), result) in pending.into_iter().zip(results) {
                match result {
                    Err(e) if e.is_retryable() && attempt < ITEM_RETRIES => again.push((index, op)),
                    result => answers.push(ItemAnswer { index, result }),
                }
            }
            pending = again;
            attempt += 1;
        }
        answers.sort_by_key(|a| a.index);
        Ok(answers)
    }
}
