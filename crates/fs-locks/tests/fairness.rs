//! Fair waiting under load: a rename of `/clinton` is not starved by a stream of renames below
//! it.
//!
//! Eight churners, each with a client of its own, rename `/clinton/dI/fK` to `/clinton/dI/gK`
//! over and over, so that `/clinton` is almost never free of their IX locks. A ninth client
//! then asks to rename `/clinton` itself (X on `/clinton`), trial after trial, and the time
//! until it is granted is measured. With fair waiting it registers as a waiter on `/clinton`
//! once refused for `queue_after`, the churners' younger requests are refused there, and it is
//! granted as soon as the IX locks in progress are given back.
//!
//! The baseline shows what fair waiting prevents: the same measurement by a client that
//! already holds a lock elsewhere. Such a client ignores the queue and never registers (a
//! holder never waits for a waiter), which is how every request behaved before fair waiting;
//! it gets `/clinton` only when all eight churners happen to be out at once.
//!
//! `FSRENAME_FAIRNESS_TRIALS` sets the number of trials (default 50);
//! `FSRENAME_FAIRNESS_BASELINE_TRIALS` those of the baseline (default 5: a starved trial takes
//! its whole 5 s). Every backend prints one line per measurement, starting with `fairness`; the
//! tests of this binary run side by side and share the CPUs, so for figures to compare run it
//! with `--test-threads=1`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fs_locks::{LockClient, LockClientBuilder, LockError, LockProtocol, Observed};
use fs_testkit::Backend;
use tokio::task::JoinSet;
use tokio::time::Instant;

const CHURNERS: u64 = 8;

/// The library's default backoff (5 ms doubling to 500 ms) rather than the helpers' fast one:
/// the queue's timings derive from it, so these are the figures a user sees.
const BACKOFF_BASE_MS: u64 = 5;
const BACKOFF_MAX_MS: u64 = 500;

/// How long a churner holds its rename locks: a tiny hold, so that `/clinton` is free of IX
/// locks only when every churner happens to be between two renames.
const CHURN_HOLD: Duration = Duration::from_millis(1);

/// How long the rename of `/clinton` holds its locks once granted.
const PARENT_HOLD: Duration = Duration::from_millis(5);

/// How long the rename of `/clinton` may wait with fair waiting: far more than it should
/// ever need, so that a refusal shows as a failed trial rather than a hang.
const FAIR_WAIT: Duration = Duration::from_secs(20);

/// The bound on the fair wait. From the settings: the request registers at its first refusal
/// after `queue_after` (10 × the backoff base, 50 ms), at most one jittered pause later (the
/// fifth pause is at most 80 ms); then the churners' renames in progress finish (a hold of
/// 1 ms and a release each), and it polls at most `head_pause` (a tenth of the longest pause,
/// 50 ms) apart: about 200 ms. Older requests go first, though: a churner that queued behind
/// the previous trial's rename may still be registered, and in a pause of up to 500 ms, when
/// the next trial starts; that adds up to a longest pause, about 700 ms in all. The bound is
/// several times that, so that only starvation fails it, not a slow or busy machine.
const FAIR_BOUND: Duration = Duration::from_secs(5);

/// How long the baseline's rename of `/clinton` waits before it counts as starved.
const NO_QUEUE_CAP: Duration = Duration::from_secs(5);

/// The lease of a waiter registration with this backoff: four of the longest pauses (at
/// least a second, at most the lock lease of 30 s). A waiter entry left behind by a request
/// that gave up blocks nobody once it has run out.
const WAITER_LEASE: Duration = Duration::from_millis(4 * BACKOFF_MAX_MS);

/// How many churner renames must be granted before a trial starts: two rounds of all eight,
/// so that every trial starts under full load (the churners back off while the previous
/// trial's rename holds `/clinton`, by up to 500 ms).
const CHURN_BEFORE_TRIAL: u64 = 2 * CHURNERS;

/// Reads a number of trials from `var`, else `default`.
fn trials(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn fair_builder(env: &Env, holder: &str) -> LockClientBuilder {
    client_builder(env, holder).backoff(
        Duration::from_millis(BACKOFF_BASE_MS),
        Duration::from_millis(BACKOFF_MAX_MS),
    )
}

/// The eight churners: their grants so far, and how to stop them.
struct Churn {
    stop: Arc<AtomicBool>,
    grants: Arc<AtomicU64>,
    tasks: JoinSet<u64>,
}

impl Churn {
    fn start(env: &Env) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let grants = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        for i in 0..CHURNERS {
            let (env, stop, grants) = (env.clone(), Arc::clone(&stop), Arc::clone(&grants));
            tasks.spawn(async move {
                // Patient: a churner refused while `/clinton` is being renamed waits its turn
                // (and queues, like anyone else) rather than failing.
                let client = fair_builder(&env, &format!("churner-{i}"))
                    .wait(Duration::from_secs(10))
                    .build();
                let mut timed_out = 0;
                for k in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let from = p(&format!("/clinton/d{i}/f{k}"));
                    let to = p(&format!("/clinton/d{i}/g{k}"));
                    match client.lock_rename(&from, &to).await {
                        Ok(guard) => {
                            grants.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(CHURN_HOLD).await;
                            guard.release().await.expect("churner: release");
                        }
                        Err(e) if e.is_retryable() => timed_out += 1,
                        Err(e) => panic!("churner {i}: {e}"),
                    }
                }
                timed_out
            });
        }
        Churn {
            stop,
            grants,
            tasks,
        }
    }

    /// Waits until the churners have been granted [`CHURN_BEFORE_TRIAL`] more renames.
    async fn under_load(&self) {
        let from = self.grants.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.grants.load(Ordering::Relaxed) < from + CHURN_BEFORE_TRIAL {
            assert!(
                Instant::now() < deadline,
                "the churners made no progress for 20 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Stops the churners; returns their grants and their timeouts.
    async fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let mut timed_out = 0;
        while let Some(done) = self.tasks.join_next().await {
            timed_out += done.expect("churner task");
        }
        (self.grants.load(Ordering::Relaxed), timed_out)
    }
}

/// The figures of one measurement.
struct Waits {
    waits: Vec<Duration>,
    timed_out: usize,
}

impl Waits {
    /// Returns the `pct` percentile by nearest rank.
    fn percentile(&self, pct: usize) -> Duration {
        let mut sorted = self.waits.clone();
        sorted.sort_unstable();
        let rank = (sorted.len() * pct).div_ceil(100).max(1);
        sorted[rank - 1]
    }

    fn max(&self) -> Duration {
        self.waits.iter().copied().max().unwrap_or_default()
    }

    fn summary(&self) -> String {
        format!(
            "{} trials, {} timed out, wait p50 {} ms, p99 {} ms, max {} ms",
            self.waits.len(),
            self.timed_out,
            self.percentile(50).as_millis(),
            self.percentile(99).as_millis(),
            self.max().as_millis(),
        )
    }
}

/// Runs `trials` renames of `/clinton` by `parent` under the churn, each starting under full
/// load. A timeout counts as a wait of what was waited.
async fn rename_the_parent_under_churn(churn: &Churn, parent: &LockClient, trials: usize) -> Waits {
    let (clinton, gormley) = (p("/clinton"), p("/gormley"));
    let mut figures = Waits {
        waits: Vec::new(),
        timed_out: 0,
    };
    for _ in 0..trials {
        churn.under_load().await;
        let started = Instant::now();
        match parent.lock_rename(&clinton, &gormley).await {
            Ok(guard) => {
                figures.waits.push(started.elapsed());
                tokio::time::sleep(PARENT_HOLD).await;
                guard.release().await.expect("release /clinton");
            }
            Err(LockError::Timeout { waited, .. }) => {
                figures.waits.push(waited);
                figures.timed_out += 1;
            }
            Err(e) => panic!("renaming /clinton: {e}"),
        }
    }
    figures
}

/// Names the backend and the protocol its clients really use, for the printed lines.
async fn label(env: &Env, client: &LockClient) -> String {
    let backend = match env.backend {
        Backend::Embedded => "embedded",
        Backend::Osmem => "osmem",
        Backend::RealElastic => "elasticsearch",
    };
    let protocol: LockProtocol = client.protocol().await.expect("protocol");
    format!("{backend} {protocol}")
}

/// Checks that nothing is held any more, and sweeps what a request that gave up may leave:
/// its conditional removal of its waiter entries can lose every round under this much
/// contention, and the entry then expires with its short lease (as in `tests/stress.rs`,
/// where `reap_expired` plays the part of fsrename `recover`).
async fn assert_nothing_held(env: &Env) {
    let left = lock_docs(env).await;
    for doc in &left {
        assert!(
            Observed::from_source(&doc.source).is_unheld(),
            "`{}` still held: {}",
            doc.id,
            doc.source
        );
    }
    if !left.is_empty() {
        tokio::time::sleep(WAITER_LEASE + Duration::from_millis(500)).await;
        let sweeper = client(env, "sweeper");
        for doc in &left {
            sweeper
                .reap_expired(&doc.id)
                .await
                .unwrap_or_else(|e| panic!("sweeping `{}`: {e}", doc.id));
        }
    }
    println!("{} waiter-only documents swept", left.len());
    assert_eq!(lock_count(env).await, 0, "lock documents left behind");
}

/// With fair waiting, every rename of `/clinton` is granted, and soon.
async fn a_parent_rename_is_not_starved_by_renames_below(env: Env) {
    let churn = Churn::start(&env);
    let parent = fair_builder(&env, "mv /clinton /gormley")
        .wait(FAIR_WAIT)
        .build();
    let trials = trials("FSRENAME_FAIRNESS_TRIALS", 50);
    let figures = rename_the_parent_under_churn(&churn, &parent, trials).await;
    let (grants, churn_timeouts) = churn.stop().await;
    println!(
        "fairness {}: {} (churners: {grants} renames, {churn_timeouts} timed out)",
        label(&env, &parent).await,
        figures.summary(),
    );
    assert_eq!(figures.timed_out, 0, "every rename of /clinton is granted");
    assert!(
        figures.max() < FAIR_BOUND,
        "the longest wait, {:?}, is over {FAIR_BOUND:?}",
        figures.max()
    );
    assert_nothing_held(&env).await;
}

/// The "no queue" baseline: the same rename of `/clinton`, by a client that holds a lock
/// elsewhere and so ignores the queue, as every request did before fair waiting. Measured and
/// printed, not bounded: its waits show the starvation fair waiting removes.
async fn baseline_without_the_queue_a_parent_rename_starves(env: Env) {
    let churn = Churn::start(&env);
    let parent = fair_builder(&env, "mv /clinton /gormley (no queue)")
        .wait(NO_QUEUE_CAP)
        .build();
    let elsewhere = parent
        .lock_tree(&p("/elsewhere"))
        .await
        .expect("X on /elsewhere");
    let trials = trials("FSRENAME_FAIRNESS_BASELINE_TRIALS", 5);
    let figures = rename_the_parent_under_churn(&churn, &parent, trials).await;
    let (grants, churn_timeouts) = churn.stop().await;
    println!(
        "fairness no-queue baseline {}: {} (a timeout counts as {} s; churners: {grants} renames, {churn_timeouts} timed out)",
        label(&env, &parent).await,
        figures.summary(),
        NO_QUEUE_CAP.as_secs(),
    );
    elsewhere.release().await.expect("release /elsewhere");
    assert_nothing_held(&env).await;
}

on_every_backend!(
    a_parent_rename_is_not_starved_by_renames_below,
    baseline_without_the_queue_a_parent_rename_starves,
);
