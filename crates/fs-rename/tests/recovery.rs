//! Recovery: jobs that die half-way are finished, zombies do no harm, live jobs are left
//! alone, and expired locks are swept with exactly the expired shares. On both backends, in
//! real time with a short lease.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use fs_locks::{LockClient, SharedIntentions};
use fs_model::FsPath;
use fs_rename::{
    fsck, Entry, Journal, Recovery, RenameError, RenameHooks, Renamer, RenamerBuilder,
};
use fs_store::SharedStore;
use fs_testkit::{faulty, FaultPlan, FaultyStore};
use tokio::sync::Notify;

const LEASE: Duration = Duration::from_millis(600);
const PAGE: usize = 10;

/// `/src` with 50 files in two directories, and `/dst-parent`.
async fn setup(env: &Env) {
    src_tree(env, 25).await;
}

fn recovery(env: &Env) -> Recovery {
    Recovery::new(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .wait(Duration::from_secs(5))
        .page_size(PAGE)
}

fn renamer(store: SharedStore, env: &Env, hooks: Arc<dyn RenameHooks>) -> Renamer {
    renamer_builder(store, env, hooks).build()
}

fn renamer_builder(store: SharedStore, env: &Env, hooks: Arc<dyn RenameHooks>) -> RenamerBuilder {
    Renamer::builder(store, env.index.clone())
        .lease(LEASE)
        .page_size(PAGE)
        .wait(Duration::from_secs(5))
        .hooks(hooks)
}

/// Starts `mv /src /dst-parent/dst` through a store that dies before page `page`.
async fn start_dying_job(
    env: &Env,
    page: usize,
) -> (tokio::task::JoinHandle<()>, Arc<FaultyStore>) {
    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 1);
    let hooks = Arc::new(KillAtPage::new(page, Arc::clone(&store)));
    let job = renamer(store.clone(), env, hooks);
    let handle = tokio::spawn(async move {
        let _ = job.rename(&p("/src"), &p("/dst-parent/dst")).await;
        unreachable!("a dead job never returns");
    });
    wait_until_dead(&store).await;
    (handle, store)
}

/// Every document moved exactly once, a clean tree, no lock and no journal entry.
async fn assert_finished(env: &Env, before: &std::collections::BTreeMap<String, String>) {
    let after = paths_by_id(env).await;
    assert_eq!(after.len(), before.len(), "documents lost or added");
    for (id, path) in before {
        let want = FsPath::parse(path)
            .expect("path")
            .rebase(&p("/src"), &p("/dst-parent/dst"))
            .map(|p| p.to_string())
            .unwrap_or_else(|_| path.clone());
        let want = if path.starts_with("/src") {
            want
        } else {
            path.clone()
        };
        assert_eq!(after.get(id), Some(&want), "document {id} ({path})");
    }
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(locks_left(env).await, 0, "locks left");
    assert_eq!(report.journals_open(), 0, "journal entries left");
}

async fn a_job_that_dies_mid_rewrite_is_finished(env: Env) {
    // The job dies in the middle of a scan.
    env.scans_die_open(1);
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let (job, _store) = start_dying_job(&env, 3).await;
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    let open = journal.list().await.expect("journal");
    assert_eq!(open.len(), 1, "the dying job journaled its rename");
    assert_eq!(open[0].0.from, "/src");

    // While its locks are valid the job counts as alive: nothing is touched.
    let early = recovery(&env).run().await.expect("recover");
    assert_eq!(
        early
            .running
            .iter()
            .map(|r| r.job_id.clone())
            .collect::<Vec<_>>(),
        vec![open[0].0.job_id.clone()],
        "{early}"
    );
    let now = fs_locks::LeaseClock::new().now_ms();
    assert!(
        early.running[0]
            .lease_left(now)
            .is_some_and(|left| left <= std::time::Duration::from_secs(60)),
        "it says when its lease runs out: {early}"
    );
    assert!(early.to_string().contains("leased for"), "{early}");
    assert!(
        early.finished.is_empty() && early.locks_released == 0,
        "{early}"
    );
    // And nobody else can touch the half-renamed tree: its expired locks are not taken by
    // an ordinary acquisition either.
    let other = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .wait(Duration::ZERO)
        .build()
        .rename(&p("/src/a"), &p("/a"))
        .await;
    assert!(matches!(other, Err(RenameError::Lock(_))), "{other:?}");

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_eq!(report.finished[0].recoveries, 1);
    assert!(
        report.finished[0].rewritten > 0 && report.finished[0].rewritten < 54,
        "the job had moved part of it: {report}"
    );
    assert_finished(&env, &before).await;
    job.abort();
}

async fn a_dying_recoverer_is_recovered_in_turn(env: Env) {
    // The job and the recoverer die in the middle of a scan.
    env.scans_die_open(2);
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let (job, _store) = start_dying_job(&env, 2).await;
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;

    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 2);
    let hooks = Arc::new(KillAtPage::new(2, Arc::clone(&store)));
    let first = Recovery::new(store.clone(), env.index.clone())
        .lease(LEASE)
        .page_size(PAGE)
        .hooks(hooks);
    let recoverer = tokio::spawn(async move { first.run().await });
    wait_until_dead(&store).await;

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_eq!(report.finished[0].recoveries, 2, "{report}");
    assert_finished(&env, &before).await;
    job.abort();
    recoverer.abort();
}

/// Stops a job's whole "process" (its store calls, renewals included, and the hook that calls
/// it) until the test thaws it.
struct Freezer {
    frozen: Notify,
    thaw: Notify,
    store: Arc<FaultyStore>,
}

impl Freezer {
    fn new(store: Arc<FaultyStore>) -> Freezer {
        Freezer {
            frozen: Notify::new(),
            thaw: Notify::new(),
            store,
        }
    }

    async fn freeze(&self) {
        self.store.pause(true);
        self.frozen.notify_one();
        self.thaw.notified().await;
        self.store.pause(false);
    }
}

/// Freezes the job before page `page`.
struct FreezeAtPage {
    page: usize,
    seen: AtomicUsize,
    freezer: Freezer,
}

#[async_trait]
impl RenameHooks for FreezeAtPage {
    async fn before_write(&self, _page: &[Entry]) {
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.page {
            self.freezer.freeze().await;
        }
    }
}

async fn a_zombie_stops_at_its_first_write(env: Env) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 3);
    let hooks = Arc::new(FreezeAtPage {
        page: 2,
        seen: AtomicUsize::new(0),
        freezer: Freezer::new(Arc::clone(&store)),
    });
    let job = renamer(store, &env, hooks.clone());
    let zombie = tokio::spawn(async move { job.rename(&p("/src"), &p("/dst-parent/dst")).await });
    hooks.freezer.frozen.notified().await;

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_finished(&env, &before).await;
    // Someone makes a new /src, which the zombie, reading afresh, would find.
    let tree = env.tree();
    let settings = fs_rename::LockSettings::default();
    fs_rename::mkdir(&tree, &settings, &p("/src"), false)
        .await
        .expect("mkdir");
    fs_rename::touch(&tree, &settings, &p("/src/new"))
        .await
        .expect("touch");

    hooks.freezer.thaw.notify_one();
    let result = zombie.await.expect("zombie task");
    assert!(
        matches!(&result, Err(RenameError::Unfinished { cause, .. }) if matches!(**cause, RenameError::Lock(fs_locks::LockError::LeaseLost { .. }))),
        "{result:?}"
    );
    let after = paths_by_id(&env).await;
    assert!(
        after.values().any(|p| p == "/src/new"),
        "the zombie moved /src/new"
    );
    assert_eq!(after.len(), before.len() + 2);
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(locks_left(&env).await, 0);
}

/// Found by the Jepsen-style test on a real cluster (`docs/reliability.md`): an `rm -r` paused
/// past its lease after its journal entry landed and before its first write was reported
/// failed ("lost the lock") while recovery had carried it out. Waking, the job withdraws its
/// entry (it wrote nothing itself), met the tombstone the recoverer left when it closed the
/// entry, and took it for its own withdrawal. The withdrawal now fails there, and the job
/// reports itself unfinished, recovery's: never failed, since its effect is in place.
async fn a_job_paused_before_its_first_write_and_finished_by_recovery_is_not_failed(env: Env) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 7);
    let hooks = Arc::new(FreezeAtPage {
        page: 1,
        seen: AtomicUsize::new(0),
        freezer: Freezer::new(Arc::clone(&store)),
    });
    let job = renamer(store, &env, hooks.clone());
    let paused = tokio::spawn(async move { job.rename(&p("/src"), &p("/dst-parent/dst")).await });
    hooks.freezer.frozen.notified().await;

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_finished(&env, &before).await;

    hooks.freezer.thaw.notify_one();
    let result = paused.await.expect("job task");
    assert!(
        matches!(&result, Err(RenameError::Unfinished { cause, .. }) if matches!(**cause, RenameError::Lock(fs_locks::LockError::LeaseLost { .. }))),
        "a job whose effect recovery made must not report failure: {result:?}"
    );
    assert_finished(&env, &before).await;
    let checked = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(checked.is_clean(), "{checked}");
    assert_eq!(checked.journals_open(), 0, "{checked}");
    assert_eq!(locks_left(&env).await, 0);
}

/// Lets the job's journal entry land, then freezes the job (every call of its store, its lock
/// renewals too) before it hears so, and answers it with a lost answer once thawed: a node
/// paused (or partitioned) between the write and its answer.
#[derive(Debug)]
struct LoseTheJournalAnswer {
    store: Arc<FaultyStore>,
    journal: String,
    once: std::sync::atomic::AtomicBool,
    frozen: Notify,
    thaw: Notify,
}

#[async_trait]
impl fs_store::StoreLayer for LoseTheJournalAnswer {
    fn inner(&self) -> &dyn fs_store::DocStore {
        &*self.store
    }
    fn on_describe(&self) -> String {
        "loses the journal's answer".into()
    }
    /// No journal entry sent with the writes in one transaction: the entry goes alone.
    fn on_capabilities<'a>(
        &'a self,
        offered: fs_store::Capabilities<'a>,
    ) -> fs_store::Capabilities<'a> {
        fs_store::Capabilities {
            chained_bulk: None,
            ..offered
        }
    }
    async fn on_write(
        &self,
        index: &str,
        op: fs_store::BulkOp,
    ) -> fs_store::Result<fs_store::Version> {
        let create = matches!(op, fs_store::BulkOp::Create { .. });
        if !(create && index == self.journal && !self.once.swap(true, Ordering::SeqCst)) {
            return fs_store::DocStore::write(&*self.store, index, op).await;
        }
        let landed = fs_store::DocStore::write(&*self.store, index, op).await;
        assert!(landed.is_ok(), "the entry lands: {landed:?}");
        self.store.pause(true);
        self.frozen.notify_one();
        self.thaw.notified().await;
        self.store.pause(false);
        Err(fs_store::StoreError::Transient {
            context: "test".into(),
            message: "the answer was lost".into(),
        })
    }
}

/// Found by the Jepsen-style test on a real cluster (`docs/reliability.md`): a rename through
/// the service was reported failed ("source not found") while recovery had carried it out.
/// Its journal entry landed, a node pause held the answer back past the job's lease, and
/// recovery claimed the entry and finished the rename. The job, reading its entry back after
/// the lost answer, found the recoverer's tombstone, took it for a fence (which means "never
/// journaled") and started over, to find its source gone. An entry at the job's own id that a
/// recoverer claimed or closed now means the job was taken over: it reports itself
/// unfinished, recovery's, and does not start over.
async fn a_job_whose_journal_answer_came_after_recovery_finished_it_is_not_failed(env: Env) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let layer = Arc::new(LoseTheJournalAnswer {
        store: faulty(Arc::clone(&env.store), FaultPlan::default(), 8),
        journal: fs_model::journal_index_name(&env.index),
        once: Default::default(),
        frozen: Notify::new(),
        thaw: Notify::new(),
    });
    let store: SharedStore = layer.clone();
    let job = renamer(store, &env, Arc::new(NoHooks));
    let paused = tokio::spawn(async move { job.rename(&p("/src"), &p("/dst-parent/dst")).await });
    layer.frozen.notified().await;

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_finished(&env, &before).await;

    layer.thaw.notify_one();
    let result = paused.await.expect("job task");
    assert!(
        matches!(&result, Err(RenameError::Unfinished { cause, .. }) if matches!(**cause, RenameError::TakenOver { .. })),
        "a job whose effect recovery made must not report failure nor start over: {result:?}"
    );
    assert_finished(&env, &before).await;
    let checked = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(checked.is_clean(), "{checked}");
    assert_eq!(checked.journals_open(), 0, "{checked}");
}

/// No hooks.
struct NoHooks;
impl RenameHooks for NoHooks {}

/// Kills its store once the job has written everything, before it closes its entry.
struct KillAfterTheWrites(Arc<FaultyStore>);

#[async_trait]
impl RenameHooks for KillAfterTheWrites {
    async fn rewritten(&self) {
        self.0.kill();
    }
}

/// Closes a journal entry, as its own job would, just before recovery's claim of it lands:
/// the close of a job killed with it in flight, arriving after the listing.
#[derive(Debug)]
struct CloseBeforeTheClaim {
    store: SharedStore,
    index: String,
    closed: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl fs_store::StoreLayer for CloseBeforeTheClaim {
    fn inner(&self) -> &dyn fs_store::DocStore {
        &*self.store
    }
    async fn on_write(
        &self,
        index: &str,
        op: fs_store::BulkOp,
    ) -> fs_store::Result<fs_store::Version> {
        if let fs_store::BulkOp::Index {
            id,
            if_version: Some(version),
            ..
        } = &op
        {
            let journal = fs_model::journal_index_name(&self.index);
            if index == journal && !self.closed.swap(true, Ordering::SeqCst) {
                Journal::new(Arc::clone(&self.store), &self.index)
                    .close(id, *version)
                    .await
                    .expect("the job's close lands");
            }
        }
        self.store.write(index, op).await
    }
}

/// Found by the crash test of `rm -r --rewrite server` on a real Elasticsearch (1 round in
/// about 150): the job was killed just after its last write, its close in flight. The close
/// landed after recovery had listed the entry open, so recovery's claim met a tombstone, and
/// recovery took it for another recoverer's claim: it reported the job as running and spared
/// its owner's locks, which outlived the run. A claim lost to a close now leaves nothing to
/// spare: the locks are swept.
async fn a_close_that_lands_after_the_listing_leaves_no_lock(env: Env) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 1);
    let job = renamer(
        store.clone(),
        &env,
        Arc::new(KillAfterTheWrites(Arc::clone(&store))),
    );
    let dying = tokio::spawn(async move {
        let _ = job.rename(&p("/src"), &p("/dst-parent/dst")).await;
        unreachable!("a dead job never returns");
    });
    wait_until_dead(&store).await;
    let open = Journal::new(Arc::clone(&env.store), &env.index)
        .list()
        .await
        .expect("journal");
    assert_eq!(open.len(), 1, "the job died with its entry open");

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let layer: SharedStore = Arc::new(CloseBeforeTheClaim {
        store: Arc::clone(&env.store),
        index: env.index.clone(),
        closed: Default::default(),
    });
    let report = Recovery::new(layer, env.index.clone())
        .lease(LEASE)
        .page_size(PAGE)
        .run()
        .await
        .expect("recover");
    assert!(
        report.running.is_empty() && report.finished.is_empty(),
        "a job closed by itself is neither running nor finished by recovery: {report}"
    );
    assert!(report.locks_released > 0, "{report}");
    assert_finished(&env, &before).await;
    dying.abort();
}

async fn live_jobs_are_left_alone(env: Env) {
    setup(&env).await;
    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 4);
    let hooks = Arc::new(FreezeAtPage {
        page: 2,
        seen: AtomicUsize::new(0),
        freezer: Freezer::new(faulty(Arc::clone(&env.store), FaultPlan::default(), 5)),
    });
    // The hook pauses a store the job does not use: the job waits, its renewals go on.
    let job = renamer(store, &env, hooks.clone());
    let running = tokio::spawn(async move { job.rename(&p("/src"), &p("/dst-parent/dst")).await });
    hooks.freezer.frozen.notified().await;
    tokio::time::sleep(LEASE * 2).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.running.len(), 1, "{report}");
    assert!(report.finished.is_empty(), "{report}");
    assert_eq!(report.locks_released + report.shares_reaped, 0, "{report}");
    hooks.freezer.thaw.notify_one();
    let done = running
        .await
        .expect("job task")
        .expect("the live job finishes");
    assert_eq!(done.rewritten, 53);
    assert_eq!(locks_left(&env).await, 0);
}

async fn expired_locks_are_swept_and_live_shares_kept(env: Env) {
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    let dead = LockClient::builder(Arc::clone(&env.store), env.lock_index())
        .lease(LEASE)
        .renew_every(Duration::from_secs(3600))
        .build();
    let alive = LockClient::builder(Arc::clone(&env.store), env.lock_index())
        .lease(LEASE)
        .build();
    let dead_guard = dead.lock_tree(&p("/x/a")).await.expect("dead");
    let alive_guard = alive.lock_tree(&p("/x/b")).await.expect("alive");
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;

    let dry = recovery(&env).dry_run(true).run().await.expect("dry run");
    assert_eq!((dry.locks_released, dry.shares_reaped), (1, 1), "{dry}");
    assert_eq!(locks_left(&env).await, 3, "a dry run changes nothing");

    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(
        (report.locks_released, report.shares_reaped),
        (1, 1),
        "{report}"
    );
    let shared = env
        .store
        .get(&env.lock_index(), "/x")
        .await
        .expect("get")
        .expect("the live share remains");
    assert_eq!(shared.source["lock_count"], 1);
    assert!(shared.source["holders"]
        .get(&alive.owner().process_id)
        .is_some());
    alive_guard.release().await.expect("release");
    assert_eq!(locks_left(&env).await, 0);
    assert!(
        dead_guard.release().await.is_err(),
        "the dead owner's locks are gone"
    );
}

/// Fair waiting: a live older waiter keeps younger conflicting requests out; once its
/// registration expires (the waiter died) it blocks nobody, and the sweep removes what it left.
async fn a_dead_waiter_blocks_nobody_and_is_swept(env: Env) {
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    let locks = env.lock_index();
    let client = |label: &str| {
        LockClient::builder(Arc::clone(&env.store), locks.clone())
            .holder(label)
            .lease(LEASE)
            .wait(Duration::from_millis(300))
            .build()
    };
    let now = fs_locks::LeaseClock::new().now_ms();
    let ghost = |expires_at: i64| {
        serde_json::json!({"lock_type": "shared", "lock_count": 0, "holders": {}, "path": "/w",
            "waiters": {"ghost": {"mode": "X", "since": 1, "expires_at": expires_at,
                                  "holder": "mv /w /elsewhere (a waiter)"}}})
    };
    // An old request waits for X on `/w`: a younger writer below it may not barge in.
    env.store
        .index(&locks, "/w", ghost(now + 60_000), None)
        .await
        .expect("a live waiter");
    let younger = client("mv /w/f /w/g");
    let message = match younger.lock_tree(&p("/w/f")).await {
        Err(e @ fs_locks::LockError::Timeout { .. }) => e.to_string(),
        other => panic!("expected a timeout behind the waiter, got {other:?}"),
    };
    assert!(
        message.contains("older request waiting") && message.contains("`/w`"),
        "{message}"
    );
    // The waiter dies: its registration runs out, and the same request passes.
    env.store
        .index(&locks, "/w", ghost(now - 1), None)
        .await
        .expect("a dead waiter");
    let guard = younger.lock_tree(&p("/w/f")).await.expect("granted");
    guard.release().await.expect("release");
    // What a dead waiter leaves where nobody comes by is swept.
    let mut left = ghost(now - 1);
    left["path"] = serde_json::json!("/z");
    env.store
        .index(&locks, "/z", left, None)
        .await
        .expect("a forgotten waiter");
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.waiters_reaped, 1, "{report}");
    assert!(report.to_string().contains("expired waiter"), "{report}");
    assert_eq!(locks_left(&env).await, 0);
}

/// A request refused by a holder whose lease ran out says so, and what clears it, instead of
/// reading like a live holder's.
async fn a_refusal_by_a_dead_holder_says_so(env: Env) {
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    let dead = LockClient::builder(Arc::clone(&env.store), env.lock_index())
        .holder("mv /p/s2 /p/t2")
        .lease(LEASE)
        .renew_every(Duration::from_secs(3600))
        .build();
    let _held = dead.lock_tree(&p("/p/s2")).await.expect("dead");
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let asker = LockClient::builder(Arc::clone(&env.store), env.lock_index())
        .wait(Duration::from_millis(100))
        .build();
    let message = match asker.lock_tree(&p("/p/s2/x")).await {
        Err(e @ fs_locks::LockError::Timeout { .. }) => e.to_string(),
        other => panic!("expected a timeout, got {other:?}"),
    };
    assert!(
        message.contains("held by mv /p/s2 /p/t2")
            && message.contains("expired")
            && message.contains("`fsrename recover` finishes what it left and clears it"),
        "{message}"
    );
}

/// Freezes the job the first time it is about to write its journal entry (after its lease
/// check).
struct FreezeBeforeJournal {
    once: std::sync::atomic::AtomicBool,
    freezer: Freezer,
}

#[async_trait]
impl RenameHooks for FreezeBeforeJournal {
    async fn journaling(&self, _job_id: &str) -> Result<(), String> {
        if !self.once.swap(true, Ordering::SeqCst) {
            self.freezer.freeze().await;
        }
        Ok(())
    }
}

/// A regression (the simulation's seed 1610): a job paused after taking its locks and before
/// journaling outlived its lease; recovery cleared its expired locks (no journal entry named
/// them), another job took them and moved the destination's parent away, the paused job then
/// journaled, and a later recovery rolled it forward into a directory that no longer existed.
/// Now the sweep fences the job's journal id before clearing its locks, and the job's journal
/// write meets the fence: it has rewritten nothing, so it starts over, and its new attempt
/// finds the destination's parent gone.
async fn a_job_paused_before_journaling_is_fenced_off(env: Env) {
    paused_before_journaling(env, false).await;
}

/// The same with the job's intention lock on `/dst-parent` borrowed from its process: it
/// outlives its lease and its hold's, and recovery fences it (it is named after the hold)
/// before it clears the hold.
async fn a_borrowing_job_paused_before_journaling_is_fenced_off(env: Env) {
    paused_before_journaling(env, true).await;
}

async fn paused_before_journaling(env: Env, share: bool) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 6);
    let hooks = Arc::new(FreezeBeforeJournal {
        once: Default::default(),
        freezer: Freezer::new(Arc::clone(&store)),
    });
    let mut job = renamer_builder(store.clone(), &env, hooks.clone());
    let as_shared: SharedStore = store;
    let holds = share.then(|| shared(&as_shared, &env, LEASE));
    if let Some(holds) = &holds {
        job = job.share_intentions(holds.clone());
    }
    let job = job.build();
    let paused = tokio::spawn(async move {
        job.rename_reporting(&p("/src"), &p("/dst-parent/dst"))
            .await
    });
    hooks.freezer.frozen.notified().await;
    if let Some(holds) = &holds {
        assert_eq!(
            holders_of(&env, "/dst-parent").await,
            [holds.hold_id()],
            "the job borrowed its intention lock"
        );
    }
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;

    // The job's two exclusive locks and its (or its hold's) share of `/dst-parent`.
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.fenced, 1, "{report}");
    assert_eq!(
        (report.locks_released, report.shares_reaped),
        (2, 1),
        "{report}"
    );
    assert_eq!(locks_left(&env).await, 0);
    let other = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .build();
    other
        .rename(&p("/dst-parent"), &p("/elsewhere"))
        .await
        .expect("the locks are free for another job");

    hooks.freezer.thaw.notify_one();
    let outcome = paused.await.expect("job task");
    assert_eq!(outcome.report.restarts, 1, "{outcome:?}");
    assert_eq!(outcome.report.rewritten, 0, "{outcome:?}");
    assert!(
        matches!(
            outcome.result,
            Err(RenameError::DestinationParentMissing { .. })
        ),
        "{:?}",
        outcome.result
    );
    let report = recovery(&env).run().await.expect("recover again");
    assert!(report.finished.is_empty(), "nothing to finish: {report}");
    let after = paths_by_id(&env).await;
    assert_eq!(after.len(), before.len());
    for (id, path) in &before {
        let want = path.replacen("/dst-parent", "/elsewhere", 1);
        assert_eq!(after.get(id), Some(&want), "document {id}");
    }
    let checked = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(checked.is_clean(), "{checked}");
    assert_eq!(checked.journals_open(), 0, "{checked}");
    assert_eq!(locks_left(&env).await, 0);
    // Two tombstones: the fence the sweep left at the paused job's id, and the one the
    // recovered rename left when it closed its entry.
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    assert_eq!(journal.fences().await.expect("fences").len(), 2);
}

/// Does to the foreign share count of `/clinton` what the book's scripts do: `lock_count +=
/// delta` in place (other fields kept), creating `{"lock_type": "shared", "lock_count": 1}`.
async fn book_share(env: &Env, delta: i64) {
    let locks = env.lock_index();
    match env.store.get(&locks, "/clinton").await.expect("read") {
        None => {
            env.store
                .create(
                    &locks,
                    "/clinton",
                    serde_json::json!({ "lock_type": "shared", "lock_count": delta }),
                )
                .await
                .expect("book share");
        }
        Some(doc) => {
            let mut source = doc.source;
            let count = source["lock_count"].as_i64().unwrap_or(0) + delta;
            source["lock_count"] = serde_json::json!(count);
            env.store
                .index(&locks, "/clinton", source, Some(doc.version))
                .await
                .expect("book share");
        }
    }
}

/// The book's retried increment: a book client's `lock_count++` applied twice (the first
/// attempt landed, its answer was lost, it was sent again), then its release (`--lock_count`)
/// leaves a share nobody holds. It keeps every rename of `/clinton` out (a foreign share is
/// IX), so recovery watches it: noted at first, watched again from scratch whenever the
/// count moves (a book client came or went), and cleared once it stood still for the foreign
/// lease. Then the rename goes through.
async fn a_share_count_too_high_is_cleared_after_the_foreign_lease(env: Env) {
    tree_with(&env, &[("/clinton", true), ("/clinton/a", false)]).await;
    book_share(&env, 2).await;
    book_share(&env, -1).await;
    let renamer = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .wait(Duration::from_millis(200))
        .build();
    let refused = renamer.rename(&p("/clinton"), &p("/gormley")).await;
    assert!(refused.is_err(), "the phantom share keeps the rename out");

    let lease = Duration::from_millis(400);
    let recovery = Recovery::new(Arc::clone(&env.store), env.index.clone()).foreign_lease(lease);
    let run = recovery.run().await.expect("recovery");
    assert_eq!((run.foreign_watched, run.foreign_cleared), (1, 0), "{run}");
    // A live book client comes: the count moves, so the watch starts again.
    tokio::time::sleep(lease).await;
    book_share(&env, 1).await;
    let run = recovery.run().await.expect("recovery");
    assert_eq!((run.foreign_watched, run.foreign_cleared), (1, 0), "{run}");
    // It goes, and the count moves again.
    tokio::time::sleep(lease).await;
    book_share(&env, -1).await;
    let run = recovery.run().await.expect("recovery");
    assert_eq!((run.foreign_watched, run.foreign_cleared), (1, 0), "{run}");
    // Now nothing moves for a whole foreign lease: the phantom goes.
    tokio::time::sleep(lease + Duration::from_millis(50)).await;
    let run = recovery.run().await.expect("recovery");
    assert_eq!((run.foreign_watched, run.foreign_cleared), (0, 1), "{run}");
    assert!(run.to_string().contains("1 foreign share(s)"), "{run}");
    assert!(env
        .store
        .get(&env.lock_index(), "/clinton")
        .await
        .expect("read")
        .is_none());
    renamer
        .rename(&p("/clinton"), &p("/gormley"))
        .await
        .expect("the rename goes through");
}

/// Cancels its job just before page `at` is written (counting from 1).
struct CancelAtPage {
    at: usize,
    pages: AtomicUsize,
    cancel: tokio::sync::watch::Sender<bool>,
}

#[async_trait]
impl RenameHooks for CancelAtPage {
    async fn before_write(&self, _page: &[Entry]) {
        if self.pages.fetch_add(1, Ordering::SeqCst) + 1 == self.at {
            self.cancel.send_replace(true);
        }
    }
}

/// Issue 47, item 3: a job cancelled (Ctrl-C) after its journal entry landed but before its
/// first write kept its locks for their whole lease, as if it had written half the tree, and
/// the same `mv` run again waited them out. With nothing written there is nothing to finish:
/// the entry is closed and the locks given back at once. A job cancelled after a write still
/// leaves both, for recovery.
async fn a_job_cancelled_before_its_first_write_gives_its_locks_back(env: Env) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    for (at, wrote) in [(1, false), (2, true)] {
        let (cancel, cancelled) = tokio::sync::watch::channel(false);
        let hooks = Arc::new(CancelAtPage {
            at,
            pages: AtomicUsize::new(0),
            cancel,
        });
        let job = Renamer::builder(Arc::clone(&env.store), env.index.clone())
            // Long: what is given back is given back by the job, not by its lease.
            .lease(Duration::from_secs(600))
            .page_size(PAGE)
            .hooks(hooks)
            .cancel(cancelled)
            .build();
        let stopped = job.rename(&p("/src"), &p("/dst-parent/dst")).await;
        let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
            .await
            .expect("fsck");
        if wrote {
            // Out of all 53 under `/src` (not of the pages read so far), as progress said;
            // the first page may be written or still on its way.
            assert!(
                matches!(&stopped, Err(RenameError::Unfinished { cause, found: 53, .. })
                    if matches!(**cause, RenameError::Cancelled { rewritten: 0 | 10, found: 53, .. })),
                "{stopped:?}"
            );
            assert!(locks_left(&env).await > 0, "left for recovery");
            assert_eq!(report.journals_open(), 1, "{report}");
        } else {
            assert!(
                matches!(stopped, Err(RenameError::Cancelled { rewritten: 0, .. })),
                "{stopped:?}"
            );
            assert_eq!(locks_left(&env).await, 0, "given back");
            assert_eq!(report.journals_open(), 0, "{report}");
            assert!(report.is_clean(), "{report}");
            assert_eq!(paths_by_id(&env).await, before, "nothing moved");
        }
    }
}

/// The process's shared intention locks on `store`, leased for `lease`, given back as the
/// last job is done (no linger: the tests count what is left once the jobs end).
fn shared(store: &SharedStore, env: &Env, lease: Duration) -> SharedIntentions {
    SharedIntentions::new(
        LockClient::builder(Arc::clone(store), env.lock_index())
            .holder("intentions of a test process")
            .lease(lease),
    )
    .linger(Duration::ZERO)
}

/// The holders' process ids on the lock document `id`, sorted.
async fn holders_of(env: &Env, id: &str) -> Vec<String> {
    let Some(doc) = env.store.get(&env.lock_index(), id).await.expect("read") else {
        return Vec::new();
    };
    match fs_locks::Observed::from_source(&doc.source) {
        fs_locks::Observed::Group { holders, .. } => holders.keys().cloned().collect(),
        fs_locks::Observed::Exclusive { process_id, .. } => process_id.into_iter().collect(),
    }
}

/// A hold whose lease ended while a job that borrowed it has journaled and may still act is
/// not cleared; once the job is finished (here by recovery, which takes an intention lock of
/// its own beside the expired hold), the hold goes too.
async fn a_hold_is_kept_while_a_borrower_that_journaled_may_act(env: Env) {
    env.scans_die_open(1);
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 1);
    let as_shared: SharedStore = store.clone();
    // The hold's lease is the shorter: it ends while the job's own locks still run.
    let holds = shared(&as_shared, &env, LEASE);
    let hooks = Arc::new(KillAtPage::new(3, Arc::clone(&store)));
    let job = renamer_builder(store.clone(), &env, hooks)
        .lease(LEASE * 4)
        .share_intentions(holds.clone())
        .build();
    let handle = tokio::spawn(async move {
        let result = job.rename(&p("/src"), &p("/dst-parent/dst")).await;
        panic!("a dead job never returns: {result:?}");
    });
    wait_until_dead(&store).await;
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.running.len(), 1, "the job is still leased: {report}");
    assert_eq!((report.fenced, report.shares_reaped), (0, 0), "{report}");
    assert_eq!(
        holders_of(&env, "/dst-parent").await,
        [holds.hold_id()],
        "the expired hold is kept for the journaled job"
    );

    tokio::time::sleep(LEASE * 4).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_finished(&env, &before).await;
    handle.abort();
}

/// The protocol marker (issue 73): written once, read past by this version's recovery and
/// fsck; a newer protocol's stops them both, naming the version it needs, before any lock is
/// touched.
async fn the_protocol_marker_is_passed_over_and_a_newer_one_stops_recovery(env: Env) {
    setup(&env).await;
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    journal.declare_protocol().await.expect("marker");
    journal.declare_protocol().await.expect("marker again");
    assert!(journal.list().await.expect("list").is_empty(), "no job's");
    let report = recovery(&env).run().await.expect("recover past the marker");
    assert!(report.finished.is_empty(), "{report}");
    let checked = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(checked.is_clean(), "{checked}");

    // What a newer version would leave.
    let journal_index = fs_model::journal_index_name(&env.index);
    let newer = serde_json::json!({"kind": "fsrename protocol 99: run fsrename 9.0.0 or later",
        "protocol": fs_rename::PROTOCOL + 1, "needs": "9.0.0"});
    env.store
        .index(&journal_index, fs_rename::PROTOCOL_ID, newer, None)
        .await
        .expect("a newer marker");
    let refused = recovery(&env).run().await.expect_err("a newer protocol");
    assert!(
        matches!(refused, RenameError::NewerProtocol { .. })
            && refused.to_string().contains("9.0.0"),
        "{refused}"
    );
    let refused = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect_err("fsck refuses too");
    assert!(refused.to_string().contains("9.0.0"), "{refused}");
    let refused = journal.declare_protocol().await.expect_err("not lowered");
    assert!(refused.to_string().contains("9.0.0"), "{refused}");
}

on_every_backend!(
    a_close_that_lands_after_the_listing_leaves_no_lock,
    the_protocol_marker_is_passed_over_and_a_newer_one_stops_recovery,
    a_borrowing_job_paused_before_journaling_is_fenced_off,
    a_hold_is_kept_while_a_borrower_that_journaled_may_act,
    a_job_cancelled_before_its_first_write_gives_its_locks_back,
    a_share_count_too_high_is_cleared_after_the_foreign_lease,
    a_job_paused_before_journaling_is_fenced_off,
    a_job_that_dies_mid_rewrite_is_finished,
    a_dying_recoverer_is_recovered_in_turn,
    a_zombie_stops_at_its_first_write,
    a_job_paused_before_its_first_write_and_finished_by_recovery_is_not_failed,
    a_job_whose_journal_answer_came_after_recovery_finished_it_is_not_failed,
    live_jobs_are_left_alone,
    expired_locks_are_swept_and_live_shares_kept,
    a_dead_waiter_blocks_nobody_and_is_swept,
    a_refusal_by_a_dead_holder_says_so,
);
