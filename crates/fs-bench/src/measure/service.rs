//! The service (issue 35): `fsrename serve` in process on the backend, behind a
//! [`CountingStore`]; K clients each rename their own `/p/sI` back and forth through the HTTP
//! API (submit, then poll the job until it is done). Each round runs tree, global and no
//! locks one after the other, the order rotating from round to round so that the machine's
//! drift falls on each in turn; the rates compared are the medians of the rounds.
//!
//! No locks is the service's default strategy here (`ServeConfig::strategy`), with requests
//! that name none: the API itself refuses `"strategy": "none"` from users.

use std::sync::Arc;
use std::time::Duration;

use fs_rename::{FsTree, Strategy};
use fs_store::{CountingStore, SharedStore};
use fsrename::serve::{ServeConfig, Server};

use super::{insert_dir, median, Plan};
use crate::feed_load::renaming_window;

/// The strategies compared, in the first round's order.
const STRATEGIES: [Strategy; 3] = [Strategy::Tree, Strategy::Global, Strategy::None];

/// Before counting: the first jobs done.
const WARM_UP: Duration = Duration::from_millis(500);

/// One strategy at one K: medians over the rounds.
#[derive(Debug, Clone)]
pub struct ServiceRow {
    pub k: usize,
    pub strategy: Strategy,
    pub per_sec: f64,
    /// The median time from submit to seeing the job done, in ms.
    pub latency_ms: f64,
    /// Store requests per job, everything counted (locks, rewrite, job records, recovery).
    pub requests: f64,
}

/// Runs the rounds for each K of the plan's service Ks.
pub async fn service(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<ServiceRow>> {
    let mut out = Vec::new();
    for &k in &plan.service_ks {
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
        let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
        let mut requests: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
        for round in 0..plan.service_rounds {
            for step in 0..STRATEGIES.len() {
                let which = (round + step) % STRATEGIES.len();
                let run = run(store, k, STRATEGIES[which], plan).await?;
                eprintln!(
                    "service K = {k} {:?}: {:.1} renames/s, median {:.1} ms, {:.1} requests/job",
                    STRATEGIES[which], run.per_sec, run.latency_ms, run.requests
                );
                rates[which].push(run.per_sec);
                latencies[which].push(run.latency_ms);
                requests[which].push(run.requests);
            }
        }
        for (i, strategy) in STRATEGIES.into_iter().enumerate() {
            out.push(ServiceRow {
                k,
                strategy,
                per_sec: median(&mut rates[i]),
                latency_ms: median(&mut latencies[i]),
                requests: median(&mut requests[i]),
            });
        }
    }
    Ok(out)
}

/// One service with `strategy` as its default, `k` clients for the plan's seconds.
async fn run(
    store: &SharedStore,
    k: usize,
    strategy: Strategy,
    plan: &Plan,
) -> anyhow::Result<ServiceRow> {
    let counting = CountingStore::new(Arc::clone(store));
    let counted: SharedStore = Arc::new(counting.clone());
    // Index names avoid `J`, `M` and backticks (a Debian Elasticsearch build refuses them).
    let index = "bench-service";
    let tree = FsTree::new(Arc::clone(&counted), index);
    super::drop_tree(&tree).await.ok();
    tree.ensure_indices().await?;
    // The destinations' parent must exist for the renames to be accepted.
    tree.insert_all(vec![fs_model::FsDoc::dir(
        fs_model::FsPath::parse("/p")?,
        0,
    )])
    .await?;
    for i in 0..k {
        insert_dir(&tree, plan.concurrent_docs, &format!("/p/s{i}")).await?;
    }
    tree.refresh().await?;

    let mut config = ServeConfig::new(index);
    config.listen = "127.0.0.1:0".parse()?;
    config.max_jobs = k;
    config.recover_every = None;
    config.strategy = strategy;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = Server::start(config, Arc::clone(&counted), async {
        let _ = stopped.await;
    })
    .await?;
    let base = format!("http://{}", server.addr());
    let http = reqwest::Client::new();

    let window = renaming_window(
        &http,
        &base,
        &counting,
        k,
        |i| [format!("/p/s{i}"), format!("/p/t{i}")],
        WARM_UP,
        plan.concurrent_secs,
    )
    .await?;
    let _ = stop.send(());
    server.wait().await?;
    let mut latencies = window.latencies_ms;
    let renames = latencies.len();
    Ok(ServiceRow {
        k,
        strategy,
        per_sec: renames as f64 / window.seconds,
        latency_ms: median(&mut latencies),
        requests: window.requests as f64 / renames.max(1) as f64,
    })
}
