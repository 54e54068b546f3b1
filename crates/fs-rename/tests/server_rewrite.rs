//! Renames rewritten by the server (`_update_by_query` with fsrename's rename script), under the
//! same locks, check and journal: through the Elasticsearch-behaviour proxy, which runs the task
//! and the tasks API as Elasticsearch does (`EsProxyOptions::update_by_query`). The same
//! behaviour on a real server: `real_elasticsearch_*` below, ignored without one.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fs_model::FsPath;
use fs_rename::{fsck, Recovery, RenameError, RenameEvent, Renamer, Rewrite};
use fs_store::TaskFailure;
use fs_testkit::{Backend, EsProxy, EsProxyOptions};

// Long enough for the renewals behind a task's batches on a busy machine.
const LEASE: Duration = Duration::from_secs(6);

/// One test at a time: the tests share one osmem, which holds other writes back while it runs
/// a bulk request, and a task's batches from one test would hold another test's lease
/// renewals back past their lease.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn proxy(pause: Duration) -> EsProxy {
    by_query_proxy(pause)
}

fn env_at(url: &str) -> Env {
    common::env_at(url, "fs-srv")
}

/// `/src` with `files` files in each of `/src/a` and `/src/b`, and `/dst-parent`.
async fn big_src(env: &Env, files: usize) {
    let mut entries: Vec<(String, bool)> = vec![
        ("/src".into(), true),
        ("/src/a".into(), true),
        ("/src/b".into(), true),
        ("/dst-parent".into(), true),
    ];
    for i in 0..files {
        entries.push((format!("/src/a/f{i:05}"), false));
        entries.push((format!("/src/b/g{i:05}"), false));
    }
    let refs: Vec<(&str, bool)> = entries.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(env, &refs).await;
}

fn renamer(env: &Env) -> fs_rename::RenamerBuilder {
    Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .wait(Duration::from_secs(10))
}

/// Every document of `before` under `/src` is now under `/dst-parent/dst`, the others where
/// they were, ids kept; the tree is clean and holds no lock.
async fn assert_renamed(env: &Env, before: &BTreeMap<String, String>) {
    let after = paths_by_id(env).await;
    assert_eq!(after.len(), before.len(), "documents lost or added");
    for (id, path) in before {
        let want = match path.strip_prefix("/src") {
            Some(rest) => format!("/dst-parent/dst{rest}"),
            None => path.clone(),
        };
        assert_eq!(after.get(id), Some(&want), "document {id} ({path})");
    }
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(locks_left(env).await, 0, "locks left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_rename_is_one_task_on_the_server() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let proxy = proxy(Duration::ZERO);
    let env = env_at(proxy.url());
    big_src(&env, 1_200).await;
    let before = paths_by_id(&env).await;
    let progress = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&progress);
    let job = renamer(&env)
        .progress(Arc::new(move |event| {
            if let RenameEvent::Progress { done, total } = event {
                seen.lock().unwrap().push((done, total));
            }
        }))
        .build();
    proxy.take_requests();
    let report = job
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect("rename");
    let requests = proxy.take_requests();
    assert!(report.on_server, "auto chose the server: {report:?}");
    assert_eq!((report.found, report.rewritten), (2_403, 2_403));
    // No document crossed the network: nothing was written to the tree index but by the task.
    let tree_bulks = requests
        .iter()
        .filter(|r| r.contains(&format!("/{}/_bulk", env.index)))
        .count();
    assert_eq!(tree_bulks, 0, "{requests:#?}");
    assert!(requests.iter().any(|r| r.contains("_update_by_query")));
    let progress = progress.lock().unwrap().clone();
    assert_eq!(progress.last(), Some(&(2_403, 2_403)), "{progress:?}");
    assert_renamed(&env, &before).await;
    assert_eq!(proxy.running_tasks(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_rename_stays_with_the_client_unless_asked() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let proxy = proxy(Duration::ZERO);
    let env = env_at(proxy.url());
    big_src(&env, 20).await;
    let before = paths_by_id(&env).await;
    let report = renamer(&env)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect("rename");
    assert!(!report.on_server, "{report:?}");
    let report = renamer(&env)
        .rewrite(Rewrite::Server)
        .build()
        .rename(&p("/dst-parent/dst"), &p("/src"))
        .await
        .expect("rename back");
    assert!(report.on_server, "{report:?}");
    assert_eq!(report.rewritten, 43);
    let again = renamer(&env)
        .rewrite(Rewrite::Server)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect("rename there again");
    assert_eq!(again.rewritten, 43);
    assert_renamed(&env, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_asked_for_only_where_it_can() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // The embedded store has no server to ask: `server` is an error, `auto` the client.
    let env = Env::new(Backend::Embedded);
    big_src(&env, 600).await;
    let refused = renamer(&env)
        .rewrite(Rewrite::Server)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect_err("no server to rewrite");
    assert!(refused.to_string().contains("cannot run one"), "{refused}");
    let report = renamer(&env)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect("auto rewrites on the client");
    assert_eq!((report.on_server, report.rewritten), (false, 1_203));

    // A server that runs no painless for it (osmem behind a proxy that leaves it alone):
    // `auto` falls back to the client.
    let proxy = fs_testkit::start_es_proxy(EsProxyOptions::default());
    let env = env_at(proxy.url());
    big_src(&env, 600).await;
    let report = renamer(&env)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect("auto falls back to the client");
    assert_eq!((report.on_server, report.rewritten), (false, 1_203));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_write_under_the_lock_stops_the_task_and_recovery_finishes() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // Parts of 500, the task pausing before each.
    let proxy = proxy(Duration::from_millis(100));
    let env = env_at(proxy.url());
    big_src(&env, 2_000).await;
    let before = paths_by_id(&env).await;
    // The last document of the snapshot (by path), changed by someone who takes no lock
    // while the task works on its first batches.
    let (victim, _) = before
        .iter()
        .max_by(|a, b| a.1.cmp(b.1))
        .map(|(id, path)| (id.clone(), path.clone()))
        .expect("documents");
    let store = Arc::clone(&env.store);
    let index = env.index.clone();
    let proxy = Arc::new(proxy);
    let watched = Arc::clone(&proxy);
    // Once the task has read its snapshot and written its first part: before that, on a
    // loaded machine, the write could land before the snapshot, which then holds it, and the
    // task meets nothing foreign.
    let intruder = tokio::spawn(async move {
        while watched.running_tasks_updated() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let doc = store
            .get(&index, &victim)
            .await
            .expect("get")
            .expect("found");
        let mut source = doc.source.clone();
        source["size"] = serde_json::json!(42);
        store
            .index(&index, &victim, source, Some(doc.version))
            .await
            .expect("the foreign write");
    });
    let failed = renamer(&env)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect_err("the task meets the foreign write");
    intruder.await.expect("intruder");
    let RenameError::Unfinished { cause, .. } = &failed else {
        panic!("a journaled job that stopped is unfinished: {failed}");
    };
    assert!(
        matches!(
            cause.as_ref(),
            RenameError::ServerRewrite {
                failure: TaskFailure::Conflict(_),
                ..
            }
        ),
        "{failed}"
    );
    assert_eq!(proxy.running_tasks(), 0);
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    let report = Recovery::new(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .run()
        .await
        .expect("recovery");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_renamed(&env, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_s_task_is_stopped_before_recovery_finishes_the_rename() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let proxy = proxy(Duration::from_millis(150));
    let env = env_at(proxy.url());
    big_src(&env, 2_000).await;
    let before = paths_by_id(&env).await;
    // The job dies (its future dropped, as a killed process stops) while its task runs.
    let job = renamer(&env).build();
    let running = tokio::spawn(async move {
        let _ = job.rename(&p("/src"), &p("/dst-parent/dst")).await;
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
    assert_eq!(proxy.running_tasks(), 0, "no task left running");
    assert_renamed(&env, &before).await;
}

fn real_env() -> Env {
    common::real_env("fs-srv")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_renames_on_the_server() {
    let env = real_env();
    big_src(&env, 1_200).await;
    let before = paths_by_id(&env).await;
    let report = renamer(&env)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect("rename");
    assert!(report.on_server, "{report:?}");
    assert_eq!(report.rewritten, 2_403);
    assert_renamed(&env, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_refuses_a_document_the_check_did_not_see() {
    let env = real_env();
    big_src(&env, 10).await;
    // A document under the source whose parent does not agree with its path: the script
    // refuses it, and the job stops with the script's words.
    let tree = env.tree();
    let mut bad = fs_model::FsDoc::file(p("/src/a/zz"), 0, 0);
    bad.parent = Some(p("/src/b"));
    tree.insert_all(vec![bad]).await.expect("insert");
    tree.refresh().await.expect("refresh");
    let failed = renamer(&env)
        .rewrite(Rewrite::Server)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect_err("refused");
    assert!(
        failed
            .to_string()
            .contains("has parent [/src/b], not [/src/a]"),
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_lost_with_its_node_is_finished_by_the_client() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // The task fails after its first 1 000 documents, as one whose shard's node died.
    let proxy = fs_testkit::start_es_proxy(EsProxyOptions {
        update_by_query: true,
        update_by_query_fails_after: Some(2),
        ..EsProxyOptions::default()
    });
    let env = env_at(proxy.url());
    big_src(&env, 1_500).await;
    let before = paths_by_id(&env).await;
    let report = renamer(&env)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await
        .expect("the client finishes what the task left");
    assert!(report.on_server, "{report:?}");
    assert_eq!((report.found, report.rewritten), (3_003, 3_003));
    assert_eq!(proxy.running_tasks(), 0);
    assert_renamed(&env, &before).await;
}
