//! The service (issue 35): `fsrename serve` in process on the backend, behind a
//! [`CountingStore`]; K clients each rename their own `/p/sI` back and forth through the HTTP
//! API (submit, then poll the job until it is done). Each round runs tree, tree with the
//! instances' intention locks shared among their jobs (`serve --share-intentions`, issue 51),
//! global and no locks one after the other, the order rotating from round to round so that
//! the machine's drift falls on each in turn; the rates compared are the medians of the
//! rounds.
//!
//! No locks is the service's default strategy here (`ServeConfig::strategy`), with requests
//! that name none: the API itself refuses `"strategy": "none"` from users.

use std::sync::Arc;
use std::time::Duration;

use fs_rename::{FsTree, Strategy};
use fs_store::{CountingStore, SharedStore};
use fsrename::serve::{ServeConfig, Server};

use super::{insert_dir, median, LockWrites, Plan};
use crate::feed_load::renaming_window;

/// The strategies compared, in the first round's order, each with whether the instances
/// share their jobs' intention locks.
const STRATEGIES: [(Strategy, bool); 4] = [
    (Strategy::Tree, false),
    (Strategy::Tree, true),
    (Strategy::Global, false),
    (Strategy::None, false),
];

/// Before counting: the first jobs done.
const WARM_UP: Duration = Duration::from_millis(500);

/// One strategy at one K and one number of instances: medians over the rounds.
#[derive(Debug, Clone)]
pub struct ServiceRow {
    pub k: usize,
    /// Service instances on the store, the clients spread over them.
    pub instances: usize,
    pub strategy: Strategy,
    /// Whether the instances shared their jobs' intention locks (`--share-intentions`).
    pub shared: bool,
    pub per_sec: f64,
    /// The median time from submit to seeing the job done, in ms.
    pub latency_ms: f64,
    /// Store requests per job, everything counted (locks, rewrite, job records, recovery).
    pub requests: f64,
    /// Documents written to the lock index per job (takes, releases, renewals, waiters), and
    /// of them the shared parent's, `/p` (issue 51).
    pub lock_writes: f64,
    pub shared_lock_writes: f64,
    /// Jobs that ended failed, over all the rounds (a client whose job failed stops).
    pub failed: usize,
    /// The service's answer for one of them.
    pub first_failure: Option<String>,
    /// Where a job's time went, in the round of median rate.
    pub split: Split,
    /// Where the SQLite connection's time went, in the same round (a store with one).
    pub connection: Option<ConnectionSplit>,
}

/// Where the time of the one SQLite connection under the service went (`embedded`, `remote`):
/// it serves every call in turn, so when it is busy most of the window, a job's rate is one
/// over the time the job's calls hold it.
#[derive(Debug, Clone, Default)]
pub struct ConnectionSplit {
    /// The share of the window some call held the connection.
    pub busy: f64,
    /// Per kind of call: calls a job, and the connection's time a job in microseconds.
    pub per_job: Vec<(&'static str, f64, f64)>,
}

impl ConnectionSplit {
    /// `used` over a window of `seconds` in which `jobs` jobs finished.
    fn of(used: &fs_store::ConnectionUse, seconds: f64, jobs: usize) -> ConnectionSplit {
        let jobs = jobs.max(1) as f64;
        ConnectionSplit {
            busy: used.held().as_secs_f64() / seconds.max(f64::MIN_POSITIVE),
            per_job: used
                .calls
                .iter()
                .map(|(&kind, call)| {
                    let micros = call.held.as_secs_f64() * 1e6;
                    (kind, call.count as f64 / jobs, micros / jobs)
                })
                .collect(),
        }
    }

    /// The connection's time a job, in all, in microseconds.
    pub fn micros_per_job(&self) -> f64 {
        self.per_job.iter().map(|(_, _, micros)| micros).sum()
    }

    /// `kind µs (calls)`, for each kind of call, the costliest first; a kind that held the
    /// connection less than a microsecond a job is left out.
    pub fn describe(&self) -> String {
        let mut calls = self.per_job.clone();
        calls.retain(|(_, _, micros)| *micros >= 0.5);
        calls.sort_by(|a, b| b.2.total_cmp(&a.2));
        calls
            .iter()
            .map(|(kind, n, micros)| format!("{kind} {micros:.0} ({n:.1})"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where the time of a job served over HTTP goes, as means in milliseconds over the jobs of
/// a run: from the service's own record of each (its timestamps, its report's phases).
#[derive(Debug, Clone, Copy, Default)]
pub struct Split {
    /// Submitted to started: the queue (and the job's first record).
    pub queued: f64,
    /// The rename's phases (`RenameReport::phases`).
    pub locking: f64,
    pub checking: f64,
    pub rewriting: f64,
    pub releasing: f64,
    /// Started to finished, less the phases: the journal entry, the job's records, the
    /// report.
    pub other: f64,
    /// Finished to seen done by the client: the record's way to the client, and polling.
    pub seen_after: f64,
    /// CPU per job, in ms: this process's (clients and service) and the others' (the server,
    /// where it runs on this machine); and the machine's busy share in the window.
    pub own_cpu: f64,
    pub others_cpu: f64,
    pub busy: f64,
}

impl Split {
    /// The means over `jobs` (as `GET /renames/ID` showed them done), `latencies_ms` the
    /// clients' submit-to-done times of the same jobs.
    fn of(jobs: &[serde_json::Value], latencies_ms: &[f64]) -> Split {
        let mut sum = Split::default();
        for (job, latency) in jobs.iter().zip(latencies_ms) {
            let at = |field: &str| job[field].as_f64().unwrap_or(0.0);
            let phase = |name: &str| job["report"]["phases"][name].as_f64().unwrap_or(0.0);
            let (submitted, started, finished) =
                (at("submitted_at"), at("started_at"), at("finished_at"));
            let phases = [
                phase("locking_ms"),
                phase("checking_ms"),
                phase("rewriting_ms"),
                phase("releasing_ms"),
            ];
            sum.queued += started - submitted;
            sum.locking += phases[0];
            sum.checking += phases[1];
            sum.rewriting += phases[2];
            sum.releasing += phases[3];
            sum.other += (finished - started) - phases.iter().sum::<f64>();
            sum.seen_after += latency - (finished - submitted);
        }
        let n = jobs.len().max(1) as f64;
        Split {
            queued: sum.queued / n,
            locking: sum.locking / n,
            checking: sum.checking / n,
            rewriting: sum.rewriting / n,
            releasing: sum.releasing / n,
            other: sum.other / n,
            seen_after: sum.seen_after / n,
            ..Split::default()
        }
    }
}

/// Runs the rounds for each number of instances and each K of the plan's.
/// `connection`, the SQLite store under `store` if there is one, has its time split by call.
pub async fn service(
    store: &SharedStore,
    connection: Option<&fs_store::SqliteStore>,
    plan: &Plan,
) -> anyhow::Result<Vec<ServiceRow>> {
    let mut out = Vec::new();
    for &instances in &plan.service_instances {
        for &k in &plan.service_ks {
            out.extend(rounds((store, connection), k, instances, plan).await?);
        }
    }
    Ok(out)
}

/// The plan's rounds at `k` clients over `instances` instances: a row per strategy.
async fn rounds(
    (store, connection): (&SharedStore, Option<&fs_store::SqliteStore>),
    k: usize,
    instances: usize,
    plan: &Plan,
) -> anyhow::Result<Vec<ServiceRow>> {
    let mut out = Vec::new();
    {
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
        let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
        let mut requests: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
        let mut lock_writes: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
        let mut shared_lock_writes: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
        let mut splits: Vec<Vec<(f64, Split, Option<ConnectionSplit>)>> =
            vec![Vec::new(); STRATEGIES.len()];
        let mut failed = [0; STRATEGIES.len()];
        let mut first_failure: [Option<String>; STRATEGIES.len()] = Default::default();
        for round in 0..plan.service_rounds {
            for step in 0..STRATEGIES.len() {
                let which = (round + step) % STRATEGIES.len();
                let run = run((store, connection), k, instances, STRATEGIES[which], plan).await?;
                let p = run.split;
                eprintln!(
                    "service K = {k} on {instances} instance(s) {:?}{}: {:.1} renames/s, median {:.1} ms, {:.1} requests/job, {:.1} lock writes/job ({:.1} on /p); mean ms: queued {:.1}, locking {:.1}, checking {:.1}, rewriting {:.1}, releasing {:.1}, other {:.1}, seen after {:.1}; CPU ms a job: here {:.1}, others {:.1}; cores {:.0} % busy",
                    STRATEGIES[which].0, if run.shared { " shared" } else { "" }, run.per_sec, run.latency_ms, run.requests,
                    run.lock_writes, run.shared_lock_writes,
                    p.queued, p.locking, p.checking, p.rewriting, p.releasing, p.other, p.seen_after,
                    p.own_cpu, p.others_cpu, p.busy * 100.0
                );
                if let Some(c) = &run.connection {
                    eprintln!(
                        "  the SQLite connection {:.0} % busy, {:.0} µs a job: {}",
                        c.busy * 100.0,
                        c.micros_per_job(),
                        c.describe()
                    );
                }
                rates[which].push(run.per_sec);
                latencies[which].push(run.latency_ms);
                requests[which].push(run.requests);
                lock_writes[which].push(run.lock_writes);
                shared_lock_writes[which].push(run.shared_lock_writes);
                splits[which].push((run.per_sec, run.split, run.connection));
                if run.failed > 0 {
                    eprintln!(
                        "  {} job(s) failed; {}",
                        run.failed,
                        run.first_failure.as_deref().unwrap_or("-")
                    );
                }
                failed[which] += run.failed;
                if first_failure[which].is_none() {
                    first_failure[which] = run.first_failure;
                }
            }
        }
        for (i, (strategy, shared)) in STRATEGIES.into_iter().enumerate() {
            let per_sec = median(&mut rates[i]);
            // The split of the round whose rate is the median.
            let (split, connection) = splits[i]
                .iter()
                .min_by(|a, b| (a.0 - per_sec).abs().total_cmp(&(b.0 - per_sec).abs()))
                .map_or_else(Default::default, |(_, split, connection)| {
                    (*split, connection.clone())
                });
            out.push(ServiceRow {
                k,
                instances,
                strategy,
                shared,
                per_sec,
                latency_ms: median(&mut latencies[i]),
                requests: median(&mut requests[i]),
                lock_writes: median(&mut lock_writes[i]),
                shared_lock_writes: median(&mut shared_lock_writes[i]),
                failed: failed[i],
                first_failure: first_failure[i].take(),
                split,
                connection,
            });
        }
    }
    Ok(out)
}

/// `instances` instances of the service on one store with `strategy` as their default (and
/// sharing their jobs' intention locks if `shared`), `k` clients spread over them for the
/// plan's seconds.
async fn run(
    (store, connection): (&SharedStore, Option<&fs_store::SqliteStore>),
    k: usize,
    instances: usize,
    (strategy, shared): (Strategy, bool),
    plan: &Plan,
) -> anyhow::Result<ServiceRow> {
    let counting = CountingStore::new(Arc::clone(store));
    // The shared parent's lock document has the parent's path for its id.
    let lock_writes = LockWrites::new(Arc::new(counting.clone()), ["/p".to_owned()]);
    let counted: SharedStore = Arc::new(lock_writes.clone());
    // Index names avoid `J`, `M` and backticks (a Debian Elasticsearch build refuses them).
    let index = "bench-service";
    let tree = FsTree::new(Arc::clone(&counted), index);
    super::drop_tree(&tree).await.ok();
    // The jobs index too: every run would otherwise add its jobs' records to the last run's,
    // and an instance reads them all when it starts (adoption), so later runs would pay for
    // earlier ones.
    counted
        .delete_index(&fs_model::jobs_index_name(index))
        .await
        .ok();
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

    let mut servers = Vec::with_capacity(instances);
    let mut bases = Vec::with_capacity(instances);
    for n in 0..instances.max(1) {
        let mut config = ServeConfig::new(index);
        config.listen = "127.0.0.1:0".parse()?;
        config.instance = format!("bench-{n}");
        config.max_jobs = k;
        config.recover_every = None;
        config.strategy = strategy;
        config.share_intentions = shared;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = Server::start(config, Arc::clone(&counted), async {
            let _ = stopped.await;
        })
        .await?;
        bases.push(format!("http://{}", server.addr()));
        servers.push((stop, server));
    }
    let http = reqwest::Client::new();

    let window = renaming_window(
        &http,
        &bases,
        &counting,
        Some(&lock_writes),
        connection,
        k,
        |i| [format!("/p/s{i}"), format!("/p/t{i}")],
        WARM_UP,
        plan.concurrent_secs,
    )
    .await?;
    for (stop, server) in servers {
        let _ = stop.send(());
        server.wait().await?;
    }
    let mut split = Split::of(&window.jobs, &window.latencies_ms);
    let jobs = window.jobs.len().max(1) as f64;
    split.own_cpu = window.cpu.own_ms / jobs;
    split.others_cpu = window.cpu.others_ms / jobs;
    split.busy = window.cpu.busy;
    let mut latencies = window.latencies_ms;
    let renames = latencies.len();
    Ok(ServiceRow {
        k,
        instances,
        strategy,
        shared,
        per_sec: renames as f64 / window.seconds,
        latency_ms: median(&mut latencies),
        requests: window.requests as f64 / renames.max(1) as f64,
        lock_writes: window.lock_writes.total as f64 / renames.max(1) as f64,
        shared_lock_writes: window.lock_writes.shared as f64 / renames.max(1) as f64,
        failed: window.failed,
        first_failure: window.first_failure,
        split,
        connection: window
            .connection
            .as_ref()
            .map(|used| ConnectionSplit::of(used, window.seconds, renames)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_split_is_per_job_and_costliest_first() {
        let before = fs_store::ConnectionUse::default();
        let mut used = before.clone();
        used.calls.insert(
            "search",
            fs_store::CallUse {
                count: 10,
                held: Duration::from_millis(2),
            },
        );
        used.calls.insert(
            "bulk",
            fs_store::CallUse {
                count: 5,
                held: Duration::from_millis(6),
            },
        );
        used.calls.insert(
            "mget",
            fs_store::CallUse {
                count: 1,
                held: Duration::from_micros(1),
            },
        );
        let split = ConnectionSplit::of(&used.since(&before), 0.01, 5);
        assert!((split.busy - 0.8001).abs() < 1e-9);
        assert!((split.micros_per_job() - 1_600.2).abs() < 1e-6);
        assert_eq!(split.describe(), "bulk 1200 (1.0), search 400 (2.0)");
    }
}
