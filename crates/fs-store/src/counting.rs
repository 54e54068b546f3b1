//! [`CountingStore`]: a store wrapper that counts round trips.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::scripted::{ScriptedUpdate, ScriptedUpdates, UpdateItemResult};
use crate::store::{DocStore, SharedStore};
use crate::types::{
    BulkItemResult, BulkOp, Chained, Cursor, Page, Scope, SearchRequest, StoredDoc, Version,
};

/// Wraps a store and counts every call made through it: one call, one round trip.
///
/// Wrap the shared store once per job to learn what that job cost; the count is shared by
/// clones of the returned handle.
#[derive(Debug, Clone)]
pub struct CountingStore {
    inner: SharedStore,
    calls: Arc<AtomicU64>,
}

impl CountingStore {
    /// Wraps `inner` with a counter starting at zero.
    pub fn new(inner: SharedStore) -> CountingStore {
        CountingStore {
            inner,
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Returns the number of calls made so far.
    pub fn round_trips(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl DocStore for CountingStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn create_index(&self, index: &str, body: &Value) -> Result<bool> {
        self.count();
        self.inner.create_index(index, body).await
    }

    async fn delete_index(&self, index: &str) -> Result<bool> {
        self.count();
        self.inner.delete_index(index).await
    }

    async fn extend_mapping(&self, index: &str, mappings: &Value) -> Result<()> {
        self.count();
        self.inner.extend_mapping(index, mappings).await
    }

    async fn find(
        &self,
        index: &str,
        query: &fs_model::FindQuery,
        size: usize,
    ) -> Result<Vec<StoredDoc>> {
        self.count();
        self.inner.find(index, query, size).await
    }

    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.count();
        self.inner.get(index, id).await
    }

    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        self.count();
        self.inner.mget(index, ids).await
    }

    async fn create(&self, index: &str, id: &str, source: Value) -> Result<Version> {
        self.count();
        self.inner.create(index, id, source).await
    }

    async fn index(
        &self,
        index: &str,
        id: &str,
        source: Value,
        if_version: Option<Version>,
    ) -> Result<Version> {
        self.count();
        self.inner.index(index, id, source, if_version).await
    }

    async fn delete(&self, index: &str, id: &str, if_version: Option<Version>) -> Result<Version> {
        self.count();
        self.inner.delete(index, id, if_version).await
    }

    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.count();
        self.inner.bulk(index, ops).await
    }

    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        self.count();
        self.inner.search(index, request).await
    }

    async fn close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        self.count();
        self.inner.close_cursor(index, cursor).await
    }

    async fn count(&self, index: &str, scope: &Scope) -> Result<u64> {
        self.count();
        self.inner.count(index, scope).await
    }

    async fn refresh(&self, index: &str) -> Result<()> {
        self.count();
        self.inner.refresh(index).await
    }

    async fn indices_exist(&self, indices: &[&str]) -> Result<bool> {
        self.count();
        self.inner.indices_exist(indices).await
    }

    /// One round trip, as on Elasticsearch (an embedded store refreshes in the same call).
    async fn bulk_refreshed(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.count();
        self.inner.bulk_refreshed(index, ops).await
    }

    fn chains_bulk(&self) -> bool {
        self.inner.chains_bulk()
    }

    /// One round trip: both go in one request.
    async fn bulk_after(
        &self,
        first_index: &str,
        first: BulkOp,
        index: &str,
        ops: Vec<BulkOp>,
        refresh: bool,
    ) -> Result<Chained<BulkItemResult>> {
        self.count();
        self.inner
            .bulk_after(first_index, first, index, ops, refresh)
            .await
    }

    fn scripted(&self) -> Option<&dyn ScriptedUpdates> {
        self.inner.scripted().map(|_| self as &dyn ScriptedUpdates)
    }
}

#[async_trait]
impl ScriptedUpdates for CountingStore {
    /// Not counted: storing scripts is set-up, done once per store handle and cached there.
    async fn put_script(&self, id: &str, source: &str) -> Result<bool> {
        match self.inner.scripted() {
            Some(scripted) => scripted.put_script(id, source).await,
            None => Ok(false),
        }
    }

    /// Not counted, like storing them.
    async fn stored_script(&self, id: &str) -> Result<Option<String>> {
        match self.inner.scripted() {
            Some(scripted) => scripted.stored_script(id).await,
            None => Ok(None),
        }
    }

    async fn bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        self.count();
        match self.inner.scripted() {
            Some(scripted) => scripted.bulk_update(index, items).await,
            None => Err(StoreError::rejected(
                format!("scripted update of `{index}`"),
                "the store runs no scripts",
            )),
        }
    }

    fn chains(&self) -> bool {
        self.inner.scripted().is_some_and(ScriptedUpdates::chains)
    }

    /// One round trip: both go in one request.
    async fn bulk_update_after(
        &self,
        first_index: &str,
        first: BulkOp,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Chained<UpdateItemResult>> {
        self.count();
        match self.inner.scripted() {
            Some(scripted) => {
                scripted
                    .bulk_update_after(first_index, first, index, items)
                    .await
            }
            None => Err(StoreError::rejected(
                format!("scripted update of `{index}`"),
                "the store runs no scripts",
            )),
        }
    }
}
