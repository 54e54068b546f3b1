//! The conformance suite: the semantics every [`DocStore`] must share, written once.
//!
//! Each case is a public async function taking a fresh store; it panics on a violation, naming
//! what broke. [`conformance_suite!`](crate::conformance_suite) turns them into one test per
//! case for a store factory, so every implementation runs the same code:
//!
//! ```text
//! async fn make_store() -> fs_store::SharedStore { /* ... */ }
//! fs_store::conformance_suite!(make_store);
//! ```
//!
//! Every case works in indices of its own (a random suffix), so one server can serve them all,
//! and refreshes before it searches, so it holds on near-real-time stores too.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::sync::Arc;

use fs_model::{DocKind, FsDoc, FsPath};
use serde_json::{json, Value};

use crate::{
    BulkOp, Chained, Cursor, DocStore, Scan, Scope, SearchRequest, SharedStore, StoreError, Version,
};

/// Returns a fresh index name `prefix-<random>`, created with `path` and `parent` as keywords
/// (as in both of fsrename's indices) and other fields free, since the cases write free-form
/// documents too.
pub async fn fresh_index(store: &dyn DocStore, prefix: &str) -> String {
    let index = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    assert!(store
        .create_index(&index, &suite_index_body())
        .await
        .expect("create index"));
    index
}

fn suite_index_body() -> Value {
    json!({ "mappings": { "properties": {
        "path": { "type": "keyword" },
        "parent": { "type": "keyword" }
    } } })
}

fn doc(path: &str, kind: DocKind) -> Value {
    let path = FsPath::parse(path).expect("test path");
    serde_json::to_value(FsDoc::new(path, kind, 0, 0)).expect("serialize doc")
}

fn file(path: &str) -> Value {
    doc(path, DocKind::File)
}

/// Indexes `paths` (directories end up as files; only paths matter here) with ids `d0`, `d1`...
async fn put_paths(store: &dyn DocStore, index: &str, paths: &[&str]) {
    let ops = paths
        .iter()
        .enumerate()
        .map(|(i, p)| BulkOp::Create {
            id: format!("d{i}"),
            source: file(p),
        })
        .collect();
    let results = store.bulk(index, ops).await.expect("bulk");
    assert!(
        results.iter().all(Result::is_ok),
        "setup bulk failed: {results:?}"
    );
    store.refresh(index).await.expect("refresh");
}

/// Pages through `scope` `size` documents at a time; returns the paths in order.
async fn search_all(store: &dyn DocStore, index: &str, scope: Scope, size: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut request = SearchRequest::first(scope, size);
    loop {
        let page = store.search(index, request.clone()).await.expect("search");
        assert!(page.docs.len() <= size, "page larger than asked");
        for d in &page.docs {
            let path = d
                .source
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or("<none>");
            out.push(path.to_owned());
        }
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => return out,
        }
    }
}

pub async fn index_lifecycle(store: SharedStore) {
    let index = fresh_index(&*store, "conf-life").await;
    assert!(
        !store.create_index(&index, &json!({})).await.expect("again"),
        "created twice"
    );
    assert!(store.delete_index(&index).await.expect("delete"));
    assert!(!store.delete_index(&index).await.expect("delete again"));
    let missing = store.get(&index, "x").await;
    assert!(
        matches!(missing, Err(StoreError::IndexNotFound { .. })),
        "{missing:?}"
    );
    let bad = store.create_index("Not-Lowercase", &json!({})).await;
    assert!(matches!(bad, Err(StoreError::Rejected { .. })), "{bad:?}");
}

pub async fn create_then_get(store: SharedStore) {
    let index = fresh_index(&*store, "conf-create").await;
    let v = store.create(&index, "a", file("/a")).await.expect("create");
    let got = store.get(&index, "a").await.expect("get").expect("found");
    assert_eq!((got.id.as_str(), got.version), ("a", v));
    assert_eq!(got.source, file("/a"));
    let again = store.create(&index, "a", file("/b")).await;
    match again {
        // A store that reports the current version must report the right one.
        Err(StoreError::Conflict {
            exists: true,
            current,
            ..
        }) => {
            assert!(current.is_none_or(|c| c == v), "{current:?} is not {v:?}")
        }
        other => panic!("second create of `a` should conflict, got {other:?}"),
    }
    let unchanged = store.get(&index, "a").await.expect("get").expect("found");
    assert_eq!(
        unchanged.source,
        file("/a"),
        "a refused create must not write"
    );
    assert!(store
        .get(&index, "nope")
        .await
        .expect("get missing")
        .is_none());
}

pub async fn ids_may_contain_slashes_and_unicode(store: SharedStore) {
    let index = fresh_index(&*store, "conf-ids").await;
    for id in [
        "/clinton/projects",
        "/日本/é",
        "global",
        "sha256:00ff",
        "a b%2F?#",
    ] {
        store
            .create(&index, id, json!({"id": id}))
            .await
            .expect("create");
        let got = store.get(&index, id).await.expect("get").expect("found");
        assert_eq!(got.source["id"], id);
    }
}

pub async fn index_writes_and_conditions(store: SharedStore) {
    let index = fresh_index(&*store, "conf-index").await;
    let v1 = store
        .index(&index, "a", file("/a"), None)
        .await
        .expect("upsert creates");
    let v2 = store
        .index(&index, "a", file("/b"), None)
        .await
        .expect("upsert replaces");
    assert!(
        v2.seq_no > v1.seq_no,
        "seq_no must grow: {v1:?} then {v2:?}"
    );
    let stale = store.index(&index, "a", file("/c"), Some(v1)).await;
    match stale {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, Some(v2)),
        other => panic!("write conditional on a stale version should conflict, got {other:?}"),
    }
    let other_term = Version {
        primary_term: v2.primary_term + 1,
        ..v2
    };
    let wrong_term = store.index(&index, "a", file("/c"), Some(other_term)).await;
    assert!(
        matches!(wrong_term, Err(StoreError::Conflict { current: Some(c), .. }) if c == v2),
        "a write conditional on another primary term should conflict, got {wrong_term:?}"
    );
    let deleted = store.delete(&index, "a", Some(other_term)).await;
    assert!(
        matches!(deleted, Err(StoreError::Conflict { .. })),
        "a delete conditional on another primary term should conflict, got {deleted:?}"
    );
    let got = store.get(&index, "a").await.expect("get").expect("found");
    assert_eq!(
        (got.version, got.source),
        (v2, file("/b")),
        "refused writes change nothing"
    );
    let v3 = store
        .index(&index, "a", file("/d"), Some(v2))
        .await
        .expect("matching version");
    assert!(v3.seq_no > v2.seq_no);
    let got = store.get(&index, "a").await.expect("get").expect("found");
    assert_eq!((got.version, got.source), (v3, file("/d")));
    let missing = store.index(&index, "nope", file("/x"), Some(v3)).await;
    assert!(
        matches!(missing, Err(StoreError::Conflict { exists: false, .. })),
        "conditional write of a missing doc should conflict, got {missing:?}"
    );
    assert!(store.get(&index, "nope").await.expect("get").is_none());
}

pub async fn delete_and_conditions(store: SharedStore) {
    let index = fresh_index(&*store, "conf-delete").await;
    let v1 = store.create(&index, "a", file("/a")).await.expect("create");
    let v2 = store
        .index(&index, "a", file("/a2"), None)
        .await
        .expect("index");
    let stale = store.delete(&index, "a", Some(v1)).await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { current: Some(c), .. }) if c == v2),
        "{stale:?}"
    );
    assert!(
        store.get(&index, "a").await.expect("get").is_some(),
        "refused delete must not delete"
    );
    store
        .delete(&index, "a", Some(v2))
        .await
        .expect("conditional delete");
    assert!(store.get(&index, "a").await.expect("get").is_none());
    let again = store.delete(&index, "a", None).await;
    assert!(
        matches!(again, Err(StoreError::NotFound { .. })),
        "{again:?}"
    );
    let cond_missing = store.delete(&index, "a", Some(v2)).await;
    assert!(
        matches!(
            cond_missing,
            Err(StoreError::Conflict { exists: false, .. })
        ),
        "{cond_missing:?}"
    );
    store.create(&index, "b", file("/b")).await.expect("create");
    store
        .delete(&index, "b", None)
        .await
        .expect("unconditional delete");
    let v = store
        .create(&index, "b", file("/b"))
        .await
        .expect("re-create after delete");
    assert!(v.seq_no > v2.seq_no, "a re-created doc gets a new seq_no");
}

pub async fn mget_keeps_order(store: SharedStore) {
    let index = fresh_index(&*store, "conf-mget").await;
    let va = store.create(&index, "a", file("/a")).await.expect("create");
    let vc = store.create(&index, "c", file("/c")).await.expect("create");
    let ids: Vec<String> = ["c", "missing", "a", "c"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let docs = store.mget(&index, &ids).await.expect("mget");
    let seen: Vec<Option<(String, Version)>> = docs
        .into_iter()
        .map(|d| d.map(|d| (d.id, d.version)))
        .collect();
    assert_eq!(
        seen,
        vec![
            Some(("c".into(), vc)),
            None,
            Some(("a".into(), va)),
            Some(("c".into(), vc))
        ]
    );
    assert!(store
        .mget(&index, &[])
        .await
        .expect("empty mget")
        .is_empty());
    let many: Vec<String> = (0..1200).map(|i| format!("m{i}")).collect();
    let ops = many
        .iter()
        .map(|id| BulkOp::Create {
            id: id.clone(),
            source: json!({}),
        })
        .collect();
    store.bulk(&index, ops).await.expect("bulk");
    let docs = store.mget(&index, &many).await.expect("large mget");
    assert!(docs
        .iter()
        .zip(&many)
        .all(|(d, id)| d.as_ref().map(|d| &d.id) == Some(id)));
}

pub async fn bulk_items_are_independent(store: SharedStore) {
    let index = fresh_index(&*store, "conf-bulk").await;
    let v_old = store
        .create(&index, "old", file("/old"))
        .await
        .expect("create");
    let v_new = store
        .index(&index, "old", file("/old2"), None)
        .await
        .expect("index");
    store
        .create(&index, "taken", file("/taken"))
        .await
        .expect("create");
    let results = store
        .bulk(
            &index,
            vec![
                BulkOp::Create {
                    id: "fresh".into(),
                    source: file("/fresh"),
                },
                BulkOp::Create {
                    id: "taken".into(),
                    source: file("/other"),
                },
                BulkOp::Index {
                    id: "old".into(),
                    source: file("/stale"),
                    if_version: Some(v_old),
                },
                BulkOp::Index {
                    id: "old".into(),
                    source: file("/ok"),
                    if_version: Some(v_new),
                },
                BulkOp::Delete {
                    id: "ghost".into(),
                    if_version: None,
                },
                BulkOp::Create {
                    id: "fresh2".into(),
                    source: file("/fresh2"),
                },
            ],
        )
        .await
        .expect("bulk request");
    assert_eq!(results.len(), 6);
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(
        matches!(results[1], Err(StoreError::Conflict { .. })),
        "{:?}",
        results[1]
    );
    assert!(
        matches!(results[2], Err(StoreError::Conflict { .. })),
        "{:?}",
        results[2]
    );
    assert!(results[3].is_ok(), "{:?}", results[3]);
    assert!(
        matches!(results[4], Err(StoreError::NotFound { .. })),
        "{:?}",
        results[4]
    );
    assert!(
        results[5].is_ok(),
        "a failed item must not stop later ones: {:?}",
        results[5]
    );
    let get = |id: &'static str| {
        let store = Arc::clone(&store);
        let index = index.clone();
        async move { store.get(&index, id).await.expect("get").map(|d| d.source) }
    };
    assert_eq!(get("taken").await, Some(file("/taken")));
    assert_eq!(get("old").await, Some(file("/ok")));
    assert_eq!(get("fresh2").await, Some(file("/fresh2")));
    let v3 = results[3].clone().expect("item 3");
    let deleted = store
        .bulk(
            &index,
            vec![BulkOp::Delete {
                id: "old".into(),
                if_version: Some(v3),
            }],
        )
        .await
        .expect("bulk delete");
    assert!(deleted[0].is_ok(), "{deleted:?}");
    assert!(store
        .bulk(&index, vec![])
        .await
        .expect("empty bulk")
        .is_empty());
}

const TREE: &[&str] = &[
    "/clinton",
    "/clinton/projects",
    "/clinton/projects/elasticsearch",
    "/clinton/projects/elasticsearch/README.txt",
    "/clinton/projects/kibana",
    "/clinton/a.txt",
    "/clinton-x",
    "/clinton-x/inside",
    "/clintonx",
    "/clinton0",
    "/gormley",
    "/gormley/b.txt",
    "/日本/é",
];

pub async fn search_subtree_is_component_wise(store: SharedStore) {
    let index = fresh_index(&*store, "conf-subtree").await;
    put_paths(&*store, &index, TREE).await;
    store
        .create(&index, "no-path", json!({"lock_type": "exclusive"}))
        .await
        .expect("create");
    store.refresh(&index).await.expect("refresh");
    let clinton = Scope::Subtree(FsPath::parse("/clinton").expect("path"));
    for size in [1, 2, 3, 100] {
        let got = search_all(&*store, &index, clinton.clone(), size).await;
        assert_eq!(
            got,
            vec![
                "/clinton",
                "/clinton/a.txt",
                "/clinton/projects",
                "/clinton/projects/elasticsearch",
                "/clinton/projects/elasticsearch/README.txt",
                "/clinton/projects/kibana",
            ],
            "page size {size}"
        );
    }
    let leaf = Scope::Subtree(FsPath::parse("/clinton/a.txt").expect("path"));
    assert_eq!(
        search_all(&*store, &index, leaf, 10).await,
        vec!["/clinton/a.txt"]
    );
    let none = Scope::Subtree(FsPath::parse("/nothing").expect("path"));
    assert!(search_all(&*store, &index, none, 10).await.is_empty());
    let mut everything: Vec<String> = TREE.iter().map(|s| s.to_string()).collect();
    everything.sort();
    let root = Scope::Subtree(FsPath::root());
    assert_eq!(
        search_all(&*store, &index, root, 4).await,
        everything,
        "root covers all paths"
    );
}

pub async fn search_exact_path(store: SharedStore) {
    let index = fresh_index(&*store, "conf-exact").await;
    put_paths(&*store, &index, TREE).await;
    let exact = Scope::Exact(FsPath::parse("/clinton").expect("path"));
    assert_eq!(
        search_all(&*store, &index, exact.clone(), 10).await,
        vec!["/clinton"]
    );
    assert_eq!(store.count(&index, &exact).await.expect("count"), 1);
    let none = Scope::Exact(FsPath::parse("/clinton/nothing").expect("path"));
    assert!(search_all(&*store, &index, none, 10).await.is_empty());
}

pub async fn search_children(store: SharedStore) {
    let index = fresh_index(&*store, "conf-children").await;
    put_paths(&*store, &index, TREE).await;
    let kids = Scope::Children(FsPath::parse("/clinton").expect("path"));
    assert_eq!(
        search_all(&*store, &index, kids, 1).await,
        vec!["/clinton/a.txt", "/clinton/projects"]
    );
    let top = search_all(&*store, &index, Scope::Children(FsPath::root()), 2).await;
    assert_eq!(
        top,
        vec![
            "/clinton",
            "/clinton-x",
            "/clinton0",
            "/clintonx",
            "/gormley"
        ]
    );
    // From a name on: paged like the directory, nothing below it, count agrees.
    let from = |dir: &str, start: &str| Scope::ChildrenFrom {
        dir: FsPath::parse(dir).expect("path"),
        start: FsPath::parse(start).expect("path"),
    };
    let rest = from("/", "/clinton0");
    assert!(rest.sorted_by_path());
    for size in [1, 2, 100] {
        assert_eq!(
            search_all(&*store, &index, rest.clone(), size).await,
            vec!["/clinton0", "/clintonx", "/gormley"],
            "pages of {size}"
        );
    }
    assert_eq!(store.count(&index, &rest).await.expect("count"), 3);
    // A start that is no entry: from the next one on.
    assert_eq!(
        search_all(&*store, &index, from("/clinton", "/clinton/b"), 10).await,
        vec!["/clinton/projects"]
    );
    assert!(
        search_all(&*store, &index, from("/clinton", "/clinton/zz"), 10)
            .await
            .is_empty()
    );
}

pub async fn search_all_pages_everything(store: SharedStore) {
    let index = fresh_index(&*store, "conf-all").await;
    put_paths(&*store, &index, TREE).await;
    store
        .create(&index, "global", json!({}))
        .await
        .expect("create");
    store.refresh(&index).await.expect("refresh");
    for size in [1, 5, 1000] {
        let mut ids = BTreeSet::new();
        let mut request = SearchRequest::first(Scope::All, size);
        loop {
            let page = store.search(&index, request.clone()).await.expect("search");
            for d in page.docs {
                assert!(
                    ids.insert(d.id.clone()),
                    "`{}` returned twice at page size {size}",
                    d.id
                );
            }
            match page.next {
                Some(c) => request.after = Some(c),
                None => break,
            }
        }
        assert_eq!(ids.len(), TREE.len() + 1, "page size {size}");
    }
    let count = store.count(&index, &Scope::All).await.expect("count");
    assert_eq!(count, TREE.len() as u64 + 1);
}

/// [`Scope::Pathless`] finds the documents without a `path` (a copy's claims), in every page
/// size, and nothing of the tree; no path scope finds them.
pub async fn search_pathless(store: SharedStore) {
    let index = fresh_index(&*store, "conf-pathless").await;
    put_paths(&*store, &index, TREE).await;
    for id in ["claim-b", "claim-a", "claim-c"] {
        store
            .create(&index, id, json!({"kind": "claim", "name": "job-1"}))
            .await
            .expect("create a claim");
    }
    store.refresh(&index).await.expect("refresh");
    for size in [1, 2, 1000] {
        let mut ids = Vec::new();
        let mut request = SearchRequest::first(Scope::Pathless, size);
        loop {
            let page = store.search(&index, request.clone()).await.expect("search");
            ids.extend(page.docs.into_iter().map(|d| d.id));
            match page.next {
                Some(c) => request.after = Some(c),
                None => break,
            }
        }
        ids.sort();
        assert_eq!(ids, ["claim-a", "claim-b", "claim-c"], "page size {size}");
    }
    let count = store.count(&index, &Scope::Pathless).await.expect("count");
    assert_eq!(count, 3);
    let tree = store
        .count(&index, &Scope::Subtree(FsPath::root()))
        .await
        .expect("count");
    assert_eq!(tree, TREE.len() as u64, "the root's subtree has no claims");
}

/// A paged search stopped before its last page can be closed, twice without harm; a [`Scan`]
/// reads everything, or stops and closes.
pub async fn a_search_stopped_early_is_closed(store: SharedStore) {
    let index = fresh_index(&*store, "conf-close").await;
    put_paths(&*store, &index, TREE).await;
    let scope = Scope::Subtree(FsPath::root());
    let first = store
        .search(&index, SearchRequest::first(scope.clone(), 2))
        .await
        .expect("search");
    let cursor = first.next.expect("more than one page");
    store
        .close_cursor(&index, cursor.clone())
        .await
        .expect("close");
    store
        .close_cursor(&index, cursor)
        .await
        .expect("closing twice is harmless");
    let mut scan = Scan::new(Arc::clone(&store), &index, scope.clone(), 2);
    let page = scan.next_page().await.expect("page").expect("documents");
    assert_eq!(page.len(), 2);
    scan.close().await;
    scan.close().await;
    assert_eq!(scan.next_page().await.expect("closed"), None);
    let all = Scan::new(Arc::clone(&store), &index, scope, 2)
        .read_all()
        .await
        .expect("scan");
    assert_eq!(all.len(), TREE.len());
}

pub async fn count_agrees_with_search(store: SharedStore) {
    let index = fresh_index(&*store, "conf-count").await;
    put_paths(&*store, &index, TREE).await;
    for scope in [
        Scope::Subtree(FsPath::parse("/clinton").expect("path")),
        Scope::Subtree(FsPath::root()),
        Scope::Children(FsPath::root()),
        Scope::Children(FsPath::parse("/clinton/projects").expect("path")),
    ] {
        let found = search_all(&*store, &index, scope.clone(), 3).await.len() as u64;
        assert_eq!(
            store.count(&index, &scope).await.expect("count"),
            found,
            "{scope:?}"
        );
    }
}

/// One search of several scopes finds what each finds, once, sorted by path; count agrees.
pub async fn search_any_of(store: SharedStore) {
    let index = fresh_index(&*store, "conf-any-of").await;
    put_paths(&*store, &index, TREE).await;
    let path = |p: &str| FsPath::parse(p).expect("path");
    let scope = Scope::AnyOf(vec![
        Scope::Subtree(path("/clinton/projects")),
        Scope::Exact(path("/gormley")),
        Scope::Exact(path("/nothing")),
        // Overlaps the first: still one hit per document.
        Scope::Exact(path("/clinton/projects/kibana")),
    ]);
    assert!(scope.sorted_by_path());
    let expected = vec![
        "/clinton/projects",
        "/clinton/projects/elasticsearch",
        "/clinton/projects/elasticsearch/README.txt",
        "/clinton/projects/kibana",
        "/gormley",
    ];
    for size in [2, 10] {
        assert_eq!(
            search_all(&*store, &index, scope.clone(), size).await,
            expected,
            "pages of {size}"
        );
    }
    let one_page = store
        .search(&index, SearchRequest::single_page(scope.clone(), 10))
        .await
        .expect("single page");
    assert_eq!(one_page.docs.len(), expected.len());
    assert!(one_page.next.is_none());
    assert_eq!(store.count(&index, &scope).await.expect("count"), 5);
    let nothing = Scope::AnyOf(Vec::new());
    assert!(search_all(&*store, &index, nothing.clone(), 10)
        .await
        .is_empty());
    assert_eq!(store.count(&index, &nothing).await.expect("count"), 0);
}

/// The rest of a subtree from a path on: path order, paged like the subtree; a start before
/// the root's subtree reads all of it, one past its end nothing; count agrees.
pub async fn search_subtree_from(store: SharedStore) {
    let index = fresh_index(&*store, "conf-subtree-from").await;
    put_paths(&*store, &index, TREE).await;
    let path = |p: &str| FsPath::parse(p).expect("path");
    let rest = Scope::SubtreeFrom {
        root: path("/clinton"),
        start: path("/clinton/projects/elasticsearch"),
    };
    assert!(rest.sorted_by_path());
    let expected = vec![
        "/clinton/projects/elasticsearch",
        "/clinton/projects/elasticsearch/README.txt",
        "/clinton/projects/kibana",
    ];
    for size in [1, 2, 100] {
        assert_eq!(
            search_all(&*store, &index, rest.clone(), size).await,
            expected,
            "pages of {size}"
        );
    }
    assert_eq!(store.count(&index, &rest).await.expect("count"), 3);
    let all = Scope::SubtreeFrom {
        root: path("/clinton"),
        start: path("/a"),
    };
    assert_eq!(search_all(&*store, &index, all.clone(), 100).await.len(), 6);
    let none = Scope::SubtreeFrom {
        root: path("/clinton"),
        start: path("/clinton/zz"),
    };
    assert!(search_all(&*store, &index, none, 100).await.is_empty());
    // From the root itself: the root is in; from between the root and what lies below it
    // (`/clinton-x` sorts there), the root is out and so is the sibling.
    let from = |root: &str, start: &str| Scope::SubtreeFrom {
        root: path(root),
        start: path(start),
    };
    let whole = search_all(&*store, &index, from("/clinton", "/clinton"), 100).await;
    assert_eq!(whole.len(), 6, "{whole:?}");
    assert_eq!(whole.first().map(String::as_str), Some("/clinton"));
    let below = search_all(&*store, &index, from("/clinton", "/clinton-x"), 100).await;
    assert_eq!(below.len(), 5, "{below:?}");
    assert!(
        below.iter().all(|p| p.starts_with("/clinton/")),
        "{below:?}"
    );
    // Under the root of the tree: every path from `start` on.
    assert_eq!(
        search_all(&*store, &index, from("/", "/clinton0"), 100).await,
        vec![
            "/clinton0",
            "/clintonx",
            "/gormley",
            "/gormley/b.txt",
            "/日本/é"
        ]
    );
}

/// Scopes in turn: the documents of the first scope before those only later ones hold, each
/// scope in path order, every document once, in one page with no next; a cursor is refused;
/// count agrees with `AnyOf`.
pub async fn search_in_turn(store: SharedStore) {
    let index = fresh_index(&*store, "conf-in-turn").await;
    put_paths(&*store, &index, TREE).await;
    store
        .create(&index, "no-path", json!({"lock_type": "exclusive"}))
        .await
        .expect("create");
    store.refresh(&index).await.expect("refresh");
    let path = |p: &str| FsPath::parse(p).expect("path");
    let scopes = vec![
        Scope::Exact(path("/gormley")),
        Scope::Exact(path("/nothing")),
        // Sorts before `/gormley` by path, yet comes after it.
        Scope::Subtree(path("/clinton")),
        // Overlaps the one before: its documents come once, where that one put them.
        Scope::Exact(path("/clinton/a.txt")),
        Scope::Exact(path("/日本/é")),
    ];
    let search = |size: usize| {
        let (store, index, scope) = (Arc::clone(&store), index.clone(), scopes.clone());
        async move {
            let page = store
                .search(
                    &index,
                    SearchRequest::single_page(Scope::InTurn(scope), size),
                )
                .await
                .expect("search in turn");
            assert!(page.next.is_none(), "one page, no next");
            page.docs
                .iter()
                .map(|d| d.source["path"].as_str().unwrap_or("?").to_owned())
                .collect::<Vec<_>>()
        }
    };
    let all = vec![
        "/gormley",
        "/clinton",
        "/clinton/a.txt",
        "/clinton/projects",
        "/clinton/projects/elasticsearch",
        "/clinton/projects/elasticsearch/README.txt",
        "/clinton/projects/kibana",
        "/日本/é",
    ];
    assert_eq!(search(100).await, all);
    // A page too small for everything keeps the earlier scopes whole.
    assert_eq!(search(3).await, all[..3].to_vec());
    // `first` (not `single_page`) reads one page too.
    let page = store
        .search(
            &index,
            SearchRequest::first(Scope::InTurn(scopes.clone()), 2),
        )
        .await
        .expect("first page in turn");
    assert_eq!(page.docs.len(), 2);
    assert!(page.next.is_none(), "scopes in turn have no next page");
    assert_eq!(
        store
            .count(&index, &Scope::InTurn(scopes.clone()))
            .await
            .expect("count"),
        8
    );
    let mut request = SearchRequest::first(Scope::InTurn(scopes), 2);
    request.after = Some(Cursor(json!(["/clinton", "d0"])));
    let refused = store.search(&index, request).await;
    assert!(
        matches!(refused, Err(StoreError::Rejected { .. })),
        "{refused:?}"
    );
    let nothing = store
        .search(
            &index,
            SearchRequest::single_page(Scope::InTurn(Vec::new()), 10),
        )
        .await
        .expect("nothing in turn");
    assert!(nothing.docs.is_empty());
}

/// `indices_exist` is true only when every index named exists (a store may always say false,
/// "not known", and then must say so for missing ones too); `bulk_refreshed` leaves its items
/// searchable with no refresh after it.
pub async fn indices_exist_and_bulk_refreshed(store: SharedStore) {
    let index = fresh_index(&*store, "conf-exist").await;
    let missing = format!("{index}-missing");
    assert!(!store
        .indices_exist(&[&index, &missing])
        .await
        .expect("exists"));
    assert!(!store.indices_exist(&[&missing]).await.expect("exists"));
    let knows = store.indices_exist(&[&index]).await.expect("exists");
    let other = fresh_index(&*store, "conf-exist").await;
    assert_eq!(
        store
            .indices_exist(&[&index, &other])
            .await
            .expect("exists"),
        knows
    );
    let results = store
        .bulk_refreshed(
            &index,
            vec![BulkOp::Create {
                id: "a".into(),
                source: file("/a"),
            }],
        )
        .await
        .expect("bulk_refreshed");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        search_all(&*store, &index, Scope::Subtree(FsPath::root()), 10).await,
        vec!["/a"],
        "searchable with no refresh after it"
    );
}

/// A chained request ([`DocStore::bulk_after`]): where the store chains, the first write and
/// the bulk land together, refreshed; a first write that fails (a conflict, a missing index)
/// leaves everything as it was. Where it does not chain, it refuses and changes nothing.
pub async fn chained_writes_land_together_or_not_at_all(store: SharedStore) {
    let first_index = fresh_index(&*store, "conf-chain-first").await;
    let index = fresh_index(&*store, "conf-chain").await;
    store
        .create(&first_index, "taken", file("/taken"))
        .await
        .expect("create");
    let ops = |path: &str| {
        vec![BulkOp::Create {
            id: path.trim_start_matches('/').to_owned(),
            source: file(path),
        }]
    };
    let create = |id: &str| BulkOp::Create {
        id: id.to_owned(),
        source: file(&format!("/{id}")),
    };
    let sent = store
        .bulk_after(&first_index, create("entry"), &index, ops("/a"), true)
        .await;
    if !store.chains_bulk() {
        assert!(
            matches!(sent, Err(StoreError::Rejected { .. })),
            "a store that does not chain refuses: {sent:?}"
        );
        assert!(store
            .get(&first_index, "entry")
            .await
            .expect("get")
            .is_none());
        return;
    }
    match sent.expect("chained") {
        Chained::Ran(version, results) => {
            assert!(results.iter().all(Result::is_ok), "{results:?}");
            let entry = store.get(&first_index, "entry").await.expect("get");
            assert_eq!(entry.map(|d| d.version), Some(version));
        }
        other => panic!("the first write should land: {other:?}"),
    }
    assert_eq!(
        search_all(&*store, &index, Scope::Subtree(FsPath::root()), 10).await,
        vec!["/a"],
        "the bulk landed, searchable with no refresh after it"
    );
    let refused = store
        .bulk_after(&first_index, create("taken"), &index, ops("/b"), true)
        .await
        .expect("chained");
    assert!(
        matches!(&refused, Chained::FirstFailed(e) if e.is_conflict()),
        "a conflict on the first write: {refused:?}"
    );
    let missing = format!("{first_index}-missing");
    let refused = store
        .bulk_after(&missing, create("entry"), &index, ops("/c"), true)
        .await
        .expect("chained");
    assert!(
        matches!(
            &refused,
            Chained::FirstFailed(StoreError::IndexNotFound { .. })
        ),
        "a missing index for the first write: {refused:?}"
    );
    assert!(
        store.get(&index, "b").await.expect("get").is_none(),
        "nothing ran after a failed first write"
    );
    assert!(
        store.get(&index, "c").await.expect("get").is_none(),
        "nothing ran after a failed first write"
    );
}

pub async fn search_hits_carry_versions(store: SharedStore) {
    let index = fresh_index(&*store, "conf-hitver").await;
    put_paths(&*store, &index, &["/a", "/a/b"]).await;
    store
        .index(&index, "d1", file("/a/b"), None)
        .await
        .expect("rewrite");
    store.refresh(&index).await.expect("refresh");
    let scope = Scope::Subtree(FsPath::parse("/a").expect("path"));
    let page = store
        .search(&index, SearchRequest::first(scope, 10))
        .await
        .expect("search");
    for hit in page.docs {
        let got = store
            .get(&index, &hit.id)
            .await
            .expect("get")
            .expect("found");
        assert_eq!(
            hit.version, got.version,
            "search and get disagree on `{}`",
            hit.id
        );
        assert_eq!(hit.source, got.source);
    }
}

pub async fn refresh_makes_writes_searchable(store: SharedStore) {
    let index = fresh_index(&*store, "conf-refresh").await;
    store.create(&index, "a", file("/a")).await.expect("create");
    store
        .index(&index, "b", file("/b"), None)
        .await
        .expect("index");
    store.refresh(&index).await.expect("refresh");
    let all = search_all(&*store, &index, Scope::Subtree(FsPath::root()), 10).await;
    assert_eq!(all, vec!["/a", "/b"]);
    store.delete(&index, "a", None).await.expect("delete");
    store
        .index(&index, "b", file("/c"), None)
        .await
        .expect("move b");
    store.refresh(&index).await.expect("refresh");
    let all = search_all(&*store, &index, Scope::Subtree(FsPath::root()), 10).await;
    assert_eq!(
        all,
        vec!["/c"],
        "deletes and moves are searchable after refresh"
    );
}

pub async fn sources_must_be_objects(store: SharedStore) {
    let index = fresh_index(&*store, "conf-object").await;
    let refused = store.create(&index, "a", json!([1, 2])).await;
    assert!(
        matches!(refused, Err(StoreError::Rejected { .. })),
        "{refused:?}"
    );
    assert!(store.get(&index, "a").await.expect("get").is_none());
    let cursor = crate::Cursor(json!({"not": "ours"}));
    let request = SearchRequest {
        single_page: false,
        scope: Scope::All,
        size: 5,
        after: Some(cursor),
    };
    let bad = store.search(&index, request).await;
    assert!(matches!(bad, Err(StoreError::Rejected { .. })), "{bad:?}");
}

/// 8 tasks × 200 compare-and-set increments of one document end at exactly 1600.
pub async fn cas_increments_are_exact(store: SharedStore) {
    let index = fresh_index(&*store, "conf-cas").await;
    store
        .create(&index, "counter", json!({"n": 0}))
        .await
        .expect("create");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (store, index) = (Arc::clone(&store), index.clone());
        tasks.spawn(async move {
            let mut conflicts = 0u64;
            for _ in 0..200 {
                loop {
                    let doc = store
                        .get(&index, "counter")
                        .await
                        .expect("get")
                        .expect("exists");
                    let n = doc.source["n"].as_i64().expect("n");
                    match store
                        .index(&index, "counter", json!({"n": n + 1}), Some(doc.version))
                        .await
                    {
                        Ok(_) => break,
                        Err(e) if e.is_conflict() || e.is_retryable() => conflicts += 1,
                        Err(e) => panic!("increment failed: {e}"),
                    }
                }
            }
            conflicts
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task");
    }
    let doc = store
        .get(&index, "counter")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(doc.source["n"], 1600);
}

/// 16 tasks racing to create one id: exactly one wins, the others see a conflict.
pub async fn create_race_has_one_winner(store: SharedStore) {
    let index = fresh_index(&*store, "conf-race").await;
    for round in 0..5 {
        let id = format!("lock-{round}");
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..16 {
            let (store, index, id) = (Arc::clone(&store), index.clone(), id.clone());
            tasks.spawn(async move { store.create(&index, &id, json!({"owner": task})).await });
        }
        let (mut won, mut lost) = (0, 0);
        while let Some(done) = tasks.join_next().await {
            match done.expect("task") {
                Ok(_) => won += 1,
                Err(e) if e.is_conflict() => lost += 1,
                Err(e) => panic!("create failed with a non-conflict: {e}"),
            }
        }
        assert_eq!((won, lost), (1, 15), "round {round}");
    }
}

/// For stores in near-real-time mode: an unrefreshed write is invisible to search and count but
/// not to get.
pub async fn near_real_time_hides_unrefreshed_writes(store: SharedStore) {
    let index = fresh_index(&*store, "conf-nrt").await;
    let root = Scope::Subtree(FsPath::root());
    store.create(&index, "a", file("/a")).await.expect("create");
    assert!(
        store.get(&index, "a").await.expect("get").is_some(),
        "get is realtime"
    );
    assert!(
        search_all(&*store, &index, root.clone(), 10)
            .await
            .is_empty(),
        "search saw it"
    );
    assert_eq!(
        store.count(&index, &root).await.expect("count"),
        0,
        "count saw it"
    );
    store.refresh(&index).await.expect("refresh");
    assert_eq!(
        search_all(&*store, &index, root.clone(), 10).await,
        vec!["/a"]
    );
    store
        .index(&index, "a", file("/moved"), None)
        .await
        .expect("move");
    store.create(&index, "b", file("/b")).await.expect("create");
    assert_eq!(
        search_all(&*store, &index, root.clone(), 10).await,
        vec!["/a"],
        "stale view"
    );
    let stale = store
        .search(&index, SearchRequest::first(root.clone(), 10))
        .await
        .expect("search");
    let fresh = store.get(&index, "a").await.expect("get").expect("found");
    assert_ne!(
        stale.docs[0].version, fresh.version,
        "search shows the refreshed version"
    );
    store.delete(&index, "b", None).await.expect("delete");
    store.refresh(&index).await.expect("refresh");
    assert_eq!(search_all(&*store, &index, root, 10).await, vec!["/moved"]);
}

/// `find`: a name pattern, the words of the content, a subtree, all together; content that
/// changes, moves with its document and goes with it; hits without their content.
pub async fn find_by_name_and_words(store: SharedStore) {
    let index = format!("conf-find-{}", uuid::Uuid::new_v4().simple());
    assert!(store
        .create_index(&index, &fs_model::tree_index_body())
        .await
        .expect("create index"));
    let text = |path: &str, content: &str| {
        let path = FsPath::parse(path).expect("test path");
        let doc = FsDoc::file(path, content.len() as u64, 0).with_content(Some(content.into()));
        serde_json::to_value(doc).expect("serialize doc")
    };
    let ops = vec![
        ("t1", text("/a/readme.txt", "The quick brown fox")),
        ("t2", text("/a/b/notes.txt", "a lazy dog, a brown dog")),
        ("t3", text("/a/b/fox.md", "Fox and hound: quick, quick!")),
        ("t4", text("/ab/other.txt", "quick brown fox elsewhere")),
        ("d1", doc("/a", DocKind::Dir)),
        ("d2", doc("/a/b", DocKind::Dir)),
    ];
    let ops = ops
        .into_iter()
        .map(|(id, source)| BulkOp::Create {
            id: id.into(),
            source,
        })
        .collect();
    for result in store.bulk(&index, ops).await.expect("bulk") {
        result.expect("item");
    }
    store.refresh(&index).await.expect("refresh");
    let under = |p: &str| fs_model::FindQuery::under(FsPath::parse(p).expect("path"));
    let glob = |g: &str| fs_model::NameGlob::parse(g).expect("glob");
    let paths = |hits: Vec<crate::StoredDoc>| -> Vec<String> {
        hits.iter()
            .map(|h| {
                assert!(
                    h.source.get("content").is_none(),
                    "hits come without content"
                );
                h.source["path"].as_str().expect("path").to_owned()
            })
            .collect()
    };
    let find = |q: fs_model::FindQuery, size: usize| {
        let store = store.clone();
        let index = index.clone();
        async move { store.find(&index, &q, size).await.expect("find") }
    };

    let by_name = find(under("/a").name(glob("*.txt")), 10).await;
    assert_eq!(paths(by_name), ["/a/b/notes.txt", "/a/readme.txt"]);
    let everything = find(under("/a"), 10).await;
    assert_eq!(
        paths(everything),
        [
            "/a",
            "/a/b",
            "/a/b/fox.md",
            "/a/b/notes.txt",
            "/a/readme.txt"
        ],
        "by path, the subtree component-wise (`/ab` is not under `/a`)"
    );
    assert_eq!(paths(find(under("/a"), 2).await), ["/a", "/a/b"], "size");
    let class = find(under("/").name(glob("[fr]*")), 10).await;
    assert_eq!(paths(class), ["/a/b/fox.md", "/a/readme.txt"]);

    let brown_fox = find(under("/").text("BROWN fox"), 10).await;
    let mut brown_fox = paths(brown_fox);
    brown_fox.sort();
    assert_eq!(
        brown_fox,
        ["/a/readme.txt", "/ab/other.txt"],
        "every word, any case"
    );
    let quick = find(under("/a").text("quick"), 10).await;
    assert_eq!(
        paths(quick),
        ["/a/b/fox.md", "/a/readme.txt"],
        "the one that says it twice, in the shorter text, first"
    );
    let both = find(under("/a").name(glob("*.md")).text("quick"), 10).await;
    assert_eq!(paths(both), ["/a/b/fox.md"]);
    assert!(find(under("/").text("cat"), 10).await.is_empty());

    // The content changes: the old words go, the new come.
    let t2 = store.get(&index, "t2").await.expect("get").expect("t2");
    let mut source = t2.source.clone();
    source["content"] = json!("a sleepy cat");
    store
        .index(&index, "t2", source, Some(t2.version))
        .await
        .expect("rewrite");
    // It moves, its content as it was: found at its new path.
    let t1 = store.get(&index, "t1").await.expect("get").expect("t1");
    let mut moved = t1.source.clone();
    moved["path"] = json!("/a/b/moved.txt");
    moved["parent"] = json!("/a/b");
    moved["name"] = json!("moved.txt");
    store
        .index(&index, "t1", moved, Some(t1.version))
        .await
        .expect("move");
    store.delete(&index, "t4", None).await.expect("delete");
    store.refresh(&index).await.expect("refresh");
    assert_eq!(
        paths(find(under("/").text("cat"), 10).await),
        ["/a/b/notes.txt"]
    );
    assert!(find(under("/").text("dog"), 10).await.is_empty());
    assert_eq!(
        paths(find(under("/").text("brown"), 10).await),
        ["/a/b/moved.txt"],
        "moved with its content; the deleted one gone"
    );
    store.delete_index(&index).await.expect("delete index");
}

/// Generates one `#[tokio::test]` per conformance case for a store factory: an async function
/// returning a fresh [`SharedStore`](crate::SharedStore). Add `near_real_time` to also run the
/// case that only near-real-time stores pass.
#[macro_export]
macro_rules! conformance_suite {
    ($factory:path) => {
        $crate::conformance_suite!(@cases $factory;
            index_lifecycle, create_then_get, ids_may_contain_slashes_and_unicode,
            index_writes_and_conditions, delete_and_conditions, mget_keeps_order,
            bulk_items_are_independent, search_subtree_is_component_wise, search_exact_path, search_children,
            search_all_pages_everything, search_pathless, search_any_of, search_in_turn, search_subtree_from, indices_exist_and_bulk_refreshed, chained_writes_land_together_or_not_at_all, a_search_stopped_early_is_closed, count_agrees_with_search, search_hits_carry_versions,
            refresh_makes_writes_searchable, sources_must_be_objects, cas_increments_are_exact,
            create_race_has_one_winner, find_by_name_and_words);
    };
    ($factory:path, near_real_time) => {
        $crate::conformance_suite!($factory);
        $crate::conformance_suite!(@cases $factory; near_real_time_hides_unrefreshed_writes);
    };
    // `$factory` returns the store and a check to run after each case (that the case left no
    // search context open on a server that counts them, say).
    ($factory:path, near_real_time, checked) => {
        $crate::conformance_suite!(@checked $factory;
            index_lifecycle, create_then_get, ids_may_contain_slashes_and_unicode,
            index_writes_and_conditions, delete_and_conditions, mget_keeps_order,
            bulk_items_are_independent, search_subtree_is_component_wise, search_exact_path, search_children,
            search_all_pages_everything, search_pathless, search_any_of, search_in_turn, search_subtree_from, indices_exist_and_bulk_refreshed, chained_writes_land_together_or_not_at_all, a_search_stopped_early_is_closed, count_agrees_with_search, search_hits_carry_versions,
            refresh_makes_writes_searchable, sources_must_be_objects, cas_increments_are_exact,
            create_race_has_one_winner, find_by_name_and_words, near_real_time_hides_unrefreshed_writes);
    };
    (@checked $factory:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let (store, check) = $factory().await;
                $crate::conformance::$case(store).await;
                check();
            }
        )+
    };
    (@cases $factory:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::conformance::$case($factory().await).await;
            }
        )+
    };
}
