//! Deletes the server carries out (`rm -r`: the subtree's files by one `_delete_by_query`, then
//! its directories deepest first by the client), under the same locks, check and journal as
//! the client's delete: through the Elasticsearch-behaviour proxy, which runs the task and the
//! tasks API as Elasticsearch does (`EsProxyOptions::update_by_query`). The same on a real
//! server: `real_elasticsearch_*` below, ignored without one.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fs_model::FsPath;
use fs_rename::{fsck, Journal, Recovery, Renamer, Rewrite};
use fs_testkit::{Backend, EsProxy, EsProxyOptions};

// Long enough for the renewals behind a task's batches on a busy machine.
const LEASE: Duration = Duration::from_secs(6);

/// One test at a time: the tests share one osmem (see `server_rewrite.rs`).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn proxy(pause: Duration) -> EsProxy {
    by_query_proxy(pause)
}

fn env_at(url: &str) -> Env {
    common::env_at(url, "fs-del")
}

/// `/src` with `files` files in each of `/src/a`, `/src/a/deep` and `/src/b`, an empty
/// `/src/empty`, and `/keep` with one file beside it.
async fn big_src(env: &Env, files: usize) {
    let mut entries: Vec<(String, bool)> = vec![
        ("/src".into(), true),
        ("/src/a".into(), true),
        ("/src/a/deep".into(), true),
        ("/src/b".into(), true),
        ("/src/empty".into(), true),
        ("/keep".into(), true),
        ("/keep/f".into(), false),
    ];
    for i in 0..files {
        entries.push((format!("/src/a/f{i:05}"), false));
        entries.push((format!("/src/a/deep/h{i:05}"), false));
        entries.push((format!("/src/b/g{i:05}"), false));
    }
    let refs: Vec<(&str, bool)> = entries.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(env, &refs).await;
}

/// Documents under `/src` in [`big_src`] with `files` files a directory.
fn under_src(files: usize) -> u64 {
    3 * files as u64 + 5
}

fn renamer(env: &Env) -> fs_rename::RenamerBuilder {
    Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .wait(Duration::from_secs(10))
}

/// Nothing is left under `/src`, everything else is where it was; the tree is clean, and no
/// lock, journal entry or task is left.
async fn assert_deleted(env: &Env, before: &BTreeMap<String, String>, proxy: Option<&EsProxy>) {
    let after = paths_by_id(env).await;
    let want: BTreeMap<String, String> = before
        .iter()
        .filter(|(_, path)| !p(path).is_inside(&p("/src")))
        .map(|(id, path)| (id.clone(), path.clone()))
        .collect();
    assert_eq!(after, want);
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(locks_left(env).await, 0, "locks left");
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    assert!(journal.list().await.expect("journal").is_empty());
    if let Some(proxy) = proxy {
        assert_eq!(proxy.running_tasks(), 0, "a task left running");
    }
}

/// Every path of `paths` but `/src` and the root's children has its parent among them.
fn orphans(paths: &BTreeSet<String>) -> Vec<String> {
    paths
        .iter()
        .filter(|path| {
            let parent = p(path).parent().expect("a parent");
            !parent.is_root() && !paths.contains(parent.as_str())
        })
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_delete_is_one_task_for_the_files_then_the_directories_deepest_first() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let proxy = proxy(Duration::ZERO);
    let env = env_at(proxy.url());
    big_src(&env, 800).await;
    let before = paths_by_id(&env).await;
    proxy.take_requests();
    let report = renamer(&env)
        .build()
        .remove(&p("/src"), true)
        .await
        .expect("rm -r");
    let requests = proxy.take_requests();
    assert!(report.on_server, "auto chose the server: {report:?}");
    assert_eq!((report.found, report.rewritten), (2_405, 2_405));
    assert_eq!(under_src(800), 2_405);
    let by_query: Vec<&String> = requests
        .iter()
        .filter(|r| r.contains("_delete_by_query"))
        .collect();
    assert_eq!(by_query.len(), 1, "{requests:#?}");
    // The client deleted only the five directories: one bulk request a height.
    let tree_bulks = requests
        .iter()
        .filter(|r| r.contains(&format!("/{}/_bulk", env.index)))
        .count();
    assert!((1..=3).contains(&tree_bulks), "{requests:#?}");
    // One refresh shows the files and the directories gone: the job's, before its release,
    // not the task's as well. The directories were read without one.
    assert!(by_query[0].contains("refresh=false"), "{requests:#?}");
    let refreshes = requests
        .iter()
        .filter(|r| r.contains(&format!("/{}/_refresh", env.index)))
        .count();
    assert_eq!(refreshes, 1, "{requests:#?}");
    assert_deleted(&env, &before, Some(&proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_document_is_ever_seen_without_its_parent_while_the_server_deletes() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let proxy = proxy(Duration::from_millis(40));
    let env = env_at(proxy.url());
    big_src(&env, 800).await;
    let before = paths_by_id(&env).await;
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (done, env) = (Arc::clone(&done), env.clone());
        tokio::spawn(async move {
            let mut looks = 0;
            while !done.load(Ordering::Relaxed) {
                let seen: BTreeSet<String> = paths_by_id(&env).await.into_values().collect();
                let orphans = orphans(&seen);
                assert!(
                    orphans.is_empty(),
                    "{} orphans seen, the first: {:?}",
                    orphans.len(),
                    orphans.first()
                );
                looks += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            looks
        })
    };
    let report = renamer(&env)
        .build()
        .remove(&p("/src"), true)
        .await
        .expect("rm -r");
    done.store(true, Ordering::Relaxed);
    let looks = watcher.await.expect("no orphan seen");
    assert!(report.on_server, "{report:?}");
    assert!(looks >= 2, "looked {looks} times only");
    assert_deleted(&env, &before, Some(&proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_s_delete_task_is_stopped_before_recovery_finishes_the_delete() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let proxy = proxy(Duration::from_millis(150));
    let env = env_at(proxy.url());
    big_src(&env, 1_000).await;
    let before = paths_by_id(&env).await;
    // The job dies (its future dropped, as a killed process stops) while its task runs.
    let job = renamer(&env).build();
    let running = tokio::spawn(async move {
        let _ = job.remove(&p("/src"), true).await;
    });
    while proxy.running_tasks() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.abort();
    let _ = running.await;
    assert_eq!(proxy.running_tasks(), 1, "the task outlives its job");
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    let report = Recovery::new(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .run()
        .await
        .expect("recovery");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_deleted(&env, &before, Some(&proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_task_lost_with_its_node_is_finished_by_the_client() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // The task fails after its first 1 000 documents, as one whose shard's node died.
    let proxy = fs_testkit::start_es_proxy(EsProxyOptions {
        update_by_query: true,
        update_by_query_fails_after: Some(2),
        ..EsProxyOptions::default()
    });
    let env = env_at(proxy.url());
    big_src(&env, 1_000).await;
    let before = paths_by_id(&env).await;
    let report = renamer(&env)
        .build()
        .remove(&p("/src"), true)
        .await
        .expect("the client finishes what the task left");
    assert!(report.on_server, "{report:?}");
    assert_eq!(
        (report.found, report.rewritten),
        (under_src(1_000), under_src(1_000))
    );
    assert_deleted(&env, &before, Some(&proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_goes_to_the_server_only_where_it_can_and_is_asked() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // The embedded store has no server to ask: `server` is refused before any lock, `auto`
    // deletes on the client.
    let env = Env::new(Backend::Embedded);
    big_src(&env, 300).await;
    let before = paths_by_id(&env).await;
    let refused = renamer(&env)
        .rewrite(Rewrite::Server)
        .build()
        .remove(&p("/src"), true)
        .await
        .expect_err("no server to delete");
    assert!(refused.to_string().contains("cannot run one"), "{refused}");
    assert_eq!(paths_by_id(&env).await, before, "nothing deleted");
    let report = renamer(&env)
        .build()
        .remove(&p("/src"), true)
        .await
        .expect("auto deletes on the client");
    assert_eq!(
        (report.on_server, report.rewritten),
        (false, under_src(300))
    );
    assert_deleted(&env, &before, None).await;

    // A small subtree stays with the client, unless the server is asked for; `client` keeps a
    // large one there.
    let proxy = proxy(Duration::ZERO);
    let env = env_at(proxy.url());
    big_src(&env, 5).await;
    let small = renamer(&env)
        .build()
        .remove(&p("/src/a"), true)
        .await
        .expect("rm -r small");
    assert!(!small.on_server, "{small:?}");
    let asked = renamer(&env)
        .rewrite(Rewrite::Server)
        .build()
        .remove(&p("/src/b"), true)
        .await
        .expect("rm -r on the server");
    assert!(asked.on_server, "{asked:?}");
    assert_eq!(asked.rewritten, 6);
    let env = env_at(proxy.url());
    big_src(&env, 800).await;
    let client = renamer(&env)
        .rewrite(Rewrite::Client)
        .build()
        .remove(&p("/src"), true)
        .await
        .expect("rm -r on the client");
    assert_eq!((client.on_server, client.rewritten), (false, 2_405));
}

fn real_env() -> Env {
    common::real_env("fs-del")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_deletes_on_the_server() {
    let env = real_env();
    big_src(&env, 800).await;
    let before = paths_by_id(&env).await;
    let report = renamer(&env)
        .build()
        .remove(&p("/src"), true)
        .await
        .expect("rm -r");
    assert!(report.on_server, "{report:?}");
    assert_eq!((report.found, report.rewritten), (2_405, 2_405));
    assert_deleted(&env, &before, None).await;
}
