//! Helpers shared by the lock tests: an environment per backend, clients, lock documents.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use fs_locks::{LockClient, LockClientBuilder, LockError, LockProtocol};
use fs_model::FsPath;
use fs_store::{Scope, SharedStore};
use fs_testkit::Backend;
use serde_json::Value;

/// A store, a lock index of a test's own, and the protocol its clients use.
#[derive(Clone)]
pub struct Env {
    pub store: SharedStore,
    pub locks: String,
    pub protocol: LockProtocol,
    pub backend: Backend,
    /// A proxy of the test's own whose network faults [`Env::storm`] turns on.
    pub faulty: Option<fs_testkit::Storm>,
}

impl Env {
    /// A fresh lock index on `backend` (the embedded store is near-real-time, so a forgotten
    /// refresh fails), with the protocol chosen automatically.
    pub async fn new(backend: Backend) -> Env {
        Env::with_protocol(backend, LockProtocol::Auto).await
    }

    /// A fresh lock index on `backend`, written with `protocol`.
    pub async fn with_protocol(backend: Backend, protocol: LockProtocol) -> Env {
        let env = Env {
            store: backend.store(),
            locks: fs_testkit::unique_name("fs-lock"),
            protocol,
            backend,
            faulty: None,
        };
        client(&env, "setup")
            .ensure_index()
            .await
            .expect("lock index");
        env
    }

    /// A fresh lock index on osmem through a proxy of its own, written with `protocol`, calm
    /// until [`Env::storm`] turns on every network fault at `rate` (seeded, the seed printed).
    pub async fn with_network_faults(protocol: LockProtocol, rate: f64) -> Env {
        let storm = fs_testkit::Storm::start(rate);
        let env = Env {
            store: Arc::new(storm.store()),
            locks: fs_testkit::unique_name("fs-lock"),
            protocol,
            backend: Backend::Osmem,
            faulty: Some(storm),
        };
        client(&env, "setup")
            .ensure_index()
            .await
            .expect("lock index");
        env
    }

    /// Turns the network faults on, once the test's set-up is done (no-op without them).
    pub fn storm(&self) {
        self.faulty.iter().for_each(fs_testkit::Storm::storm);
    }

    /// Turns them off again for the checks, and prints what struck (no-op without them).
    pub fn calm(&self) {
        self.faulty.iter().for_each(fs_testkit::Storm::calm);
    }
}

impl Env {
    /// Checks what every test must leave behind: on the proxied HTTP backend, no search
    /// context open on this test's lock index.
    /// Not checked through a faulty proxy: a close cut on its way leaves its context to the
    /// keep-alive, as a real server does.
    pub fn finish(&self) {
        if self.backend == Backend::Osmem && self.faulty.is_none() {
            fs_testkit::assert_no_open_contexts(&[&self.locks]);
        }
    }
}

/// Expands each listed `async fn(Env)` into one test per backend and protocol: the embedded
/// store with each protocol (compare-and-set, and its atomic updates: the lock scripts' twins
/// run inside one transaction), osmem behind the Elasticsearch-behaviour proxy with each
/// protocol (the proxy runs the lock scripts with Elasticsearch's races), and a real
/// Elasticsearch with the scripts, when asked for.
#[macro_export]
macro_rules! on_every_backend {
    ($($case:ident),+ $(,)?) => {
        mod embedded_cas {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::with_protocol(
                        fs_testkit::Backend::Embedded,
                        fs_locks::LockProtocol::Cas,
                    )
                    .await;
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
        mod embedded_atomic {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::with_protocol(
                        fs_testkit::Backend::Embedded,
                        fs_locks::LockProtocol::Scripted,
                    )
                    .await;
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
        mod osmem_cas {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::with_protocol(
                        fs_testkit::Backend::Osmem,
                        fs_locks::LockProtocol::Cas,
                    )
                    .await;
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
        mod osmem_scripted {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::with_protocol(
                        fs_testkit::Backend::Osmem,
                        fs_locks::LockProtocol::Scripted,
                    )
                    .await;
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
        mod real_elasticsearch_scripted {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs a real Elasticsearch: set FSRENAME_TEST_ES_URL"]
                async fn $case() {
                    let env = super::common::Env::with_protocol(
                        fs_testkit::Backend::RealElastic,
                        fs_locks::LockProtocol::Scripted,
                    )
                    .await;
                    super::$case(env).await
                }
            )+
        }
    };
}

/// Expands each listed `async fn(Env)` into a test on osmem with the scripted protocol (what
/// fsrename uses on Elasticsearch), through a proxy with every network fault at 2 % (between
/// the case's [`Env::storm`] and [`Env::calm`]). Compare-and-set under the same faults is not
/// here yet: one run in three reported an exclusive lock lost at its release (issue 17, stress
/// seed 10307596627125618203).
#[macro_export]
macro_rules! with_network_faults {
    ($($case:ident),+ $(,)?) => {
        mod network_faults_scripted {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::with_network_faults(
                        fs_locks::LockProtocol::Scripted,
                        0.02,
                    )
                    .await;
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
        mod network_faults_cas {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::with_network_faults(
                        fs_locks::LockProtocol::Cas,
                        0.02,
                    )
                    .await;
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
    };
}

/// A client builder with short waits, so refusals show up fast.
pub fn client_builder(env: &Env, holder: &str) -> LockClientBuilder {
    LockClient::builder(Arc::clone(&env.store), env.locks.clone())
        .protocol(env.protocol)
        .holder(holder)
        .wait(Duration::ZERO)
        .backoff(Duration::from_millis(1), Duration::from_millis(20))
}

pub fn client(env: &Env, holder: &str) -> LockClient {
    client_builder(env, holder).build()
}

pub fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("test path")
}

/// Returns the source of the lock document `id`, if any.
pub async fn lock_doc(env: &Env, id: &str) -> Option<Value> {
    env.store
        .get(&env.locks, id)
        .await
        .expect("get lock doc")
        .map(|d| d.source)
}

/// Writes a lock document by hand, as a foreign client would.
pub async fn put_lock(env: &Env, id: &str, source: Value) {
    env.store
        .create(&env.locks, id, source)
        .await
        .expect("hand-written lock document");
}

/// Returns every lock document (refreshing first).
pub async fn lock_docs(env: &Env) -> Vec<fs_store::StoredDoc> {
    env.store.refresh(&env.locks).await.expect("refresh");
    fs_store::Scan::new(Arc::clone(&env.store), &env.locks, Scope::All, 1_000)
        .read_all()
        .await
        .expect("scan the lock index")
}

/// Returns how many lock documents exist (refreshing first).
pub async fn lock_count(env: &Env) -> u64 {
    env.store.refresh(&env.locks).await.expect("refresh");
    env.store
        .count(&env.locks, &Scope::All)
        .await
        .expect("count")
}

/// Asserts that `result` is a timeout blocked on `path`, and returns the error text.
pub fn assert_blocked_on<T: std::fmt::Debug>(result: Result<T, LockError>, path: &str) -> String {
    match result {
        Err(LockError::Timeout { ref blocker, .. }) if blocker.path == path => {
            result.expect_err("checked").to_string()
        }
        other => panic!("expected a timeout blocked on `{path}`, got {other:?}"),
    }
}
