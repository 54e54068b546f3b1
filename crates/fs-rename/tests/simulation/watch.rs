//! [`Watched`]: the store beneath every simulated job and recoverer (each behind a fault
//! injector of its own). After every write that reaches it, the step, it checks the
//! invariants; on request it keeps a trace of every call and answer, which is what a replay
//! of the same seed must reproduce exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fs_model::FsPath;
use fs_rename::RenameHooks;
use fs_store::{
    BulkItemResult, BulkOp, Cursor, DocStore, Page, Result, Scope, SearchRequest, SqliteStore,
    StoredDoc, Version,
};
use serde_json::Value;

use crate::invariants::{self, Expected};

/// The simulated world: the store, what is expected of it, and what was seen.
pub struct World {
    pub raw: Arc<SqliteStore>,
    expected: Mutex<Expected>,
    /// Writes so far (each followed by a check).
    steps: AtomicU64,
    /// The first violation, with the step that made it. Recorded rather than raised: the
    /// writer may be a lock client's background renewal, whose panic nobody would see.
    violation: Mutex<Option<String>>,
    trace: Option<Mutex<Vec<String>>>,
    /// Prints every call as it happens (`FSRENAME_SIM_TRACE=1`, for a seed under study).
    live: bool,
    started: tokio::time::Instant,
}

impl World {
    pub fn new(raw: Arc<SqliteStore>, expected: Expected, trace: bool) -> Arc<World> {
        Arc::new(World {
            raw,
            expected: Mutex::new(expected),
            steps: AtomicU64::new(0),
            violation: Mutex::new(None),
            trace: (trace || live_trace()).then(|| Mutex::new(Vec::new())),
            live: live_trace(),
            started: tokio::time::Instant::now(),
        })
    }

    pub fn expected(&self) -> Expected {
        self.expected.lock().unwrap().clone()
    }

    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }

    pub fn violation(&self) -> Option<String> {
        self.violation.lock().unwrap().clone()
    }

    pub fn trace(&self) -> Vec<String> {
        self.trace
            .as_ref()
            .map(|t| t.lock().unwrap().clone())
            .unwrap_or_default()
    }

    fn record(&self, line: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            let ms = self.started.elapsed().as_millis();
            let line = format!("{ms:>6} ms {}", line());
            if self.live {
                eprintln!("{line}");
            }
            trace.lock().unwrap().push(line);
        }
    }

    /// A write reached the store: checks the invariants (until the first violation).
    async fn step(&self, call: impl FnOnce() -> String) {
        let n = self.steps.fetch_add(1, Ordering::SeqCst) + 1;
        if self.violation.lock().unwrap().is_some() {
            return;
        }
        let expected = self.expected();
        if let Err(broken) = invariants::check(&self.raw, &expected).await {
            *self.violation.lock().unwrap() =
                Some(format!("after step {n} ({}): {broken}", call()));
        }
    }

    /// Applies a committed rename to the model.
    fn commit(&self, from: &FsPath, to: &FsPath) {
        self.record(|| format!("committed {from} -> {to}"));
        let mut expected = self.expected.lock().unwrap();
        for path in expected.model.values_mut() {
            let current = FsPath::parse(path).expect("model path");
            if current.is_inside(from) {
                *path = current.rebase(from, to).expect("rebase").to_string();
            }
        }
    }
}

fn live_trace() -> bool {
    std::env::var("FSRENAME_SIM_TRACE").is_ok_and(|v| v == "1")
}

/// Applies a rename to the model when it commits (its job's or its recoverer's hook).
pub struct Commit(pub Arc<World>);

#[async_trait]
impl RenameHooks for Commit {
    async fn committed(&self, from: &FsPath, to: &FsPath) {
        self.0.commit(from, to);
    }
}

/// The watched store; see the module documentation.
pub struct Watched(pub Arc<World>);

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watched({} steps)", self.0.steps())
    }
}

impl Watched {
    async fn read<T: std::fmt::Debug>(
        &self,
        call: impl FnOnce() -> String,
        result: Result<T>,
    ) -> Result<T> {
        self.0.record(|| format!("{} -> {result:?}", call()));
        result
    }

    async fn write<T: std::fmt::Debug>(
        &self,
        call: impl Fn() -> String,
        result: Result<T>,
    ) -> Result<T> {
        self.0.record(|| format!("{} -> {result:?}", call()));
        self.0.step(call).await;
        result
    }
}

#[async_trait]
impl DocStore for Watched {
    fn describe(&self) -> String {
        format!("watched({})", self.0.raw.describe())
    }
    async fn create_index(&self, index: &str, body: &Value) -> Result<bool> {
        let result = self.0.raw.create_index(index, body).await;
        self.write(|| format!("create_index {index}"), result).await
    }
    async fn delete_index(&self, index: &str) -> Result<bool> {
        let result = self.0.raw.delete_index(index).await;
        self.write(|| format!("delete_index {index}"), result).await
    }
    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        let result = self.0.raw.get(index, id).await;
        self.read(|| format!("get {index}/{id}"), result).await
    }
    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        let result = self.0.raw.mget(index, ids).await;
        self.read(|| format!("mget {index} {ids:?}"), result).await
    }
    async fn create(&self, index: &str, id: &str, source: Value) -> Result<Version> {
        let shown = source.to_string();
        let result = self.0.raw.create(index, id, source).await;
        self.write(|| format!("create {index}/{id} {shown}"), result)
            .await
    }
    async fn index(
        &self,
        index: &str,
        id: &str,
        source: Value,
        if_version: Option<Version>,
    ) -> Result<Version> {
        let shown = source.to_string();
        let result = self.0.raw.index(index, id, source, if_version).await;
        self.write(
            || format!("index {index}/{id} if {if_version:?} {shown}"),
            result,
        )
        .await
    }
    async fn delete(&self, index: &str, id: &str, if_version: Option<Version>) -> Result<Version> {
        let result = self.0.raw.delete(index, id, if_version).await;
        self.write(|| format!("delete {index}/{id} if {if_version:?}"), result)
            .await
    }
    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let shown = self.0.trace.is_some().then(|| format!("{ops:?}"));
        let n = ops.len();
        let result = self.0.raw.bulk(index, ops).await;
        self.write(
            || match &shown {
                Some(ops) => format!("bulk {index} {ops}"),
                None => format!("bulk {index} ({n} items)"),
            },
            result,
        )
        .await
    }
    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        let shown = self.0.trace.is_some().then(|| format!("{request:?}"));
        let result = self.0.raw.search(index, request).await;
        self.read(|| format!("search {index} {shown:?}"), result)
            .await
    }
    async fn close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        let shown = self.0.trace.is_some().then(|| format!("{cursor:?}"));
        let result = self.0.raw.close_cursor(index, cursor).await;
        self.read(|| format!("close_cursor {index} {shown:?}"), result)
            .await
    }
    async fn count(&self, index: &str, scope: &Scope) -> Result<u64> {
        let result = self.0.raw.count(index, scope).await;
        self.read(|| format!("count {index} {scope:?}"), result)
            .await
    }
    async fn refresh(&self, index: &str) -> Result<()> {
        let result = self.0.raw.refresh(index).await;
        self.read(|| format!("refresh {index}"), result).await
    }
}
