//! The measurements, on one backend at a time: what to run ([`Plan`]) and the rows they give;
//! one file each for how they are run (`run`), the locks (`locks`), the renames (`renames`),
//! the concurrent jobs (`concurrency`), the service (`service`) and the lock-index writes a
//! job makes (`lock_writes`).

use std::sync::Arc;
use std::time::Duration;

use fs_locks::LockProtocol;
use fs_rename::Strategy;
use fs_store::SharedStore;
use fs_testkit::Backend;

mod concurrency;
mod lock_writes;
mod locks;
mod renames;
mod run;
mod service;

pub use concurrency::disjoint_renames;
pub use lock_writes::{LockWriteCounts, LockWrites};
pub use renames::{drop_tree, insert_dir, profile_rename};
pub use run::{osmem, run_all};
pub use service::ServiceRow;

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
    /// The clients of the service measurement.
    pub service_ks: Vec<usize>,
    /// The numbers of service instances on one store the service measurement runs with.
    pub service_instances: Vec<usize>,
    /// Rounds of the service measurement (each runs tree, global and none once).
    pub service_rounds: usize,
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
    /// 6: renames through `fsrename serve`, tree (its jobs taking their own intention locks,
    /// and sharing the instance's), global and no locks (issues 35 and 51).
    Service,
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
    let (store, _, dir) = embedded_with_connection(kind)?;
    Ok((store, dir))
}

/// [`embedded`], with the SQLite store itself where there is one, whose connection's use the
/// service measurement reads ([`fs_store::SqliteStore::connection_use`]).
pub fn embedded_with_connection(
    kind: Embedded,
) -> anyhow::Result<(
    SharedStore,
    Option<fs_store::SqliteStore>,
    Option<tempfile::TempDir>,
)> {
    Ok(match kind {
        Embedded::File => {
            let dir = tempfile::tempdir()?;
            let store = fs_store::SqliteStore::open(dir.path().join("bench.db"))?;
            (Arc::new(store.clone()), Some(store), Some(dir))
        }
        Embedded::Memory => {
            let store = fs_store::SqliteStore::in_memory()?;
            (Arc::new(store.clone()), Some(store), None)
        }
        Embedded::NearRealTime => (Backend::Embedded.store(), None, None),
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
        let sizes: Vec<usize> = [1_000, 10_000, 20_000, 100_000]
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
            service_ks: vec![1, 16, 64],
            service_instances: vec![1],
            service_rounds: if quick { 1 } else { 5 },
            embedded,
            only: vec![
                Measurement::Locks,
                Measurement::Renames,
                Measurement::Concurrency,
                Measurement::Affected,
                Measurement::Fairness,
                Measurement::Service,
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
    /// The median of the rename rewritten by the server (`--rewrite server`: the same locks,
    /// check and journal, the rewrite one task), paired with the peer, where the server runs
    /// painless.
    pub server_s: Option<f64>,
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
    pub fn server_rate(&self) -> Option<f64> {
        self.server_s.map(|s| self.docs as f64 / s)
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
    /// Measurement 6: renames through the service.
    pub service: Vec<ServiceRow>,
    /// The measurements that failed on this backend, with why.
    pub failures: Vec<String>,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
