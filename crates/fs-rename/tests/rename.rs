//! Rename jobs on the embedded store: what moves, each check's error, every strategy, stale
//! writes, transient faults, progress, and fsck.

mod common;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::*;
use fs_rename::{fsck, Entry, RenameError, RenameEvent, RenameHooks, Renamer, Strategy};
use fs_store::SharedStore;
use serde_json::json;

const SMALL: &[(&str, bool)] = &[
    ("/a", true),
    ("/a/b", true),
    ("/a/b/c.txt", false),
    ("/a/d.txt", false),
    ("/x", true),
    ("/x/file", false),
];

fn renamer(store: &SharedStore) -> Renamer {
    Renamer::builder(Arc::clone(store), INDEX).build()
}

#[tokio::test]
async fn a_directory_moves_with_everything_under_it() {
    let store = store();
    tree_with(&store, SMALL).await;
    let before = paths_by_id(&store).await;
    let report = renamer(&store)
        .rename(&p("/a"), &p("/x/a2"))
        .await
        .expect("rename");
    assert_eq!((report.found, report.rewritten), (4, 4));
    assert!(
        report.round_trips >= 8,
        "locks, refresh, checks, scan, write: {report:?}"
    );
    let after = paths_by_id(&store).await;
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "ids stay"
    );
    let mut moved: Vec<&str> = after.values().map(String::as_str).collect();
    moved.sort();
    assert_eq!(
        moved,
        [
            "/x",
            "/x/a2",
            "/x/a2/b",
            "/x/a2/b/c.txt",
            "/x/a2/d.txt",
            "/x/file"
        ]
    );
    let doc = store
        .get(
            INDEX,
            after
                .iter()
                .find(|(_, p)| *p == "/x/a2/b/c.txt")
                .expect("c")
                .0,
        )
        .await
        .expect("get")
        .expect("doc")
        .source;
    assert_eq!(
        (
            doc["parent"].clone(),
            doc["name"].clone(),
            doc["depth"].clone()
        ),
        (json!("/x/a2/b"), json!("c.txt"), json!(4))
    );
    let report = fsck(Arc::clone(&store), INDEX, &p("/"))
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(locks_left(&store).await, 0);
}

#[tokio::test]
async fn a_file_rename_moves_one_document() {
    let store = store();
    tree_with(&store, SMALL).await;
    let report = renamer(&store)
        .rename(&p("/a/d.txt"), &p("/x/d.md"))
        .await
        .expect("rename");
    assert_eq!(report.rewritten, 1);
    assert!(paths_by_id(&store).await.values().any(|p| p == "/x/d.md"));
}

#[tokio::test]
async fn each_check_has_its_own_error() {
    let store = store();
    tree_with(&store, SMALL).await;
    let r = renamer(&store);
    type IsExpected = fn(&RenameError) -> bool;
    let cases: Vec<(&str, &str, IsExpected)> = vec![
        ("/nope", "/y", |e| {
            matches!(e, RenameError::SourceNotFound { .. })
        }),
        ("/a", "/x", |e| {
            matches!(e, RenameError::DestinationExists { .. })
        }),
        ("/a", "/", |e| {
            matches!(e, RenameError::DestinationExists { .. })
        }),
        ("/a", "/missing/a", |e| {
            matches!(e, RenameError::DestinationParentMissing { .. })
        }),
        ("/a", "/x/file/a", |e| {
            matches!(e, RenameError::DestinationParentNotDir { .. })
        }),
        ("/a", "/a/b/a", |e| {
            matches!(e, RenameError::MoveIntoItself { .. })
        }),
        ("/a", "/a", |e| {
            matches!(e, RenameError::MoveIntoItself { .. })
        }),
        ("/", "/y", |e| matches!(e, RenameError::RootCannotMove)),
    ];
    let before = paths_by_id(&store).await;
    for (from, to, expected) in cases {
        let err = r.rename(&p(from), &p(to)).await.expect_err(from);
        assert!(expected(&err), "{from} → {to}: {err:?}");
        assert!(
            err.to_string()
                .contains(if from == "/" { "root" } else { "`" }),
            "{err}"
        );
    }
    assert_eq!(
        paths_by_id(&store).await,
        before,
        "failed renames change nothing"
    );
    assert_eq!(
        locks_left(&store).await,
        0,
        "failed renames release their locks"
    );
}

#[tokio::test]
async fn every_strategy_renames_and_cleans_up() {
    for strategy in [
        Strategy::Tree,
        Strategy::Global,
        Strategy::Document,
        Strategy::None,
    ] {
        let store = store();
        tree_with(&store, SMALL).await;
        let r = Renamer::builder(Arc::clone(&store), INDEX)
            .strategy(strategy)
            .build();
        let report = r.rename(&p("/a"), &p("/x/a")).await.expect("rename");
        assert_eq!(report.rewritten, 4, "{strategy}");
        assert!(fsck(Arc::clone(&store), INDEX, &p("/"))
            .await
            .expect("fsck")
            .is_clean());
        assert_eq!(locks_left(&store).await, 0, "{strategy}");
    }
}

/// Changes `/a/d.txt` behind the job's back just before its page is written.
struct Meddler {
    store: SharedStore,
}

#[async_trait]
impl RenameHooks for Meddler {
    async fn before_write(&self, page: &[Entry]) {
        if let Some(e) = page.iter().find(|e| e.doc.path.as_str() == "/a/d.txt") {
            let mut changed = e.doc.clone();
            changed.size = 999;
            let source = serde_json::to_value(&changed).expect("json");
            self.store
                .index(INDEX, &e.id, source, None)
                .await
                .expect("meddle");
        }
    }
}

#[tokio::test]
async fn a_write_from_a_stale_read_fails_instead_of_overwriting() {
    let store = store();
    tree_with(&store, SMALL).await;
    let r = Renamer::builder(Arc::clone(&store), INDEX)
        .strategy(Strategy::None)
        .hooks(Arc::new(Meddler {
            store: Arc::clone(&store),
        }))
        .build();
    let err = r.rename(&p("/a"), &p("/x/a")).await.expect_err("conflict");
    assert!(
        matches!(err, RenameError::Conflict { ref path, .. } if path == "/a/d.txt"),
        "{err:?}"
    );
    let docs = paths_by_id(&store).await;
    let id = docs
        .iter()
        .find(|(_, p)| *p == "/a/d.txt")
        .expect("left in place")
        .0;
    let doc = store.get(INDEX, id).await.expect("get").expect("doc");
    assert_eq!(
        doc.source["size"], 999,
        "the other writer's change survives"
    );
}

async fn survives(fault: Fault) {
    let store = store();
    tree_with(&store, SMALL).await;
    let flaky: SharedStore = Arc::new(Flaky {
        inner: Arc::clone(&store),
        fault,
        remaining: AtomicUsize::new(3),
    });
    let report = renamer(&flaky)
        .rename(&p("/a"), &p("/x/a"))
        .await
        .expect("rename despite faults");
    assert_eq!((report.rewritten, report.retries), (4, 3), "{fault:?}");
    assert!(fsck(Arc::clone(&store), INDEX, &p("/"))
        .await
        .expect("fsck")
        .is_clean());
    assert_eq!(locks_left(&store).await, 0);
}

#[tokio::test]
async fn transient_item_failures_are_retried() {
    survives(Fault::Dropped).await;
}

#[tokio::test]
async fn a_retried_write_that_had_landed_is_recognised() {
    survives(Fault::LostAnswer).await;
}

#[tokio::test]
async fn progress_is_reported_in_order() {
    let store = store();
    tree_with(&store, SMALL).await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let r = Renamer::builder(Arc::clone(&store), INDEX)
        .page_size(2)
        .progress(Arc::new(move |e| sink.lock().expect("events").push(e)))
        .build();
    r.rename(&p("/a"), &p("/x/a")).await.expect("rename");
    let events = events.lock().expect("events").clone();
    assert!(
        matches!(events.first(), Some(RenameEvent::Locked { .. })),
        "{events:?}"
    );
    assert_eq!(events.get(1), Some(&RenameEvent::Checked { total: 4 }));
    let progress: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            RenameEvent::Progress { done, .. } => Some(*done),
            _ => None,
        })
        .collect();
    assert_eq!(progress, [2, 4]);
    assert_eq!(events.last(), Some(&RenameEvent::Released));
}

#[tokio::test]
async fn fsck_finds_what_is_broken() {
    let store = store();
    tree_with(&store, &[("/a", true), ("/a/f", false)]).await;
    let put = |id: &str, source: serde_json::Value| {
        let store = Arc::clone(&store);
        let id = id.to_owned();
        async move { store.create(INDEX, &id, source).await.expect("put") }
    };
    let doc = |path: &str, parent: &str, name: &str, depth: u32, kind: &str| {
        json!({
            "path": path, "parent": parent, "name": name, "depth": depth, "kind": kind, "size": 0, "modified": 0
        })
    };
    put("orphan", doc("/gone/x", "/gone", "x", 2, "file")).await;
    put("under-file", doc("/a/f/x", "/a/f", "x", 3, "file")).await;
    put("wrong-depth", doc("/a/w", "/a", "w", 7, "file")).await;
    put("twin", doc("/a/f", "/a", "f", 2, "file")).await;
    put(
        "junk",
        json!({"path": "/a/junk", "what": "not a tree document"}),
    )
    .await;
    let report = fsck(Arc::clone(&store), INDEX, &p("/"))
        .await
        .expect("fsck");
    assert!(!report.is_clean());
    let all = report.problems.join("\n");
    for expected in [
        "`/gone/x`: parent directory `/gone` does not exist",
        "`/a/f/x`: parent `/a/f` is a file",
        "`/a/w` (document `wrong-depth`)",
        "`/a/f` is stored twice",
        "document `junk` is not a valid tree document",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
    assert_eq!(report.problem_count, 5, "{all}");
    let scoped = fsck(Arc::clone(&store), INDEX, &p("/a/f"))
        .await
        .expect("scoped fsck");
    assert!(
        scoped.problems.iter().any(|p| p.contains("stored twice")),
        "{scoped}"
    );
}

#[tokio::test]
async fn fsck_reports_locks_without_failing() {
    let store = store();
    tree_with(&store, SMALL).await;
    let locks = fs_locks::LockClient::builder(Arc::clone(&store), format!("{INDEX}-lock")).build();
    let guard = locks.lock_tree(&p("/a")).await.expect("lock");
    let report = fsck(Arc::clone(&store), INDEX, &p("/"))
        .await
        .expect("fsck");
    assert!(report.is_clean());
    assert_eq!((report.locks_active, report.locks_expired), (1, 0));
    assert!(
        report.to_string().contains("held by running jobs"),
        "{report}"
    );
    guard.release().await.expect("release");
}
