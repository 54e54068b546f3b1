//! The store conformance suite over real HTTP against osmem-server behind the
//! Elasticsearch-behaviour proxy (near-real-time search, capped search contexts), in each paging
//! mode, and what the HTTP store does when the server is away.

use std::sync::Arc;
use std::time::Duration;

use fs_store::{DocStore, ElasticConfig, ElasticStore, Paging, SharedStore};

fn with_paging(paging: Paging) -> SharedStore {
    let config = ElasticConfig::new(fs_testkit::es_proxy().url())
        .expect("url")
        .paging(paging);
    Arc::new(ElasticStore::connect(config).expect("client"))
}

mod osmem {
    use super::*;

    async fn store() -> SharedStore {
        fs_testkit::Backend::Osmem.store()
    }

    fs_store::conformance_suite!(store, near_real_time);
}

mod osmem_scroll {
    use super::*;

    async fn store() -> SharedStore {
        with_paging(Paging::Scroll)
    }

    fs_store::conformance_suite!(store, near_real_time);
}

mod osmem_pit_by_id {
    use super::*;

    async fn store() -> SharedStore {
        with_paging(Paging::PitId)
    }

    fs_store::conformance_suite!(store, near_real_time);
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
