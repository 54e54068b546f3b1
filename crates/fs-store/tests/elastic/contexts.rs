//! Search contexts (scrolls and points in time) are closed on every way out of a paged search,
//! in each paging mode: counted by the handle ([`ElasticStore::open_cursors`]) and by the
//! server (the Elasticsearch-behaviour proxy's count, `GET _nodes/stats`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use elasticsearch::http::headers::HeaderMap;
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::Method;
use fs_model::FsPath;
use fs_store::{
    BulkOp, DocStore, ElasticConfig, ElasticStore, HeldCursors, Page, Paging, Result, Scan, Scope,
    SearchRequest, SharedStore, StoreError, StoreLayer,
};
use fs_testkit::EsProxyOptions;
use serde_json::{json, Value};

const PAGE: usize = 10;

fn client(url: &str, paging: Paging) -> ElasticStore {
    let config = ElasticConfig::new(url).expect("url").paging(paging);
    ElasticStore::connect(config).expect("client")
}

fn dir() -> FsPath {
    FsPath::parse("/d").expect("path")
}

/// Creates an index of `docs` documents under `/d`, refreshed; returns its name.
async fn index_of(store: &ElasticStore, docs: usize) -> String {
    let index = fs_testkit::unique_name("contexts");
    let body = json!({ "mappings": { "properties": { "path": { "type": "keyword" } } } });
    store.create_index(&index, &body).await.expect("index");
    let ops = (0..docs)
        .map(|i| BulkOp::Create {
            id: format!("f{i:03}"),
            source: json!({ "path": format!("/d/f{i:03}") }),
        })
        .collect();
    for written in store.bulk(&index, ops).await.expect("bulk") {
        written.expect("written");
    }
    store.refresh(&index).await.expect("refresh");
    index
}

/// Asks the server, as one would ask Elasticsearch, how many scrolls and points in time are
/// open: `GET /_nodes/stats/indices/search`, summed over nodes.
async fn server_open_contexts(url: &str) -> (u64, u64) {
    let fresh = client(url, Paging::Auto);
    let response = fresh
        .client()
        .transport()
        .send(
            Method::Get,
            "/_nodes/stats/indices/search",
            HeaderMap::new(),
            None::<&()>,
            None::<JsonBody<Value>>,
            None,
        )
        .await
        .expect("node stats");
    let stats: Value = response.json().await.expect("JSON");
    let nodes = stats["nodes"].as_object().expect("nodes");
    nodes.values().fold((0, 0), |(scrolls, pits), node| {
        let search = &node["indices"]["search"];
        (
            scrolls + search["scroll_current"].as_u64().expect("scroll_current"),
            pits + search["point_in_time_current"].as_u64().unwrap_or(0),
        )
    })
}

/// Runs `check` in each paging mode against the shared proxy.
macro_rules! in_each_paging {
    ($($name:ident => $check:ident;)*) => {
        $(
            mod $name {
                use super::*;

                #[tokio::test]
                async fn scroll() {
                    $check(Paging::Scroll).await;
                }

                #[tokio::test]
                async fn point_in_time() {
                    $check(Paging::Auto).await;
                }

                #[tokio::test]
                async fn point_in_time_by_id() {
                    $check(Paging::PitId).await;
                }
            }
        )*
    };
}

in_each_paging! {
    a_scan_to_the_end_closes_its_context => scan_to_the_end;
    a_scan_to_an_empty_last_page_closes_its_context => scan_to_an_empty_last_page;
    a_scan_stopped_after_one_page_and_closed_leaves_nothing_open => scan_stopped_early;
    a_failed_continuation_closes_its_context => failed_continuation;
    a_scan_whose_store_call_fails_leaves_nothing_open => failing_store_call;
    a_scan_dropped_open_is_closed_in_the_background => dropped_open;
}

async fn scan_to_the_end(paging: Paging) {
    let store = client(fs_testkit::es_proxy().url(), paging);
    let index = index_of(&store, 25).await;
    let shared: SharedStore = Arc::new(store.clone());
    let docs = Scan::new(shared, &index, Scope::Subtree(dir()), PAGE)
        .read_all()
        .await
        .expect("scan");
    assert_eq!(docs.len(), 25);
    assert_eq!(store.open_cursors(), 0);
    fs_testkit::assert_no_open_contexts(&[&index]);
}

async fn scan_to_an_empty_last_page(paging: Paging) {
    // 20 documents in pages of 10: the second page is full, the third empty.
    let store = client(fs_testkit::es_proxy().url(), paging);
    let index = index_of(&store, 20).await;
    let mut request = SearchRequest::first(Scope::Subtree(dir()), PAGE);
    let mut pages = 0;
    loop {
        let page = store.search(&index, request.clone()).await.expect("page");
        pages += 1;
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(store.open_cursors(), 0, "the empty last page closes too");
    fs_testkit::assert_no_open_contexts(&[&index]);
}

async fn scan_stopped_early(paging: Paging) {
    let store = client(fs_testkit::es_proxy().url(), paging);
    let index = index_of(&store, 25).await;
    let shared: SharedStore = Arc::new(store.clone());
    let mut scan = Scan::new(shared, &index, Scope::Subtree(dir()), PAGE);
    let first = scan.next_page().await.expect("page").expect("documents");
    assert_eq!(first.len(), PAGE);
    assert_eq!(store.open_cursors(), 1, "open between two pages");
    assert_eq!(fs_testkit::es_proxy().open_contexts_on(&[&index]).len(), 1);
    scan.close().await;
    scan.close().await;
    assert_eq!(store.open_cursors(), 0);
    fs_testkit::assert_no_open_contexts(&[&index]);
}

async fn failed_continuation(paging: Paging) {
    // The context disappears between two pages (as one whose keep-alive ran out): the next
    // page fails, and the store lets go of it.
    let store = client(fs_testkit::es_proxy().url(), paging);
    let index = index_of(&store, 25).await;
    let first = store
        .search(&index, SearchRequest::first(Scope::Subtree(dir()), PAGE))
        .await
        .expect("first page");
    let cursor = first.next.expect("more pages");
    assert_eq!(store.open_cursors(), 1);
    let other = client(fs_testkit::es_proxy().url(), paging);
    other
        .close_cursor(&index, cursor.clone())
        .await
        .expect("closed by another handle");
    fs_testkit::assert_no_open_contexts(&[&index]);
    let mut next = SearchRequest::first(Scope::Subtree(dir()), PAGE);
    next.after = Some(cursor.clone());
    let failed = store.search(&index, next).await.expect_err("context gone");
    assert!(matches!(failed, StoreError::NotFound { .. }), "{failed:?}");
    assert_eq!(store.open_cursors(), 0, "a failed page closes its context");
    store
        .close_cursor(&index, cursor)
        .await
        .expect("closing again is harmless");
    assert_eq!(store.open_cursors(), 0);
}

async fn failing_store_call(paging: Paging) {
    let store = client(fs_testkit::es_proxy().url(), paging);
    let index = index_of(&store, 25).await;
    let failing: SharedStore = Arc::new(FailingSearch {
        inner: store.clone(),
        searches: AtomicUsize::new(0),
        fail_at: 1,
    });
    let mut scan = Scan::new(failing, &index, Scope::Subtree(dir()), PAGE);
    let scanned = async {
        let mut n = 0;
        while let Some(docs) = scan.next_page().await? {
            n += docs.len();
        }
        Ok::<_, StoreError>(n)
    }
    .await;
    scan.close().await;
    // The second page fails; the scan starts again from the last path it returned, and
    // reads the rest once.
    assert_eq!(scanned.expect("the scan starts again"), 25);
    assert_eq!(store.open_cursors(), 0);
    fs_testkit::assert_no_open_contexts(&[&index]);
}

async fn dropped_open(paging: Paging) {
    // A cancelled job drops its scan between two pages.
    let store = client(fs_testkit::es_proxy().url(), paging);
    let index = index_of(&store, 25).await;
    let shared: SharedStore = Arc::new(store.clone());
    let mut scan = Scan::new(shared, &index, Scope::Subtree(dir()), PAGE);
    scan.next_page().await.expect("page");
    drop(scan);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store.open_cursors() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dropped scan was never closed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fs_testkit::assert_no_open_contexts(&[&index]);
}

#[tokio::test]
async fn a_single_page_search_opens_nothing() {
    let proxy = fs_testkit::start_es_proxy(EsProxyOptions::default());
    for paging in [Paging::Scroll, Paging::Auto, Paging::PitId] {
        let store = client(proxy.url(), paging);
        let index = index_of(&store, 5).await;
        let shared: SharedStore = Arc::new(store.clone());
        let mut scan = Scan::single_page(Arc::clone(&shared), &index, Scope::Subtree(dir()), 10);
        assert_eq!(
            scan.next_page().await.expect("page").map(|d| d.len()),
            Some(5)
        );
        assert!(!scan.is_open());
        let exact = Scope::Exact(FsPath::parse("/d/f003").expect("path"));
        let found = store
            .search(&index, SearchRequest::first(exact, 1))
            .await
            .expect("exact");
        assert_eq!(found.docs.len(), 1);
        assert!(found.next.is_none());
        assert_eq!(store.open_cursors(), 0);
    }
    assert_eq!(
        proxy.stats().contexts_opened,
        0,
        "one-page searches open no scroll and no point in time"
    );
}

/// A paged search whose answer fits in one page is one plain search: no point in time opened
/// and closed around it (two round trips, and on osmem a copy of the whole index at the next
/// write while it is open). One document more than a page, and the search is paged over a
/// point in time from the start, every document read once.
#[tokio::test]
async fn a_paged_search_that_fits_in_one_page_opens_nothing() {
    for paging in [Paging::Auto, Paging::PitId] {
        for (docs, contexts) in [(0, 0), (5, 0), (PAGE, 0), (PAGE + 1, 1), (25, 1)] {
            let proxy = fs_testkit::start_es_proxy(EsProxyOptions::default());
            let store = client(proxy.url(), paging);
            let index = index_of(&store, docs).await;
            let shared: SharedStore = Arc::new(store.clone());
            let found = Scan::new(shared, &index, Scope::Subtree(dir()), PAGE)
                .read_all()
                .await
                .expect("scan");
            let mut paths: Vec<String> = found
                .iter()
                .map(|d| d.source["path"].as_str().unwrap_or("").to_owned())
                .collect();
            let read = paths.len();
            paths.dedup();
            assert_eq!(
                (read, paths.len()),
                (docs, docs),
                "{docs} documents ({paging:?})"
            );
            assert!(paths.is_sorted(), "in path order ({paging:?})");
            assert_eq!(
                proxy.stats().contexts_opened,
                contexts,
                "{docs} documents in pages of {PAGE} ({paging:?})"
            );
            assert_eq!(store.open_cursors(), 0);
        }
    }
}

/// Issue 14: `fsrename` on Elasticsearch 7.2.1 (scroll paging) left a scroll open per paged
/// search: its close ran in a task spawned on a runtime that the short-lived CLI process shut
/// down first. After a few hundred commands the server refused every search (HTTP 500) until
/// the scrolls expired.
///
/// Each round here is such a command: a runtime and a store handle of its own, paged searches
/// (to the end, stopped early, by hand), then the runtime goes away at once. The proxy allows
/// fewer contexts than there are rounds, so a leak fails a search; at the end the server is
/// asked, as Elasticsearch would be, how many scrolls are open.
#[test]
fn issue_14_short_lived_clients_leave_no_scroll_open() {
    let proxy = fs_testkit::start_es_proxy(EsProxyOptions {
        max_open_contexts: 10,
        ..EsProxyOptions::default()
    });
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    };
    let index = runtime().block_on(index_of(&client(proxy.url(), Paging::Scroll), 25));
    for paging in [Paging::Scroll, Paging::Auto] {
        for round in 0..15 {
            let store = client(proxy.url(), paging);
            let shared: SharedStore = Arc::new(store.clone());
            runtime().block_on(async {
                let scope = Scope::Subtree(dir());
                match round % 3 {
                    0 => {
                        let all = Scan::new(shared, &index, scope, PAGE).read_all().await;
                        assert_eq!(all.expect("scan").len(), 25);
                    }
                    1 => {
                        let mut scan = Scan::new(shared, &index, scope, PAGE);
                        scan.next_page().await.expect("page");
                        scan.close().await;
                    }
                    _ => {
                        // By hand, as callers paged before there was a scan.
                        let mut request = SearchRequest::first(scope, PAGE);
                        while let Some(cursor) = store
                            .search(&index, request.clone())
                            .await
                            .expect("page")
                            .next
                        {
                            request.after = Some(cursor);
                        }
                    }
                }
                assert_eq!(store.open_cursors(), 0, "round {round} ({paging:?})");
            });
        }
        let (scrolls, pits) = runtime().block_on(server_open_contexts(proxy.url()));
        assert_eq!(
            (scrolls, pits),
            (0, 0),
            "scrolls and points in time left open ({paging:?})"
        );
    }
    assert_eq!(proxy.stats().contexts_refused, 0);
    assert!(proxy.stats().contexts_opened >= 20, "{:?}", proxy.stats());
}

/// The store of the handle it wraps, whose `fail_at`-th search (from 0) fails before it is
/// sent, as a fault injector's failure would: the store never sees it, so closing what that
/// search was paging with is up to its caller.
#[derive(Debug)]
struct FailingSearch {
    inner: ElasticStore,
    searches: AtomicUsize,
    fail_at: usize,
}

#[async_trait]
impl StoreLayer for FailingSearch {
    fn inner(&self) -> &dyn DocStore {
        &self.inner
    }
    fn on_describe(&self) -> String {
        format!("failing({})", self.inner.describe())
    }
    async fn on_search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        if self.searches.fetch_add(1, Ordering::SeqCst) == self.fail_at {
            return Err(StoreError::Transient {
                context: format!("searching `{index}`"),
                message: "injected failure before the request".into(),
            });
        }
        self.inner.search(index, request).await
    }
}
