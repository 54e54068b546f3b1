//! The crash test of the jobs the server carries out: `fsrename mv --rewrite server` (and
//! `fsrename rm -r --rewrite server`, whose files the server deletes) killed with SIGKILL at
//! random moments, then `fsrename recover`. A killed job leaves its task running on the server;
//! recovery must stop it before it finishes the job, and leave no task behind.
//!
//! Through the Elasticsearch-behaviour proxy, which runs the task and the tasks API as
//! Elasticsearch does (5 000 documents, a pause before each part it writes so that kills land
//! in the middle of the task); and on a real Elasticsearch at `FSRENAME_TEST_ES_URL` (20 000
//! documents), ignored without one. Each round builds `/src`, times nothing, kills the `mv`
//! after a random delay (uniform over 0 to 1.2 times an uninterrupted run, measured first),
//! runs `recover`, and runs the `mv` again if the kill came before it journaled. Then: every
//! document once, under `/dst`, with its id (for `rm -r`: none left, and at the kill none
//! whose parent was gone); fsck clean; no lock, no journal entry, no task running. `FSRENAME_CRASH_ROUNDS` sets the rounds (default 8 through the proxy, 20 on a
//! real server); the delays follow `FSRENAME_CRASH_SEED` (printed).
//!
//! The lease is long (ten minutes): `recover` does not wait it out, since the killed `mv` ran on
//! this machine and its process is proven gone (`fs_locks::OsProcess`). A short lease (1 s
//! before issue 47) made the job itself lose its locks when the cores were busy with other
//! work, and the test fail for a reason it does not test.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::{DocKind, FsDoc, FsPath};
use fs_rename::{fsck, FsTree, Journal};
use fs_store::{Scan, Scope, SharedStore};
use fs_testkit::{EsProxy, EsProxyOptions};
use rand::{Rng, SeedableRng};

/// Ten minutes: far more than any round takes, however busy the machine, so that a round
/// that finishes well within it shows that nothing waited for it.
const LEASE: &str = "600s";
const LEASE_SECS: u64 = 600;

/// The job the rounds kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    /// `mv /src /dst`.
    Mv,
    /// `rm -r /src`.
    Rm,
}

/// The rounds on a real server one test at a time: a round counts every by-query task the
/// server runs (the other test's too), and the kills' moments follow a run measured alone.
static ONE_REAL_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where the rounds run.
struct Place {
    url: String,
    store: SharedStore,
    /// The proxy that runs the tasks, when it is not a real server.
    proxy: Option<EsProxy>,
    docs: usize,
    verb: Verb,
}

impl Place {
    fn fsrename(&self, index: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fsrename"));
        cmd.args(["--store", &self.url, "--index", index, "--lease", LEASE])
            .args(args)
            .env_remove("FSRENAME_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    /// The job the rounds kill (the name is the first verb's).
    fn mv(&self, index: &str) -> Command {
        match self.verb {
            Verb::Mv => self.fsrename(index, &["mv", "/src", "/dst", "--rewrite", "server"]),
            Verb::Rm => self.fsrename(index, &["rm", "-r", "/src", "--rewrite", "server"]),
        }
    }

    /// Where a document at `path` under `/src` is once the job is done (`None`: gone).
    fn after_job(&self, path: &str) -> Option<String> {
        match self.verb {
            Verb::Mv => Some(path.replacen("/src", "/dst", 1)),
            Verb::Rm => None,
        }
    }

    /// The update-by-query tasks running on the server.
    async fn running_tasks(&self) -> usize {
        if let Some(proxy) = &self.proxy {
            return proxy.running_tasks();
        }
        let answer: serde_json::Value =
            reqwest::get(format!("{}/_tasks?actions=*byquery", self.url))
                .await
                .expect("GET _tasks")
                .json()
                .await
                .expect("a task list");
        answer["nodes"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(_, n)| n["tasks"].as_object().map_or(0, serde_json::Map::len))
            .sum()
    }
}

/// 5 000 documents behind a proxy that runs the tasks, pausing `pause_ms` before each part
/// (of 500) a task writes, so that kills land in the middle of one.
fn through_the_proxy(verb: Verb, pause_ms: u64) -> Place {
    let proxy = fs_testkit::start_es_proxy(EsProxyOptions {
        update_by_query: true,
        update_by_query_pause: Duration::from_millis(pause_ms),
        ..EsProxyOptions::default()
    });
    Place {
        url: proxy.url().to_owned(),
        store: Arc::new(fs_testkit::elastic_store(proxy.url())),
        proxy: Some(proxy),
        docs: 5_000,
        verb,
    }
}

fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("path")
}

/// `/src` with `n` documents in all, in ten directories; on a real server in a tree index of
/// `FSRENAME_TEST_ES_SHARDS` shards, whose rename the server runs sliced, a slice a shard.
async fn build(place: &Place, index: &str) {
    let layout = match place.proxy {
        Some(_) => fs_model::IndexLayout::default(),
        None => fs_testkit::real_elastic_layout(),
    };
    let tree = FsTree::new(Arc::clone(&place.store), index).with_layout(layout);
    tree.ensure_indices().await.expect("indices");
    let mut docs = vec![FsDoc::new(p("/src"), DocKind::Dir, 0, 0)];
    for d in 0..10 {
        docs.push(FsDoc::new(p(&format!("/src/d{d}")), DocKind::Dir, 0, 0));
    }
    let files = place.docs - docs.len();
    for i in 0..files {
        let path = format!("/src/d{}/f{i:05}", i % 10);
        docs.push(FsDoc::new(p(&path), DocKind::File, 1, 0));
    }
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");
}

/// The path of every document, by id.
async fn paths(place: &Place, index: &str) -> BTreeMap<String, String> {
    let store = &place.store;
    store.refresh(index).await.expect("refresh");
    Scan::new(Arc::clone(store), index, Scope::All, 5_000)
        .read_all()
        .await
        .expect("search")
        .into_iter()
        .map(|d| (d.id, d.source["path"].as_str().expect("path").to_owned()))
        .collect()
}

/// Every lock document left, as stored: empty when none is.
async fn locks(place: &Place, index: &str) -> Vec<String> {
    let locks = format!("{index}-lock");
    place.store.refresh(&locks).await.expect("refresh");
    Scan::new(Arc::clone(&place.store), &locks, Scope::All, 1_000)
        .read_all()
        .await
        .expect("the lock index")
        .into_iter()
        .map(|d| format!("{}: {}", d.id, d.source))
        .collect()
}

async fn journals(place: &Place, index: &str) -> usize {
    Journal::new(Arc::clone(&place.store), index)
        .list()
        .await
        .expect("journal")
        .len()
}

/// Runs `cmd` to its end, which must be a success; returns what it said on stderr.
fn run(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().expect("run fsrename");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what}: {said}");
    said
}

/// How long an uninterrupted `mv` takes; prints the most by-query tasks seen at once while
/// it ran (on several shards: the parent task and its slices).
async fn calibrate(place: &Place) -> Duration {
    let index = fs_testkit::unique_name("crash-srv");
    build(place, &index).await;
    let started = Instant::now();
    // Its messages go to the test's output: a pipe nobody reads while it runs could fill.
    let mut mv = place.mv(&index);
    let mut child = mv.stderr(Stdio::inherit()).spawn().expect("start mv");
    let mut most = 0;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for mv") {
            break status;
        }
        most = most.max(place.running_tasks().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = started.elapsed();
    assert!(status.success(), "an uninterrupted mv: {status}");
    println!("by-query tasks seen at once during an uninterrupted mv: {most}");
    assert_eq!(place.running_tasks().await, 0);
    drop_indices(place, &index).await;
    took
}

/// One round: build, kill the job after `delay`, recover, check. Returns how many documents
/// the job had done (moved, or deleted) when the kill struck.
async fn round(place: &Place, delay: Duration) -> usize {
    let index = fs_testkit::unique_name("crash-srv");
    build(place, &index).await;
    let before = paths(place, &index).await;
    let mut child = place.mv(&index).spawn().expect("start the job");
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    let at_kill = paths(place, &index).await;
    let done_at_kill = match place.verb {
        Verb::Mv => at_kill.values().filter(|p| p.starts_with("/dst")).count(),
        Verb::Rm => {
            assert_no_orphan(&at_kill);
            before.len() - at_kill.len()
        }
    };
    // What `recover` said (its warnings, if any) goes with every failure below.
    let mut recover = place.fsrename(&index, &["recover"]);
    recover.env("FSRENAME_LOG", "warn,fs_rename=debug,fs_locks=debug");
    let recovered = run(recover, "recover");
    let after = paths(place, &index).await;
    if after == before && journals(place, &index).await == 0 {
        // Killed before it journaled: nothing to finish, the user runs it again.
        run(place.mv(&index), "the job again");
    }
    let after = paths(place, &index).await;
    let want: BTreeMap<String, String> = before
        .iter()
        .filter_map(|(id, path)| Some((id.clone(), place.after_job(path)?)))
        .collect();
    let index_said = format!("index `{index}` (kept), recover said: {recovered}");
    assert_eq!(
        after, want,
        "documents lost, added or misplaced; {index_said}"
    );
    let report = fsck(Arc::clone(&place.store), &index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}; {index_said}");
    let left = locks(place, &index).await;
    assert!(left.is_empty(), "locks left: {left:#?}; {index_said}");
    assert_eq!(
        journals(place, &index).await,
        0,
        "journal entries left; {index_said}"
    );
    assert_eq!(
        place.running_tasks().await,
        0,
        "a task left running; {index_said}"
    );
    drop_indices(place, &index).await;
    done_at_kill
}

/// Deletes the tree index `index` and its lock and journal indices: a round leaves nothing
/// on the server (a single node opens at most 1 000 shards, and 200 rounds would fill it).
async fn drop_indices(place: &Place, index: &str) {
    let names = [
        index.to_owned(),
        fs_model::lock_index_name(index),
        fs_model::journal_index_name(index),
    ];
    for name in &names {
        place.store.delete_index(name).await.expect("delete");
    }
}

/// Every document of `paths` but `/src` has its parent among them: a delete that stopped
/// anywhere left none whose parent is gone.
fn assert_no_orphan(paths: &BTreeMap<String, String>) {
    let present: std::collections::BTreeSet<&str> = paths.values().map(String::as_str).collect();
    for path in &present {
        if *path == "/src" {
            continue;
        }
        let parent = p(path).parent().expect("a parent");
        assert!(
            present.contains(parent.as_str()),
            "`{path}` left without its parent"
        );
    }
}

async fn crash_rounds(place: Place, default_rounds: usize) {
    let rounds = std::env::var("FSRENAME_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default_rounds);
    let seed = std::env::var("FSRENAME_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random::<u64>());
    println!("FSRENAME_CRASH_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let uninterrupted = calibrate(&place).await;
    println!(
        "an uninterrupted {:?} of {} documents: {uninterrupted:?}",
        place.verb, place.docs
    );
    let mut struck = Vec::new();
    for r in 0..rounds {
        let delay = uninterrupted.mul_f64(rng.random_range(0.0..1.2));
        let moved = round(&place, delay).await;
        println!(
            "round {r}: killed after {delay:?}, {moved} of {} done",
            place.docs
        );
        struck.push(moved);
    }
    let mid = struck.iter().filter(|&&m| m > 0 && m < place.docs).count();
    println!("{mid} of {rounds} kills struck in the middle of the task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_server_side_rename_then_recover_through_the_proxy() {
    crash_rounds(through_the_proxy(Verb::Mv, 60), 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_server_side_delete_then_recover_through_the_proxy() {
    crash_rounds(through_the_proxy(Verb::Rm, 60), 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_sigkill_during_a_server_side_rename_then_recover() {
    let _alone = ONE_REAL_AT_A_TIME.lock().await;
    let url = std::env::var("FSRENAME_TEST_ES_URL").expect("FSRENAME_TEST_ES_URL");
    let place = Place {
        store: Arc::new(fs_testkit::elastic_store(&url)),
        url,
        proxy: None,
        docs: 20_000,
        verb: Verb::Mv,
    };
    crash_rounds(place, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_sigkill_during_a_server_side_delete_then_recover() {
    let _alone = ONE_REAL_AT_A_TIME.lock().await;
    let url = std::env::var("FSRENAME_TEST_ES_URL").expect("FSRENAME_TEST_ES_URL");
    let place = Place {
        store: Arc::new(fs_testkit::elastic_store(&url)),
        url,
        proxy: None,
        docs: 20_000,
        verb: Verb::Rm,
    };
    crash_rounds(place, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_server_s_task_and_leaves_the_rename_to_recover() {
    let place = through_the_proxy(Verb::Mv, 200);
    let index = fs_testkit::unique_name("crash-srv");
    build(&place, &index).await;
    let before = paths(&place, &index).await;
    let child = place.mv(&index).spawn().expect("start mv");
    let started = Instant::now();
    while place.running_tasks().await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no task started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let interrupt = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(interrupt.success());
    let out = child.wait_with_output().expect("mv ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("fsrename recover"), "{stderr}");
    assert_eq!(place.running_tasks().await, 0, "the task was cancelled");
    // Issue 47, item 3: the same `mv` again finishes the interrupted one at once (its process
    // is gone; its locks are leased for ten minutes), and says so.
    let started = Instant::now();
    let out = place
        .mv(&index)
        .stdout(Stdio::piped())
        .output()
        .expect("mv again");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("first finished `mv /src /dst`")
            && stdout.contains("the same job, stopped in an earlier run, is finished now"),
        "{stdout}\n{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(LEASE_SECS / 2),
        "waited {:?}: as if for the lease",
        started.elapsed()
    );
    let after = paths(&place, &index).await;
    for (id, path) in &before {
        let want = path.replacen("/src", "/dst", 1);
        assert_eq!(after.get(id), Some(&want), "document {id} ({path})");
    }
    let left = locks(&place, &index).await;
    assert!(left.is_empty(), "locks left: {left:#?}");
    assert_eq!(journals(&place, &index).await, 0, "journal entries left");
}
