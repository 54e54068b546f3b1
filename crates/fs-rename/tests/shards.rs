//! A tree index on several shards (`FsTree::with_layout`): created with the shards asked for
//! (the lock and journal indices on one), and every job works on it as on one shard: scans in
//! path order, renames rewritten by the client and by the server, copies, removals, a clean
//! fsck and a recursive listing in path order. On osmem behind the Elasticsearch-behaviour
//! proxy (which runs the server's renames); osmem keeps an index's shards apart (documents are
//! routed to one of them) and merges sorted searches across them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fs_model::{FsPath, IndexLayout};
use fs_rename::{fsck, FsTree, Renamer, Rewrite};
use fs_store::{Scan, Scope};
use fs_testkit::{Backend, EsProxyOptions, NetFaults, ProxyStats};

const SHARDS: u32 = 3;

/// `/src` with ten directories of thirty files, `/dst-parent`, and `/other` with twenty files:
/// 333 documents, spread over the shards by their ids.
fn entries() -> Vec<(String, bool)> {
    let mut entries: Vec<(String, bool)> = vec![
        ("/src".into(), true),
        ("/dst-parent".into(), true),
        ("/other".into(), true),
    ];
    for d in 0..10 {
        entries.push((format!("/src/d{d}"), true));
        for f in 0..30 {
            entries.push((format!("/src/d{d}/f{f:02}"), false));
        }
    }
    entries.extend((0..20).map(|f| (format!("/other/o{f:02}"), false)));
    entries
}

/// Every path of the tree, in the order a recursive listing of `/` gives them.
async fn listed(env: &Env) -> Vec<String> {
    env.store.refresh(&env.index).await.expect("refresh");
    let mut paths = Vec::new();
    fs_rename::list(&env.store, &env.index, &FsPath::root(), true, |entry| {
        paths.push(entry.doc.path.as_str().to_owned());
        Ok(())
    })
    .await
    .expect("ls -R");
    paths
}

/// Moves every expected path under `from` to under `to`.
fn moved(expected: &BTreeSet<String>, from: &str, to: &str) -> BTreeSet<String> {
    expected
        .iter()
        .map(|path| match path.strip_prefix(from) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{to}{rest}"),
            _ => path.clone(),
        })
        .collect()
}

/// Asserts that the tree holds exactly `expected`, listed in path order, and is clean.
async fn assert_tree(env: &Env, expected: &BTreeSet<String>, after: &str) {
    let paths = listed(env).await;
    let want: Vec<String> = expected.iter().cloned().collect();
    assert_eq!(paths, want, "the tree after {after}, listed in path order");
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "after {after}: {report}");
    assert_eq!(locks_left(env).await, 0, "locks left after {after}");
}

/// Asserts that every document of `before` under `from` is now under `to`, with its id.
async fn assert_ids_kept(env: &Env, before: &BTreeMap<String, String>, from: &str, to: &str) {
    let after = paths_by_id(env).await;
    for (id, path) in before {
        if let Some(rest) = path.strip_prefix(from) {
            if rest.is_empty() || rest.starts_with('/') {
                assert_eq!(after.get(id), Some(&format!("{to}{rest}")), "{id} ({path})");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_works_on_a_tree_of_three_shards() {
    every_job_on_three_shards(None).await;
}

/// A real cluster answers a search or a count without the part of a shard whose node it lost
/// (HTTP 200, `_shards.failed` 1): a page taken as whole would skip documents, and a rename
/// would leave them behind. Every job asks again, and does all its work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_works_through_answers_missing_a_shard() {
    every_job_through_partial_answers(NetFaults {
        partial_shards: 0.2,
        ..NetFaults::none(NetFaults::seed_from_env())
    })
    .await;
}

/// While a shard has no active copy (the node holding its only one died), a real cluster
/// answers a search or a count without its part and counts nothing failed: `_shards.failed` 0,
/// `successful` one short. A check that took such an answer missed a destination and a rename
/// moved onto it (anomaly 10 of `docs/reliability.md`). Every job asks again, and does all its
/// work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_works_through_answers_lacking_a_shard_with_no_copy() {
    every_job_through_partial_answers(NetFaults {
        unassigned_shards: 0.2,
        ..NetFaults::none(NetFaults::seed_from_env())
    })
    .await;
}

/// Every job on a tree of three shards through `faults`, some answers of which were partial.
async fn every_job_through_partial_answers(faults: NetFaults) {
    let stats = every_job_on_three_shards(Some(faults)).await;
    assert!(
        stats.partial_answers > 0,
        "no answer was left partial: {stats:?}"
    );
}

/// Anomaly 10 of `docs/reliability.md`, as the real cluster met it: `mv` onto a destination
/// that exists, its check answered while the destination's shard has no active copy
/// (`_shards.failed` 0, `successful` one short). Taken as whole, the answer lacks the
/// destination (or the source) and the rename moves onto it. Every one is refused, the source
/// left where it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_onto_a_destination_whose_shard_has_no_copy_is_refused() {
    let (proxy, env) = three_shards().await;
    let mut entries: Vec<(String, bool)> = vec![("/src".into(), true), ("/src/f".into(), false)];
    entries.extend((0..40).map(|d| (format!("/d{d:02}"), true)));
    let refs: Vec<(&str, bool)> = entries.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(&env, &refs).await;
    proxy.set_faults(NetFaults {
        unassigned_shards: 0.5,
        ..NetFaults::none(NetFaults::seed_from_env())
    });
    let renamer = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .lease(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .build();
    for d in 0..40 {
        let to = format!("/d{d:02}");
        let outcome = renamer.rename(&p("/src"), &p(&to)).await;
        assert!(
            matches!(outcome, Err(fs_rename::RenameError::DestinationExists { ref path }) if path.as_str() == to),
            "mv /src {to}: {outcome:?}"
        );
    }
    assert!(proxy.stats().partial_answers > 0, "{:?}", proxy.stats());
    proxy.set_faults(NetFaults::none(0));
    let expected: BTreeSet<String> = entries.into_iter().map(|(p, _)| p).collect();
    assert_tree(&env, &expected, "the refused renames").await;
}

/// A proxy on osmem that runs the server's renames, and a tree on it whose index has three
/// shards (its lock and journal indices one).
async fn three_shards() -> (fs_testkit::EsProxy, Env) {
    let proxy = fs_testkit::start_es_proxy(EsProxyOptions {
        update_by_query: true,
        ..EsProxyOptions::default()
    });
    let env = Env {
        store: Arc::new(fs_testkit::elastic_store(proxy.url())),
        index: fs_testkit::unique_name("fs-shards"),
        backend: Backend::Osmem,
        dead_scans: Arc::default(),
        faulty: None,
    };
    let layout = IndexLayout::default()
        .with_shards(SHARDS)
        .and_then(|l| l.with_replicas(0))
        .expect("layout");
    let tree = FsTree::new(Arc::clone(&env.store), env.index.clone()).with_layout(layout);
    tree.ensure_indices().await.expect("indices");
    (proxy, env)
}

/// Indexes a tree of three shards, then scans, renames (by the client and by the server),
/// copies and removes in it, with `faults` from the first scan on; returns what the proxy
/// counted.
async fn every_job_on_three_shards(faults: Option<NetFaults>) -> ProxyStats {
    let (proxy, env) = three_shards().await;

    // The tree index has the shards asked for; the lock and journal indices stay on one.
    let url = proxy.url();
    assert_eq!(
        fs_testkit::shards_of(url, &env.index).await,
        u64::from(SHARDS)
    );
    assert_eq!(fs_testkit::shards_of(url, &env.lock_index()).await, 1);
    let journal = fs_model::journal_index_name(&env.index);
    assert_eq!(fs_testkit::shards_of(url, &journal).await, 1);

    // Indexed (`tree_with` finds the indices made), then scanned in path order in pages
    // smaller than a shard's share, so that every page is merged from all three.
    let entries = entries();
    let refs: Vec<(&str, bool)> = entries.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(&env, &refs).await;
    let mut expected: BTreeSet<String> = entries.iter().map(|(p, _)| p.clone()).collect();
    // Spread over the three: each holds some of the documents.
    let spread = fs_testkit::docs_per_shard(url, &env.index).await;
    assert_eq!(spread.len(), SHARDS as usize, "{spread:?}");
    assert!(spread.iter().all(|&docs| docs > 0), "{spread:?}");
    assert_eq!(
        spread.iter().sum::<u64>(),
        expected.len() as u64,
        "{spread:?}"
    );
    if let Some(faults) = faults {
        proxy.set_faults(faults);
    }
    let scanned: Vec<String> = Scan::new(
        Arc::clone(&env.store),
        &env.index,
        Scope::Subtree(FsPath::root()),
        37,
    )
    .read_all()
    .await
    .expect("scan")
    .into_iter()
    .map(|d| d.source["path"].as_str().expect("path").to_owned())
    .collect();
    let want: Vec<String> = expected.iter().cloned().collect();
    assert_eq!(scanned, want, "a scan of the whole tree, in path order");
    assert_tree(&env, &expected, "indexing").await;

    let renamer = |rewrite: Rewrite| {
        Renamer::builder(Arc::clone(&env.store), env.index.clone())
            .rewrite(rewrite)
            .page_size(40)
            .lease(Duration::from_secs(10))
            .wait(Duration::from_secs(10))
            .build()
    };

    // mv, rewritten by the client, page by page.
    let before = paths_by_id(&env).await;
    let report = renamer(Rewrite::Client)
        .rename(&p("/src/d1"), &p("/dst-parent/d1"))
        .await
        .expect("mv by the client");
    assert!(!report.on_server, "{report:?}");
    assert_eq!((report.found, report.rewritten), (31, 31), "{report:?}");
    expected = moved(&expected, "/src/d1", "/dst-parent/d1");
    assert_tree(&env, &expected, "mv by the client").await;
    assert_ids_kept(&env, &before, "/src/d1", "/dst-parent/d1").await;

    // mv, rewritten by the server (`_update_by_query`, `slices=auto`).
    let before = paths_by_id(&env).await;
    let report = renamer(Rewrite::Server)
        .rename(&p("/src"), &p("/moved"))
        .await
        .expect("mv by the server");
    assert!(report.on_server, "{report:?}");
    assert_eq!((report.found, report.rewritten), (280, 280), "{report:?}");
    expected = moved(&expected, "/src", "/moved");
    assert_tree(&env, &expected, "mv by the server").await;
    assert_ids_kept(&env, &before, "/src", "/moved").await;

    // cp -r.
    let report = renamer(Rewrite::Auto)
        .copy(&p("/moved/d2"), &p("/copy"))
        .await
        .expect("cp -r");
    assert_eq!(report.rewritten, 31, "{report:?}");
    let copies: Vec<String> = expected
        .iter()
        .filter_map(|path| path.strip_prefix("/moved/d2"))
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        .map(|rest| format!("/copy{rest}"))
        .collect();
    expected.extend(copies);
    assert_tree(&env, &expected, "cp -r").await;

    // rm -r.
    let report = renamer(Rewrite::Auto)
        .remove(&p("/moved/d3"), true)
        .await
        .expect("rm -r");
    assert_eq!(report.rewritten, 31, "{report:?}");
    expected.retain(|path| path != "/moved/d3" && !path.starts_with("/moved/d3/"));
    assert_tree(&env, &expected, "rm -r").await;

    let open = proxy.open_contexts();
    assert!(open.is_empty(), "search contexts left open: {open:?}");
    proxy.stats()
}

/// The embedded store has no shards: a layout is accepted and changes nothing.
#[tokio::test]
async fn the_embedded_store_ignores_the_layout() {
    let env = Env::new(Backend::Embedded);
    let layout = IndexLayout::default()
        .with_shards(SHARDS)
        .and_then(|l| l.with_replicas(2))
        .expect("layout");
    let tree = FsTree::new(Arc::clone(&env.store), env.index.clone()).with_layout(layout);
    tree.ensure_indices().await.expect("indices");
    tree_with(&env, &[("/a", true), ("/a/b", false)]).await;
    let report = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .build()
        .rename(&p("/a"), &p("/c"))
        .await
        .expect("mv");
    assert_eq!(report.rewritten, 2);
    assert_eq!(listed(&env).await, ["/c", "/c/b"]);
}
