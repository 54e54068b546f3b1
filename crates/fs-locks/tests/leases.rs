//! Leases under paused tokio time: renewal keeps locks alive, an unrenewed lock expires, and
//! only the explicit reap and takeover operations touch expired locks.
//!
//! On the embedded store only: paused time advances by itself while a task waits on network
//! I/O, which would fire HTTP timeouts at once, and what is tested here is time logic.

mod common;

use std::time::Duration;

use common::*;
use fs_locks::{LockError, Reaped};
use fs_testkit::Backend;

const LEASE: Duration = Duration::from_secs(3);
/// A holder that never renews within a test: as good as dead.
const NEVER: Duration = Duration::from_secs(3600);

fn expires_at(doc: &serde_json::Value) -> i64 {
    doc["expires_at"].as_i64().expect("expires_at")
}

#[tokio::test(start_paused = true)]
async fn renewal_keeps_locks_alive() {
    let env = Env::new(Backend::Embedded).await;
    let a = client_builder(&env, "a").lease(LEASE).build(); // renews every second
    let b = client(&env, "b");
    let guard = a.lock_tree(&p("/x/y")).await.expect("lock");
    let first = expires_at(&lock_doc(&env, "/x/y").await.expect("exclusive"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let exclusive = lock_doc(&env, "/x/y").await.expect("still there");
    assert!(
        expires_at(&exclusive) >= first + 9_000,
        "renewed: {first} → {exclusive}"
    );
    let shared = lock_doc(&env, "/x").await.expect("shared");
    let pid = a.owner().process_id.clone();
    assert!(
        shared["holders"][&pid]["expires_at"]
            .as_i64()
            .expect("entry")
            >= first + 9_000
    );
    let not_expired = b.reap_expired("/x/y").await;
    assert!(
        matches!(not_expired, Err(LockError::NotExpired { .. })),
        "{not_expired:?}"
    );
    assert_eq!(
        b.reap_expired("/x").await.expect("reap shares"),
        Reaped::Shares(vec![])
    );
    assert_blocked_on(b.lock_tree(&p("/x")).await, "/x");
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
}

#[tokio::test(start_paused = true)]
async fn renew_every_defaults_to_a_third_of_the_lease() {
    let env = Env::new(Backend::Embedded).await;
    let a = client_builder(&env, "a")
        .lease(Duration::from_secs(30))
        .build();
    let guard = a.lock_tree(&p("/x")).await.expect("lock");
    let first = expires_at(&lock_doc(&env, "/x").await.expect("lock"));
    tokio::time::sleep(Duration::from_millis(9_900)).await;
    assert_eq!(
        expires_at(&lock_doc(&env, "/x").await.expect("lock")),
        first,
        "not yet"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(expires_at(&lock_doc(&env, "/x").await.expect("lock")) >= first + 10_000);
    guard.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn an_unrenewed_lock_expires_but_acquire_never_takes_it() {
    let env = Env::new(Backend::Embedded).await;
    let dead = client_builder(&env, "dead")
        .lease(LEASE)
        .renew_every(NEVER)
        .build();
    let b = client(&env, "b");
    let guard = dead.lock_tree(&p("/x/y")).await.expect("lock");
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Expired, yet acquiring is still refused: taking over is an explicit operation.
    assert_blocked_on(b.lock_tree(&p("/x/y")).await, "/x/y");
    match b.reap_expired("/x/y").await.expect("reap exclusive") {
        Reaped::Exclusive(holder) => assert!(holder.contains("dead"), "{holder}"),
        other => panic!("expected the exclusive lock reaped, got {other:?}"),
    }
    let pid = dead.owner().process_id.clone();
    assert_eq!(
        b.reap_expired("/x").await.expect("reap shares"),
        Reaped::Shares(vec![pid])
    );
    assert_eq!(lock_count(&env).await, 0);
    b.lock_tree(&p("/x/y"))
        .await
        .expect("free now")
        .release()
        .await
        .expect("release");
    let late = guard.release().await;
    assert!(matches!(late, Err(LockError::LeaseLost { .. })), "{late:?}");
    assert!(dead.lost_locks().borrow().iter().any(|l| l == "/x/y"));
    assert_eq!(lock_count(&env).await, 0);
}

#[tokio::test(start_paused = true)]
async fn reaping_removes_only_the_expired_share() {
    let env = Env::new(Backend::Embedded).await;
    let dead = client_builder(&env, "dead")
        .lease(LEASE)
        .renew_every(NEVER)
        .build();
    let alive = client_builder(&env, "alive").lease(LEASE).build();
    let reaper = client(&env, "reaper");
    let _dead_guard = dead.lock_tree(&p("/x/a")).await.expect("dead");
    let alive_guard = alive.lock_tree(&p("/x/b")).await.expect("alive");
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The live holder's renewal may rewrite `/x` between the reaper's read and its
    // conditional write; the reaper is then told to call again, as documented.
    let mut reaped = reaper.reap_expired("/x").await;
    for _ in 0..5 {
        if !matches!(&reaped, Err(LockError::Store { cause, .. }) if cause.is_conflict()) {
            break;
        }
        reaped = reaper.reap_expired("/x").await;
    }
    assert_eq!(
        reaped.expect("reap"),
        Reaped::Shares(vec![dead.owner().process_id.clone()])
    );
    let shared = lock_doc(&env, "/x").await.expect("alive's share remains");
    assert_eq!(shared["lock_count"], 1);
    assert!(shared["holders"].get(&alive.owner().process_id).is_some());
    alive_guard.release().await.expect("release alive");
    assert!(lock_doc(&env, "/x").await.is_none());
}

#[tokio::test(start_paused = true)]
async fn take_over_hands_an_expired_lock_to_the_recoverer() {
    let env = Env::new(Backend::Embedded).await;
    let dead = client_builder(&env, "dead")
        .lease(LEASE)
        .renew_every(NEVER)
        .build();
    let recoverer = client_builder(&env, "recoverer").lease(LEASE).build();
    let other = client(&env, "other");
    let guard = dead.lock_tree(&p("/x/y")).await.expect("lock");
    let early = recoverer.take_over("/x/y").await;
    assert!(
        matches!(early, Err(LockError::NotExpired { .. })),
        "{early:?}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let taken = recoverer.take_over("/x/y").await.expect("take over");
    let doc = lock_doc(&env, "/x/y").await.expect("lock");
    assert_eq!(doc["process_id"], recoverer.owner().process_id.as_str());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let second = other.take_over("/x/y").await;
    assert!(
        matches!(second, Err(LockError::NotExpired { .. })),
        "the recoverer renews: {second:?}"
    );
    dead.renew_now().await.expect("renew");
    assert!(
        dead.lost_locks().borrow().iter().any(|l| l == "/x/y"),
        "the zombie learns"
    );
    let late = guard.release().await;
    assert!(matches!(late, Err(LockError::LeaseLost { .. })), "{late:?}");
    assert!(
        lock_doc(&env, "/x/y").await.is_some(),
        "the zombie's release left it alone"
    );
    // Its share of `/x` had expired but nobody had reaped it, so its renewal still held and
    // its release gave the share back: only what someone acted on is lost.
    assert!(lock_doc(&env, "/x").await.is_none());
    taken.release().await.expect("recoverer releases");
    assert_eq!(lock_count(&env).await, 0);
}

/// A regression: adopting one dead job's lock set removed *every* expired share of a shared
/// lock, including those of another dead job whose rename was also unfinished; once the
/// first rename was finished and released, the ancestor was free and a third job could lock
/// it exclusively while the second rename was still half-done (the simulation's seed 19562).
#[tokio::test(start_paused = true)]
async fn adoption_takes_over_only_its_predecessors_locks() {
    let env = Env::new(Backend::Embedded).await;
    let dead = |name: &str| {
        client_builder(&env, name)
            .lease(LEASE)
            .renew_every(NEVER)
            .build()
    };
    let (first, second) = (dead("first"), dead("second"));
    let _first = first.lock_tree(&p("/x/a")).await.expect("first");
    let _second = second.lock_tree(&p("/x/b")).await.expect("second");
    let stranger = dead("stranger");
    let _stranger = stranger.lock_tree(&p("/y")).await.expect("stranger");
    tokio::time::sleep(LEASE + Duration::from_secs(1)).await;

    let recoverer = client_builder(&env, "recoverer")
        .lease(LEASE)
        .wait(Duration::from_millis(300))
        .build();
    let items = fs_locks::TreeLockRequest::path(&p("/x/a"))
        .items()
        .expect("items");
    let predecessors = vec![first.owner().process_id.clone()];
    let adopted = recoverer
        .adopt("first's locks".into(), items, &predecessors)
        .await
        .expect("adopt");
    let shared = lock_doc(&env, "/x").await.expect("shared /x");
    let holders = shared["holders"].as_object().expect("holders");
    assert!(holders.contains_key(&recoverer.owner().process_id));
    assert!(
        !holders.contains_key(&first.owner().process_id),
        "the predecessor's share is taken over"
    );
    assert!(
        holders.contains_key(&second.owner().process_id),
        "another unfinished job's share must stay: {shared}"
    );
    assert_eq!(shared["lock_count"], 2);
    adopted.release().await.expect("release");
    let left = lock_doc(&env, "/x")
        .await
        .expect("still shared by `second`");
    assert_eq!(left["lock_count"], 1);

    // Someone else's expired exclusive lock is waited for, not taken.
    let items = fs_locks::TreeLockRequest::path(&p("/y"))
        .items()
        .expect("items");
    let refused = recoverer
        .adopt("not ours".into(), items, &predecessors)
        .await;
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "{refused:?}"
    );
    let y = lock_doc(&env, "/y").await.expect("lock");
    assert_eq!(y["process_id"], stranger.owner().process_id.as_str());
}

/// Issue 47: a lease lost because this process's own renewal did not run in time (the cores
/// busy with other work, or the process paused) says so, with how late, so that a user can tell
/// a slow machine from a rival job or a failing store. The starvation is made, not hoped for:
/// the test blocks the runtime's only thread, where the renewal task would run, for longer
/// than the lease. In real time: paused time would not pass while the thread is blocked.
#[tokio::test(flavor = "current_thread")]
async fn a_lease_lost_to_a_starved_renewal_says_so() {
    let env = Env::new(Backend::Embedded).await;
    let starved = client_builder(&env, "starved")
        .lease(Duration::from_millis(1_500))
        .build();
    let guard = starved.lock_tree(&p("/x/y")).await.expect("lock");
    starved.ensure_held("/x/y").await.expect("held");
    std::thread::sleep(Duration::from_millis(2_500));
    let lost = starved.ensure_held("/x/y").await;
    let message = match lost {
        Err(e @ LockError::LeaseLost { .. }) => e.to_string(),
        other => panic!("expected a lost lease, got {other:?}"),
    };
    assert!(
        message.contains("this process renews it every 500 ms, but its renewal had not run for")
            && message.contains("starved")
            && message.contains("no other job took the lock"),
        "{message}"
    );
    drop(guard);
}
