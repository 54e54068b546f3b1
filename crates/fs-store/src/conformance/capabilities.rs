//! The conformance cases of what only some stores can do (chained and refreshed bulk requests, index checks, find), each checked against what the store says it can do.

use super::*;

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

/// A chained request ([`ChainedBulk::bulk_after`](crate::ChainedBulk::bulk_after)): where the store chains, the first write and
/// the bulk land together, refreshed; a first write that fails (a conflict, a missing index)
/// leaves everything as it was. Where it does not chain, it refuses and changes nothing.
pub async fn chained_writes_land_together_or_not_at_all(store: SharedStore) {
    let first_index = fresh_index(&*store, "conf-chain-first").await;
    let index = fresh_index(&*store, "conf-chain").await;
    store
        .create(&first_index, "taken", file("/taken"))
        .await
        .expect("create");
    // The entry `first` in `first_index`, then the file at `path` in `index`, refreshed.
    fn chain<'a>(
        first_index: &'a str,
        first: &str,
        index: &'a str,
        path: &str,
    ) -> Chain<'a, BulkOp> {
        Chain {
            first_index,
            first: BulkOp::Create {
                id: first.to_owned(),
                source: file(&format!("/{first}")),
            },
            with_first: None,
            index,
            then: vec![BulkOp::Create {
                id: path.trim_start_matches('/').to_owned(),
                source: file(path),
            }],
            refresh: true,
        }
    }
    let sent = store
        .bulk_after(chain(&first_index, "entry", &index, "/a"))
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
        .bulk_after(chain(&first_index, "taken", &index, "/b"))
        .await
        .expect("chained");
    assert!(
        matches!(&refused, Chained::FirstFailed(e) if e.is_conflict()),
        "a conflict on the first write: {refused:?}"
    );
    let missing = format!("{first_index}-missing");
    let refused = store
        .bulk_after(chain(&missing, "entry", &index, "/c"))
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
    // What stores text at all, whatever it says: the files, not the directories.
    assert_eq!(
        paths(find(under("/a").storing_text(), 10).await),
        ["/a/b/fox.md", "/a/b/notes.txt", "/a/readme.txt"]
    );
    assert_eq!(
        paths(find(under("/a/b").name(glob("*.md")).storing_text(), 10).await),
        ["/a/b/fox.md"]
    );

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
    // A directory stores no text: nothing under it does.
    let d2 = store.get(&index, "d2").await.expect("get").expect("d2");
    assert!(d2.source.get("content").is_none());
    assert!(
        find(under("/ab").storing_text(), 10).await.is_empty(),
        "t4 deleted"
    );
    store.delete_index(&index).await.expect("delete index");
}
