//! A deterministic simulation of overlapping renames, copies and deletes under injected
//! faults, with consistent readers and recovery, on one thread and virtual time.
//!
//! Each seed draws a workload (3–6 jobs, starting at random moments: half of them renames of
//! random files and directories to random new places, a quarter copies (`cp -r`), a quarter
//! deletes (`rm -r`); a source is sometimes what an earlier job of the seed makes), up to two
//! consistent readers (`ls -R --consistent`: a listing under a shared lock), and, for every
//! job and reader, a fault schedule: transient failures before a call, answers lost after a
//! write landed, failed bulk items, a "process death" at a random call (from then on its
//! calls never return: no write, no renewal, no release), and a freeze at a random call for
//! up to three leases (a zombie, when it outlasts the lease). Recovery runs at random moments
//! through a faulty store of its own (which may die or freeze too), and once more, fault-free,
//! at the end. Copies hold S on their source and readers S on what they list, so all four
//! lock modes meet, and a request refused long enough waits its turn as a registered waiter.
//!
//! After every step (every write that reaches the store) the invariants of
//! [`invariants::check`] are checked against a model of the committed jobs
//! ([`invariants::Expected`]: a rename moves documents, a copy adds documents with the ids
//! [`fs_model::FsDoc::copy_id`] gives, a delete removes them): the same documents, but for
//! what an open journal entry explains; no path twice; no two incompatible grants overlapping
//! (S and X targets, Gray's table per document); every document where the committed jobs put
//! it, with its metadata; the tree well-formed outside the renames and copies in flight (a
//! delete in flight leaves no orphan). Every refusal by an older waiter must come from a
//! registration that was live (a dead waiter blocks nobody past its lease), and every
//! consistent listing must equal the model at some moment of the read. At the end, once
//! everything has expired and recovery has settled: no lock document (no waiter left either),
//! no journal entry, exactly the model's documents (so every copy and every delete happened
//! whole or not at all), fsck clean.
//!
//! Everything follows the seed: the workload, the faults, and, through
//! [`fs_model::entropy::seed_thread`] and [`fs_locks::LeaseClock::anchor_thread`], every
//! process id, journal id (hence every copy's ids), backoff pause and lease timestamp. A seed
//! therefore replays exactly (`a_seed_replays_exactly` checks it call by call), and a failure
//! prints the command that re-runs it: `FSRENAME_SIM_SEED=<seed>`. `FSRENAME_SIM_SEEDS=N` runs
//! N seeds (default 5 000 with compare-and-set locks, 2 000 scripted, 2 000 atomic) from
//! `FSRENAME_SIM_FIRST` (default 0), plus the few seeds beyond that once found a bug
//! (`FOUND_BEYOND`), spread over `FSRENAME_SIM_THREADS` threads (default: the
//! available cores, at most 4); each seed runs alone on one of them. `FSRENAME_SIM_TRACE=1`
//! prints every call and answer as it happens (for one seed).

mod invariants;
mod watch;
mod workload;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fs_locks::LeaseClock;
use fs_model::{DocKind, FsDoc, FsPath};
use fs_rename::{fsck, FsTree, JobKind, LockSettings, Recovery, RecoveryReport, Renamer};
use fs_store::{BulkOp, SharedStore, SqliteOptions, SqliteStore};
use fs_testkit::{faulty, FaultPlan, FaultyStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::invariants::Expected;
use crate::watch::{Commit, Counters, Watched, World};
use crate::workload::Job;

const INDEX: &str = "fs";
const LEASE: Duration = Duration::from_secs(1);
const PAGE: usize = 4;
/// What every seed's lease clock reads when it starts (2027-01-15): a fixed epoch, so lease
/// boundaries fall on the same milliseconds in every replay.
const EPOCH_MS: i64 = 1_800_000_000_000;

/// Seeds per run by default: about 30 s on two cores in the test profile. The floor
/// is 500; more found bugs that 500 did not (seeds 1610 and 19562). Every seed mixes renames,
/// copies and deletes (issue 15 asks for 5 000 such seeds).
const DEFAULT_SEEDS: u64 = 5_000;
/// Seeds per run with the scripted protocol by default (issue 14's floor is 2 000).
const DEFAULT_SCRIPTED_SEEDS: u64 = 2_000;
/// Seeds beyond the default range that once found a bug, run with it every time (with
/// compare-and-set locks, where they were found): 27719 and 51872, a copy's delayed bulk
/// create landing after recovery finished the copy and `rm -r` removed it; 47784, a consistent
/// listing paused past its lease and read after a rename took over; 24894, a recoverer paused
/// between its claim of a copy's entry and its locks, which finished the copy a second time
/// after another recoverer had finished it and `rm -r` removed it; 46251, late claims that the
/// sweep did not see (it searched without a refresh).
const FOUND_BEYOND: &[u64] = &[24_894, 27_719, 46_251, 47_784, 51_872];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn simulated_renames_with_faults_and_recovery() {
    run_seeds(
        "simulated_renames_with_faults_and_recovery",
        DEFAULT_SEEDS,
        FOUND_BEYOND,
        Locks::Cas,
    );
}

/// The same workloads with the scripted lock protocol: the lock scripts run as Elasticsearch
/// runs a scripted update (read, run, write conditionally; races retried, then 409), through
/// the same implementation as the Elasticsearch-behaviour proxy of the HTTP tests.
#[test]
fn simulated_renames_with_scripted_locks() {
    run_seeds(
        "simulated_renames_with_scripted_locks",
        DEFAULT_SCRIPTED_SEEDS,
        &[],
        Locks::Scripted,
    );
}

/// The same workloads with the embedded store's atomic scripted updates: each lock script's
/// twin runs inside one transaction, so updates never race (issue 16).
#[test]
fn simulated_renames_with_atomic_locks() {
    run_seeds(
        "simulated_renames_with_atomic_locks",
        DEFAULT_SCRIPTED_SEEDS,
        &[],
        Locks::Atomic,
    );
}

/// Which lock protocol the jobs and recoveries of a seed use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locks {
    /// Compare-and-set: the embedded store runs no scripts.
    Cas,
    /// The stored scripts, run by [`fs_testkit::ScriptingStore`] in front of the store.
    Scripted,
    /// The stored scripts, run atomically by the embedded store itself.
    Atomic,
}

fn run_seeds(test: &str, default_seeds: u64, found_beyond: &[u64], locks: Locks) {
    let seeds: Vec<u64> = match env_u64("FSRENAME_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("FSRENAME_SIM_FIRST").unwrap_or(0);
            let n = env_u64("FSRENAME_SIM_SEEDS").unwrap_or(default_seeds);
            let range = first..first + n;
            let beyond = found_beyond.iter().filter(|s| !range.contains(s)).copied();
            let beyond: Vec<u64> = beyond.collect();
            range.chain(beyond).collect()
        }
    };
    let threads = env_u64("FSRENAME_SIM_THREADS")
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get().min(4))
                .unwrap_or(1)
        })
        .clamp(1, seeds.len().max(1));
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let total = Mutex::new(Stats::default());
    let failures: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                if i >= seeds.len() || failed.load(Ordering::SeqCst) {
                    return;
                }
                let seed = seeds[i];
                match std::panic::catch_unwind(|| run_seed(seed, false, locks)) {
                    Ok(outcome) => total.lock().unwrap().add(&outcome.stats),
                    Err(panic) => {
                        failed.store(true, Ordering::SeqCst);
                        failures.lock().unwrap().push((seed, panic_message(&panic)));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    if let Some((seed, message)) = failures.iter().min_by_key(|(seed, _)| *seed) {
        panic!(
            "simulation failed at seed {seed}: {message}\nre-run it with \
             FSRENAME_SIM_SEED={seed} cargo test -p fs-rename --test simulation {test} -- --nocapture"
        );
    }
    let stats = total.into_inner().unwrap();
    println!(
        "{} seeds ({locks:?} locks) on {threads} threads: {stats:?}",
        seeds.len()
    );
    let copies = &stats.by_kind[kind_index(JobKind::Copy)];
    let deletes = &stats.by_kind[kind_index(JobKind::Delete)];
    let world = &stats.world;
    assert!(
        seeds.len() < 100
            || stats.died > 0
                && stats.recovered > 0
                && stats.completed > 0
                && stats.failed > 0
                && stats.froze_then_failed > 0
                && [copies, deletes]
                    .iter()
                    .all(|k| k.completed > 0 && k.died > 0 && k.recovered > 0)
                && world.copies_committed > 0
                && world.deletes_committed > 0
                && world.waiter_refusals > 0
                && world.listings_checked > 0,
        "the workload never exercised every outcome: {stats:?}"
    );
}

/// The determinism the seed promises: two runs of one seed make the same calls, in the same
/// order, at the same virtual times, and get the same answers.
#[test]
fn a_seed_replays_exactly() {
    let mut seen = Vec::new();
    for seed in [3, 17, 64, 101, 250, 499] {
        let locks = match seed % 3 {
            0 => Locks::Cas,
            1 => Locks::Scripted,
            _ => Locks::Atomic,
        };
        let first = run_seed(seed, true, locks);
        let second = run_seed(seed, true, locks);
        assert!(
            first.trace.len() > 50,
            "seed {seed}: a trace of {} calls",
            first.trace.len()
        );
        if let Some(i) = (0..first.trace.len().max(second.trace.len()))
            .find(|&i| first.trace.get(i) != second.trace.get(i))
        {
            panic!(
                "seed {seed} did not replay: call {i} differs\nfirst:  {:?}\nsecond: {:?}",
                first.trace.get(i),
                second.trace.get(i)
            );
        }
        seen.extend(first.trace);
    }
    // What the replayed seeds cover between them: every kind of job committed, and a
    // consistent listing.
    for what in ["committed mv ", "committed cp ", "committed rm ", "listed "] {
        assert!(
            seen.iter().any(|line| line.contains(what)),
            "no replayed seed shows `{what}`"
        );
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The outcomes of the jobs of one kind.
#[derive(Debug, Default, Clone)]
struct KindStats {
    jobs: u64,
    completed: u64,
    failed: u64,
    died: u64,
    /// Finished by a recovery (the job had died or frozen after journaling).
    recovered: u64,
}

impl KindStats {
    fn add(&mut self, other: &KindStats) {
        self.jobs += other.jobs;
        self.completed += other.completed;
        self.failed += other.failed;
        self.died += other.died;
        self.recovered += other.recovered;
    }
}

/// Where a kind's outcomes are kept in [`Stats::by_kind`].
fn kind_index(kind: JobKind) -> usize {
    match kind {
        JobKind::Rename => 0,
        JobKind::Copy => 1,
        JobKind::Delete => 2,
    }
}

#[derive(Debug, Default)]
struct Stats {
    jobs: u64,
    completed: u64,
    failed: u64,
    died: u64,
    /// Jobs whose process froze at some point (zombies, when the freeze outlasted the lease).
    froze: u64,
    /// Of those, the ones that then failed (stopped by a lost lease or a conflict).
    froze_then_failed: u64,
    /// Times a job's journal write met a fence (a recovery had cleared its expired locks)
    /// and the job started over.
    fenced: u64,
    recovered: u64,
    steps: u64,
    /// Renames, copies and deletes (in this order): the same outcomes by kind.
    by_kind: [KindStats; 3],
    /// Consistent reads that listed, and those that failed (a lock timeout, a store failure).
    reads: u64,
    reads_failed: u64,
    /// What the model saw: commits by kind, waiters and their refusals, listings checked.
    world: Counters,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.jobs += other.jobs;
        self.completed += other.completed;
        self.failed += other.failed;
        self.died += other.died;
        self.froze += other.froze;
        self.froze_then_failed += other.froze_then_failed;
        self.fenced += other.fenced;
        self.recovered += other.recovered;
        self.steps += other.steps;
        for (mine, theirs) in self.by_kind.iter_mut().zip(&other.by_kind) {
            mine.add(theirs);
        }
        self.reads += other.reads;
        self.reads_failed += other.reads_failed;
        let (w, o) = (&mut self.world, &other.world);
        w.renames_committed += o.renames_committed;
        w.copies_committed += o.copies_committed;
        w.deletes_committed += o.deletes_committed;
        w.waiters_registered += o.waiters_registered;
        w.waiters_expired_in_place += o.waiters_expired_in_place;
        w.waiter_refusals += o.waiter_refusals;
        w.late_waiter_refusals += o.late_waiter_refusals;
        w.listings_checked += o.listings_checked;
    }

    /// Counts what recovery finished, by kind.
    fn recovered(&mut self, report: &RecoveryReport) {
        self.recovered += report.finished.len() as u64;
        for done in &report.finished {
            self.by_kind[kind_index(done.kind)].recovered += 1;
        }
    }

    /// Counts how a job of `kind` ended: `ok`, or failed; `store` says whether its process
    /// froze or died on the way (`None`: it never ended, as a dead process does not).
    fn ended(&mut self, kind: JobKind, ok: bool, store: Option<&FaultyStore>) {
        let by_kind = &mut self.by_kind[kind_index(kind)];
        by_kind.jobs += 1;
        let dead = store.is_none_or(FaultyStore::is_dead);
        if store.is_some_and(FaultyStore::has_frozen) {
            self.froze += 1;
            if !ok && !dead {
                self.froze_then_failed += 1;
            }
        }
        let (total, mine) = match (ok, dead) {
            (true, _) => (&mut self.completed, &mut by_kind.completed),
            (false, true) => (&mut self.died, &mut by_kind.died),
            (false, false) => (&mut self.failed, &mut by_kind.failed),
        };
        *total += 1;
        *mine += 1;
    }
}

struct Outcome {
    stats: Stats,
    trace: Vec<String>,
}

/// Runs one seed alone on this thread: a seeded entropy source, a paused single-threaded
/// runtime, and (inside it) an anchored lease clock.
fn run_seed(seed: u64, trace: bool, locks: Locks) -> Outcome {
    let _entropy = fs_model::entropy::seed_thread(seed ^ 0x5EED_F00D_CAFE_D00D);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(simulate(seed, trace, locks))
}

/// The initial tree: `/d0..d2`, each with `s0..s2`, each with files `f0..f2` (39 documents),
/// with ids, sizes and modification times fixed by the seed-independent layout (all
/// different, so that a copy with the wrong metadata shows).
fn initial_tree() -> Vec<(String, FsDoc)> {
    let mut docs = Vec::new();
    let mut add = |path: String, kind| {
        let n = docs.len();
        let id = format!("doc{n:03}");
        let size = if kind == DocKind::File {
            100 + 7 * n as u64
        } else {
            0
        };
        let modified = EPOCH_MS - 86_400_000 + 1_000 * n as i64;
        docs.push((
            id,
            FsDoc::new(FsPath::parse(&path).expect("path"), kind, size, modified),
        ));
    };
    for d in 0..3 {
        add(format!("/d{d}"), DocKind::Dir);
        for s in 0..3 {
            add(format!("/d{d}/s{s}"), DocKind::Dir);
            for f in 0..3 {
                add(format!("/d{d}/s{s}/f{f}"), DocKind::File);
            }
        }
    }
    docs
}

/// A fault schedule: transient failures, lost answers and failed bulk items throughout;
/// with probability `death` a death at a random call, and with probability `freeze` a freeze
/// at a random call for up to three leases (a zombie, if it outlasts the lease).
fn plan(rng: &mut StdRng, death: f64, freeze: f64, max_calls: u64) -> FaultPlan {
    FaultPlan {
        transient: 0.04,
        lost_reply: 0.04,
        item_fail: 0.05,
        die_at: rng
            .random_bool(death)
            .then(|| rng.random_range(1..max_calls)),
        freeze_at: rng.random_bool(freeze).then(|| {
            let pause = LEASE.mul_f64(rng.random_range(0.1..3.0));
            (rng.random_range(1..max_calls), pause)
        }),
    }
}

async fn simulate(seed: u64, trace: bool, locks: Locks) -> Outcome {
    let _clock = LeaseClock::anchor_thread(EPOCH_MS);
    let mut rng = StdRng::seed_from_u64(seed);
    let raw = Arc::new(
        SqliteStore::in_memory_with(SqliteOptions::new().near_real_time(true).inline(true))
            .expect("store"),
    );
    let initial = initial_tree();
    {
        let raw: SharedStore = Arc::clone(&raw) as SharedStore;
        FsTree::new(Arc::clone(&raw), INDEX)
            .ensure_indices()
            .await
            .expect("indices");
        let ops = initial
            .iter()
            .map(|(id, doc)| BulkOp::Create {
                id: id.clone(),
                source: serde_json::to_value(doc).expect("doc"),
            })
            .collect();
        raw.bulk(INDEX, ops).await.expect("insert");
        raw.refresh(INDEX).await.expect("refresh");
    }
    let expected = Expected {
        docs: initial.iter().cloned().collect(),
    };
    let world = World::new(Arc::clone(&raw), expected, trace);
    let watched: SharedStore = Arc::new(Watched(Arc::clone(&world), locks == Locks::Atomic));
    // Scripted updates decompose into reads and conditional writes below the scripting layer,
    // so every one of those writes is a step the invariants are checked after; an atomic
    // bulk of them is one step.
    let base: SharedStore = match locks {
        Locks::Cas | Locks::Atomic => watched,
        Locks::Scripted => Arc::new(fs_testkit::ScriptingStore::new(watched)),
    };
    let paths: Vec<FsPath> = initial.iter().map(|(_, d)| d.path.clone()).collect();
    let dirs: Vec<FsPath> = initial
        .iter()
        .filter(|(_, d)| d.kind == DocKind::Dir)
        .map(|(_, d)| d.path.clone())
        .chain([FsPath::root()])
        .collect();
    let mut stats = Stats::default();

    let n_jobs = rng.random_range(3..=6);
    let fenced = Arc::new(AtomicU64::new(0));
    let mut jobs: Vec<Job> = Vec::new();
    let mut handles = Vec::new();
    for j in 0..n_jobs {
        let job = Job::draw(&mut rng, j, &paths, &dirs, &jobs);
        jobs.push(job.clone());
        let store = faulty(
            Arc::clone(&base),
            plan(&mut rng, 0.3, 0.25, 60),
            rng.random(),
        );
        let delay = Duration::from_millis(rng.random_range(0..1_500));
        let fenced = Arc::clone(&fenced);
        let renamer = Renamer::builder(store.clone(), INDEX)
            .lease(LEASE)
            .wait(Duration::from_secs(4))
            .page_size(PAGE)
            .hooks(Arc::new(Commit(Arc::clone(&world))))
            .progress(workload::refusals(Arc::clone(&world), Arc::clone(&store)))
            .build();
        handles.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let outcome = job.run(&renamer).await;
            fenced.fetch_add(u64::from(outcome.report.restarts), Ordering::SeqCst);
            (outcome.result.is_ok(), store)
        }));
    }
    stats.jobs = n_jobs as u64;

    // Consistent readers: a listing of a directory (or of what a job makes) under S.
    let mut readers = Vec::new();
    for _ in 0..rng.random_range(0..=2) {
        let made: Vec<&FsPath> = jobs
            .iter()
            .filter_map(|job| match job {
                Job::Rename { to, .. } | Job::Copy { to, .. } => Some(to),
                Job::Delete { .. } => None,
            })
            .collect();
        let path = if !made.is_empty() && rng.random_bool(0.3) {
            made[rng.random_range(0..made.len())].clone()
        } else {
            dirs[rng.random_range(0..dirs.len() - 1)].clone()
        };
        let store = faulty(
            Arc::clone(&base),
            plan(&mut rng, 0.15, 0.15, 12),
            rng.random(),
        );
        let delay = Duration::from_millis(rng.random_range(0..3_000));
        let world = Arc::clone(&world);
        let settings = LockSettings {
            lease: LEASE,
            wait: Duration::from_secs(4),
            ..LockSettings::default()
        };
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            workload::read(&world, store, &settings, &path).await
        }));
    }

    let recoveries = rng.random_range(1..=4);
    let mut recoverers = Vec::new();
    for _ in 0..recoveries {
        let store = faulty(
            Arc::clone(&base),
            plan(&mut rng, 0.15, 0.15, 40),
            rng.random(),
        );
        let delay = Duration::from_millis(rng.random_range(500..4_000));
        let recovery = Recovery::new(store, INDEX)
            .lease(LEASE)
            .wait(Duration::from_secs(2))
            .page_size(PAGE)
            .hooks(Arc::new(Commit(Arc::clone(&world))));
        recoverers.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            tokio::time::timeout(Duration::from_secs(20), recovery.run()).await
        }));
    }

    for (job, handle) in jobs.iter().zip(handles) {
        match tokio::time::timeout(Duration::from_secs(60), handle).await {
            Ok(Ok((ok, store))) => stats.ended(job.kind(), ok, Some(&store)),
            Ok(Err(e)) => std::panic::resume_unwind(e.into_panic()),
            Err(_) => stats.ended(job.kind(), false, None),
        }
    }
    for reader in readers {
        match tokio::time::timeout(Duration::from_secs(60), reader).await {
            Ok(Ok(true)) => stats.reads += 1,
            Ok(Ok(false)) | Err(_) => stats.reads_failed += 1,
            Ok(Err(e)) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    for recoverer in recoverers {
        match recoverer.await {
            Ok(Ok(Ok(report))) => stats.recovered(&report),
            Ok(_) => {}
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    // The end: everything left expires, and a fault-free recovery cleans up.
    tokio::time::sleep(LEASE * 3).await;
    let recovery = Recovery::new(Arc::clone(&base), INDEX)
        .lease(LEASE)
        .page_size(PAGE)
        .hooks(Arc::new(Commit(Arc::clone(&world))));
    for round in 0.. {
        let report = recovery.run().await.expect("final recovery");
        stats.recovered(&report);
        assert!(report.failed.is_empty(), "seed {seed}: {report}");
        if report.is_idle() && report.running.is_empty() {
            break;
        }
        assert!(round < 5, "seed {seed}: recovery does not settle: {report}");
        tokio::time::sleep(LEASE * 2).await;
    }
    if let Some(violation) = world.violation() {
        panic!("seed {seed}: {violation}");
    }
    let expected = world.expected();
    if let Err(broken) = invariants::check_settled(&raw, &expected).await {
        panic!("seed {seed}, once settled: {broken}");
    }
    let report = fsck(Arc::clone(&base), INDEX, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "seed {seed}: {report}");
    assert_eq!(
        report.locks_active + report.locks_gone + report.locks_expired + report.journals_open(),
        0,
        "seed {seed}: {report}"
    );
    stats.steps = world.steps();
    stats.fenced = fenced.load(Ordering::SeqCst);
    stats.world = world.counters();
    Outcome {
        stats,
        trace: world.trace(),
    }
}
