//! Clocks (issue 72): leases are judged by the server's clock, whatever the clocks of the
//! machines that write and judge them say (`fs_locks::LeaseClock::sync`, `docs/recovery.md`).
//!
//! A process's clock is set off with libfaketime (Debian's `faketime`, which `.ci/run`
//! installs): a `mv` whose machine runs a minute behind holds locks with a lease of 10 s
//! while the server rewrites the tree (through the Elasticsearch-behaviour proxy, which runs
//! the task slowly and tells its clock in its node statistics). Judged by that machine's
//! clock, its leases ran out 50 s before it took them: another process on a true clock would
//! list them as expired and `recover` would take the job over from under it. By the server's
//! clock they are good, and nothing is taken.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::{DocKind, FsDoc, FsPath};
use fs_rename::FsTree;
use fs_testkit::EsProxyOptions;
use serde_json::Value;

/// Where Debian's libfaketime is.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("path")
}

/// `fsrename` on the proxy's server, its clock set off by `offset` (libfaketime's syntax:
/// "-60s", "+2m") if given. The monotonic clock is left alone, as a real machine's.
fn fsrename(url: &str, index: &str, offset: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fsrename"));
    cmd.args(["--store", url, "--index", index, "--lease", "10s"])
        .args(args)
        .env_remove("FSRENAME_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(offset) = offset {
        assert!(
            Path::new(LIBFAKETIME).exists(),
            "{LIBFAKETIME} is missing: install Debian's faketime (.ci/run does)"
        );
        cmd.env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME", offset)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME_DONT_RESET", "1");
    }
    cmd
}

/// The JSON lines a command printed (`docs/json.md`).
fn lines_of(cmd: &mut Command, what: &str) -> Vec<Value> {
    let out = cmd.output().expect("run fsrename");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
        .collect()
}

/// The locks `fsrename locks --json` lists, by a process on the machine's own clock.
fn locks(url: &str, index: &str) -> Vec<Value> {
    lines_of(
        &mut fsrename(url, index, None, &["locks", "--json"]),
        "locks",
    )
    .into_iter()
    .filter(|l| l["type"] == "lock")
    .collect()
}

/// `/src` with `n` documents in ten directories.
async fn build(url: &str, index: &str, n: usize, layout: fs_model::IndexLayout) {
    let store = Arc::new(fs_testkit::elastic_store(url));
    let tree = FsTree::new(store, index).with_layout(layout);
    tree.ensure_indices().await.expect("indices");
    let mut docs = vec![FsDoc::new(p("/src"), DocKind::Dir, 0, 0)];
    for d in 0..10 {
        docs.push(FsDoc::new(p(&format!("/src/d{d}")), DocKind::Dir, 0, 0));
    }
    for i in 0..n - docs.len() {
        let path = format!("/src/d{}/f{i:05}", i % 10);
        docs.push(FsDoc::new(p(&path), DocKind::File, 1, 0));
    }
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");
}

/// A proxy that runs renames as slow tasks: 5 000 documents in parts of 500, 400 ms before
/// each, some 4 s in all.
fn slow_proxy() -> fs_testkit::EsProxy {
    fs_testkit::start_es_proxy(EsProxyOptions {
        update_by_query: true,
        update_by_query_pause: Duration::from_millis(400),
        ..EsProxyOptions::default()
    })
}

/// Builds `/src` in `index` and starts `mv /src /dst` on the server (its clock set off by
/// `offset`); returns once the server runs its task, the locks held.
async fn mv_under_way(
    proxy: &fs_testkit::EsProxy,
    index: &str,
    offset: Option<&str>,
) -> std::process::Child {
    build(proxy.url(), index, 5_000, fs_model::IndexLayout::default()).await;
    let mv = fsrename(
        proxy.url(),
        index,
        offset,
        &["mv", "/src", "/dst", "--rewrite", "server"],
    )
    .spawn()
    .expect("start mv");
    let started = Instant::now();
    while proxy.running_tasks() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no task started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    mv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_clock_runs_behind_keeps_its_locks() {
    let proxy = slow_proxy();
    let index = fs_testkit::unique_name("clock-behind");
    let mv = mv_under_way(&proxy, &index, Some("-60s")).await;
    // A true clock lists the mv's locks: none has run out.
    let locks = locks(proxy.url(), &index);
    assert!(!locks.is_empty(), "the mv holds locks");
    for lock in &locks {
        assert_eq!(
            lock["expired"],
            Value::Bool(false),
            "a lock of a live holder listed as expired: {lock}"
        );
    }
    // And a recovery on a true clock takes nothing over.
    let recovered = lines_of(
        &mut fsrename(proxy.url(), &index, None, &["recover", "--json"]),
        "recover",
    );
    assert_eq!(
        proxy.running_tasks(),
        1,
        "the mv's task still runs: {recovered:?}"
    );
    let out = mv.wait_with_output().expect("mv ends");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}\nrecover said: {recovered:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // And it said why its leases do not follow its own clock.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("behind the store's: leases follow the store's clock"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_written_in_the_server_s_time() {
    let proxy = slow_proxy();
    // A server an hour ahead of every machine of the test (which share one clock).
    let hour: i64 = 3_600_000;
    proxy.set_server_clock_offset(hour);
    let index = fs_testkit::unique_name("clock-ahead");
    let mv = mv_under_way(&proxy, &index, None).await;
    let machine_now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("milliseconds");
    let locks = locks(proxy.url(), &index);
    assert!(!locks.is_empty(), "the mv holds locks");
    for lock in &locks {
        let expires_at = lock["expires_at"].as_i64().expect("expires_at");
        // The lease is 10 s: by the server's clock, an hour on.
        assert!(
            (machine_now + hour..machine_now + hour + 11_000).contains(&expires_at),
            "expires at {expires_at}, the machine's clock says {machine_now}: {lock}"
        );
        assert_eq!(lock["expired"], Value::Bool(false), "{lock}");
    }
    let out = mv.wait_with_output().expect("mv ends");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_a_holder_whose_clock_runs_behind_keeps_its_locks() {
    let url = std::env::var("FSRENAME_TEST_ES_URL").expect("FSRENAME_TEST_ES_URL");
    let index = fs_testkit::unique_name("clock-behind");
    build(&url, &index, 20_000, fs_testkit::real_elastic_layout()).await;
    // The client rewrites the documents, page by page: some seconds with locks held.
    let mut mv = fsrename(
        &url,
        &index,
        Some("-60s"),
        &["mv", "/src", "/dst", "--rewrite", "client"],
    )
    .spawn()
    .expect("start mv");
    let mut seen = 0;
    while mv.try_wait().expect("mv").is_none() {
        for lock in locks(&url, &index) {
            assert_eq!(
                lock["expired"],
                Value::Bool(false),
                "a lock of a live holder listed as expired: {lock}"
            );
            seen += 1;
        }
    }
    let out = mv.wait_with_output().expect("mv ends");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(seen > 0, "the mv ended before a listing saw its locks");
    println!("{seen} locks listed while the mv ran, none expired");
}
