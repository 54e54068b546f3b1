//! [`FaultyStore`]: a store wrapper that injects the failures a network and a process can
//! produce, from a seeded random source, and can "die".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fs_store::{
    BulkItemResult, BulkOp, Call, DocStore, Result, ScriptedUpdate, SharedStore, StoreError,
    StoreLayer, UpdateItemResult,
};
use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Which failures a [`FaultyStore`] injects, each with its probability per call (per item for
/// bulk items).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultPlan {
    /// The call fails with a transient error and does nothing.
    pub transient: f64,
    /// A write happens, but its answer is lost: the caller sees a transient error.
    pub lost_reply: f64,
    /// A bulk item is not written and reported as a transient failure (the others are).
    pub item_fail: f64,
    /// After this many calls the "process" dies: every later call never returns.
    pub die_at: Option<u64>,
    /// At this call the "process" freezes for this long (a GC pause, SIGSTOP, a partition),
    /// then goes on as if nothing happened: a zombie, if the freeze outlasts its lease. While
    /// frozen no call goes out and no answer comes back.
    pub freeze_at: Option<(u64, std::time::Duration)>,
}

#[derive(Debug)]
struct State {
    rng: StdRng,
    calls: u64,
    /// While frozen: when the freeze ends.
    frozen_until: Option<tokio::time::Instant>,
}

/// A store wrapper injecting [`FaultPlan`]'s failures. Death makes every call hang forever,
/// as a killed process's requests would never be answered, so a dead job neither writes nor
/// renews nor releases anything.
#[derive(Debug)]
pub struct FaultyStore {
    inner: SharedStore,
    plan: FaultPlan,
    state: Mutex<State>,
    dead: AtomicBool,
    paused: tokio::sync::watch::Sender<bool>,
}

/// What one call is to suffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Die,
    /// Frozen at this call: it goes out when the freeze ends.
    Freeze,
    Fail,
    LoseReply,
    Normal,
}

impl FaultyStore {
    /// Wraps `inner`, drawing faults from `seed`.
    pub fn new(inner: SharedStore, plan: FaultPlan, seed: u64) -> FaultyStore {
        FaultyStore {
            inner,
            plan,
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                calls: 0,
                frozen_until: None,
            }),
            dead: AtomicBool::new(false),
            paused: tokio::sync::watch::channel(false).0,
        }
    }

    /// Kills it now: every later call hangs.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    /// Freezes (true) or thaws (false) it: while frozen, calls wait, as a stopped process's
    /// would, then go on.
    pub fn pause(&self, yes: bool) {
        self.paused.send_replace(yes);
    }

    async fn while_paused(&self) {
        let mut paused = self.paused.subscribe();
        // Errors only if the sender is gone, which cannot happen while `self` lives.
        let _ = paused.wait_for(|p| !*p).await;
        let frozen_until = self.state().frozen_until;
        if let Some(until) = frozen_until {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Returns true once a scheduled freeze has begun (it may be over).
    pub fn has_frozen(&self) -> bool {
        self.state().frozen_until.is_some()
    }

    /// Returns true once it has died.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Returns how many calls it has seen.
    pub fn calls(&self) -> u64 {
        self.state().calls
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fate(&self, write: bool) -> Fate {
        if self.is_dead() {
            return Fate::Die;
        }
        let mut state = self.state();
        state.calls += 1;
        if let Some((at, pause)) = self.plan.freeze_at {
            if state.calls == at {
                state.frozen_until = Some(tokio::time::Instant::now() + pause);
                return Fate::Freeze;
            }
        }
        if self.plan.die_at.is_some_and(|at| state.calls >= at) {
            self.dead.store(true, Ordering::SeqCst);
            return Fate::Die;
        }
        let roll: f64 = state.rng.random();
        if roll < self.plan.transient {
            Fate::Fail
        } else if write && roll < self.plan.transient + self.plan.lost_reply {
            Fate::LoseReply
        } else {
            Fate::Normal
        }
    }

    async fn gate(&self, write: bool) -> Result<Fate> {
        self.while_paused().await;
        match self.fate(write) {
            Fate::Die => std::future::pending().await,
            Fate::Freeze => {
                self.while_paused().await;
                Ok(Fate::Normal)
            }
            Fate::Fail => Err(injected("before the call")),
            fate => Ok(fate),
        }
    }

    async fn after<T>(&self, fate: Fate, result: Result<T>) -> Result<T> {
        self.while_paused().await;
        if self.is_dead() {
            return std::future::pending().await;
        }
        match fate {
            Fate::LoseReply => Err(injected("after the write")),
            _ => result,
        }
    }
}

fn injected(when: &str) -> StoreError {
    StoreError::Transient {
        context: "fault injection".into(),
        message: format!("injected transient failure {when}"),
    }
}

/// Wraps a store in a fault injector with a shared handle.
pub fn faulty(inner: SharedStore, plan: FaultPlan, seed: u64) -> Arc<FaultyStore> {
    Arc::new(FaultyStore::new(inner, plan, seed))
}

impl FaultyStore {
    /// Sends `items` through `send` but for those whose seeded draw fails them alone: those
    /// are not sent and come back as transient failures (a busy node rejecting an item), the
    /// others with their answers, in order.
    async fn with_item_faults<I, R, Fut>(
        &self,
        items: Vec<I>,
        send: impl FnOnce(Vec<I>) -> Fut,
    ) -> Result<Vec<Result<R>>>
    where
        Fut: std::future::Future<Output = Result<Vec<Result<R>>>>,
    {
        // Each item's fate is decided up front, from the seeded source.
        let failing: Vec<bool> = {
            let mut state = self.state();
            items
                .iter()
                .map(|_| state.rng.random::<f64>() < self.plan.item_fail)
                .collect()
        };
        let sent: Vec<I> = items
            .into_iter()
            .zip(&failing)
            .filter(|(_, fail)| !**fail)
            .map(|(item, _)| item)
            .collect();
        let answered = if sent.is_empty() {
            Vec::new()
        } else {
            send(sent).await?
        };
        let mut answers = answered.into_iter();
        Ok(failing
            .into_iter()
            .map(|fail| match fail {
                true => Err(injected("to this item")),
                false => answers
                    .next()
                    .unwrap_or_else(|| Err(injected("(no answer)"))),
            })
            .collect())
    }
}

/// Every call may fail before it is sent, lose its answer after it landed (a write), or never
/// come back (death); a bulk request's items, refreshed or scripted, may also fail alone. A
/// chained request is one transaction: it fails or lands whole. It offers every capability of
/// the store it wraps, so that the fault-injection tests take the paths production takes.
#[async_trait]
impl StoreLayer for FaultyStore {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }

    fn on_describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: Call,
        next: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        Box::pin(async move {
            if call == Call::CloseCursor {
                // No fate of its own: a close frees what the server holds and decides
                // nothing, and drawing for it would move every later call's fault in a
                // seeded schedule. A dead process closes nothing; a frozen one closes when it
                // thaws.
                self.while_paused().await;
                if self.is_dead() {
                    return std::future::pending().await;
                }
                return next.await;
            }
            let fate = self.gate(call.writes()).await?;
            let result = next.await;
            self.after(fate, result).await
        })
    }

    async fn on_bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.with_item_faults(ops, |sent| self.inner.bulk(index, sent))
            .await
    }

    async fn on_bulk_refreshed(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
    ) -> Result<Vec<BulkItemResult>> {
        self.with_item_faults(ops, |sent| self.inner.bulk_refreshed(index, sent))
            .await
    }

    async fn on_bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        let Some(scripted) = self.inner.scripted() else {
            return Err(StoreError::Rejected {
                context: format!("scripted update of `{index}`"),
                status: None,
                message: "the store runs no scripts".into(),
            });
        };
        self.with_item_faults(items, |sent| scripted.bulk_update(index, sent))
            .await
    }
}

#[cfg(test)]
mod tests {
    use fs_store::{Chain, Chained, CountingStore, SqliteOptions, SqliteStore};
    use serde_json::json;

    use super::*;

    /// The fault-injection tests over the embedded store take the chained path, as production
    /// does: the wrapper says it chains, and a chained request reaches SQLite as one call (it
    /// used to answer that it could not, so jobs under faults never chained).
    #[tokio::test]
    async fn faults_over_the_embedded_store_take_the_chained_path() {
        let sqlite =
            SqliteStore::in_memory_with(SqliteOptions::new().near_real_time(true)).expect("store");
        let reached = Arc::new(CountingStore::new(Arc::new(sqlite)));
        let store: SharedStore = faulty(reached.clone(), FaultPlan::default(), 7);
        assert!(store.chains_bulk(), "a FaultyStore over SQLite chains");
        let scripted = store.scripted().expect("scripts forwarded");
        assert!(scripted.chains(), "and chains its scripted updates");
        for index in ["journal", "tree"] {
            store.create_index(index, &json!({})).await.expect("index");
        }
        let before = reached.round_trips();
        let entry = BulkOp::Create {
            id: "job".into(),
            source: json!({"state": "open"}),
        };
        let ops = vec![BulkOp::Create {
            id: "a".into(),
            source: json!({"path": "/a"}),
        }];
        let chained = store
            .bulk_after(Chain {
                first_index: "journal",
                first: entry,
                with_first: None,
                index: "tree",
                then: ops,
                refresh: true,
            })
            .await
            .expect("chained");
        assert!(
            matches!(&chained, Chained::Ran(_, results) if results.iter().all(Result::is_ok)),
            "{chained:?}"
        );
        assert_eq!(
            reached.round_trips(),
            before + 1,
            "one chained call reached SQLite"
        );
        assert!(store.get("journal", "job").await.expect("get").is_some());
        let page = store
            .search(
                "tree",
                fs_store::SearchRequest::single_page(fs_store::Scope::All, 10),
            )
            .await
            .expect("search");
        assert_eq!(page.docs.len(), 1, "refreshed in the same call");
    }

    /// A bulk whose items fail alone answers each surviving item with its own result, in
    /// order (the scripted bulk used to shift them: it took an answer for each failed item
    /// too). Plain, refreshed and scripted bulks share the one item-fault path.
    #[tokio::test]
    async fn failed_items_do_not_shift_the_others_answers() {
        let sqlite: SharedStore = Arc::new(SqliteStore::in_memory().expect("store"));
        let plan = FaultPlan {
            item_fail: 0.5,
            ..FaultPlan::default()
        };
        let store = FaultyStore::new(Arc::clone(&sqlite), plan, 3);
        store.create_index("i", &json!({})).await.expect("index");
        let ops: Vec<BulkOp> = (0..20)
            .map(|i| BulkOp::Create {
                id: format!("d{i}"),
                source: json!({}),
            })
            .collect();
        let results = store.bulk("i", ops).await.expect("bulk");
        assert!(results.iter().any(Result::is_err) && results.iter().any(Result::is_ok));
        for (i, result) in results.iter().enumerate() {
            let stored = sqlite.get("i", &format!("d{i}")).await.expect("get");
            assert_eq!(stored.is_some(), result.is_ok(), "item {i}: {result:?}");
        }
    }
}
