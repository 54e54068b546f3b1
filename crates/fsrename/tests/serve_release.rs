//! `fsrename serve` when a job's release fails after its rename is complete (issue 14): the job
//! is `done` with a warning naming the locks left, and the service clears them itself once
//! their lease has run out. On the embedded store and on osmem.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fs_model::{journal_index_name, lock_index_name, FsDoc, FsPath};
use fs_rename::FsTree;
use fs_store::{
    BulkItemResult, BulkOp, Capabilities, DocStore, Scope, SharedStore, StoreError, StoreLayer,
    Version,
};
use fs_testkit::Backend;
use fsrename::serve::{ServeConfig, Server};
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// Wraps a store and fails the first lock release (a bulk request to the lock index that
/// deletes something) sent after a journal entry was closed. Renewals only rewrite lock
/// documents, so they go through; so does everything after the one failure.
#[derive(Debug)]
struct FailingRelease {
    inner: SharedStore,
    lock_index: String,
    journal_index: String,
    armed: AtomicBool,
    failed: AtomicUsize,
}

#[async_trait]
impl StoreLayer for FailingRelease {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }
    fn on_describe(&self) -> String {
        format!("failing-release({})", self.inner.describe())
    }
    /// Offers neither scripts nor the ways of writing items that would go around its
    /// `on_bulk`: the release it fails is the compare-and-set one, a bulk request.
    fn on_capabilities<'a>(&'a self, offered: Capabilities<'a>) -> Capabilities<'a> {
        Capabilities {
            scripts: None,
            chained_bulk: None,
            refreshed_bulk: None,
            ..offered
        }
    }
    async fn on_write(&self, index: &str, op: BulkOp) -> fs_store::Result<Version> {
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
    async fn on_bulk(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
    ) -> fs_store::Result<Vec<BulkItemResult>> {
        let release =
            index == self.lock_index && ops.iter().any(|op| matches!(op, BulkOp::Delete { .. }));
        if release && self.armed.swap(false, Ordering::SeqCst) {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Backend {
                context: "releasing locks (test)".into(),
                message: "injected failure after the journal entry was closed".into(),
            });
        }
        self.inner.bulk(index, ops).await
    }
}

fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("test path")
}

async fn lock_documents(store: &SharedStore, lock_index: &str) -> u64 {
    store.refresh(lock_index).await.expect("refresh locks");
    store
        .count(lock_index, &Scope::All)
        .await
        .expect("count locks")
}

async fn a_job_whose_release_fails_is_done_and_its_locks_are_cleared(backend: Backend) {
    let raw = backend.store();
    let index = fs_testkit::unique_name("fs");
    let lock_index = lock_index_name(&index);
    let store = Arc::new(FailingRelease {
        inner: Arc::clone(&raw),
        lock_index: lock_index.clone(),
        journal_index: journal_index_name(&index),
        armed: AtomicBool::new(false),
        failed: AtomicUsize::new(0),
    });
    let lease = Duration::from_secs(1);
    let mut config = ServeConfig::new(index.clone());
    config.listen = "127.0.0.1:0".parse().expect("addr");
    config.lease = lease;
    // Only the service's own run after the failed release can clear the locks.
    config.recover_every = None;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = Server::start(config, store.clone(), async {
        let _ = stopped.await;
    })
    .await
    .expect("start the service");
    let tree = FsTree::new(Arc::clone(&raw), index.clone());
    let mut docs = vec![FsDoc::dir(p("/a"), 0)];
    for f in 0..5 {
        docs.push(FsDoc::file(p(&format!("/a/f{f}")), 1, 0));
    }
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");

    let base = format!("http://{}", server.addr());
    let http = reqwest::Client::new();
    let answer = http
        .post(format!("{base}/renames"))
        .json(&json!({"from": "/a", "to": "/b"}))
        .send()
        .await
        .expect("POST /renames");
    assert_eq!(answer.status().as_u16(), 202);
    let id = answer.json::<Value>().await.expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let job: Value = http
            .get(format!("{base}/renames/{id}"))
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("json");
        if job["state"] == "done" || job["state"] == "failed" {
            break job;
        }
        assert!(Instant::now() < deadline, "never finished: {job}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };

    assert_eq!(store.failed.load(Ordering::SeqCst), 1, "the release failed");
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["error"], Value::Null, "{job}");
    assert_eq!(job["report"]["rewritten"], 6, "{job}");
    assert_eq!(job["report"]["locks_left"], json!(["/a", "/b"]), "{job}");
    let warning = job["warnings"][0].as_str().expect("a warning");
    assert!(warning.contains("releasing its locks failed"), "{warning}");
    assert_eq!(tree.count_under(&p("/b")).await.expect("count"), 6);
    assert_eq!(lock_documents(&raw, &lock_index).await, 2, "left to expire");

    // Periodic recovery is off: the service's own run, once the lease is over, clears them.
    loop {
        if lock_documents(&raw, &lock_index).await == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the locks left were never cleared"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = fs_rename::fsck(Arc::clone(&raw), &index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.journals_open, 0, "{report}");

    let _ = stop.send(());
    server.wait().await.expect("clean shutdown");
}

mod embedded {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_whose_release_fails_is_done_and_its_locks_are_cleared() {
        super::a_job_whose_release_fails_is_done_and_its_locks_are_cleared(
            fs_testkit::Backend::Embedded,
        )
        .await
    }
}

mod osmem {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_whose_release_fails_is_done_and_its_locks_are_cleared() {
        super::a_job_whose_release_fails_is_done_and_its_locks_are_cleared(
            fs_testkit::Backend::Osmem,
        )
        .await
    }
}
