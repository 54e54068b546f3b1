//! The Elasticsearch-behaviour proxy behaves as Elasticsearch does where osmem forgives:
//! scripted updates race and refuse as Elasticsearch's do, search contexts are counted and
//! capped, and search is near-real-time.

use std::sync::Arc;
use std::time::Duration;

use fs_model::lock_scripts::{self, LOCK_SCRIPTS};
use fs_store::{
    DocStore, Scope, ScriptedUpdate, ScriptedUpdates, SearchRequest, StoreError, UpdateResult,
};
use fs_testkit::{elastic_store, start_es_proxy, EsProxyOptions};
use serde_json::json;

async fn with_scripts(store: &fs_store::ElasticStore) -> String {
    for script in LOCK_SCRIPTS {
        assert!(store
            .put_script(script.id, script.painless)
            .await
            .expect("store"));
    }
    let index = fs_testkit::unique_name("proxy");
    store
        .create_index(&index, &fs_model::lock_index_body())
        .await
        .expect("index");
    index
}

fn share(id: &str, process: &str) -> ScriptedUpdate {
    let entry = json!({"holder": process, "acquired_at": 1, "expires_at": 100, "mode": "IX"});
    ScriptedUpdate {
        id: id.to_owned(),
        script: lock_scripts::ACQUIRE.id.to_owned(),
        params: json!({"process_id": process, "path": id, "entry": entry, "mode": "IX",
                       "since": 1, "now": 1, "queue": true, "exclusive": {}}),
        upsert: Some(
            json!({"lock_type": "shared", "lock_count": 1, "path": id, "expires_at": 100,
                   "holders": {process: entry}}),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_shares_race_but_every_one_counts_once() {
    let proxy = start_es_proxy(EsProxyOptions {
        race_window: Duration::from_millis(5),
        ..EsProxyOptions::default()
    });
    let store = elastic_store(proxy.url());
    let index = with_scripts(&store).await;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..16 {
        // A handle each, as separate processes have: one handle sends the updates of its
        // concurrent callers together, and those never race.
        let (store, index) = (elastic_store(proxy.url()), index.clone());
        tasks.spawn(async move {
            // Each process sends its share until it lands: a 409 is a race, never a refusal.
            let mut raced = 0;
            loop {
                let result = store
                    .bulk_update(&index, vec![share("/p", &format!("p{n}"))])
                    .await
                    .expect("bulk");
                match result.into_iter().next().expect("one item") {
                    Ok(_) => return raced,
                    Err(e) if e.is_conflict() => raced += 1,
                    Err(e) => panic!("p{n}: {e:?}"),
                }
            }
        });
    }
    let mut raced = 0;
    while let Some(r) = tasks.join_next().await {
        raced += r.expect("task");
    }
    let doc = store.get(&index, "/p").await.expect("get").expect("doc");
    assert_eq!(doc.source["lock_count"], 16, "{}", doc.source);
    assert_eq!(doc.source["holders"].as_object().map(|h| h.len()), Some(16));
    let stats = proxy.stats();
    assert!(
        stats.races > 0,
        "16 updates of one document at once must race: {stats:?}"
    );
    println!("{raced} updates answered 409 and sent again; proxy: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_sent_at_once_through_one_handle_go_together_and_never_race() {
    let proxy = start_es_proxy(EsProxyOptions {
        race_window: Duration::from_millis(5),
        ..EsProxyOptions::default()
    });
    let store = elastic_store(proxy.url());
    let index = with_scripts(&store).await;
    proxy.take_requests();
    let shares = (0..16).map(|n| {
        let (store, index) = (store.clone(), index.clone());
        async move {
            let result = store
                .bulk_update(&index, vec![share("/p", &format!("p{n}"))])
                .await
                .expect("bulk");
            assert!(
                matches!(result.as_slice(), [Ok(_)]),
                "p{n}: one share, granted: {result:?}"
            );
        }
    });
    futures::future::join_all(shares).await;
    let doc = store.get(&index, "/p").await.expect("get").expect("doc");
    assert_eq!(doc.source["lock_count"], 16, "{}", doc.source);
    let stats = proxy.stats();
    assert_eq!(stats.races, 0, "one request's items do not race: {stats:?}");
    let bulks = proxy
        .take_requests()
        .iter()
        .filter(|r| r.contains("_bulk"))
        .count();
    assert!(
        (1..16).contains(&bulks),
        "16 callers at once through one handle: {bulks} bulk requests"
    );
}

#[tokio::test]
async fn a_refusal_is_not_a_race() {
    let proxy = start_es_proxy(EsProxyOptions::default());
    let store = elastic_store(proxy.url());
    let index = with_scripts(&store).await;
    store
        .create(&index, "/x", json!({"lock_type": "exclusive"}))
        .await
        .expect("a book client's exclusive lock");
    let result = store
        .bulk_update(&index, vec![share("/x", "p1")])
        .await
        .expect("bulk");
    match &result[0] {
        Err(e @ StoreError::Refused { reason, .. }) => {
            assert!(!e.is_conflict());
            assert!(reason.contains("refused by an exclusive lock"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A release of what is not ours does nothing; a missing document is not found.
    let release = ScriptedUpdate {
        id: "/x".into(),
        script: lock_scripts::RELEASE.id.into(),
        params: json!({"process_id": "p1", "now": 1}),
        upsert: None,
    };
    let missing = ScriptedUpdate {
        id: "/nothing".into(),
        ..release.clone()
    };
    let results = store
        .bulk_update(&index, vec![release, missing])
        .await
        .expect("bulk");
    assert_eq!(
        results[0].as_ref().map(|o| o.result),
        Ok(UpdateResult::Noop)
    );
    assert!(
        matches!(results[1], Err(StoreError::NotFound { .. })),
        "{:?}",
        results[1]
    );
}

/// Passing through, the proxy is only a counter: the server behind answers (osmem refuses the
/// lock scripts the proxy itself would store) and every request is logged.
#[tokio::test]
async fn passing_through_leaves_the_answers_to_the_server_and_counts_the_requests() {
    let script = &LOCK_SCRIPTS[0];
    let proxy = fs_testkit::EsProxy::start(
        fs_testkit::osmem_url(),
        EsProxyOptions {
            pass_through: true,
            ..EsProxyOptions::default()
        },
    );
    let store = elastic_store(proxy.url());
    assert!(!store
        .put_script(script.id, script.painless)
        .await
        .expect("answer"));
    assert_eq!(
        proxy.take_requests(),
        vec![format!("PUT /_scripts/{}", script.id)]
    );
    let behaving = start_es_proxy(EsProxyOptions::default());
    assert!(elastic_store(behaving.url())
        .put_script(script.id, script.painless)
        .await
        .expect("answer"));
}

#[tokio::test]
async fn unknown_scripts_are_refused_at_storing() {
    let proxy = start_es_proxy(EsProxyOptions::default());
    let store = elastic_store(proxy.url());
    assert!(!store
        .put_script("someone-elses", "ctx._source.n += 1")
        .await
        .expect("answer"));
}

#[tokio::test]
async fn search_sees_only_refreshed_writes_with_their_refreshed_versions() {
    let proxy = start_es_proxy(EsProxyOptions::default());
    let store = elastic_store(proxy.url());
    let index = fs_testkit::unique_name("nrt");
    store
        .create_index(&index, &fs_model::lock_index_body())
        .await
        .expect("index");
    let v1 = store
        .create(&index, "/a", json!({"path": "/a"}))
        .await
        .expect("create");
    let all = || async {
        store
            .search(&index, SearchRequest::single_page(Scope::All, 10))
            .await
            .expect("search")
            .docs
    };
    assert!(all().await.is_empty(), "not refreshed yet");
    assert_eq!(store.count(&index, &Scope::All).await.expect("count"), 0);
    store.refresh(&index).await.expect("refresh");
    let seen = all().await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].version, v1);
    store
        .index(&index, "/a", json!({"path": "/a", "n": 2}), Some(v1))
        .await
        .expect("update");
    let stale = all().await;
    assert_eq!(
        stale[0].version, v1,
        "search still shows the refreshed version"
    );
    assert!(stale[0].source.get("n").is_none());
    assert_eq!(
        store
            .get(&index, "/a")
            .await
            .expect("get")
            .expect("doc")
            .source["n"],
        2,
        "reads by id are realtime"
    );
    store.refresh(&index).await.expect("refresh");
    assert_eq!(all().await[0].source["n"], 2);
}

#[tokio::test]
async fn contexts_are_counted_capped_and_closed() {
    let proxy = start_es_proxy(EsProxyOptions {
        max_open_contexts: 2,
        ..EsProxyOptions::default()
    });
    let config = fs_store::ElasticConfig::new(proxy.url())
        .expect("url")
        .paging(fs_store::Paging::Scroll);
    let store: Arc<dyn DocStore> =
        Arc::new(fs_store::ElasticStore::connect(config).expect("client"));
    let index = fs_testkit::unique_name("ctx");
    store
        .create_index(&index, &fs_model::lock_index_body())
        .await
        .expect("index");
    for n in 0..5 {
        store
            .create(&index, &format!("/d{n}"), json!({"path": format!("/d{n}")}))
            .await
            .expect("doc");
    }
    store.refresh(&index).await.expect("refresh");
    // Two scans stopped after their first page keep their scrolls open...
    for _ in 0..2 {
        let page = store
            .search(&index, SearchRequest::first(Scope::All, 2))
            .await
            .expect("first page");
        assert!(page.next.is_some());
    }
    assert_eq!(proxy.open_contexts_on(&[&index]).len(), 2);
    // ...and the third is refused, as Elasticsearch refuses past its limit.
    let refused = store
        .search(&index, SearchRequest::first(Scope::All, 2))
        .await
        .expect_err("over the limit");
    assert!(
        refused.to_string().contains("too many scroll contexts"),
        "{refused}"
    );
    assert_eq!(proxy.stats().contexts_refused, 1);
    // A single page opens nothing.
    store
        .search(&index, SearchRequest::single_page(Scope::All, 10))
        .await
        .expect("single page");
    assert_eq!(proxy.open_contexts().len(), 2);
}

#[tokio::test]
async fn bulk_answers_are_filtered_as_asked_and_the_store_judges_the_items_from_what_is_left() {
    let proxy = start_es_proxy(EsProxyOptions::default());
    let index = fs_testkit::unique_name("filtered");
    let body = "{\"create\":{\"_id\":\"a\"}}\n{\"x\":1}\n{\"create\":{\"_id\":\"a\"}}\n{\"x\":2}\n";
    let url = format!(
        "{}/{index}/_bulk?refresh=true&filter_path=errors,items.*.status,items.*._seq_no",
        proxy.url()
    );
    let answer: serde_json::Value = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .expect("answer")
        .json()
        .await
        .expect("json");
    // As Elasticsearch answers it: no `took`, and of each item only what was named.
    assert_eq!(
        answer,
        json!({"errors": true, "items": [
            {"create": {"_seq_no": 0, "status": 201}},
            {"create": {"status": 409}}
        ]})
    );
    // Written all the same, and noted for search.
    let store = elastic_store(proxy.url());
    assert_eq!(store.count(&index, &Scope::All).await.expect("count"), 1);
    // The store asks for filtered answers, and still tells a write from a conflict.
    let ops = vec![
        fs_store::BulkOp::Create {
            id: "b".into(),
            source: json!({"x": 3}),
        },
        fs_store::BulkOp::Create {
            id: "a".into(),
            source: json!({"x": 4}),
        },
    ];
    let results = store.bulk(&index, ops).await.expect("bulk");
    let version = results[0].as_ref().expect("b written");
    assert_eq!(version.primary_term, 1);
    assert!(
        results[1].as_ref().is_err_and(StoreError::is_conflict),
        "{:?}",
        results[1]
    );
    let requests = proxy.take_requests();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("/_bulk?") && r.contains("filter_path=")),
        "{requests:?}"
    );
    // An error is answered whole, as Elasticsearch answers it.
    let refused = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/x-ndjson")
        .body("garbage\n")
        .send()
        .await
        .expect("answer");
    assert_eq!(refused.status(), 400);
    let refused: serde_json::Value = refused.json().await.expect("json");
    assert!(refused["error"]["reason"].is_string(), "{refused}");
}
