//! The conformance cases of the per-document primitives: index lifecycle, get, mget, create, index, delete and bulk.

use super::*;

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
