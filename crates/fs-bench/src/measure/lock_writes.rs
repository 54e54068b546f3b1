//! [`LockWrites`]: a store layer that counts the documents written to lock indices (issue 51):
//! every item of a write, a bulk, a scripted update or a chain whose index is a lock index,
//! and apart those whose id is one of the shared ancestors' lock ids (`/p` for the service's
//! clients under `/p`). A job's locks on its own paths are the floor (a take and a release
//! each); writes of a shared ancestor's document are what every job adds to the one document
//! all of them meet on.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use fs_store::{
    BulkItemResult, BulkOp, Chain, Chained, DocStore, Result, ScriptedUpdate, SharedStore,
    StoreLayer, UpdateItemResult, Version,
};

/// Counts of lock-index writes so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockWriteCounts {
    /// Documents written to lock indices, every kind of write.
    pub total: u64,
    /// Of those, the shared ancestors' documents.
    pub shared: u64,
}

impl LockWriteCounts {
    /// What was written between `earlier` and `self`.
    pub fn since(self, earlier: LockWriteCounts) -> LockWriteCounts {
        LockWriteCounts {
            total: self.total.saturating_sub(earlier.total),
            shared: self.shared.saturating_sub(earlier.shared),
        }
    }
}

/// Wraps a store and counts the documents written to its lock indices (names ending in
/// `-lock`, as `fs_model::lock_index_name` makes them). Clones share the counts.
#[derive(Debug, Clone)]
pub struct LockWrites {
    inner: SharedStore,
    shared_ids: Arc<HashSet<String>>,
    total: Arc<AtomicU64>,
    shared: Arc<AtomicU64>,
}

impl LockWrites {
    /// Wraps `inner`; the documents with an id in `shared_ids` are counted apart.
    pub fn new(inner: SharedStore, shared_ids: impl IntoIterator<Item = String>) -> LockWrites {
        LockWrites {
            inner,
            shared_ids: Arc::new(shared_ids.into_iter().collect()),
            total: Arc::new(AtomicU64::new(0)),
            shared: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> LockWriteCounts {
        LockWriteCounts {
            total: self.total.load(Ordering::Relaxed),
            shared: self.shared.load(Ordering::Relaxed),
        }
    }

    /// Counts the documents `ids` written to `index`, if it is a lock index.
    fn note<'a>(&self, index: &str, ids: impl IntoIterator<Item = &'a str>) {
        if !index.ends_with("-lock") {
            return;
        }
        for id in ids {
            self.total.fetch_add(1, Ordering::Relaxed);
            if self.shared_ids.contains(id) {
                self.shared.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[async_trait]
impl StoreLayer for LockWrites {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }

    async fn on_write(&self, index: &str, op: BulkOp) -> Result<Version> {
        self.note(index, [op.id()]);
        self.inner.write(index, op).await
    }

    async fn on_bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.note(index, ops.iter().map(BulkOp::id));
        self.inner.bulk(index, ops).await
    }

    async fn on_bulk_refreshed(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
    ) -> Result<Vec<BulkItemResult>> {
        self.note(index, ops.iter().map(BulkOp::id));
        self.inner.bulk_refreshed(index, ops).await
    }

    async fn on_bulk_after(&self, chain: Chain<'_, BulkOp>) -> Result<Chained<BulkItemResult>> {
        self.note(chain.first_index, [chain.first.id()]);
        self.note(chain.index, chain.then.iter().map(BulkOp::id));
        self.inner.bulk_after(chain).await
    }

    async fn on_bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        self.note(index, items.iter().map(|item| item.id.as_str()));
        match self.inner.scripted() {
            Some(scripted) => scripted.bulk_update(index, items).await,
            None => Err(no_scripts(index)),
        }
    }

    async fn on_bulk_update_after(
        &self,
        chain: Chain<'_, ScriptedUpdate>,
    ) -> Result<Chained<UpdateItemResult>> {
        self.note(chain.first_index, [chain.first.id()]);
        self.note(chain.index, chain.then.iter().map(|item| item.id.as_str()));
        match self.inner.scripted() {
            Some(scripted) => scripted.bulk_update_after(chain).await,
            None => Err(no_scripts(chain.index)),
        }
    }
}

/// The error of a scripted update through a store without scripts (never asked: this layer
/// offers the capability only where the store has it).
fn no_scripts(index: &str) -> fs_store::StoreError {
    fs_store::StoreError::Rejected {
        context: format!("scripted update of `{index}`"),
        status: None,
        message: "this store runs no scripts".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree lock on `/p/s0` and its release write `/p` (the shared ancestor) twice and
    /// `/p/s0` twice, on a store without scripts (compare-and-set) and on one with them.
    #[tokio::test]
    async fn a_tree_lock_under_a_shared_parent_is_counted() {
        for store in [
            fs_testkit::Backend::Embedded.store(),
            Arc::new(fs_testkit::ScriptingStore::new(
                fs_testkit::Backend::Embedded.store(),
            )) as SharedStore,
        ] {
            let counting = LockWrites::new(store, ["/p".to_owned()]);
            let layered: SharedStore = Arc::new(counting.clone());
            let tree = fs_rename::FsTree::new(Arc::clone(&layered), "fs");
            tree.ensure_indices().await.expect("indices");
            let index = tree.lock_index();
            let client = fs_locks::LockClient::builder(layered, index).build();
            let path = fs_model::FsPath::parse("/p/s0").expect("a path");
            let guard = client.lock_tree(&path).await.expect("lock");
            guard.release().await.expect("release");
            assert_eq!(
                counting.counts(),
                LockWriteCounts {
                    total: 4,
                    shared: 2
                }
            );
        }
    }
}
