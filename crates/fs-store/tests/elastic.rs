//! The store conformance suite over real HTTP against osmem-server behind the
//! Elasticsearch-behaviour proxy (near-real-time search, capped search contexts), in each paging
//! mode, and what the HTTP store does when the server is away.

use std::sync::Arc;
use std::time::Duration;

use fs_store::{DocStore, ElasticConfig, ElasticStore, Paging, SharedStore};

/// A store behind a proxy of the case's own, in `paging` mode, and the check run after the
/// case: it left no scroll or point in time open.
fn checked(paging: Paging) -> (SharedStore, impl FnOnce()) {
    let proxy = fs_testkit::start_es_proxy(fs_testkit::EsProxyOptions::default());
    let config = ElasticConfig::new(proxy.url()).expect("url").paging(paging);
    let store: SharedStore = Arc::new(ElasticStore::connect(config).expect("client"));
    let check = move || {
        let open = proxy.open_contexts();
        assert!(open.is_empty(), "search contexts left open: {open:?}");
    };
    (store, check)
}

mod osmem {
    use super::*;

    async fn store() -> (SharedStore, impl FnOnce()) {
        checked(Paging::Auto)
    }

    fs_store::conformance_suite!(store, near_real_time, checked);
}

mod osmem_scroll {
    use super::*;

    async fn store() -> (SharedStore, impl FnOnce()) {
        checked(Paging::Scroll)
    }

    fs_store::conformance_suite!(store, near_real_time, checked);
}

mod osmem_pit_by_id {
    use super::*;

    async fn store() -> (SharedStore, impl FnOnce()) {
        checked(Paging::PitId)
    }

    fs_store::conformance_suite!(store, near_real_time, checked);
}

#[tokio::test]
async fn the_server_is_recognised() {
    let description = fs_testkit::osmem_store()
        .server_description()
        .await
        .expect("info");
    assert!(description.starts_with("OpenSearch 3."), "{description}");
}

#[tokio::test]
async fn an_absent_server_is_a_transient_error_naming_the_call() {
    // Port 9 on loopback: nothing listens there, so connections are refused.
    let config = ElasticConfig::new("http://127.0.0.1:9")
        .expect("url")
        .retry_deadline(Duration::from_millis(300));
    let store = ElasticStore::connect(config).expect("client");
    let started = std::time::Instant::now();
    let err = store.get("fs", "x").await.expect_err("nobody listens");
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("getting `fs/x`"), "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "refused connections are retried"
    );
}

/// With a first-contact deadline (what the CLI sets), a server that has refused every
/// connection from the first is named as not there once it has passed, not retried to the
/// retry deadline; a server that has answered once and then refuses is retried as before.
#[tokio::test]
async fn a_server_never_reached_is_named_at_the_first_contact_deadline() {
    let config = ElasticConfig::new("http://127.0.0.1:9")
        .expect("url")
        .first_contact(Duration::from_millis(200));
    let store = ElasticStore::connect(config).expect("client");
    let started = std::time::Instant::now();
    let err = store.get("fs", "x").await.expect_err("nobody listens");
    assert!(!err.is_retryable(), "{err:?}");
    assert!(
        err.to_string()
            .contains("cannot connect to http://127.0.0.1:9: connection refused"),
        "{err}"
    );
    // The retry deadline is 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    let mut proxy = fs_testkit::start_es_proxy(fs_testkit::EsProxyOptions::default());
    let config = ElasticConfig::new(proxy.url())
        .expect("url")
        .first_contact(Duration::from_millis(200))
        .retry_deadline(Duration::from_millis(600));
    let store = ElasticStore::connect(config).expect("client");
    store
        .refresh(&fs_testkit::unique_name("answered"))
        .await
        .expect_err("no such index, but an answer");
    proxy.kill();
    let err = store.get("fs", "x").await.expect_err("the proxy is gone");
    assert!(err.is_retryable(), "{err:?}");
}

#[tokio::test]
async fn osmem_refuses_stored_scripts_and_is_asked_once() {
    use fs_store::ScriptedUpdates;
    let store = fs_testkit::osmem_store();
    assert!(!store
        .put_script("fsrename-test", "ctx.op = 'noop'")
        .await
        .expect("answer"));
    assert!(!store
        .put_script("fsrename-other", "ctx.op = 'noop'")
        .await
        .expect("remembered"));
}

#[tokio::test]
async fn replicas_setting_is_applied() {
    let config = ElasticConfig::new(fs_testkit::osmem_url())
        .expect("url")
        .replicas(0);
    let store = ElasticStore::connect(config).expect("client");
    let index = fs_testkit::unique_name("replicas");
    assert!(store
        .create_index(&index, &fs_model::lock_index_body())
        .await
        .expect("create"));
    assert!(!store
        .create_index(&index, &fs_model::lock_index_body())
        .await
        .expect("again"));
}

#[path = "elastic/contexts.rs"]
mod contexts;
