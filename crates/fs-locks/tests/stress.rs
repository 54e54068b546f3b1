//! Stress: 32 tasks take and release random tree and rename locks over a 4-level tree. At
//! every successful acquisition no two holders may hold exclusive locks on overlapping paths,
//! and at the end no lock document is left.
//!
//! `FSRENAME_STRESS_SEED` replays a seed (each task's is seed + task number);
//! `FSRENAME_STRESS_SECS` sets the duration (default 10). A run that has not made
//! [`PROGRESS`] grants by then goes on until it has, for [`PATIENCE`] times the duration at
//! most: the bound is on progress, not on how fast a loaded machine makes it.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fs_model::FsPath;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TASKS: u64 = 32;
const FAN_OUT: usize = 3;
/// Grants the run must make: more than one a task.
const PROGRESS: u64 = TASKS + 1;
/// How many times the duration a run short of [`PROGRESS`] may take to reach it.
const PATIENCE: u32 = 6;

fn random_path(rng: &mut StdRng) -> FsPath {
    let depth = rng.random_range(1..=4);
    let mut path = FsPath::root();
    for level in 0..depth {
        let name = format!(
            "{}{}",
            ["a", "b", "c", "d"][level],
            rng.random_range(0..FAN_OUT)
        );
        path = path.join(&name).expect("join");
    }
    path
}

/// Exclusive paths held right now, by task.
type Registry = Arc<Mutex<Vec<(u64, FsPath)>>>;

fn check_and_register(registry: &Registry, task: u64, mine: &[FsPath], seed: u64) {
    let mut held = registry.lock().unwrap_or_else(|p| p.into_inner());
    for (other, path) in held.iter() {
        for m in mine {
            assert!(
                !m.overlaps(path),
                "seed {seed}: task {task} was granted `{m}` while task {other} holds `{path}`"
            );
        }
    }
    held.extend(mine.iter().map(|m| (task, m.clone())));
}

fn unregister(registry: &Registry, task: u64) {
    registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(t, _)| *t != task);
}

async fn tree_locks_never_overlap(env: Env) {
    let seed: u64 = std::env::var("FSRENAME_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let secs: u64 = std::env::var("FSRENAME_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    println!("stress seed {seed} (replay with FSRENAME_STRESS_SEED={seed}), {secs} s");
    let proxied = env.backend == fs_testkit::Backend::Osmem;
    let scripted_on_proxy = proxied && env.protocol == fs_locks::LockProtocol::Scripted;
    let proxy_before = scripted_on_proxy.then(|| fs_testkit::es_proxy().stats());
    let registry: Registry = Arc::new(Mutex::new(Vec::new()));
    env.storm();
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let last_chance = started + Duration::from_secs(secs) * PATIENCE;
    let total_granted = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let (env, registry) = (env.clone(), Arc::clone(&registry));
        let total_granted = Arc::clone(&total_granted);
        tasks.spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_add(task));
            let client = client_builder(&env, &format!("task-{task}"))
                .wait(Duration::from_millis(200))
                .build();
            let (mut granted, mut timed_out, mut races) = (0u64, 0u64, 0u64);
            let go_on = || {
                let now = tokio::time::Instant::now();
                now < deadline
                    || (now < last_chance && total_granted.load(Ordering::Relaxed) < PROGRESS)
            };
            while go_on() {
                let from = random_path(&mut rng);
                let rename_to = rng.random_bool(0.25).then(|| random_path(&mut rng));
                let result = match &rename_to {
                    Some(to) => client.lock_rename(&from, to).await,
                    None => client.lock_tree(&from).await,
                };
                let guard = match result {
                    Ok(guard) => guard,
                    Err(fs_locks::LockError::MoveIntoItself { .. }) => continue,
                    Err(e) if e.is_retryable() => {
                        timed_out += 1;
                        continue;
                    }
                    Err(e) => panic!("seed {seed}: task {task}: {e}"),
                };
                races += u64::from(guard.grant().races);
                let mine: Vec<FsPath> = std::iter::once(from).chain(rename_to).collect();
                check_and_register(&registry, task, &mine, seed);
                granted += 1;
                total_granted.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_micros(rng.random_range(0..2_000))).await;
                unregister(&registry, task);
                let released = guard
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("seed {seed}: release: {e}"));
                races += u64::from(released.races);
            }
            (granted, timed_out, races)
        });
    }
    let (mut granted, mut timed_out, mut races) = (0, 0, 0);
    while let Some(done) = tasks.join_next().await {
        let (g, t, r) = done.expect("stress task");
        granted += g;
        timed_out += t;
        races += r;
    }
    env.calm();
    println!(
        "{granted} acquisitions granted, {timed_out} timed out, {races} lost races sent again by fsrename, in {:?}",
        started.elapsed()
    );
    if let Some(proxy_before) = proxy_before {
        let stats = fs_testkit::es_proxy().stats();
        println!(
            "proxy (with the tests running beside this one): {} scripted updates, {} races ({} retried inside the update, {} answered 409), {} refusals",
            stats.updates - proxy_before.updates,
            stats.races - proxy_before.races,
            stats.races_retried - proxy_before.races_retried,
            stats.conflicts_returned - proxy_before.conflicts_returned,
            stats.refusals - proxy_before.refusals,
        );
    }
    assert!(
        granted >= PROGRESS,
        "seed {seed}: too little progress ({granted} grants in {:?})",
        started.elapsed()
    );
    // A request that gave up removes its waiter entries, but under this much contention its
    // conditional removal can lose every round; the entry then expires with its short lease
    // and blocks nobody, and the sweep (here `reap_expired`, in fsrename `recover`) deletes
    // what it leaves. Nothing may be held.
    let left = lock_docs(&env).await;
    let sweeper = client_builder(&env, "sweeper").build();
    if !left.is_empty() {
        tokio::time::sleep(Duration::from_millis(2_100)).await;
    }
    for doc in &left {
        let observed = fs_locks::Observed::from_source(&doc.source);
        assert!(
            observed.is_unheld(),
            "seed {seed}: `{}` still held: {}",
            doc.id,
            doc.source
        );
        sweeper
            .reap_expired(&doc.id)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: sweeping `{}`: {e}", doc.id));
    }
    println!("{} waiter-only documents swept", left.len());
    assert_eq!(
        lock_count(&env).await,
        0,
        "seed {seed}: lock documents left behind"
    );
}

/// Lease renewals whose answers are lost: 6 holders keep a rename lock each (sharing the
/// ancestors `/r` and `/r/a<i>`) for 4 s with a 600 ms lease, renewed every 200 ms, while the
/// faults strike. A renewal of unknown fate must be recognised as landed or sent again: no
/// holder may ever see a lock lost, and all is released at the end.
async fn renewals_ride_out_network_faults(env: Env) {
    const HOLDERS: usize = 6;
    let lease = Duration::from_millis(600);
    let mut clients = Vec::new();
    let mut guards = Vec::new();
    for i in 0..HOLDERS {
        let client = client_builder(&env, &format!("holder-{i}"))
            .lease(lease)
            .wait(Duration::from_secs(10))
            .build();
        let (from, to) = (
            FsPath::parse(&format!("/r/a{i}/x")).expect("path"),
            FsPath::parse(&format!("/r/b{i}")).expect("path"),
        );
        guards.push(client.lock_rename(&from, &to).await.expect("lock"));
        clients.push(client);
    }
    env.storm();
    let until = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < until {
        for client in &clients {
            let lost = client.lost_locks().borrow().clone();
            assert!(lost.is_empty(), "{}: lost {lost:?}", client.owner().holder);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for guard in guards {
        guard.release().await.expect("released, nothing lost");
    }
    env.calm();
    assert_eq!(lock_count(&env).await, 0, "lock documents left behind");
}

on_every_backend!(tree_locks_never_overlap);

with_network_faults!(tree_locks_never_overlap, renewals_ride_out_network_faults);
