//! Test support shared by the workspace's test binaries.
//!
//! - [`Backend`]: the stores every test runs on: the embedded store (in memory, in
//!   near-real-time mode, so a forgotten refresh fails) and osmem-server over HTTP behind the
//!   Elasticsearch-behaviour proxy.
//! - [`osmem_url`]: starts one osmem-server per test binary, on `127.0.0.1:0`; it exits with
//!   the test process.
//! - [`EsProxy`]: a loopback proxy in front of osmem that adds what osmem forgives and
//!   Elasticsearch does not: scripted updates that race (and the lock scripts run, so the
//!   scripted protocol is tested), counted and capped scroll contexts and points in time, and
//!   near-real-time search; and, when a test asks, network faults from a seed ([`NetFaults`]:
//!   refused connections, 429 and 503, bulk items rejected alone, connections cut before or
//!   after the server carried a request out) and a sudden death ([`EsProxy::kill`]).
//!   [`es_proxy`] is the one every HTTP test of a binary shares;
//!   [`assert_no_open_contexts`] checks at a test's end that it closed what it opened.
//! - [`SecureFront`]: Debian's nginx on loopback in front of a test's server: TLS with a CA
//!   the test made (and certificates misnamed or expired), basic authentication and API keys,
//!   401 and 403 answered with Elasticsearch's security bodies.
//! - [`rename_ended`]: waits for a rename job of `fsrename serve` to end.
//! - [`Storm`]: a proxy of a test's own whose network faults come on after the set-up.
//! - [`unique_name`]: index names no other test uses, so tests can share one server.
//! - [`shards_of`] and [`docs_per_shard`]: an index's number of shards, as the server's
//!   settings say, and how its documents are spread over them.
//! - [`Backend::layout`]: the shards of a test's tree (`FSRENAME_TEST_ES_SHARDS` on a real
//!   Elasticsearch, [`real_elastic_layout`]).
//! - [`FaultyStore`]: injects transient failures, lost answers, failed bulk items, process
//!   freezes and process death, from a seed.
//! - [`FailingRelease`]: fails a job's lock release once it has closed its journal entry
//!   ([`ReleaseFailure`] says how), for the tests of a release that fails after a rename.
//! - [`LatencyStore`]: makes every call wait a fixed round trip, as a remote cluster would.
//! - [`ScriptingStore`]: runs the lock scripts on any store with Elasticsearch's update
//!   semantics ([`scripted_update`], which the proxy uses too), for the scripted protocol in
//!   the deterministic simulation.
//!
//! osmem-server comes from PyPI (`pip install osmem-server==0.1.6`, which `.ci/run` does). The
//! binary is found through `FSRENAME_OSMEM_BIN`, else through the installed Python package.
#![deny(missing_docs)]

mod es_proxy;
mod failing_release;
mod faulty;
mod latency;
mod real_cluster;
mod scripting;
mod secure_front;
mod service;
mod storm;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

pub use es_proxy::{
    ContextKind, EsProxy, EsProxyOptions, NetFaults, OpenContext, ProxyStats, FAULT_SEED_VAR,
};
pub use failing_release::{FailingRelease, ReleaseFailure};
pub use faulty::{faulty, FaultPlan, FaultyStore};
use fs_model::IndexLayout;
use fs_store::{ElasticConfig, ElasticStore, SharedStore, SqliteOptions, SqliteStore};
pub use latency::LatencyStore;
pub use real_cluster::RealCluster;
pub use scripting::{scripted_update, ScriptingStore, UpdateRaces, RETRY_ON_CONFLICT};
pub use secure_front::SecureFront;
pub use service::rename_ended;
pub use storm::Storm;

/// The backends a shared test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded SQLite store, in memory, near-real-time.
    Embedded,
    /// osmem-server over HTTP, through the Elasticsearch client, behind the
    /// Elasticsearch-behaviour proxy ([`es_proxy`]): scripts run and race, search contexts are
    /// capped, search is near-real-time.
    Osmem,
    /// A real Elasticsearch at `FSRENAME_TEST_ES_URL`, for the tests only it can run (stored
    /// scripts). Those tests are ignored unless asked for: `cargo test -- --ignored`.
    RealElastic,
}

impl Backend {
    /// Returns a fresh store on this backend (for osmem: a new client of the shared server;
    /// use [`unique_name`] for indices).
    pub fn store(self) -> SharedStore {
        match self {
            Backend::Embedded => Arc::new(
                SqliteStore::in_memory_with(SqliteOptions::new().near_real_time(true))
                    .expect("in-memory store"),
            ),
            Backend::Osmem => Arc::new(osmem_store()),
            Backend::RealElastic => Arc::new(real_elastic_store()),
        }
    }

    /// Returns the shards and replicas a test's tree gets on this backend
    /// (`FsTree::with_layout`): on a real Elasticsearch, `FSRENAME_TEST_ES_SHARDS` shards
    /// ([`real_elastic_layout`]); elsewhere the server's defaults.
    pub fn layout(self) -> IndexLayout {
        match self {
            Backend::RealElastic => real_elastic_layout(),
            Backend::Embedded | Backend::Osmem => IndexLayout::default(),
        }
    }
}

/// The variable that gives the tree indices of the real-Elasticsearch tests a number of
/// shards (1 to 1 024; unset: the server's default), to run the suite on a sharded tree.
pub const REAL_ES_SHARDS_VAR: &str = "FSRENAME_TEST_ES_SHARDS";

/// Returns the layout of the tree indices the real-Elasticsearch tests create: the shards of
/// `FSRENAME_TEST_ES_SHARDS` if set. Replicas are left to the test's store (none for
/// [`real_elastic_store`]; a cluster test sets its own).
///
/// # Panics
/// If the variable is set to something other than a number of shards: the run asked for a
/// layout it would not get.
pub fn real_elastic_layout() -> IndexLayout {
    match std::env::var(REAL_ES_SHARDS_VAR) {
        Err(_) => IndexLayout::default(),
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .map_err(|e| e.to_string())
            .and_then(|shards| {
                IndexLayout::default()
                    .with_shards(shards)
                    .map_err(|e| e.to_string())
            })
            .unwrap_or_else(|e| panic!("{REAL_ES_SHARDS_VAR}=`{text}`: {e}")),
    }
}

/// The variable that points the real-Elasticsearch tests at a server.
pub const REAL_ES_VAR: &str = "FSRENAME_TEST_ES_URL";

/// Returns a client of the real Elasticsearch at `FSRENAME_TEST_ES_URL` (credentials from the
/// URL or from `FSRENAME_ES_USER`/`FSRENAME_ES_PASSWORD`/`FSRENAME_ES_API_KEY`).
///
/// # Panics
/// If the variable is not set: such a test was asked for explicitly, and should say why it
/// cannot run rather than pass.
pub fn real_elastic_store() -> ElasticStore {
    let url = std::env::var(REAL_ES_VAR).unwrap_or_else(|_| {
        panic!("{REAL_ES_VAR} is not set: point it at an Elasticsearch 7.x/8.x (see docs/elasticsearch.md)")
    });
    let config = ElasticConfig::new(&url)
        .expect("FSRENAME_TEST_ES_URL is not a URL")
        .with_env()
        .expect("the FSRENAME_ES_* settings")
        .replicas(0);
    ElasticStore::connect(config).expect("Elasticsearch client")
}

/// Returns a client of this test binary's osmem-server, behind its Elasticsearch-behaviour
/// proxy ([`es_proxy`]).
pub fn osmem_store() -> ElasticStore {
    elastic_store(es_proxy().url())
}

/// Returns a client of osmem-server itself, with no proxy in front: a server that runs no
/// scripts, keeps no count of search contexts and searches in real time.
pub fn raw_osmem_store() -> ElasticStore {
    elastic_store(osmem_url())
}

/// Returns a client of the server at `url` (a proxy of this binary, say).
pub fn elastic_store(url: &str) -> ElasticStore {
    let config = ElasticConfig::new(url).expect("a loopback URL");
    ElasticStore::connect(config).expect("Elasticsearch client")
}

/// Returns the Elasticsearch-behaviour proxy this test binary's HTTP tests share, in front of
/// its osmem-server, started on first use with [`EsProxyOptions::default`].
pub fn es_proxy() -> &'static EsProxy {
    static PROXY: OnceLock<EsProxy> = OnceLock::new();
    PROXY.get_or_init(|| EsProxy::start(osmem_url(), EsProxyOptions::default()))
}

/// Starts a proxy of its own in front of this binary's osmem-server, for a test that needs
/// other options (a lower context limit, say). It stops when dropped.
pub fn start_es_proxy(options: EsProxyOptions) -> EsProxy {
    EsProxy::start(osmem_url(), options)
}

/// Returns how many scroll contexts the server at `url` has open now, over all its nodes
/// (`GET _nodes/stats/indices/search`, `scroll_current`): on a real Elasticsearch, to check that
/// what fsrename opened it also closed.
///
/// # Panics
/// If the server cannot be asked: the test that asks needs the answer.
pub async fn scroll_contexts_open(url: &str) -> u64 {
    let stats: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/_nodes/stats/indices/search",
            url.trim_end_matches('/')
        ))
        .send()
        .await
        .expect("GET _nodes/stats")
        .json()
        .await
        .expect("node stats are JSON");
    stats["nodes"]
        .as_object()
        .expect("node stats name the nodes")
        .values()
        .map(|node| {
            node["indices"]["search"]["scroll_current"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum()
}

/// Returns how many scroll contexts the server at `url` has open now on `indices` (those that
/// exist; `GET <indices>/_stats/search`, `scroll_current` over every copy): for a test whose
/// neighbours, running at the same time on the same server, open scrolls of their own, which
/// the count of [`scroll_contexts_open`] would include.
///
/// # Panics
/// If the server cannot be asked: the test that asks needs the answer.
pub async fn scroll_contexts_open_on(url: &str, indices: &[&str]) -> u64 {
    let stats: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/{}/_stats/search?ignore_unavailable=true",
            url.trim_end_matches('/'),
            indices.join(",")
        ))
        .send()
        .await
        .expect("GET <indices>/_stats/search")
        .json()
        .await
        .expect("index stats are JSON");
    stats["indices"]
        .as_object()
        .map(|by_index| {
            by_index
                .values()
                .map(|index| {
                    index["total"]["search"]["scroll_current"]
                        .as_u64()
                        .unwrap_or(0)
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Returns the number of shards of `index` on the server at `url`, as its settings say
/// (`GET /<index>/_settings`, `index.number_of_shards`).
///
/// # Panics
/// If the server cannot be asked or its answer names no number of shards: the test that asks
/// needs the answer.
pub async fn shards_of(url: &str, index: &str) -> u64 {
    let settings: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/{index}/_settings", url.trim_end_matches('/')))
        .send()
        .await
        .expect("GET _settings")
        .json()
        .await
        .expect("settings are JSON");
    let shards = &settings[index]["settings"]["index"]["number_of_shards"];
    // Elasticsearch gives index settings as strings ("3").
    shards
        .as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| shards.as_u64())
        .unwrap_or_else(|| panic!("no number of shards in the settings of `{index}`: {settings}"))
}

/// Returns how many documents each primary shard of `index` on the server at `url` holds, by
/// shard number (`GET _cat/shards/<index>`): what it has refreshed.
///
/// # Panics
/// If the server cannot be asked or answers something else than a list of shards.
pub async fn docs_per_shard(url: &str, index: &str) -> Vec<u64> {
    let shards: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/_cat/shards/{index}?format=json&h=shard,prirep,docs",
            url.trim_end_matches('/')
        ))
        .send()
        .await
        .expect("GET _cat/shards")
        .json()
        .await
        .expect("the shards are JSON");
    let number = |v: &serde_json::Value| -> u64 {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .or_else(|| v.as_u64())
            .unwrap_or_else(|| panic!("not a number in the shards of `{index}`: {shards}"))
    };
    let mut primaries: Vec<(u64, u64)> = shards
        .as_array()
        .unwrap_or_else(|| panic!("not a list of the shards of `{index}`: {shards}"))
        .iter()
        .filter(|shard| shard["prirep"] == "p")
        .map(|shard| (number(&shard["shard"]), number(&shard["docs"])))
        .collect();
    primaries.sort_unstable();
    primaries.into_iter().map(|(_, docs)| docs).collect()
}

/// Asserts that no scroll context or point in time opened on `indices` through the shared
/// proxy is still open. Tests share the proxy, so each asks about its own indices.
///
/// # Panics
/// If one is open, naming it: something paged and did not close what it opened.
pub fn assert_no_open_contexts(indices: &[&str]) {
    let open = es_proxy().open_contexts_on(indices);
    assert!(
        open.is_empty(),
        "search contexts left open on {indices:?}: {open:?}"
    );
}

/// Returns `prefix-<random>`: an index name no other test uses.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Returns the URL of this test binary's osmem-server, starting it on first use.
///
/// # Panics
/// If osmem-server cannot be found or started; the message says how to install it.
pub fn osmem_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(start_osmem)
}

fn osmem_binary() -> String {
    if let Ok(bin) = std::env::var("FSRENAME_OSMEM_BIN") {
        return bin;
    }
    let found = Command::new("python3")
        .args([
            "-c",
            "import os, osmem_server; print(os.path.join(os.path.dirname(osmem_server.__file__), 'bin', 'osmem-server'))",
        ])
        .output();
    match found {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => panic!(
            "osmem-server is not installed: run .ci/run, or `pip install osmem-server==0.1.6`, \
             or set FSRENAME_OSMEM_BIN to its binary"
        ),
    }
}

fn start_osmem() -> String {
    let bin = osmem_binary();
    let mut child = Command::new(&bin)
        .args(["-addr", "127.0.0.1:0", "-no-stdin-watch", "-parent-pid"])
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start osmem-server `{bin}`: {e}"));
    let stdout = child.stdout.take().expect("osmem stdout");
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("osmem's first line");
    let info: serde_json::Value = serde_json::from_str(&first)
        .unwrap_or_else(|e| panic!("osmem-server printed `{first}`, not JSON: {e}"));
    let url = info["url"].as_str().expect("osmem URL").to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:"),
        "osmem must listen on loopback, got {url}"
    );
    // The child exits by itself when this process does (-parent-pid); it is not waited for.
    std::mem::forget(child);
    url
}
