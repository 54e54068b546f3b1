//! The measurements, on one backend at a time.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_locks::{LockClient, LockProtocol};
use fs_model::{FsDoc, FsPath};
use fs_rename::{FsTree, Renamer, Strategy};
use fs_store::{BulkOp, Scan, Scope, SharedStore};
use fs_testkit::{Backend, LatencyStore};

/// What to run.
pub struct Plan {
    pub depths: Vec<usize>,
    pub lock_repeat: u32,
    pub sizes: Vec<usize>,
    pub osmem_max_docs: usize,
    pub ks: Vec<usize>,
    pub concurrent_docs: usize,
    pub concurrent_secs: f64,
    pub affected: Vec<usize>,
    /// Renames of `/p` under the streams of small renames, for each way of waiting.
    pub fairness_trials: usize,
    /// Rounds of the alternation of renames and raw rewrites (each round runs both twice,
    /// once each way round); the medians are compared. On a 2-core machine one run of either
    /// moves by 5 to 10 % from the next, so a median of 10 runs still moved by 4 points from
    /// one bench run to the next at 100 000 documents: 10 rounds (20 runs) halve that.
    pub rename_repeat: usize,
    /// The bulk requests in flight of the renames and raw rewrites measured.
    pub in_flight: usize,
    /// The numbers of bulk requests in flight compared, at `in_flight_docs` documents.
    pub in_flights: Vec<usize>,
    pub in_flight_docs: usize,
    /// The round trip of the `remote` backend.
    pub rtt: Duration,
    /// How the embedded store is opened.
    pub embedded: Embedded,
    /// The measurements to run (all by default).
    pub only: Vec<Measurement>,
    /// The backends to run them on (all by default).
    pub backends: Vec<String>,
}

/// The measurements: the four of issue 9, and fair waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Measurement {
    /// 1: lock + unlock by depth.
    Locks,
    /// 2: directory renames against the raw bulk rewrite.
    Renames,
    /// 3: K concurrent renames per locking scheme.
    Concurrency,
    /// 4: locking cost by affected documents.
    Affected,
    /// 5: the wait of a rename of `/p` under streams of small renames, before and after fair
    /// waiting.
    Fairness,
}

/// How the embedded store is opened for a benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Embedded {
    /// A database file with the default options, in a temporary directory: what `fsrename`
    /// runs.
    File,
    /// In memory, realtime search.
    Memory,
    /// In memory, near-real-time (the tests' mode: searches see only refreshed writes, at the
    /// cost of copying every written document at each refresh).
    NearRealTime,
}

/// Opens the embedded store `kind`; the directory, if any, lives as long as the guard.
pub fn embedded(kind: Embedded) -> anyhow::Result<(SharedStore, Option<tempfile::TempDir>)> {
    Ok(match kind {
        Embedded::File => {
            let dir = tempfile::tempdir()?;
            let store = fs_store::SqliteStore::open(dir.path().join("bench.db"))?;
            (Arc::new(store), Some(dir))
        }
        Embedded::Memory => (Arc::new(fs_store::SqliteStore::in_memory()?), None),
        Embedded::NearRealTime => (Backend::Embedded.store(), None),
    })
}

impl Plan {
    pub fn new(
        quick: bool,
        max_docs: usize,
        full: bool,
        rtt: Duration,
        embedded: Embedded,
    ) -> Plan {
        let sizes: Vec<usize> = [1_000, 10_000, 100_000]
            .into_iter()
            .filter(|n| *n <= max_docs)
            .collect();
        Plan {
            depths: vec![1, 2, 4, 8, 16, 32],
            lock_repeat: if quick { 5 } else { 50 },
            sizes: if quick { vec![1_000, 2_000] } else { sizes },
            osmem_max_docs: if full { usize::MAX } else { 10_000 },
            ks: vec![1, 2, 4, 8, 16, 32],
            concurrent_docs: if quick { 20 } else { 50 },
            concurrent_secs: if quick { 0.5 } else { 3.0 },
            affected: if quick {
                vec![10, 100]
            } else {
                vec![10, 100, 1_000, 10_000]
            },
            fairness_trials: if quick { 5 } else { 30 },
            rename_repeat: if quick { 1 } else { 10 },
            in_flight: fs_rename::DEFAULT_IN_FLIGHT,
            in_flights: vec![1, 2, 4, 8],
            in_flight_docs: if quick { 2_000 } else { 10_000 },
            rtt,
            embedded,
            only: vec![
                Measurement::Locks,
                Measurement::Renames,
                Measurement::Concurrency,
                Measurement::Affected,
                Measurement::Fairness,
            ],
            backends: vec!["embedded".into(), "osmem".into(), "remote".into()],
        }
    }
}

#[derive(Debug, Clone)]
pub struct LockRow {
    pub depth: usize,
    /// fsrename with compare-and-set: round trips (lock, unlock) and ms.
    pub batched: (u32, u32),
    pub batched_ms: f64,
    /// fsrename with atomic updates (stored scripts, or the embedded store's own), where the
    /// store has them.
    pub atomic: Option<((u32, u32), f64)>,
    pub book: (u32, u32),
    pub book_ms: f64,
}

#[derive(Debug, Clone)]
pub struct RenameRow {
    pub docs: usize,
    pub rename_s: f64,
    pub raw_s: f64,
    pub round_trips: u64,
    /// The median of the server-side peer (`_update_by_query`), where the server runs it.
    pub peer_s: Option<f64>,
    /// The median of a scan alone, every page read and nothing written: the reading's
    /// ceiling, which pipelining hides behind the writes while it is the faster.
    pub scan_s: Option<f64>,
}

impl RenameRow {
    pub fn rate(&self) -> f64 {
        self.docs as f64 / self.rename_s
    }
    pub fn raw_rate(&self) -> f64 {
        self.docs as f64 / self.raw_s
    }
    pub fn peer_rate(&self) -> Option<f64> {
        self.peer_s.map(|s| self.docs as f64 / s)
    }
    pub fn scan_rate(&self) -> Option<f64> {
        self.scan_s.map(|s| self.docs as f64 / s)
    }
}

/// A rename and a raw rewrite with this many bulk requests in flight.
#[derive(Debug, Clone)]
pub struct InFlightRow {
    pub in_flight: usize,
    pub row: RenameRow,
}

#[derive(Debug, Clone)]
pub struct ConcurrencyRow {
    pub k: usize,
    pub strategy: Strategy,
    /// How the locks were written: the store's own choice ([`LockProtocol::Auto`]), or
    /// compare-and-set where the store also has atomic updates.
    pub protocol: LockProtocol,
    pub per_sec: f64,
    /// Store round trips per rename, locks included.
    pub round_trips: f64,
    /// Milliseconds per rename spent taking and releasing locks (waiting included).
    pub lock_ms: f64,
}

#[derive(Debug, Clone)]
pub struct AffectedRow {
    pub docs: usize,
    pub strategy: Strategy,
    pub lock_ms: f64,
    pub round_trips: u32,
}

#[derive(Debug, Clone)]
pub struct BackendResults {
    pub name: String,
    /// What the backend is, for the report.
    pub about: String,
    pub locks: Vec<LockRow>,
    pub renames: Vec<RenameRow>,
    /// Renames and raw rewrites by bulk requests in flight.
    pub in_flight: Vec<InFlightRow>,
    pub concurrency: Vec<ConcurrencyRow>,
    pub affected: Vec<AffectedRow>,
    /// Measurement 5, before (no queue) and after (fair waiting).
    pub fairness: Vec<crate::fairness::FairnessRow>,
    /// The measurements that failed on this backend, with why.
    pub failures: Vec<String>,
}

/// One backend to measure.
struct Bench {
    name: String,
    about: String,
    store: SharedStore,
    /// The largest rename measured on it.
    max_docs: usize,
    /// The server's URL, for the server-side peer, on a server named by URL.
    url: Option<String>,
}

/// The backends measured: the embedded store, osmem over HTTP, the embedded store behind a
/// network round trip (`remote`: a store whose cost is latency, not the client's CPU), and
/// each server given as `es=URL`.
fn backends(plan: &Plan, embedded: SharedStore) -> anyhow::Result<Vec<Bench>> {
    let memory: SharedStore =
        Arc::new(fs_store::SqliteStore::in_memory().expect("in-memory store"));
    let remote: SharedStore = Arc::new(LatencyStore::new(memory, plan.rtt));
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
        };
        out.push(match wanted.as_str() {
            "embedded" => bench(
                "embedded",
                format!(
                    "{about}; in process, so every call runs on the client's cores, one at a time"
                ),
                Arc::clone(&embedded),
                usize::MAX,
            ),
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
            "remote" => bench(
                "remote",
                format!(
                    "SQLite in memory behind {} ms per call, waited without CPU: a store whose \
                     capacity is its own, as a real Elasticsearch cluster's is",
                    plan.rtt.as_secs_f64() * 1e3
                ),
                Arc::clone(&remote),
                usize::MAX,
            ),
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
    let (embedded, _dir) = embedded(plan.embedded)?;
    for Bench {
        name,
        about,
        store,
        max_docs: max,
        url,
    } in backends(plan, embedded)?
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
        let locks = measured.run(Measurement::Locks, locks(&store, plan)).await;
        let (renames, in_flight) = measured
            .run(
                Measurement::Renames,
                renames(&store, plan, max, url.as_deref()),
            )
            .await;
        let concurrency = measured
            .run(Measurement::Concurrency, concurrency(&store, plan))
            .await;
        let affected = measured
            .run(Measurement::Affected, affected(&store, plan))
            .await;
        let fairness = measured
            .run(
                Measurement::Fairness,
                crate::fairness::fairness(&store, plan.fairness_trials),
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
            failures,
        };
        out.push(r);
    }
    Ok(out)
}

fn deep_path(depth: usize) -> anyhow::Result<FsPath> {
    Ok(FsPath::parse(
        &(1..=depth).map(|i| format!("/d{i}")).collect::<String>(),
    )?)
}

/// Measurement 1: Lock + unlock by depth: batched acquisition against the text's sequence.
async fn locks(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<LockRow>> {
    let index = fs_testkit::unique_name("bench-lock");
    let cas = LockClient::builder(Arc::clone(store), index.clone())
        .protocol(LockProtocol::Cas)
        .build();
    cas.ensure_index().await?;
    let auto = LockClient::builder(Arc::clone(store), index.clone()).build();
    let atomic = (auto.protocol().await? == LockProtocol::Scripted).then_some(auto);
    let mut rows = Vec::new();
    for &depth in &plan.depths {
        let path = deep_path(depth)?;
        let batched = lock_unlock(&cas, &path, plan.lock_repeat).await?;
        let atomic = match &atomic {
            Some(client) => Some(lock_unlock(client, &path, plan.lock_repeat).await?),
            None => None,
        };
        let started = Instant::now();
        let mut book = (0, 0);
        for _ in 0..plan.lock_repeat {
            let trips = crate::book::lock_unlock(store.as_ref(), &index, &path).await?;
            book = (trips.lock, trips.unlock);
        }
        let book_ms = ms(started.elapsed()) / f64::from(plan.lock_repeat);
        eprintln!("lock depth {depth}: compare-and-set {batched:?}, atomic {atomic:?}, book {book:?} {book_ms:.3} ms");
        rows.push(LockRow {
            depth,
            batched: batched.0,
            batched_ms: batched.1,
            atomic,
            book,
            book_ms,
        });
    }
    store.delete_index(&index).await?;
    Ok(rows)
}

/// Locks and unlocks `path` `repeat` times; returns the round trips of the last (lock,
/// unlock) and the mean ms of a lock and unlock.
async fn lock_unlock(
    client: &LockClient,
    path: &FsPath,
    repeat: u32,
) -> anyhow::Result<((u32, u32), f64)> {
    let started = Instant::now();
    let mut trips = (0, 0);
    for _ in 0..repeat {
        let guard = client.lock_tree(path).await?;
        let lock = guard.grant().round_trips;
        trips = (lock, guard.release().await?.round_trips);
    }
    Ok((trips, ms(started.elapsed()) / f64::from(repeat.max(1))))
}

/// Deletes a tree's three indices (the tree, its locks, its journal): a run against a real
/// server leaves nothing behind.
pub async fn drop_tree(tree: &FsTree) -> anyhow::Result<()> {
    let store = tree.store();
    store.delete_index(tree.index()).await?;
    store.delete_index(&tree.lock_index()).await?;
    store
        .delete_index(&fs_model::journal_index_name(tree.index()))
        .await?;
    Ok(())
}

/// A tree `/big` of `docs` documents in directories of 1 000.
async fn big_tree(store: &SharedStore, docs: usize, top: &str) -> anyhow::Result<FsTree> {
    let tree = FsTree::new(Arc::clone(store), fs_testkit::unique_name("bench-fs"));
    tree.ensure_indices().await?;
    insert_dir(&tree, docs, top).await?;
    Ok(tree)
}

pub async fn insert_dir(tree: &FsTree, docs: usize, top: &str) -> anyhow::Result<()> {
    let top = FsPath::parse(top)?;
    let mut all = vec![FsDoc::dir(top.clone(), 0)];
    let mut d = 0;
    while all.len() < docs {
        let dir = top.join(&format!("d{d}"))?;
        all.push(FsDoc::dir(dir.clone(), 0));
        let mut f = 0;
        while all.len() < docs && f < 999 {
            all.push(FsDoc::file(dir.join(&format!("f{f}"))?, 1, 0));
            f += 1;
        }
        d += 1;
    }
    for chunk in all.chunks(10_000) {
        tree.insert_all(chunk.to_vec()).await?;
    }
    tree.refresh().await?;
    Ok(())
}

/// The store's limit: the same scan and the same rewrite of every document, with no lock, no
/// check and no version condition, pipelined as the rename is (`in_flight` bulk requests at
/// once, the next page read meanwhile).
async fn raw_rewrite(
    tree: &FsTree,
    from: &FsPath,
    to: &FsPath,
    in_flight: usize,
) -> anyhow::Result<usize> {
    let store = tree.store();
    let scope = Scope::Subtree(from.clone());
    let mut scan = Scan::new(Arc::clone(store), tree.index(), scope, 1_000);
    let (mut n, mut failure) = (0, None);
    scan.pipeline(
        in_flight,
        |docs| async move {
            let mut ops = Vec::with_capacity(docs.len());
            for d in docs {
                let doc: FsDoc = serde_json::from_value(d.source)?;
                let moved = doc.renamed(from, to)?;
                ops.push(BulkOp::Index {
                    id: d.id,
                    source: serde_json::to_value(&moved)?,
                    if_version: None,
                });
            }
            let sent = ops.len();
            for r in store.bulk(tree.index(), ops).await? {
                r?;
            }
            anyhow::Ok(sent)
        },
        |written| match written {
            Ok(sent) => {
                n += sent;
                ControlFlow::Continue(())
            }
            Err(e) => {
                failure.get_or_insert(e);
                ControlFlow::Break(())
            }
        },
    )
    .await?;
    if let Some(e) = failure {
        return Err(e);
    }
    store.refresh(tree.index()).await?;
    Ok(n)
}

/// Measurement 2: Directory renames of N documents against the raw rewrite of the same documents.
async fn renames(
    store: &SharedStore,
    plan: &Plan,
    max: usize,
    url: Option<&str>,
) -> anyhow::Result<(Vec<RenameRow>, Vec<InFlightRow>)> {
    let (mut rows, mut in_flight_rows) = (Vec::new(), Vec::new());
    for &docs in plan.sizes.iter().filter(|n| **n <= max) {
        let tree = big_tree(store, docs, "/big").await?;
        let peer = match url.map(crate::peer::Peer::new) {
            Some(peer) if peer.runs_scripts(tree.index()).await => Some(peer),
            _ => None,
        };
        let (big, moved) = (FsPath::parse("/big")?, FsPath::parse("/moved")?);
        let (rename_s, raw_s, round_trips) = alternate(
            store,
            &tree,
            (&big, &moved),
            plan.rename_repeat,
            plan.in_flight,
        )
        .await?;
        // The bulk requests in flight, at 10 000 documents: the measurement behind the
        // default (`fs_rename::DEFAULT_IN_FLIGHT`).
        if docs == plan.in_flight_docs {
            for &in_flight in &plan.in_flights {
                let (rename_s, raw_s, round_trips) =
                    alternate(store, &tree, (&big, &moved), 1, in_flight).await?;
                eprintln!(
                    "rename {docs} with {in_flight} in flight: {:.0} docs/s, raw {:.0} docs/s",
                    docs as f64 / rename_s,
                    docs as f64 / raw_s
                );
                in_flight_rows.push(InFlightRow {
                    in_flight,
                    row: RenameRow {
                        docs,
                        rename_s,
                        raw_s,
                        round_trips,
                        peer_s: None,
                        scan_s: None,
                    },
                });
            }
        }
        // The server-side peer, there and back, as many times.
        let mut peers = Vec::new();
        if let Some(peer) = &peer {
            for _ in 0..plan.rename_repeat {
                for (from, to) in [(&big, &moved), (&moved, &big)] {
                    let started = Instant::now();
                    let n = peer.rename(tree.index(), from, to).await?;
                    peers.push(started.elapsed().as_secs_f64());
                    anyhow::ensure!(n == docs as u64, "_update_by_query moved {n} of {docs}");
                }
            }
            let back = tree.count_under(&big).await?;
            anyhow::ensure!(
                back == docs as u64,
                "after the peer, {back} of {docs} under /big"
            );
        }
        let peer_s = (!peers.is_empty()).then(|| median(&mut peers));
        let mut scans = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let scan = Scan::new(
                Arc::clone(store),
                tree.index(),
                Scope::Subtree(big.clone()),
                1_000,
            );
            let n = scan.read_all().await?.len();
            scans.push(started.elapsed().as_secs_f64());
            anyhow::ensure!(n == docs, "the scan read {n} of {docs}");
        }
        let scan_s = Some(median(&mut scans));
        crate::measure::drop_tree(&tree).await?;
        let row = RenameRow {
            docs,
            rename_s,
            raw_s,
            round_trips,
            peer_s,
            scan_s,
        };
        eprintln!(
            "rename {docs}: {:.0} docs/s, raw {:.0} docs/s{}",
            row.rate(),
            row.raw_rate(),
            row.peer_rate()
                .map(|r| format!(", _update_by_query {r:.0} docs/s"))
                .unwrap_or_default()
        );
        rows.push(row);
    }
    Ok((rows, in_flight_rows))
}

/// Renames `/big` to `/moved` and back with the renamer, and rewrites it raw, alternating
/// both ways round (rename there, raw back, raw there, rename back) `repeat` times, so that
/// both see the same store (sizes, caches) and the same directions of travel through the
/// path index; returns the medians (rename, raw) and a rename's round trips.
async fn alternate(
    store: &SharedStore,
    tree: &FsTree,
    (big, moved): (&FsPath, &FsPath),
    repeat: usize,
    in_flight: usize,
) -> anyhow::Result<(f64, f64, u64)> {
    let docs = tree.count_under(big).await? as usize;
    let renamer = Renamer::builder(Arc::clone(store), tree.index())
        .in_flight(in_flight)
        .build();
    let (mut renames, mut raws) = (Vec::new(), Vec::new());
    let mut round_trips = 0;
    for _ in 0..repeat {
        for step in 0..4 {
            let (from, to) = if step % 2 == 0 {
                (big, moved)
            } else {
                (moved, big)
            };
            let started = Instant::now();
            if step == 0 || step == 3 {
                let report = renamer.rename(from, to).await?;
                renames.push(started.elapsed().as_secs_f64());
                round_trips = report.round_trips;
            } else {
                let n = raw_rewrite(tree, from, to, in_flight).await?;
                raws.push(started.elapsed().as_secs_f64());
                anyhow::ensure!(n == docs, "raw rewrite moved {n} of {docs}");
            }
        }
    }
    // The runs themselves, for a reader who wants to judge the spread behind the medians.
    eprintln!("  {docs} documents, seconds a run: rename {renames:.3?}, raw {raws:.3?}");
    Ok((median(&mut renames), median(&mut raws), round_trips))
}

/// Measurement 3: K concurrent renames of disjoint subtrees under one parent, back and forth for a fixed
/// time; renames per second for each scheme.
async fn concurrency(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<ConcurrencyRow>> {
    let mut rows = Vec::new();
    // Tree locking by compare-and-set too, where the store also has atomic updates.
    let probe = LockClient::builder(Arc::clone(store), fs_testkit::unique_name("bench-probe"));
    let atomic = probe.build().protocol().await? == LockProtocol::Scripted;
    let mut schemes = vec![(Strategy::Tree, LockProtocol::Auto)];
    if atomic {
        schemes.push((Strategy::Tree, LockProtocol::Cas));
    }
    // `None` is the store's own ceiling: the same renames with no lock at all (safe here, the
    // subtrees are disjoint).
    for strategy in [Strategy::Document, Strategy::Global, Strategy::None] {
        schemes.push((strategy, LockProtocol::Auto));
    }
    for (strategy, protocol) in schemes {
        for &k in &plan.ks {
            let tree = FsTree::new(Arc::clone(store), fs_testkit::unique_name("bench-k"));
            tree.ensure_indices().await?;
            tree.insert_all(vec![FsDoc::dir(FsPath::parse("/p")?, 0)])
                .await?;
            for i in 0..k {
                insert_dir(&tree, plan.concurrent_docs, &format!("/p/s{i}")).await?;
            }
            let (reports, elapsed) =
                disjoint_renames(store, &tree, (strategy, protocol), k, plan.concurrent_secs)
                    .await?;
            let done = reports.len() as u64;
            let trips: u64 = reports.iter().map(|(r, _)| r.round_trips).sum();
            let locking: Duration = reports
                .iter()
                .map(|(r, _)| r.phases.locking + r.phases.releasing)
                .sum();
            let per_sec = done as f64 / elapsed.as_secs_f64();
            let per = done.max(1) as f64;
            let (round_trips, lock_ms) = (trips as f64 / per, ms(locking) / per);
            eprintln!(
                "{strategy} ({protocol}) K={k}: {per_sec:.1} renames/s, {round_trips:.1} round trips and {lock_ms:.1} ms locking per rename"
            );
            rows.push(ConcurrencyRow {
                k,
                strategy,
                protocol,
                per_sec,
                round_trips,
                lock_ms,
            });
            crate::measure::drop_tree(&tree).await?;
        }
    }
    Ok(rows)
}

/// Runs `k` jobs on `tree`, each renaming its own `/p/sI` to `/p/tI` and back for `secs`;
/// returns every rename's report with its duration, and the time they all took.
pub async fn disjoint_renames(
    store: &SharedStore,
    tree: &FsTree,
    (strategy, protocol): (Strategy, LockProtocol),
    k: usize,
    secs: f64,
) -> anyhow::Result<(Vec<(fs_rename::RenameReport, Duration)>, Duration)> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let tasks = (0..k).map(|i| {
        let renamer = Renamer::builder(Arc::clone(store), tree.index())
            .strategy(strategy)
            .lock_protocol(protocol)
            .wait(Duration::from_secs(120))
            .build();
        tokio::spawn(async move {
            let (a, b) = (
                FsPath::parse(&format!("/p/s{i}"))?,
                FsPath::parse(&format!("/p/t{i}"))?,
            );
            let mut reports = Vec::new();
            while Instant::now() < deadline {
                let (from, to) = if reports.len() % 2 == 0 {
                    (&a, &b)
                } else {
                    (&b, &a)
                };
                let began = Instant::now();
                let report = renamer.rename(from, to).await?;
                reports.push((report, began.elapsed()));
            }
            anyhow::Ok(reports)
        })
    });
    let mut all = Vec::new();
    for finished in futures::future::join_all(tasks).await {
        all.extend(finished??);
    }
    Ok((all, started.elapsed()))
}

/// Measurement 4: Locking cost (lock + release, round trips and time) as the affected documents grow.
async fn affected(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<AffectedRow>> {
    let mut rows = Vec::new();
    for &docs in &plan.affected {
        let tree = big_tree(store, docs, "/a").await?;
        for strategy in [Strategy::Tree, Strategy::Document] {
            // The lock requests' round trips, from the job's own events.
            let trips = Arc::new(std::sync::atomic::AtomicU32::new(0));
            let sink_trips = Arc::clone(&trips);
            let renamer = Renamer::builder(Arc::clone(store), tree.index())
                .strategy(strategy)
                .progress(Arc::new(move |event| {
                    if let fs_rename::RenameEvent::Locked { round_trips, .. } = event {
                        sink_trips.fetch_add(round_trips, std::sync::atomic::Ordering::Relaxed);
                    }
                }))
                .build();
            let (a, b) = (FsPath::parse("/a")?, FsPath::parse("/b")?);
            let report = renamer.rename(&a, &b).await?;
            let lock_ms = ms(report.phases.locking + report.phases.releasing);
            let round_trips = trips.load(std::sync::atomic::Ordering::Relaxed);
            renamer.rename(&b, &a).await?;
            eprintln!(
                "{strategy} over {docs} docs: {lock_ms:.2} ms locking, {round_trips} round trips"
            );
            rows.push(AffectedRow {
                docs,
                strategy,
                lock_ms,
                round_trips,
            });
        }
        crate::measure::drop_tree(&tree).await?;
    }
    Ok(rows)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Renames of a directory of `docs` documents on the embedded store, back and forth
/// `times` times, for a profiler (the tree is built once, so the renames dominate the
/// profile). Prints each rename's phases; returns the median seconds per rename.
pub async fn profile_rename(docs: usize, times: usize, kind: Embedded) -> anyhow::Result<f64> {
    let (store, _dir) = embedded(kind)?;
    let tree = big_tree(&store, docs, "/big").await?;
    let renamer = Renamer::builder(Arc::clone(&store), tree.index()).build();
    let (a, b) = (FsPath::parse("/big")?, FsPath::parse("/moved")?);
    let mut seconds = Vec::new();
    for i in 0..times {
        let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let started = Instant::now();
        let report = renamer.rename(from, to).await?;
        let took = started.elapsed().as_secs_f64();
        anyhow::ensure!(
            report.rewritten as usize == docs,
            "moved {}",
            report.rewritten
        );
        let p = report.phases;
        eprintln!(
            "rename {from} -> {to}: {took:.3} s; locking {:.1} ms, checking {:.1} ms, rewriting {:.1} ms, releasing {:.1} ms; {} round trips",
            ms(p.locking),
            ms(p.checking),
            ms(p.rewriting),
            ms(p.releasing),
            report.round_trips
        );
        seconds.push(took);
    }
    Ok(median(&mut seconds))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
