//! [`LatencyStore`]: a store wrapper that makes every call wait a fixed time first, as a call to
//! a remote cluster waits on the network and the server's queue.
//!
//! The wait uses no CPU, so many calls wait at once: the wrapper models a store whose cost to
//! the client is mostly latency and whose capacity is not shared with the client's cores (a
//! real Elasticsearch cluster), which neither the in-process embedded store nor a single
//! osmem-server on the same two cores can show. Benchmarks use it to measure what a locking
//! scheme costs in waiting rather than in CPU.

use std::time::Duration;

use async_trait::async_trait;
use fs_store::{
    BulkItemResult, BulkOp, Cursor, DocStore, Page, Result, Scope, ScriptedUpdate, ScriptedUpdates,
    SearchRequest, SharedStore, StoredDoc, UpdateItemResult, Version,
};
use serde_json::Value;

/// A store whose every call first waits `round_trip`.
#[derive(Debug, Clone)]
pub struct LatencyStore {
    inner: SharedStore,
    round_trip: Duration,
}

impl LatencyStore {
    /// Wraps `inner`; every call waits `round_trip` before it runs.
    pub fn new(inner: SharedStore, round_trip: Duration) -> LatencyStore {
        LatencyStore { inner, round_trip }
    }

    async fn wait(&self) {
        tokio::time::sleep(self.round_trip).await;
    }
}

#[async_trait]
impl DocStore for LatencyStore {
    fn describe(&self) -> String {
        format!(
            "{} behind {:?} of latency",
            self.inner.describe(),
            self.round_trip
        )
    }
    async fn create_index(&self, index: &str, body: &Value) -> Result<bool> {
        self.wait().await;
        self.inner.create_index(index, body).await
    }
    async fn delete_index(&self, index: &str) -> Result<bool> {
        self.wait().await;
        self.inner.delete_index(index).await
    }
    async fn extend_mapping(&self, index: &str, mappings: &Value) -> Result<()> {
        self.wait().await;
        self.inner.extend_mapping(index, mappings).await
    }
    async fn find(
        &self,
        index: &str,
        query: &fs_model::FindQuery,
        size: usize,
    ) -> Result<Vec<StoredDoc>> {
        self.wait().await;
        self.inner.find(index, query, size).await
    }
    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.wait().await;
        self.inner.get(index, id).await
    }
    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        self.wait().await;
        self.inner.mget(index, ids).await
    }
    async fn create(&self, index: &str, id: &str, source: Value) -> Result<Version> {
        self.wait().await;
        self.inner.create(index, id, source).await
    }
    async fn index(
        &self,
        index: &str,
        id: &str,
        source: Value,
        if_version: Option<Version>,
    ) -> Result<Version> {
        self.wait().await;
        self.inner.index(index, id, source, if_version).await
    }
    async fn delete(&self, index: &str, id: &str, if_version: Option<Version>) -> Result<Version> {
        self.wait().await;
        self.inner.delete(index, id, if_version).await
    }
    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.wait().await;
        self.inner.bulk(index, ops).await
    }
    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        self.wait().await;
        self.inner.search(index, request).await
    }
    async fn close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        self.wait().await;
        self.inner.close_cursor(index, cursor).await
    }
    async fn count(&self, index: &str, scope: &Scope) -> Result<u64> {
        self.wait().await;
        self.inner.count(index, scope).await
    }
    async fn refresh(&self, index: &str) -> Result<()> {
        self.wait().await;
        self.inner.refresh(index).await
    }
    async fn indices_exist(&self, indices: &[&str]) -> Result<bool> {
        self.wait().await;
        self.inner.indices_exist(indices).await
    }
    /// One round trip, as on Elasticsearch (`refresh=true` on the bulk request).
    async fn bulk_refreshed(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.wait().await;
        self.inner.bulk_refreshed(index, ops).await
    }
    fn chains_bulk(&self) -> bool {
        self.inner.chains_bulk()
    }

    /// One call's latency: both go in one request.
    async fn bulk_after(
        &self,
        first_index: &str,
        first: BulkOp,
        index: &str,
        ops: Vec<BulkOp>,
        refresh: bool,
    ) -> Result<fs_store::Chained<BulkItemResult>> {
        self.wait().await;
        self.inner
            .bulk_after(first_index, first, index, ops, refresh)
            .await
    }

    fn scripted(&self) -> Option<&dyn ScriptedUpdates> {
        self.inner.scripted().map(|_| self as &dyn ScriptedUpdates)
    }
}

/// A scripted request is one round trip too: the inner store's, after the wait.
#[async_trait]
impl ScriptedUpdates for LatencyStore {
    async fn put_script(&self, id: &str, source: &str) -> Result<bool> {
        self.wait().await;
        match self.inner.scripted() {
            Some(scripted) => scripted.put_script(id, source).await,
            None => Ok(false),
        }
    }
    async fn stored_script(&self, id: &str) -> Result<Option<String>> {
        self.wait().await;
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
        self.wait().await;
        match self.inner.scripted() {
            Some(scripted) => scripted.bulk_update(index, items).await,
            None => Err(fs_store::StoreError::Rejected {
                context: self.describe(),
                status: None,
                message: "the store runs no scripts".to_owned(),
            }),
        }
    }
    fn chains(&self) -> bool {
        self.inner.scripted().is_some_and(ScriptedUpdates::chains)
    }
    /// One call's latency: both go in one request.
    async fn bulk_update_after(
        &self,
        first_index: &str,
        first: BulkOp,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<fs_store::Chained<UpdateItemResult>> {
        self.wait().await;
        match self.inner.scripted() {
            Some(scripted) => {
                scripted
                    .bulk_update_after(first_index, first, index, items)
                    .await
            }
            None => Err(fs_store::StoreError::Rejected {
                context: self.describe(),
                status: None,
                message: "the store runs no scripts".to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn every_call_waits_and_waits_overlap() {
        let inner: SharedStore = Arc::new(fs_store::SqliteStore::in_memory().expect("store"));
        let store = Arc::new(LatencyStore::new(inner, Duration::from_millis(5)));
        let started = tokio::time::Instant::now();
        store
            .create_index("l", &serde_json::json!({}))
            .await
            .expect("index");
        assert_eq!(started.elapsed(), Duration::from_millis(5));
        let calls = (0..10).map(|i| {
            let store = Arc::clone(&store);
            async move { store.get("l", &format!("d{i}")).await }
        });
        let started = tokio::time::Instant::now();
        for found in futures::future::join_all(calls).await {
            assert!(found.expect("get").is_none());
        }
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(5),
            "ten calls wait at once, as on a network"
        );
    }
}
