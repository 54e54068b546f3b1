//! `fsrename serve` when a job's release fails after its rename is complete (issue 14): the job
//! is `done` with a warning naming the locks left, and the service clears them itself once
//! their lease has run out. On the embedded store and on osmem.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::{lock_index_name, FsDoc, FsPath};
use fs_rename::FsTree;
use fs_store::{Scope, SharedStore};
use fs_testkit::{Backend, FailingRelease, ReleaseFailure};
use fsrename::serve::{ServeConfig, Server};
use serde_json::{json, Value};
use tokio::sync::oneshot;

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
    let store = FailingRelease::new(Arc::clone(&raw), &index, ReleaseFailure::FirstRelease);
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
    let job = fs_testkit::rename_ended(&http, &base, &id, deadline).await;

    assert_eq!(store.failed(), 1, "the release failed");
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
    assert_eq!(report.journals_open(), 0, "{report}");

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
