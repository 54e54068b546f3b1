//! Sending one page of writes (a rename's rewrite, a copy, a delete): one bulk request, then
//! the transiently failed items again with backoff ([`resend::ITEMS`]), until each item has
//! its final answer. The one path every page of the job goes through.

use std::time::Duration;

use fs_store::{Backoff, BulkOp, StoreError, Version};

use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::resend;
use crate::tree::FsTree;

/// Where a page's writes go.
#[derive(Debug, Clone, Copy)]
pub(super) enum WriteTo<'a> {
    /// The tree index; with `refresh`, searchable once written.
    Index { refresh: bool },
    /// The tree index through a write gate (see [`fs_store::WriteGates`]): refused once the
    /// gate is shut.
    Gate(&'a str),
}

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

/// The items of one page still without a final answer, and the pauses between their sends.
pub(super) struct Unanswered {
    /// Positions in the page, in page order.
    items: Vec<usize>,
    backoff: Backoff,
    /// The pause before the next send, once a send has left items to send again.
    pause: Option<Duration>,
}

impl Unanswered {
    /// Every item of a page of `len`, none sent yet.
    pub(super) fn new(len: usize) -> Unanswered {
        Unanswered {
            items: (0..len).collect(),
            backoff: resend::ITEMS.start(),
            pause: None,
        }
    }

    /// Whether every item has its final answer.
    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
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
        self.send_ops(tree, ops, context, &mut report.retries).await
    }

    /// [`Renamer::send_page`], counting its resent items in `retries`: for a caller with two
    /// pages in flight, which cannot lend each its report.
    pub(super) async fn send_ops(
        &self,
        tree: &FsTree,
        ops: Vec<BulkOp>,
        context: &str,
        retries: &mut u64,
    ) -> Result<Vec<ItemAnswer>> {
        let to = WriteTo::Index { refresh: false };
        self.send_ops_to(tree, to, ops, context, retries).await
    }

    /// [`Renamer::send_ops`] to `to`.
    pub(super) async fn send_ops_to(
        &self,
        tree: &FsTree,
        to: WriteTo<'_>,
        ops: Vec<BulkOp>,
        context: &str,
        retries: &mut u64,
    ) -> Result<Vec<ItemAnswer>> {
        let built = (ops.len(), |i: usize| Ok(ops[i].clone()));
        self.send_built_to(tree, to, built, context, retries).await
    }

    /// [`Renamer::send_ops_to`] of `len` operations that `op_for` makes from their position,
    /// anew for each send: a caller that keeps what the operations are made of (a copy keeps
    /// its documents) spares a deep copy of every one.
    pub(super) async fn send_built_to(
        &self,
        tree: &FsTree,
        to: WriteTo<'_>,
        (len, op_for): (usize, impl Fn(usize) -> Result<BulkOp>),
        context: &str,
        retries: &mut u64,
    ) -> Result<Vec<ItemAnswer>> {
        let mut answers: Vec<ItemAnswer> = Vec::with_capacity(len);
        let mut unanswered = Unanswered::new(len);
        while !unanswered.is_empty() {
            let round = self.send_round(tree, &mut unanswered, &op_for, to, context, retries);
            answers.extend(round.await?);
        }
        answers.sort_by_key(|a| a.index);
        Ok(answers)
    }

    /// Sends the `unanswered` items of a page in one bulk request (after the pause their last
    /// send left, counted in `retries`), built by `op_for` from their position in the page,
    /// to `to`. Returns the items answered for
    /// good in this send; those that failed transiently stay in `unanswered` while the policy
    /// allows another send. Fails only if the whole request fails for good.
    pub(super) async fn send_round(
        &self,
        tree: &FsTree,
        unanswered: &mut Unanswered,
        op_for: impl Fn(usize) -> Result<BulkOp>,
        to: WriteTo<'_>,
        context: &str,
        retries: &mut u64,
    ) -> Result<Vec<ItemAnswer>> {
        if let Some(pause) = unanswered.pause.take() {
            *retries += unanswered.items.len() as u64;
            self.emit(RenameEvent::Retrying {
                items: unanswered.items.len(),
            });
            tokio::time::sleep(pause).await;
        }
        let ops = unanswered
            .items
            .iter()
            .map(|&i| op_for(i))
            .collect::<Result<Vec<BulkOp>>>()?;
        let sent = match to {
            WriteTo::Index { refresh: true } => {
                tree.store().bulk_refreshed(tree.index(), ops).await
            }
            WriteTo::Index { refresh: false } => tree.store().bulk(tree.index(), ops).await,
            WriteTo::Gate(gate) => match tree.store().write_gates() {
                Some(gates) => gates.bulk_through_gate(gate, ops).await,
                None => Err(StoreError::Rejected {
                    context: format!("writing through the gate `{gate}`"),
                    status: None,
                    message: "the store has no write gates".to_owned(),
                }),
            },
        };
        let transient = match &sent {
            Ok(results) => results
                .iter()
                .any(|r| r.as_ref().is_err_and(StoreError::is_retryable)),
            Err(e) => e.is_retryable(),
        };
        // The pause is drawn only when there is something to send again.
        let pause = if transient {
            unanswered.backoff.next()
        } else {
            None
        };
        let results = match sent {
            Ok(results) => results,
            Err(e) if pause.is_some() => unanswered.items.iter().map(|_| Err(e.clone())).collect(),
            Err(e) => return Err(RenameError::store(context)(e)),
        };
        let mut answers = Vec::new();
        let mut again = Vec::new();
        for (index, result) in std::mem::take(&mut unanswered.items)
            .into_iter()
            .zip(results)
        {
            match result {
                Err(e) if e.is_retryable() && pause.is_some() => again.push(index),
                result => answers.push(ItemAnswer { index, result }),
            }
        }
        unanswered.pause = pause.filter(|_| !again.is_empty());
        unanswered.items = again;
        Ok(answers)
    }
}
