//! Running the measurements the plan asks for on each backend, keeping the failures.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use fs_store::SharedStore;
use fs_testkit::LatencyStore;

use super::{
    concurrency, embedded_with_connection, locks, renames, service, BackendResults, Embedded,
    Measurement, Plan,
};

/// One backend to measure.
struct Bench {
    name: String,
    about: String,
    store: SharedStore,
    /// The largest rename measured on it.
    max_docs: usize,
    /// The server's URL, for the server-side peer, on a server named by URL.
    url: Option<String>,
    /// The SQLite store under it, if any: the service measurement splits the time of its one
    /// connection by kind of call.
    connection: Option<fs_store::SqliteStore>,
}

/// The backends measured: the embedded store, osmem over HTTP, the embedded store behind a
/// network round trip (`remote`: a store whose cost is latency, not the client's CPU), and
/// each server given as `es=URL`.
fn backends(
    plan: &Plan,
    (embedded, embedded_connection): (SharedStore, Option<fs_store::SqliteStore>),
) -> anyhow::Result<Vec<Bench>> {
    let memory = fs_store::SqliteStore::in_memory().context("opening an in-memory store")?;
    let remote: SharedStore = Arc::new(LatencyStore::new(Arc::new(memory.clone()), plan.rtt));
    let about = match plan.embedded {
        Embedded::File => "a SQLite database file with the default options, as `fsrename` opens it",
        Embedded::Memory => "SQLite in memory, realtime search",
        Embedded::NearRealTime => "SQLite in memory in near-real-time mode (the tests' mode)",
    };
    let mut out = Vec::new();
    for wanted in &plan.backends {
        let bench = |name: &str, about: String, store: SharedStore, max_docs: usize| Bench {
            name: name.to_owned(),
            about,
            store,
            max_docs,
            url: None,
            connection: None,
        };
        out.push(match wanted.as_str() {
            "embedded" => Bench {
                connection: embedded_connection.clone(),
                ..bench(
                    "embedded",
                    format!(
                        "{about}; in process, so every call runs on the client's cores, one at a \
                         time"
                    ),
                    Arc::clone(&embedded),
                    usize::MAX,
                )
            },
            // Started only when asked for: a run on other backends needs no osmem-server.
            "osmem" => bench(
                "osmem",
                "osmem-server 0.1.6 over HTTP on loopback, on the same cores, behind the \
                 tests' Elasticsearch-behaviour proxy (near-real-time search; the lock scripts \
                 run by the proxy as a shard runs a bulk request: one read of its documents, \
                 each one's items in order, one conditional write a document, with no added \
                 race window: one request from the client, two inside)"
                    .to_owned(),
                osmem(),
                plan.osmem_max_docs,
            ),
            "remote" => Bench {
                connection: Some(memory.clone()),
                ..bench(
                    "remote",
                    format!(
                        "SQLite in memory behind {} ms per call, waited without CPU: a store \
                         whose capacity is its own, as a real Elasticsearch cluster's is",
                        plan.rtt.as_secs_f64() * 1e3
                    ),
                    Arc::clone(&remote),
                    usize::MAX,
                )
            },
            other => {
                let url = other
                    .strip_prefix("es=")
                    .ok_or_else(|| anyhow::anyhow!("unknown backend `{other}`"))?;
                let config = fs_store::ElasticConfig::new(url)?.with_env()?.replicas(0);
                let store = fs_store::ElasticStore::connect(config)?;
                Bench {
                    name: format!("es {url}"),
                    about: format!(
                        "the server at {url} (credentials from FSRENAME_ES_*), no replicas"
                    ),
                    store: Arc::new(store),
                    max_docs: usize::MAX,
                    url: Some(url.to_owned()),
                    connection: None,
                }
            }
        });
    }
    Ok(out)
}

/// osmem-server behind an Elasticsearch-behaviour proxy of its own, which runs the lock
/// scripts with no pause between their read and their write: the tests widen that window to
/// make races frequent, which would measure the test device rather than the locks.
pub fn osmem() -> SharedStore {
    static PROXY: std::sync::OnceLock<fs_testkit::EsProxy> = std::sync::OnceLock::new();
    let proxy = PROXY.get_or_init(|| {
        fs_testkit::start_es_proxy(fs_testkit::EsProxyOptions {
            race_window: Duration::ZERO,
            ..fs_testkit::EsProxyOptions::default()
        })
    });
    Arc::new(fs_testkit::elastic_store(proxy.url()))
}

/// Runs the measurements of one backend that the plan asks for, and keeps the failures.
struct Measured<'a> {
    plan: &'a Plan,
    name: &'a str,
    failures: &'a mut Vec<String>,
}

impl Measured<'_> {
    /// Runs `measurement` (a future not yet polled) if the plan asks for it; its rows, or
    /// none if it was not asked for or failed (the failure is kept, with why).
    async fn run<T: Default>(
        &mut self,
        which: Measurement,
        measurement: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> T {
        if !self.plan.only.contains(&which) {
            return T::default();
        }
        match measurement.await {
            Ok(rows) => rows,
            Err(e) => {
                eprintln!("{}: {which:?} failed: {e:#}", self.name);
                self.failures.push(format!("{which:?}: {e:#}"));
                T::default()
            }
        }
    }
}

pub async fn run_all(plan: &Plan) -> anyhow::Result<Vec<BackendResults>> {
    let mut out = Vec::new();
    let (embedded, connection, _dir) = embedded_with_connection(plan.embedded)?;
    for Bench {
        name,
        about,
        store,
        max_docs: max,
        url,
        connection,
    } in backends(plan, (embedded, connection))?
    {
        eprintln!("== {name}: {about}");
        // A measurement that fails (a server that gives out half-way, say) is reported and
        // the run goes on: the others' figures are not lost with it.
        let mut failures = Vec::new();
        let mut measured = Measured {
            plan,
            name: &name,
            failures: &mut failures,
        };
        let locks = measured
            .run(Measurement::Locks, locks::locks(&store, plan))
            .await;
        let (renames, in_flight) = measured
            .run(
                Measurement::Renames,
                renames::renames(&store, plan, max, url.as_deref()),
            )
            .await;
        let concurrency = measured
            .run(
                Measurement::Concurrency,
                concurrency::concurrency(&store, plan),
            )
            .await;
        let affected = measured
            .run(Measurement::Affected, concurrency::affected(&store, plan))
            .await;
        let fairness = measured
            .run(
                Measurement::Fairness,
                crate::fairness::fairness(&store, plan.fairness_trials),
            )
            .await;
        let service = measured
            .run(
                Measurement::Service,
                service::service(&store, connection.as_ref(), plan),
            )
            .await;
        let r = BackendResults {
            name,
            about,
            locks,
            renames,
            in_flight,
            concurrency,
            affected,
            fairness,
            service,
            failures,
        };
        out.push(r);
    }
    Ok(out)
}
