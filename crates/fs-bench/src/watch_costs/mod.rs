//! `--watch-costs`: what the directory watcher ([`fs_rename::watch_dir`], `fsrename index
//! --watch`) costs, issue 48's figures.
//!
//! On each backend, a fresh tree index and a fresh temporary directory ([`workloads::Disk`]),
//! watched in process on the backend's store behind a [`CountingStore`]; once the first run
//! is done, each [`Workload`] runs in turn on the watched directory, and the watcher is waited
//! for until it says it caught up ([`watcher::Watch::caught_up_after`]): the tool's time, the
//! catch-up after it returned, and the store's requests from the workload's start to then.
//!
//! Then, once, the watcher idle on a large tree ([`idle::idle`]): the process's CPU time and
//! memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fs_model::FsPath;
use fs_rename::FsTree;
use fs_store::{CountingStore, SharedStore};

use crate::measure::{self, Embedded};

mod idle;
mod markdown;
mod tools;
mod watcher;
mod workloads;

pub use markdown::{render, stamp, write_into};
pub use workloads::Sizes;

use idle::Idle;
use watcher::Watch;
use workloads::{Disk, Workload};

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub sizes: Sizes,
    /// Entries of the tree watched idle.
    pub idle_entries: usize,
    /// How long the idle window lasts, in seconds.
    pub idle_seconds: f64,
    /// The longest a workload's catch-up (or a first run) is waited for.
    pub timeout: Duration,
    /// `embedded`, `osmem` or `es=URL`.
    pub backends: Vec<String>,
    /// How the embedded store is opened.
    pub embedded: Embedded,
}

/// What became of one workload.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Caught up this long after the tool returned, having sent this many requests.
    CaughtUp { seconds: f64, requests: u64 },
    /// Not caught up within the timeout; the requests sent by then.
    TimedOut { requests: u64 },
    /// Not run, and why.
    NotRun(String),
}

/// One workload on one backend.
#[derive(Debug, Clone)]
pub struct Row {
    pub workload: Workload,
    pub label: String,
    /// Entries created, moved, removed or written, counted from the workload.
    pub changes: u64,
    /// How long the workload's commands took, in seconds.
    pub tool_s: f64,
    pub outcome: Outcome,
    /// Batches the watcher applied from the workload's start to its catch-up.
    pub batches: u64,
    pub rescans: u64,
    /// Changes the batches could not apply.
    pub failures: Vec<String>,
}

/// The workloads on one backend.
#[derive(Debug, Clone)]
pub struct BackendCosts {
    pub name: String,
    pub about: String,
    pub rows: Vec<Row>,
    /// The first run: entries found, seconds, store requests.
    pub first_run: Option<(u64, f64, u64)>,
    /// Why the backend's run ended early, if it did.
    pub failure: Option<String>,
}

/// What [`watch_costs`] measured.
#[derive(Debug)]
pub struct WatchCosts {
    pub plan: Plan,
    pub backends: Vec<BackendCosts>,
    /// The idle watch, or why it failed.
    pub idle: Result<Idle, String>,
}

/// Measures the idle watch, then the workloads on each backend of the plan. A backend that
/// fails is reported in its section and the run goes on.
///
/// # Errors
/// If a backend cannot be opened.
pub async fn watch_costs(plan: Plan) -> anyhow::Result<WatchCosts> {
    // First, in a process that has done nothing else yet: its memory is the watcher's.
    eprintln!(
        "== idle: {} entries watched for {} s",
        plan.idle_entries, plan.idle_seconds
    );
    let (store, _db) = measure::embedded(plan.embedded)?;
    let idle = idle::idle(
        store,
        "embedded",
        plan.idle_entries,
        plan.idle_seconds,
        plan.timeout,
    )
    .await
    .map_err(|e| format!("{e:#}"));
    if let Err(e) = &idle {
        eprintln!("idle: failed: {e}");
    }
    let mut backends = Vec::new();
    for wanted in &plan.backends {
        let (name, about, store, _db) = open(wanted, plan.embedded)?;
        eprintln!("== {name}: {about}");
        let (mut rows, mut first_run) = (Vec::new(), None);
        let failure = on_backend(store, &plan, &mut rows, &mut first_run)
            .await
            .err()
            .map(|e| format!("{e:#}"));
        if let Some(e) = &failure {
            eprintln!("{name}: failed: {e}");
        }
        backends.push(BackendCosts {
            name,
            about,
            rows,
            first_run,
            failure,
        });
    }
    Ok(WatchCosts {
        plan,
        backends,
        idle,
    })
}

/// Opens the backend `wanted`: its name, what it is, its store, and the directory of its
/// database if it has one (kept as long as the store is used).
fn open(
    wanted: &str,
    embedded: Embedded,
) -> anyhow::Result<(String, String, SharedStore, Option<tempfile::TempDir>)> {
    Ok(match wanted {
        "embedded" => {
            let (store, dir) = measure::embedded(embedded)?;
            let about = match embedded {
                Embedded::File => "a SQLite database file with the default options, as `fsrename` opens it, in process",
                Embedded::Memory => "SQLite in memory, in process",
                Embedded::NearRealTime => "SQLite in memory in near-real-time mode, in process",
            };
            ("embedded".to_owned(), about.to_owned(), store, dir)
        }
        "osmem" => (
            "osmem".to_owned(),
            "osmem-server over HTTP on loopback, behind the tests' Elasticsearch-behaviour proxy"
                .to_owned(),
            measure::osmem(),
            None,
        ),
        other => {
            let url = other.strip_prefix("es=").with_context(|| {
                format!("`{other}` is not measured by --watch-costs: embedded, osmem or es=URL")
            })?;
            let config = fs_store::ElasticConfig::new(url)?.with_env()?.replicas(0);
            let store = fs_store::ElasticStore::connect(config)?;
            (
                format!("es {url}"),
                format!("the server at {url}, no replicas, over HTTP on loopback"),
                Arc::new(store),
                None,
            )
        }
    })
}

/// Runs every workload on `store`, a row each into `rows`, after the first run (noted in
/// `first_run`); stops the watch and drops the tree's indices however it ends.
async fn on_backend(
    store: SharedStore,
    plan: &Plan,
    rows: &mut Vec<Row>,
    first_run: &mut Option<(u64, f64, u64)>,
) -> anyhow::Result<()> {
    let sizes = plan.sizes;
    let disk = tokio::task::spawn_blocking(move || Disk::prepare(sizes))
        .await
        .context("preparing the directory")??;
    let disk = Arc::new(disk);
    let counting = CountingStore::new(store);
    let shared: SharedStore = Arc::new(counting.clone());
    let tree = FsTree::new(shared, fs_testkit::unique_name("bench-watch"));
    let at = FsPath::parse("/w")?;
    let started = Watch::start(
        tree.clone(),
        disk.root().to_owned(),
        at,
        counting.clone(),
        plan.timeout,
    )
    .await;
    let measured = match started {
        Ok(watch) => {
            let first = (
                watch.first_entries,
                watch.first_run.as_secs_f64(),
                counting.round_trips(),
            );
            eprintln!("first run: {first:?}");
            *first_run = Some(first);
            let measured = workloads_on(&watch, &disk, &counting, plan.timeout, rows).await;
            let stopped = watch.stop().await.map(drop);
            measured.and(stopped)
        }
        Err(e) => Err(e),
    };
    let dropped = measure::drop_tree(&tree).await;
    measured?;
    dropped.context("dropping the tree's indices")
}

/// Runs the workloads one after the other on the watched `disk`; after one that times out,
/// the rest are not run (the watcher is still busy with it).
async fn workloads_on(
    watch: &Watch,
    disk: &Arc<Disk>,
    counting: &CountingStore,
    timeout: Duration,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    // Let the caught-up of the first run be said before the first workload.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut timed_out = None;
    for workload in Workload::ALL {
        let mut row = Row {
            workload,
            label: disk.label(workload),
            changes: disk.changes(workload),
            tool_s: 0.0,
            outcome: Outcome::NotRun(String::new()),
            batches: 0,
            rescans: 0,
            failures: Vec::new(),
        };
        if let Some(earlier) = timed_out {
            row.outcome = Outcome::NotRun(format!("{earlier:?} timed out before"));
            rows.push(row);
            continue;
        }
        let (before, requests, started) = (watch.tally(), counting.round_trips(), Instant::now());
        let on_disk = Arc::clone(disk);
        tokio::task::spawn_blocking(move || on_disk.run(workload))
            .await
            .context("a workload")?
            .with_context(|| format!("{workload:?}"))?;
        let returned = Instant::now();
        row.tool_s = (returned - started).as_secs_f64();
        let caught = watch
            .caught_up_after(returned, before.batches, returned + timeout)
            .await;
        let after = watch.tally();
        row.batches = after.batches - before.batches;
        row.rescans = after.rescans - before.rescans;
        row.failures = watch.failures_since(before.failures);
        row.outcome = match caught {
            Some(caught) => Outcome::CaughtUp {
                seconds: caught.at.saturating_duration_since(returned).as_secs_f64(),
                requests: caught.requests - requests,
            },
            None => {
                timed_out = Some(workload);
                Outcome::TimedOut {
                    requests: counting.round_trips() - requests,
                }
            }
        };
        eprintln!(
            "{workload:?}: {} changes, tool {:.2} s, {:?}, {} batches",
            row.changes, row.tool_s, row.outcome, row.batches
        );
        rows.push(row);
    }
    Ok(())
}
