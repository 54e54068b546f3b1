//! `fsck` tells a job stopped half-way from a broken tree (issue 70): after Ctrl-C (SIGINT) and
//! after `kill -9` of `mv`, `cp -r` and `rm -r` while they write, it names the job's kind and
//! the command that finishes it, counts the documents it left out of place as the job's, says
//! that its locks' holder is gone, and exits 4; after `recover`, 0. A stopped `cp` or `rm`
//! says what it was doing in its own verb. On the embedded store and through the proxy.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use fs_model::{DocKind, FsDoc, FsPath};
use fs_rename::FsTree;
use fs_store::{SharedStore, SqliteStore};
use serde_json::Value;

use common::{signal, text};

/// Files under each of `/src/a` and `/src/b`: with pages of 2, some 200 pages, whose events
/// fill the job's pipe many times over.
const FILES: usize = 200;

/// Where a tree lives: the `--store` argument, the index, and a client of the same store.
struct Place {
    arg: String,
    index: String,
    store: SharedStore,
}

impl Place {
    fn fsrename(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fsrename"));
        cmd.args([
            "--store",
            &self.arg,
            "--index",
            &self.index,
            "--lease",
            "600s",
        ])
        .args(args)
        .env_remove("FSRENAME_STORE")
        .stdin(Stdio::null());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.fsrename(args).output().expect("run fsrename")
    }

    /// `/src` with two directories of [`FILES`] files each.
    async fn build(&self) {
        let tree = FsTree::new(Arc::clone(&self.store), self.index.clone());
        tree.ensure_indices().await.expect("indices");
        let p = |s: &str| FsPath::parse(s).expect("path");
        let mut docs = vec![
            FsDoc::new(p("/src"), DocKind::Dir, 0, 0),
            FsDoc::new(p("/src/a"), DocKind::Dir, 0, 0),
            FsDoc::new(p("/src/b"), DocKind::Dir, 0, 0),
        ];
        for i in 0..FILES {
            docs.push(FsDoc::new(
                p(&format!("/src/a/f{i:03}")),
                DocKind::File,
                1,
                0,
            ));
            docs.push(FsDoc::new(
                p(&format!("/src/b/g{i:03}")),
                DocKind::File,
                1,
                0,
            ));
        }
        tree.insert_all(docs).await.expect("insert");
        tree.refresh().await.expect("refresh");
    }
}

/// A job and how it names itself.
struct Job {
    args: &'static [&'static str],
    kind: &'static str,
    /// What its cancel message says it was doing.
    doing: &'static str,
}

const JOBS: [Job; 3] = [
    Job {
        args: &["--rewrite", "client", "mv", "/src", "/dst"],
        kind: "rename",
        doing: "cancelled after moving",
    },
    Job {
        args: &["cp", "-r", "/src", "/dst"],
        kind: "copy",
        doing: "cancelled after copying",
    },
    Job {
        // The client's pages, which the test counts (the server's delete is
        // `crash_server.rs`'s).
        args: &["--rewrite", "client", "rm", "-r", "/src"],
        kind: "delete",
        doing: "cancelled after deleting",
    },
];

/// Starts `job` with pages of 2, stops it with `stop` (`-INT` or `-KILL`) after its third page
/// of writes (and before its last: it waits for the test to read its events, which the test
/// does only once it has sent the signal), and returns what it said.
fn stopped(place: &Place, job: &Job, stop: &str) -> (Option<i32>, Vec<String>) {
    let mut args = job.args.to_vec();
    args.extend(["--page-size", "2", "--in-flight", "1", "--progress", "json"]);
    let mut child = place
        .fsrename(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the job");
    let stderr = child.stderr.take().expect("stderr");
    // Held once the test stops reading: between its third page and its last.
    common::small_pipe(&stderr);
    let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
    let mut said = Vec::new();
    let mut pages = 0;
    for line in lines.by_ref() {
        let event: Value = serde_json::from_str(&line).unwrap_or_default();
        said.push(line);
        if event["event"] == "progress" {
            pages += 1;
            if pages == 3 {
                break;
            }
        }
    }
    assert_eq!(pages, 3, "{}: no third page: {said:#?}", job.kind);
    signal(&child, stop);
    said.extend(lines);
    let status = child.wait().expect("the job ends");
    (status.code(), said)
}

/// Every job, stopped each way on `place`: fsck says what is left and how to finish it.
async fn every_job_stopped_each_way(place: impl Fn() -> Place) {
    for job in &JOBS {
        for stop in ["-INT", "-KILL"] {
            let place = place();
            place.build().await;
            let what = format!("{} stopped by {stop}", job.kind);
            let (code, said) = stopped(&place, job, stop);
            if stop == "-INT" {
                assert_eq!(code, Some(130), "{what}: {said:#?}");
                assert!(
                    said.iter().any(|l| l.contains(job.doing)),
                    "{what}: says it in its own verb: {said:#?}"
                );
            } else {
                assert_eq!(code, None, "{what}: killed");
            }
            // In words: the job's kind, its state, the fix; not a broken tree.
            let out = place.run(&["fsck"]);
            let words = text(&out.stdout);
            assert_eq!(out.status.code(), Some(4), "{what}: {words}");
            for said in [
                format!(
                    "not broken, but unfinished: 1 {} left for `fsrename recover`",
                    job.kind
                ),
                format!("unfinished {} of `/src`", job.kind),
                "left by a process that is gone".to_owned(),
                "finish it: `fsrename recover`".to_owned(),
                "held by processes that ran on this machine and run no more".to_owned(),
            ] {
                assert!(words.contains(&said), "{what}: no `{said}` in:\n{words}");
            }
            assert!(
                !words.contains("BROKEN") && !words.contains("problem:"),
                "{what}: {words}"
            );
            // In JSON, the same.
            let out = place.run(&["fsck", "--json"]);
            assert_eq!(out.status.code(), Some(4), "{what}");
            let report: Value = serde_json::from_slice(&out.stdout).expect("one line of JSON");
            let unfinished = &report["unfinished"][0];
            assert_eq!(
                (
                    &report["verdict"],
                    &report["problem_count"],
                    &unfinished["kind"],
                    &unfinished["state"],
                    &report["locks_active"],
                ),
                (
                    &Value::from("unfinished"),
                    &Value::from(0),
                    &Value::from(job.kind),
                    &Value::from("holder_gone"),
                    &Value::from(0),
                ),
                "{what}: {report:#}"
            );
            assert!(
                report["locks_gone"].as_u64() > Some(0),
                "{what}: {report:#}"
            );
            assert!(
                unfinished["finish"]
                    .as_str()
                    .is_some_and(|f| f.contains("`fsrename recover`")),
                "{what}: {report:#}"
            );
            if job.kind == "rename" {
                // Half-moved: documents whose parent is moved already, the rename's to finish.
                assert!(
                    unfinished["problem_count"].as_u64() > Some(0),
                    "{what}: {report:#}"
                );
            }
            let out = place.run(&["recover"]);
            assert_eq!(out.status.code(), Some(0), "{what}: {}", text(&out.stderr));
            let out = place.run(&["fsck", "--json"]);
            let report: Value = serde_json::from_slice(&out.stdout).expect("one line of JSON");
            assert_eq!(
                (out.status.code(), &report["verdict"]),
                (Some(0), &Value::from("clean")),
                "{what}: after recover: {report:#}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_tells_a_stopped_job_from_a_broken_tree_on_the_embedded_store() {
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path().to_owned();
    let rounds = std::sync::atomic::AtomicUsize::new(0);
    every_job_stopped_each_way(|| {
        let n = rounds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("tree-{n}.db"));
        Place {
            arg: format!("file:{}", path.display()),
            index: "fs".to_owned(),
            store: Arc::new(SqliteStore::open(&path).expect("database file")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_tells_a_stopped_job_from_a_broken_tree_through_the_proxy() {
    every_job_stopped_each_way(|| Place {
        arg: fs_testkit::es_proxy().url().to_owned(),
        index: fs_testkit::unique_name("fsck-states"),
        store: Arc::new(fs_testkit::osmem_store()),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_fsck_tells_a_stopped_job_from_a_broken_tree() {
    let url = std::env::var(fs_testkit::REAL_ES_VAR).expect("FSRENAME_TEST_ES_URL");
    every_job_stopped_each_way(|| Place {
        arg: url.clone(),
        index: fs_testkit::unique_name("fsck-states"),
        store: Arc::new(fs_testkit::real_elastic_store()),
    })
    .await;
}
