//! Helpers shared by the lock tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use fs_locks::{LockClient, LockClientBuilder, LockError};
use fs_model::FsPath;
use fs_store::{SharedStore, SqliteOptions, SqliteStore};
use serde_json::Value;

pub const LOCKS: &str = "fs-lock";

/// A fresh near-real-time in-memory store with the lock index, so a forgotten refresh fails.
pub async fn store() -> SharedStore {
    let store = SqliteStore::in_memory_with(SqliteOptions::new().near_real_time(true))
        .expect("in-memory store");
    let store: SharedStore = Arc::new(store);
    client_builder(&store, "setup")
        .build()
        .ensure_index()
        .await
        .expect("lock index");
    store
}

/// A client builder with short waits, so refusals show up fast.
pub fn client_builder(store: &SharedStore, holder: &str) -> LockClientBuilder {
    LockClient::builder(Arc::clone(store), LOCKS)
        .holder(holder)
        .wait(Duration::ZERO)
        .backoff(Duration::from_millis(1), Duration::from_millis(20))
}

pub fn client(store: &SharedStore, holder: &str) -> LockClient {
    client_builder(store, holder).build()
}

pub fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("test path")
}

/// Returns the source of the lock document `id`, if any.
pub async fn lock_doc(store: &SharedStore, id: &str) -> Option<Value> {
    store
        .get(LOCKS, id)
        .await
        .expect("get lock doc")
        .map(|d| d.source)
}

/// Returns how many lock documents exist (refreshing first).
pub async fn lock_count(store: &SharedStore) -> u64 {
    store.refresh(LOCKS).await.expect("refresh");
    store
        .count(LOCKS, &fs_store::Scope::All)
        .await
        .expect("count")
}

/// Asserts that `result` is a timeout blocked on `path`, and returns the error text.
pub fn assert_blocked_on<T: std::fmt::Debug>(result: Result<T, LockError>, path: &str) -> String {
    match result {
        Err(LockError::Timeout { ref blocker, .. }) if blocker.path == path => {
            result.expect_err("checked").to_string()
        }
        other => panic!("expected a timeout blocked on `{path}`, got {other:?}"),
    }
}
