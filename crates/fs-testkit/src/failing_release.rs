//! [`FailingRelease`]: a store wrapper that fails a job's lock release after the job has
//! closed its journal entry, for the tests of issue 14 (a rename whose rewrite is complete has
//! happened, whatever becomes of its release) in the library and in the service.
//!
//! It arms itself when a write to the journal index closes an entry (the tombstone, a fence,
//! left at its id, or the entry deleted): the last step before a release. From then on it
//! fails bulk requests to the lock index as its [`ReleaseFailure`] says. It offers neither
//! scripts nor the ways of writing items that would go around its `on_bulk`: the release it
//! fails is the compare-and-set one, a bulk request.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use fs_model::{journal_index_name, lock_index_name};
use fs_store::{
    BulkItemResult, BulkOp, Capabilities, DocStore, Result, SharedStore, StoreError, StoreLayer,
    Version,
};

/// Which bulk requests to the lock index [`FailingRelease`] fails once a journal entry is
/// closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseFailure {
    /// Every one, as a whole (a broken answer, an HTTP 500): the release, and any renewal
    /// after it.
    Request,
    /// In every one, only the item writing this lock document; the other items are written.
    Item(String),
    /// The first release only (a request that deletes a lock), as a whole: renewals, which
    /// only rewrite lock documents, go through, and so does everything after the one failure.
    FirstRelease,
}

/// A store that fails lock releases after a journal entry is closed; see the module docs.
#[derive(Debug)]
pub struct FailingRelease {
    inner: SharedStore,
    lock_index: String,
    journal_index: String,
    failure: ReleaseFailure,
    armed: AtomicBool,
    failed: AtomicUsize,
}

impl FailingRelease {
    /// Wraps `inner`, whose tree index is `index` (the lock and journal indices are named
    /// after it), failing releases as `failure` says.
    pub fn new(inner: SharedStore, index: &str, failure: ReleaseFailure) -> Arc<FailingRelease> {
        Arc::new(FailingRelease {
            inner,
            lock_index: lock_index_name(index),
            journal_index: journal_index_name(index),
            failure,
            armed: AtomicBool::new(false),
            failed: AtomicUsize::new(0),
        })
    }

    /// Returns how many bulk requests it has failed, in whole or in part.
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }

    /// Returns true if `ops` to `index` are a request this wrapper fails now.
    fn fails(&self, index: &str, ops: &[BulkOp]) -> bool {
        if index != self.lock_index {
            return false;
        }
        match self.failure {
            // Disarmed by the one failure; `any` first, so that a renewal does not disarm it.
            ReleaseFailure::FirstRelease => {
                ops.iter().any(|op| matches!(op, BulkOp::Delete { .. }))
                    && self.armed.swap(false, Ordering::SeqCst)
            }
            ReleaseFailure::Request | ReleaseFailure::Item(_) => self.armed.load(Ordering::SeqCst),
        }
    }

    /// Writes `ops` but the ones writing `failing`, which fail; one result per op, in order.
    async fn bulk_but(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
        failing: &str,
    ) -> Result<Vec<BulkItemResult>> {
        let fails: Vec<bool> = ops.iter().map(|op| op.id() == failing).collect();
        let sent = ops.into_iter().filter(|op| op.id() != failing).collect();
        let mut written = self.inner.bulk(index, sent).await?.into_iter();
        let result = |fails: bool| match fails {
            true => Err(StoreError::Rejected {
                context: "releasing a lock (test)".into(),
                status: Some(400),
                message: "injected item failure".into(),
            }),
            false => written.next().unwrap_or_else(|| {
                Err(StoreError::Backend {
                    context: format!("bulk request to `{index}` (test)"),
                    message: "fewer results than items".into(),
                })
            }),
        };
        Ok(fails.into_iter().map(result).collect())
    }
}

#[async_trait]
impl StoreLayer for FailingRelease {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }

    fn on_describe(&self) -> String {
        format!("failing-release({})", self.inner.describe())
    }

    fn on_capabilities<'a>(&'a self, offered: Capabilities<'a>) -> Capabilities<'a> {
        Capabilities {
            scripts: None,
            chained_bulk: None,
            refreshed_bulk: None,
            ..offered
        }
    }

    async fn on_write(&self, index: &str, op: BulkOp) -> Result<Version> {
        // Closing a journal entry leaves a tombstone (a fence) at its id, or deletes it.
        let closing = index == self.journal_index
            && match &op {
                BulkOp::Index { source, .. } => source["state"] == "fenced",
                BulkOp::Delete { .. } => true,
                BulkOp::Create { .. } => false,
            };
        let result = self.inner.write(index, op).await;
        if closing && result.is_ok() {
            self.armed.store(true, Ordering::SeqCst);
        }
        result
    }

    async fn on_bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        if !self.fails(index, &ops) {
            return self.inner.bulk(index, ops).await;
        }
        self.failed.fetch_add(1, Ordering::SeqCst);
        match &self.failure {
            ReleaseFailure::Request | ReleaseFailure::FirstRelease => Err(StoreError::Backend {
                context: "releasing locks (test)".into(),
                message: "injected failure after the journal entry was closed".into(),
            }),
            ReleaseFailure::Item(failing) => self.bulk_but(index, ops, failing).await,
        }
    }
}
