//! The conformance cases of search: scopes, paging, counts, and what a refresh makes visible.

use super::*;

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

/// The subtree of `/clinton` in [`TREE`], in path order: not `/clinton-x`, `/clintonx` nor
/// `/clinton0`, whose paths only start with the same letters.
const CLINTON: &[&str] = &[
    "/clinton",
    "/clinton/a.txt",
    "/clinton/projects",
    "/clinton/projects/elasticsearch",
    "/clinton/projects/elasticsearch/README.txt",
    "/clinton/projects/kibana",
];

/// Returns a fresh index named after `prefix` that holds [`TREE`] and one document without a
/// path, refreshed: what a search by scope must tell apart.
async fn tree_and_pathless(store: &dyn DocStore, prefix: &str) -> String {
    let index = fresh_index(store, prefix).await;
    put_paths(store, &index, TREE).await;
    store
        .create(&index, "no-path", json!({"lock_type": "exclusive"}))
        .await
        .expect("create");
    store.refresh(&index).await.expect("refresh");
    index
}

pub async fn search_subtree_is_component_wise(store: SharedStore) {
    let index = tree_and_pathless(&*store, "conf-subtree").await;
    let clinton = Scope::Subtree(FsPath::parse("/clinton").expect("path"));
    for size in [1, 2, 3, 100] {
        let got = search_all(&*store, &index, clinton.clone(), size).await;
        assert_eq!(got, CLINTON, "page size {size}");
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
        for d in search_docs(&*store, &index, Scope::All, size).await {
            assert!(
                ids.insert(d.id.clone()),
                "`{}` returned twice at page size {size}",
                d.id
            );
        }
        assert_eq!(ids.len(), TREE.len() + 1, "page size {size}");
    }
    let count = store.count(&index, &Scope::All).await.expect("count");
    assert_eq!(count, TREE.len() as u64 + 1);
}

/// [`Scope::SubtreeDirs`] finds the directories of a subtree, in path order and in every page
/// size, and none of its files, nor anything outside it; counted alike.
pub async fn search_subtree_dirs(store: SharedStore) {
    let index = fresh_index(&*store, "conf-subtree-dirs").await;
    let dirs = [
        "/clinton",
        "/clinton/projects",
        "/clinton/projects/kibana",
        "/clinton-x",
        "/clintonx",
    ];
    let ops = TREE
        .iter()
        .enumerate()
        .map(|(i, p)| BulkOp::Create {
            id: format!("d{i}"),
            source: doc(
                p,
                if dirs.contains(p) {
                    DocKind::Dir
                } else {
                    DocKind::File
                },
            ),
        })
        .collect();
    let results = store.bulk(&index, ops).await.expect("bulk");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    store.refresh(&index).await.expect("refresh");
    let scope = Scope::SubtreeDirs(FsPath::parse("/clinton").expect("path"));
    assert!(scope.sorted_by_path());
    let expected = ["/clinton", "/clinton/projects", "/clinton/projects/kibana"];
    for size in [1, 2, 100] {
        assert_eq!(
            search_all(&*store, &index, scope.clone(), size).await,
            expected,
            "pages of {size}"
        );
    }
    assert_eq!(store.count(&index, &scope).await.expect("count"), 3);
    let root = Scope::SubtreeDirs(FsPath::root());
    assert_eq!(
        search_all(&*store, &index, root.clone(), 100).await.len(),
        dirs.len()
    );
    let file = Scope::SubtreeDirs(FsPath::parse("/clinton/a.txt").expect("path"));
    assert!(search_all(&*store, &index, file, 100).await.is_empty());
    // From a path on: where a scan of them starts again.
    let start = FsPath::parse("/clinton/projects").expect("path");
    let rest = scope
        .from_path(&start)
        .expect("a scope read from a path on");
    assert!(rest.sorted_by_path());
    for size in [1, 100] {
        assert_eq!(
            search_all(&*store, &index, rest.clone(), size).await,
            ["/clinton/projects", "/clinton/projects/kibana"],
            "pages of {size}"
        );
    }
    assert_eq!(store.count(&index, &rest).await.expect("count"), 2);
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
        let docs = search_docs(&*store, &index, Scope::Pathless, size).await;
        let mut ids: Vec<String> = docs.into_iter().map(|d| d.id).collect();
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
    let index = tree_and_pathless(&*store, "conf-in-turn").await;
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
    let all: Vec<&str> = [&["/gormley"], CLINTON, &["/日本/é"]].concat();
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
