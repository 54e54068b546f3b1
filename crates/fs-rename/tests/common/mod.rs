//! Helpers shared by the rename tests: a store, a tree builder, a flaky store wrapper.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use fs_model::{DocKind, FsDoc, FsPath};
use fs_rename::{Entry, FsTree, RenameHooks};
use fs_store::{
    BulkItemResult, BulkOp, Capabilities, DocStore, Scan, Scope, SharedStore, StoreError,
    StoreLayer,
};
use fs_testkit::{Backend, FaultyStore};

pub mod watching;

/// A store and a tree index (with its lock index) of a test's own.
#[derive(Clone)]
pub struct Env {
    pub store: SharedStore,
    pub index: String,
    pub backend: Backend,
    /// Search contexts that processes the test killed mid-scan may leave open: a dead
    /// process closes nothing, and the server frees its contexts when their keep-alive ends.
    pub dead_scans: Arc<std::sync::atomic::AtomicUsize>,
    /// A proxy of the test's own whose network faults [`Env::storm`] turns on.
    pub faulty: Option<fs_testkit::Storm>,
}

impl Env {
    /// A fresh tree index on osmem through a proxy of its own, calm until [`Env::storm`]
    /// turns on every network fault at `rate` (seeded, the seed printed).
    pub fn with_network_faults(rate: f64) -> Env {
        let storm = fs_testkit::Storm::start(rate);
        Env {
            store: Arc::new(storm.store()),
            index: fs_testkit::unique_name("fs"),
            backend: Backend::Osmem,
            dead_scans: Arc::default(),
            faulty: Some(storm),
        }
    }

    /// Turns the network faults on, once the test's set-up is done (no-op without them).
    pub fn storm(&self) {
        self.faulty.iter().for_each(fs_testkit::Storm::storm);
    }

    /// Turns them off again between rounds, quietly (no-op without them).
    pub fn lull(&self) {
        self.faulty.iter().for_each(fs_testkit::Storm::lull);
    }

    /// Turns them off again for the checks, and prints what struck (no-op without them).
    pub fn calm(&self) {
        self.faulty.iter().for_each(fs_testkit::Storm::calm);
    }
    /// A fresh tree index name on `backend` (the embedded store is near-real-time, so a
    /// forgotten refresh fails).
    pub fn new(backend: Backend) -> Env {
        Env {
            store: backend.store(),
            index: fs_testkit::unique_name("fs"),
            backend,
            dead_scans: Arc::default(),
            faulty: None,
        }
    }

    /// The same environment seen through another store (a wrapper of this one).
    pub fn through(&self, store: SharedStore) -> Env {
        Env {
            store,
            index: self.index.clone(),
            backend: self.backend,
            dead_scans: Arc::clone(&self.dead_scans),
            faulty: self.faulty.clone(),
        }
    }

    /// The test's tree, with its backend's layout (on a real Elasticsearch, the shards of
    /// `FSRENAME_TEST_ES_SHARDS`) for the indices it creates.
    pub fn tree(&self) -> FsTree {
        FsTree::new(Arc::clone(&self.store), self.index.clone()).with_layout(self.backend.layout())
    }

    pub fn lock_index(&self) -> String {
        format!("{}-lock", self.index)
    }

    /// Says that `n` processes of this test are killed in the middle of a scan: their search
    /// contexts stay open until their keep-alive runs out, as on a real server.
    pub fn scans_die_open(&self, n: usize) {
        self.dead_scans
            .fetch_add(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Checks what every test must leave behind: on the proxied HTTP backend, no search
    /// context open on this test's indices but those of the processes it killed mid-scan.
    /// Not checked through a faulty proxy: a close cut on its way leaves its context to the
    /// keep-alive, as a real server does.
    pub fn finish(&self) {
        if self.backend == Backend::Osmem && self.faulty.is_none() {
            let (locks, journal) = (self.lock_index(), fs_model::journal_index_name(&self.index));
            let open = fs_testkit::es_proxy().open_contexts_on(&[&self.index, &locks, &journal]);
            let dead = self.dead_scans.load(std::sync::atomic::Ordering::SeqCst);
            assert!(
                open.len() <= dead,
                "search contexts left open ({dead} allowed for processes killed mid-scan): {open:?}"
            );
        }
    }
}

/// Expands each listed `async fn(Env)` into one test per backend.
#[macro_export]
macro_rules! on_every_backend {
    ($($case:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::new(fs_testkit::Backend::Embedded);
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
        mod osmem {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::new(fs_testkit::Backend::Osmem);
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
    };
}

/// Expands each listed `async fn(Env)` into a test on osmem through a proxy with every
/// network fault at 2 % (between the case's [`Env::storm`] and [`Env::calm`]).
#[macro_export]
macro_rules! with_network_faults {
    ($($case:ident),+ $(,)?) => {
        mod network_faults {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let env = super::common::Env::with_network_faults(0.02);
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        }
    };
}

pub fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("test path")
}

/// Builds a tree from `(path, is_dir)` pairs, parents first; returns it refreshed.
pub async fn tree_with(env: &Env, entries: &[(&str, bool)]) -> FsTree {
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    let docs = entries
        .iter()
        .map(|(path, dir)| {
            FsDoc::new(
                p(path),
                if *dir { DocKind::Dir } else { DocKind::File },
                0,
                0,
            )
        })
        .collect();
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");
    tree
}

/// Builds `/src` with `per_dir` files in each of `/src/a` and `/src/b`, and `/dst-parent`:
/// the tree the recovery and release tests rename.
pub async fn src_tree(env: &Env, per_dir: usize) {
    let mut entries: Vec<(String, bool)> = vec![
        ("/src".into(), true),
        ("/src/a".into(), true),
        ("/src/b".into(), true),
        ("/dst-parent".into(), true),
    ];
    for i in 0..per_dir {
        entries.push((format!("/src/a/f{i:02}"), false));
        entries.push((format!("/src/b/g{i:02}"), false));
    }
    let refs: Vec<(&str, bool)> = entries.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(env, &refs).await;
}

/// Builds the directory `dir` holding `files` files, `f00`, `f01`, ...
pub async fn dir_of_files(env: &Env, dir: &str, files: usize) {
    let mut entries = vec![(dir.to_owned(), true)];
    entries.extend((0..files).map(|f| (format!("{dir}/f{f:02}"), false)));
    let refs: Vec<(&str, bool)> = entries.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(env, &refs).await;
}

/// Every document by id, its source as stored.
pub async fn docs_by_id(env: &Env) -> BTreeMap<String, serde_json::Value> {
    env.store.refresh(&env.index).await.expect("refresh");
    Scan::new(Arc::clone(&env.store), &env.index, Scope::All, 1_000)
        .read_all()
        .await
        .expect("scan")
        .into_iter()
        .map(|d| (d.id, d.source))
        .collect()
}

/// Returns every document's path by id.
pub async fn paths_by_id(env: &Env) -> BTreeMap<String, String> {
    let (store, index) = (&env.store, env.index.as_str());
    store.refresh(index).await.expect("refresh");
    Scan::new(Arc::clone(store), index, Scope::All, 1_000)
        .read_all()
        .await
        .expect("search")
        .into_iter()
        .map(|d| {
            let path = d.source["path"].as_str().expect("path").to_owned();
            (d.id, path)
        })
        .collect()
}

/// Returns how many lock documents exist.
pub async fn locks_left(env: &Env) -> u64 {
    let locks = env.lock_index();
    env.store.refresh(&locks).await.expect("refresh locks");
    env.store
        .count(&locks, &Scope::All)
        .await
        .expect("count locks")
}

/// How a [`Flaky`] store fails bulk items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The item is not written, and reported as a transient failure.
    Dropped,
    /// The item is written, but reported as a transient failure (a timeout after the write).
    LostAnswer,
}

/// Wraps a store and fails the first `n` items of bulk requests to the tree index.
#[derive(Debug)]
pub struct Flaky {
    pub inner: SharedStore,
    /// The tree index whose bulk requests fail.
    pub index: String,
    pub fault: Fault,
    pub remaining: AtomicUsize,
    /// How many refreshes of the tree index fail (transiently) from the start.
    pub failing_refreshes: AtomicUsize,
}

impl Flaky {
    /// Sends `ops` with `send`, the first items failing as the fault says.
    async fn faulted<F, Fut>(
        &self,
        ops: Vec<BulkOp>,
        send: F,
    ) -> fs_store::Result<Vec<BulkItemResult>>
    where
        F: Fn(Vec<BulkOp>) -> Fut,
        Fut: std::future::Future<Output = fs_store::Result<Vec<BulkItemResult>>>,
    {
        let mut faulty = 0;
        while faulty < ops.len() && self.remaining.load(Ordering::SeqCst) > 0 {
            self.remaining.fetch_sub(1, Ordering::SeqCst);
            faulty += 1;
        }
        let (written, mut results) = match self.fault {
            Fault::Dropped => {
                let rest = ops[faulty..].to_vec();
                let mut results: Vec<BulkItemResult> =
                    (0..faulty).map(|_| Err(transient())).collect();
                results.extend(send(rest).await?);
                (true, results)
            }
            Fault::LostAnswer => (false, send(ops).await?),
        };
        if !written {
            for r in results.iter_mut().take(faulty) {
                *r = Err(transient());
            }
        }
        Ok(results)
    }
}

fn transient() -> StoreError {
    StoreError::Transient {
        context: "test".into(),
        message: "injected fault".into(),
    }
}

#[async_trait]
impl StoreLayer for Flaky {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }
    fn on_describe(&self) -> String {
        "flaky".into()
    }
    /// Offers none of the ways of writing items that would go around its `on_bulk`: a
    /// refreshed bulk is then a bulk and a refresh, through it.
    fn on_capabilities<'a>(&'a self, offered: Capabilities<'a>) -> Capabilities<'a> {
        Capabilities {
            chained_bulk: None,
            refreshed_bulk: None,
            ..offered
        }
    }
    async fn on_bulk(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
    ) -> fs_store::Result<Vec<BulkItemResult>> {
        if index != self.index {
            return self.inner.bulk(index, ops).await;
        }
        self.faulted(ops, |ops| self.inner.bulk(index, ops)).await
    }
    /// The writes through the tree index's gates (a copy's) fail as its own bulk requests.
    async fn on_bulk_through_gate(
        &self,
        gate: &str,
        ops: Vec<BulkOp>,
    ) -> fs_store::Result<Vec<BulkItemResult>> {
        self.faulted(ops, |ops| async move {
            match self.inner.write_gates() {
                Some(gates) => gates.bulk_through_gate(gate, ops).await,
                None => Err(transient()),
            }
        })
        .await
    }
    async fn on_refresh(&self, index: &str) -> fs_store::Result<()> {
        let failing = &self.failing_refreshes;
        if index == self.index
            && failing
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(transient());
        }
        self.inner.refresh(index).await
    }
}

/// Kills the job's store when it is about to write page `page` (1-based): the job stops there
/// for good, as if its process died, leaving its locks and journal entry.
pub struct KillAtPage {
    page: usize,
    seen: AtomicUsize,
    store: Arc<FaultyStore>,
}

impl KillAtPage {
    pub fn new(page: usize, store: Arc<FaultyStore>) -> KillAtPage {
        KillAtPage {
            page,
            seen: AtomicUsize::new(0),
            store,
        }
    }
}

#[async_trait]
impl RenameHooks for KillAtPage {
    async fn before_write(&self, _page: &[Entry]) {
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.page {
            self.store.kill();
        }
    }
}

/// Waits until `store` has been killed (by a [`KillAtPage`]); panics after 5 s.
pub async fn wait_until_dead(store: &FaultyStore) {
    for _ in 0..500 {
        if store.is_dead() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the job never reached the point where it dies");
}

/// The number in the variable `name` (a size or a count a gated test reads), or `default` if
/// it is not set or is not a number.
pub fn number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seed of a randomised test: `FSRENAME_TEST_SEED` if set (to replay a run), else a
/// fresh one; printed either way.
pub fn seed() -> u64 {
    let seed = std::env::var("FSRENAME_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("seed {seed} (replay with FSRENAME_TEST_SEED={seed})");
    seed
}

/// A proxy that runs tasks by query (`_update_by_query` with the rename script, a subtree's
/// `_delete_by_query`), pausing `pause` before each part (of 500) a task writes.
pub fn by_query_proxy(pause: std::time::Duration) -> fs_testkit::EsProxy {
    fs_testkit::start_es_proxy(fs_testkit::EsProxyOptions {
        update_by_query: true,
        update_by_query_pause: pause,
        ..fs_testkit::EsProxyOptions::default()
    })
}

/// A fresh tree index (named from `prefix`) behind the Elasticsearch-like server at `url`.
pub fn env_at(url: &str, prefix: &str) -> Env {
    Env {
        store: Arc::new(fs_testkit::elastic_store(url)),
        index: fs_testkit::unique_name(prefix),
        backend: Backend::Osmem,
        dead_scans: Arc::default(),
        faulty: None,
    }
}

/// A fresh tree index (named from `prefix`) on the real Elasticsearch at
/// `FSRENAME_TEST_ES_URL`.
pub fn real_env(prefix: &str) -> Env {
    let url = std::env::var("FSRENAME_TEST_ES_URL").expect("FSRENAME_TEST_ES_URL");
    Env {
        store: Arc::new(fs_testkit::elastic_store(&url)),
        index: fs_testkit::unique_name(prefix),
        backend: Backend::RealElastic,
        dead_scans: Arc::default(),
        faulty: None,
    }
}
