//! Intention locks shared by the jobs of one process ([`SharedIntentions`]), on every backend
//! and protocol: one holder entry per process on a shared ancestor however many jobs run
//! under it, kept a short while once the last job is done and then given back, given up to a
//! conflicting request, left to expire when a job stops half-way, and excluding others as a
//! job's own lock would.

mod common;

use std::time::Duration;

use common::*;
use fs_locks::{borrowed_from, is_hold, Observed, SharedIntentions};

/// The process's holds, probed for waiters every 50 ms (`renew_every`).
fn shared(env: &Env) -> SharedIntentions {
    SharedIntentions::new(
        client_builder(env, "intentions of a test process").renew_every(Duration::from_millis(50)),
    )
}

/// A job's client, borrowing from `shared`.
fn job(env: &Env, shared: &SharedIntentions, holder: &str) -> fs_locks::LockClient {
    shared.lend_to(client_builder(env, holder)).build()
}

/// The holders' process ids on the lock document `id`.
async fn holders(env: &Env, id: &str) -> Vec<String> {
    let source = lock_doc(env, id)
        .await
        .unwrap_or_else(|| panic!("no lock on `{id}`"));
    match Observed::from_source(&source) {
        Observed::Group { holders, .. } => holders.keys().cloned().collect(),
        Observed::Exclusive { process_id, .. } => process_id.into_iter().collect(),
    }
}

async fn jobs_under_one_parent_share_one_holder_entry(env: Env) {
    let shared = shared(&env);
    let jobs: Vec<_> = (0..3)
        .map(|i| job(&env, &shared, &format!("job {i}")))
        .collect();
    let mut guards = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let guard = j.lock_tree(&p(&format!("/p/q/t{i}"))).await.expect("lock");
        assert_eq!(
            guard.borrowed(),
            ["/p", "/p/q"],
            "job {i} borrowed its ancestors"
        );
        guards.push(guard);
    }
    for id in ["/p", "/p/q"] {
        let on = holders(&env, id).await;
        assert_eq!(
            on,
            [shared.hold_id()],
            "one holder entry on `{id}`: the hold"
        );
        assert!(is_hold(&on[0]));
    }
    for (i, j) in jobs.iter().enumerate() {
        let own = holders(&env, &format!("/p/q/t{i}")).await;
        assert_eq!(
            borrowed_from(&own[0]),
            Some(shared.hold_id()),
            "a job names its hold"
        );
        // What a journal records for recovery includes the borrowed ancestors.
        let items: Vec<String> = j.held_items().await.into_iter().map(|i| i.id).collect();
        assert_eq!(items, ["/p", "/p/q", &format!("/p/q/t{i}")]);
        assert!(j.lease_left().await.is_some_and(|l| !l.is_zero()));
    }
    assert_eq!(
        shared.holds().await,
        [("/p".to_owned(), 3), ("/p/q".to_owned(), 3)]
    );
    // Another process is excluded as by a job's own intention lock.
    let other = client(&env, "another process");
    assert_blocked_on(other.lock_tree(&p("/p")).await, "/p");
    for guard in guards {
        guard.release().await.expect("release");
    }
    // Idle, the holds linger: a job that comes meanwhile borrows them as they are.
    assert_eq!(
        shared.holds().await,
        [("/p".to_owned(), 0), ("/p/q".to_owned(), 0)],
        "the holds linger once the last job is done"
    );
    let next = job(&env, &shared, "job 3");
    let guard = next.lock_tree(&p("/p/q/t3")).await.expect("lock");
    assert_eq!(guard.borrowed(), ["/p", "/p/q"], "lent from the idle holds");
    assert_eq!(
        shared.holds().await,
        [("/p".to_owned(), 1), ("/p/q".to_owned(), 1)],
        "the same holds, lent again"
    );
    for id in ["/p", "/p/q"] {
        assert_eq!(
            holders(&env, id).await,
            [shared.hold_id()],
            "still the hold alone"
        );
    }
    guard.release().await.expect("release");
    // Then, the linger over, they are given back.
    let deadline = tokio::time::Instant::now() + fs_locks::DEFAULT_LINGER * 20;
    while lock_count(&env).await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "idle holds still held long after the linger"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        shared.holds().await.is_empty(),
        "the holds were given back once idle for the linger"
    );
}

async fn without_a_linger_the_last_job_gives_the_holds_back(env: Env) {
    let shared = shared(&env).linger(Duration::ZERO);
    let a = job(&env, &shared, "job a");
    let guard = a.lock_tree(&p("/p/a")).await.expect("lock");
    assert_eq!(guard.borrowed(), ["/p"]);
    guard.release().await.expect("release");
    assert!(shared.holds().await.is_empty(), "given back at once");
    assert_eq!(lock_count(&env).await, 0, "no lock left");
}

async fn a_waiter_ends_an_idle_hold_and_stopping_releases_the_rest(env: Env) {
    let shared = shared(&env).linger(Duration::from_secs(600));
    let a = job(&env, &shared, "job a");
    let guard = a.lock_tree(&p("/p/a/x")).await.expect("lock");
    assert_eq!(guard.borrowed(), ["/p", "/p/a"]);
    guard.release().await.expect("release");
    assert_eq!(shared.holds().await.len(), 2, "lingering");
    // A request for `/p/a` itself waits for the idle hold on it, which the probe releases;
    // the hold on `/p` is compatible and lingers.
    let other = client_builder(&env, "mv /p/a")
        .wait(Duration::from_secs(20))
        .build();
    let started = tokio::time::Instant::now();
    let granted = other.lock_tree(&p("/p/a")).await.expect("granted");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "an idle hold kept a waiter for {:?}",
        started.elapsed()
    );
    assert_eq!(
        shared.holds().await,
        [("/p".to_owned(), 0)],
        "only the conflicting hold went"
    );
    granted.release().await.expect("release");
    // A process that stops releases what lingers.
    shared.release_idle().await;
    assert!(shared.holds().await.is_empty());
    assert_eq!(lock_count(&env).await, 0, "no lock left");
}

async fn a_conflicting_request_drains_the_hold(env: Env) {
    let shared = shared(&env);
    let a = job(&env, &shared, "job a");
    let running = a.lock_tree(&p("/p/a")).await.expect("lock a");
    assert_eq!(running.borrowed(), ["/p"]);
    // Someone wants `/p` itself: it waits, registered in `/p`'s queue.
    let parent = client_builder(&env, "mv /p")
        .wait(Duration::from_secs(20))
        .build();
    let wants_parent = tokio::spawn(async move {
        let guard = parent.lock_tree(&p("/p")).await;
        (parent, guard)
    });
    // Once the probe has seen it, a new job borrows nothing: it takes its own intention lock,
    // which queues behind the older request.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let b = job(&env, &shared, "job b");
        match b.lock_tree(&p("/p/b")).await {
            Err(_) => break,
            Ok(guard) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the hold kept lending"
                );
                guard.release().await.expect("release b");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert!(
        !wants_parent.is_finished(),
        "granted while a job runs under `/p`"
    );
    running.release().await.expect("release a");
    let (parent, guard) = wants_parent.await.expect("join");
    let guard = guard.expect("the parent is granted once the running job is done");
    assert_eq!(
        holders(&env, "/p").await,
        [parent.owner().process_id.clone()]
    );
    guard.release().await.expect("release parent");
    assert!(shared.holds().await.is_empty());
    assert_eq!(lock_count(&env).await, 0);
}

async fn a_job_stopped_half_way_leaves_its_hold_to_expire(env: Env) {
    // A short lease, so that the hold left behind expires within the test.
    let lease = Duration::from_millis(400);
    let shared = SharedIntentions::new(
        client_builder(&env, "intentions of a test process")
            .lease(lease)
            .renew_every(Duration::from_millis(50)),
    );
    let a = job(&env, &shared, "job a");
    let b = job(&env, &shared, "job b");
    let ga = a.lock_tree(&p("/p/a")).await.expect("lock a");
    let gb = b.lock_tree(&p("/p/b")).await.expect("lock b");
    ga.abandon().await;
    // The hold lends no more, and outlives the running job without being released.
    let c = job(&env, &shared, "job c");
    let gc = c.lock_tree(&p("/p/c")).await.expect("lock c");
    assert!(
        gc.borrowed().is_empty(),
        "lent after a borrower stopped half-way"
    );
    gb.release().await.expect("release b");
    gc.release().await.expect("release c");
    assert!(shared.holds().await.is_empty());
    assert_eq!(
        holders(&env, "/p").await,
        [shared.hold_id()],
        "the hold stays for recovery"
    );
    // Never lent again by this process: a new job takes its own intention lock beside it.
    let d = job(&env, &shared, "job d");
    let gd = d.lock_tree(&p("/p/d")).await.expect("lock d");
    assert!(gd.borrowed().is_empty());
    let mut on = holders(&env, "/p").await;
    on.sort();
    let mut expected = vec![shared.hold_id().to_owned(), d.owner().process_id.clone()];
    expected.sort();
    assert_eq!(on, expected);
    gd.release().await.expect("release d");
    // (The holds this process took since linger; what is checked below is what it left.)
    // Once recovery has cleared it (here a reap of what expired), the process lends there
    // again.
    tokio::time::sleep(lease * 2).await;
    let reaper = client(&env, "recovery");
    reaper
        .reap_expired("/p")
        .await
        .expect("reap the expired hold");
    assert!(lock_doc(&env, "/p").await.is_none());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let e = job(&env, &shared, "job e");
        let ge = e.lock_tree(&p("/p/e")).await.expect("lock e");
        let lent = !ge.borrowed().is_empty();
        ge.release().await.expect("release e");
        if lent {
            shared.release_idle().await;
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never lent again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // What is left is job a's own lock, for recovery.
    let left: Vec<String> = lock_docs(&env).await.into_iter().map(|d| d.id).collect();
    assert_eq!(left, ["/p/a"]);
}

on_every_backend!(
    jobs_under_one_parent_share_one_holder_entry,
    a_conflicting_request_drains_the_hold,
    a_job_stopped_half_way_leaves_its_hold_to_expire,
    without_a_linger_the_last_job_gives_the_holds_back,
    a_waiter_ends_an_idle_hold_and_stopping_releases_the_rest,
);
