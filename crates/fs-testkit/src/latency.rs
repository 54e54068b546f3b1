//! [`LatencyStore`]: a store wrapper that makes every call wait a fixed time first, as a call to
//! a remote cluster waits on the network and the server's queue.
//!
//! The wait uses no CPU, so many calls wait at once: the wrapper models a store whose cost to
//! the client is mostly latency and whose capacity is not shared with the client's cores (a
//! real Elasticsearch cluster), which neither the in-process embedded store nor a single
//! osmem-server on the same two cores can show. Benchmarks use it to measure what a locking
//! scheme costs in waiting rather than in CPU.

use std::time::Duration;

use fs_store::{Call, DocStore, Result, SharedStore, StoreLayer};
use futures::future::BoxFuture;

/// A store whose every call first waits `round_trip`. A refreshed bulk request, a chained one
/// and a scripted one wait once: each is one request. It offers every capability of the store
/// it wraps.
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
}

impl StoreLayer for LatencyStore {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }

    fn on_describe(&self) -> String {
        format!(
            "{} behind {:?} of latency",
            self.inner.describe(),
            self.round_trip
        )
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        _call: Call,
        next: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        Box::pin(async move {
            tokio::time::sleep(self.round_trip).await;
            next.await
        })
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
