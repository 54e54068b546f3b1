//! On a real three-node cluster, a tree of a million documents on three shards, each with a
//! replica: a rename of the whole tree rides out a node killed at a random moment (started
//! again 20 s later, as a supervisor would) and a node paused for 25 s (SIGSTOP, then
//! SIGCONT). Only a real cluster can run it; `docs/elasticsearch.md` says how.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fs_model::{DocKind, FsDoc, IndexLayout};
use fs_rename::{fsck, FsTree, Renamer};
use fs_store::{Scan, Scope, SharedStore};
use fs_testkit::{Backend, RealCluster};
use futures::StreamExt;

/// What a run does to its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGKILL, and the node started again 20 s later.
    Kill,
    /// SIGSTOP, and SIGCONT 25 s later.
    Pause,
}

impl Fault {
    /// Runs the fault on `node` (blocking): it returns once the node is back.
    fn run(self, cluster: &RealCluster, node: &str) {
        match self {
            Fault::Kill => {
                cluster.kill(node);
                std::thread::sleep(Duration::from_secs(20));
                cluster.start(node);
            }
            Fault::Pause => {
                cluster.pause(node);
                std::thread::sleep(Duration::from_secs(25));
                cluster.resume(node);
            }
        }
    }
}

/// Every document's id, sorted, and how many documents lie in `under` (itself or below).
async fn read_tree(store: &SharedStore, index: &str, under: &str) -> (Vec<String>, usize) {
    store.refresh(index).await.expect("refresh");
    let below = format!("{under}/");
    let mut scan = Scan::new(Arc::clone(store), index, Scope::All, fs_store::READ_PAGE);
    let (mut ids, mut inside) = (Vec::new(), 0);
    while let Some(page) = scan.next_page().await.expect("read the tree") {
        for doc in page {
            let path = doc.source["path"].as_str().unwrap_or_default();
            if path == under || path.starts_with(&below) {
                inside += 1;
            }
            ids.push(doc.id);
        }
    }
    ids.sort_unstable();
    (ids, inside)
}

/// The by-query tasks running on the cluster (a rename's server-side rewrite must not outlive
/// it).
async fn by_query_tasks(cluster: &RealCluster) -> usize {
    let tasks = cluster
        .get("/_tasks?actions=*byquery*&detailed=false")
        .await;
    tasks["nodes"]
        .as_object()
        .map(|nodes| {
            nodes
                .values()
                .map(|n| n["tasks"].as_object().map_or(0, |t| t.len()))
                .sum()
        })
        .unwrap_or(0)
}

/// `FSRENAME_TEST_ES_FILES` documents (1 000 000, in directories of 1 000) under `/big`, on
/// `FSRENAME_TEST_ES_SHARDS` shards (3) with one replica, renamed back and forth
/// `FSRENAME_TEST_ES_RUNS` times (5) with a node killed, and as many with a node paused,
/// in turn. The node is drawn at random, as is the moment: within 0.8 × the quickest rename
/// yet (60 s for the first). Every rename finishes by itself, with the same documents by
/// id, all under the new name, fsck clean, no lock, no journal entry and no by-query task
/// left. Prints a table row a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch cluster: set FSRENAME_TEST_ES_CLUSTER, FSRENAME_TEST_ES_KILL, FSRENAME_TEST_ES_START, FSRENAME_TEST_ES_PAUSE and FSRENAME_TEST_ES_RESUME (docs/elasticsearch.md)"]
async fn real_cluster_a_million_documents_ride_out_kills_and_pauses() {
    use rand::{Rng, SeedableRng};

    let cluster = Arc::new(RealCluster::from_env());
    // Half the runs pause a node: without the commands for it, fail now, not after indexing.
    cluster.require_pause();
    let files = number("FSRENAME_TEST_ES_FILES", 1_000_000);
    let runs = number("FSRENAME_TEST_ES_RUNS", 5);
    let shards = number("FSRENAME_TEST_ES_SHARDS", 3) as u32;
    let per_dir = 1_000.min(files.max(1));
    let seed = fs_testkit::NetFaults::seed_from_env();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for node in cluster.nodes.clone() {
        let cluster = Arc::clone(&cluster);
        tokio::task::spawn_blocking(move || cluster.start(&node))
            .await
            .expect("start");
    }
    cluster.wait_green(Duration::from_secs(300)).await;

    let config = fs_store::ElasticConfig::new(&cluster.nodes.join(","))
        .expect("urls")
        .with_env()
        .expect("settings")
        .replicas(1)
        .retry_deadline(Duration::from_secs(120));
    let store: SharedStore = Arc::new(fs_store::ElasticStore::connect(config).expect("client"));
    let env = Env {
        store: Arc::clone(&store),
        index: fs_testkit::unique_name("fs"),
        backend: Backend::RealElastic,
        dead_scans: Arc::default(),
        faulty: None,
    };
    let layout = IndexLayout::default()
        .with_shards(shards)
        .expect("a number of shards");
    let tree = FsTree::new(Arc::clone(&store), env.index.clone()).with_layout(layout);
    tree.ensure_indices().await.expect("indices");

    let started = Instant::now();
    let dir = |d: usize| FsDoc::new(p(&format!("/big/d{d:04}")), DocKind::Dir, 0, 0);
    tree.insert_all(vec![FsDoc::new(p("/big"), DocKind::Dir, 0, 0)])
        .await
        .expect("insert /big");
    // Directories of `per_dir` files, four bulk streams at a time.
    let dirs = files.div_ceil(per_dir);
    let tree = &tree;
    futures::stream::iter(0..dirs)
        .map(|d| async move {
            let n = per_dir.min(files - d * per_dir);
            let mut docs = vec![dir(d)];
            docs.extend(
                (0..n)
                    .map(|f| FsDoc::new(p(&format!("/big/d{d:04}/f{f:04}")), DocKind::File, 0, 0)),
            );
            tree.insert_all(docs).await.expect("insert");
        })
        .buffer_unordered(4)
        .collect::<Vec<()>>()
        .await;
    let documents = files + dirs + 1;
    // A first small rename creates the lock and journal indices.
    tree.insert_all(vec![FsDoc::new(p("/warm"), DocKind::Dir, 0, 0)])
        .await
        .expect("insert /warm");
    tree.refresh().await.expect("refresh");
    Renamer::builder(Arc::clone(&store), env.index.clone())
        .build()
        .rename(&p("/warm"), &p("/warmed"))
        .await
        .expect("warm-up");
    let shape = cluster
        .get(&format!(
            "/_cat/indices/{}?format=json&h=pri,rep",
            env.index
        ))
        .await;
    assert_eq!(
        (shape[0]["pri"].as_str(), shape[0]["rep"].as_str()),
        (Some(shards.to_string().as_str()), Some("1")),
        "the tree index's shards and replicas: {shape}"
    );
    println!(
        "{documents} documents on {shards} shards, 1 replica, indexed in {:.0?}",
        started.elapsed()
    );
    let (before, inside) = read_tree(&store, &env.index, "/big").await;
    assert_eq!(inside, documents, "the tree");
    assert_eq!(before.len(), documents + 1, "the tree, and /warmed");
    println!("| run | fault | node | at | during the rename | took | locking, checking, rewriting, releasing | found | rewritten | retries | resent by the store | own writes recognised | restarts |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");

    let mut window = Duration::from_secs(60);
    let mut name = "/big".to_owned();
    for run in 1..=runs * 2 {
        let fault = if run % 2 == 1 {
            Fault::Kill
        } else {
            Fault::Pause
        };
        cluster.wait_green(Duration::from_secs(600)).await;
        let node = cluster.nodes[rng.random_range(0..cluster.nodes.len())].clone();
        let at = Duration::from_millis(rng.random_range(500..window.as_millis().max(501) as u64));
        let to = format!("/big-{run}");
        let faulting = {
            let (cluster, node) = (Arc::clone(&cluster), node.clone());
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                tokio::task::spawn_blocking(move || fault.run(&cluster, &node))
                    .await
                    .expect("the fault ran");
            })
        };
        let since = Instant::now();
        let result = Renamer::builder(Arc::clone(&store), env.index.clone())
            .build()
            .rename(&p(&name), &p(&to))
            .await;
        let took = since.elapsed();
        faulting.await.expect("the fault");
        let report = result
            .unwrap_or_else(|e| panic!("run {run} ({fault:?} {node} at {at:?}, seed {seed}): {e}"));
        // The next fault falls within the quickest rename yet (one that ran past its fault
        // took longer than the next will, if its fault comes early).
        window = window.min(took.mul_f64(0.8));
        let docs = documents as u64;
        assert_eq!((report.found, report.rewritten), (docs, docs), "{report:?}");
        cluster.wait_green(Duration::from_secs(600)).await;
        let (after, inside) = read_tree(&store, &env.index, &to).await;
        assert_eq!(before, after, "run {run}: the same documents, by id");
        assert_eq!(inside, documents, "run {run}: every document under {to}");
        let check = fsck(Arc::clone(&store), &env.index, &p("/"))
            .await
            .expect("fsck");
        assert!(check.is_clean(), "run {run}: {check}");
        assert_eq!(check.journals_open(), 0, "run {run}: journal entries left");
        assert_eq!(locks_left(&env).await, 0, "run {run}: locks left");
        assert_eq!(
            by_query_tasks(&cluster).await,
            0,
            "run {run}: by-query tasks left"
        );
        println!(
            "| {run} | {fault:?} | {node} | {at:.1?} | {} | {took:.1?} | {:.1?}, {:.1?}, {:.1?}, {:.1?} | {} | {} | {} | {} | {} | {} |",
            if at < took { "yes" } else { "no" },
            report.phases.locking,
            report.phases.checking,
            report.phases.rewriting,
            report.phases.releasing,
            report.found,
            report.rewritten,
            report.retries,
            store.items_resent(),
            report.ambiguous_resolved,
            report.restarts
        );
        name = to;
    }
    for suffix in ["", "-lock", "-journal"] {
        let _ = store.delete_index(&format!("{}{suffix}", env.index)).await;
    }
}
