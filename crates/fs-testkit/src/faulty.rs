//! [`FaultyStore`]: a store wrapper that injects the failures a network and a process can
//! produce, from a seeded random source, and can "die".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fs_store::{
    BulkItemResult, BulkOp, Cursor, DocStore, Page, Result, Scope, ScriptedUpdate, ScriptedUpdates,
    SearchRequest, SharedStore, StoreError, StoredDoc, UpdateItemResult, Version,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

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

#[async_trait]
impl DocStore for FaultyStore {
    fn describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }
    async fn create_index(&self, index: &str, body: &Value) -> Result<bool> {
        let fate = self.gate(true).await?;
        let result = self.inner.create_index(index, body).await;
        self.after(fate, result).await
    }
    async fn delete_index(&self, index: &str) -> Result<bool> {
        let fate = self.gate(true).await?;
        let result = self.inner.delete_index(index).await;
        self.after(fate, result).await
    }
    async fn extend_mapping(&self, index: &str, mappings: &Value) -> Result<()> {
        let fate = self.gate(true).await?;
        let result = self.inner.extend_mapping(index, mappings).await;
        self.after(fate, result).await
    }
    async fn find(
        &self,
        index: &str,
        query: &fs_model::FindQuery,
        size: usize,
    ) -> Result<Vec<StoredDoc>> {
        let fate = self.gate(false).await?;
        let result = self.inner.find(index, query, size).await;
        self.after(fate, result).await
    }
    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        let fate = self.gate(false).await?;
        let result = self.inner.get(index, id).await;
        self.after(fate, result).await
    }
    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        let fate = self.gate(false).await?;
        let result = self.inner.mget(index, ids).await;
        self.after(fate, result).await
    }
    async fn create(&self, index: &str, id: &str, source: Value) -> Result<Version> {
        let fate = self.gate(true).await?;
        let result = self.inner.create(index, id, source).await;
        self.after(fate, result).await
    }
    async fn index(
        &self,
        index: &str,
        id: &str,
        source: Value,
        if_version: Option<Version>,
    ) -> Result<Version> {
        let fate = self.gate(true).await?;
        let result = self.inner.index(index, id, source, if_version).await;
        self.after(fate, result).await
    }
    async fn delete(&self, index: &str, id: &str, if_version: Option<Version>) -> Result<Version> {
        let fate = self.gate(true).await?;
        let result = self.inner.delete(index, id, if_version).await;
        self.after(fate, result).await
    }
    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let fate = self.gate(true).await?;
        // Decide each item's fate up front, from the seeded source.
        let failing: Vec<bool> = {
            let mut state = self.state();
            ops.iter()
                .map(|_| state.rng.random::<f64>() < self.plan.item_fail)
                .collect()
        };
        let sent: Vec<BulkOp> = ops
            .iter()
            .zip(&failing)
            .filter(|(_, fail)| !**fail)
            .map(|(op, _)| op.clone())
            .collect();
        let answered = if sent.is_empty() {
            Ok(Vec::new())
        } else {
            self.inner.bulk(index, sent).await
        };
        let answered = self.after(fate, answered).await?;
        let mut answers = answered.into_iter();
        let mut results = Vec::with_capacity(ops.len());
        for fail in failing {
            if fail {
                results.push(Err(injected("to this bulk item")));
            } else {
                match answers.next() {
                    Some(answer) => results.push(answer),
                    None => results.push(Err(injected("(no answer)"))),
                }
            }
        }
        Ok(results)
    }
    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        let fate = self.gate(false).await?;
        let result = self.inner.search(index, request).await;
        self.after(fate, result).await
    }
    /// Forwarded without a fate of its own: a close frees what the server holds and decides
    /// nothing, and drawing for it would move every later call's fault in a seeded schedule.
    /// A dead process closes nothing; a frozen one closes when it thaws.
    async fn close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        self.while_paused().await;
        if self.is_dead() {
            return std::future::pending().await;
        }
        self.inner.close_cursor(index, cursor).await
    }
    async fn count(&self, index: &str, scope: &Scope) -> Result<u64> {
        let fate = self.gate(false).await?;
        let result = self.inner.count(index, scope).await;
        self.after(fate, result).await
    }
    async fn refresh(&self, index: &str) -> Result<()> {
        let fate = self.gate(false).await?;
        let result = self.inner.refresh(index).await;
        self.after(fate, result).await
    }
    fn scripted(&self) -> Option<&dyn ScriptedUpdates> {
        self.inner.scripted().map(|_| self as &dyn ScriptedUpdates)
    }
}

/// Scripted updates suffer the faults of a bulk request: the whole call may fail before it is
/// sent or lose its answer after it landed, and each item may fail on its own.
#[async_trait]
impl ScriptedUpdates for FaultyStore {
    async fn put_script(&self, id: &str, source: &str) -> Result<bool> {
        let fate = self.gate(true).await?;
        let result = match self.inner.scripted() {
            Some(scripted) => scripted.put_script(id, source).await,
            None => Ok(false),
        };
        self.after(fate, result).await
    }

    async fn bulk_update(
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
        let fate = self.gate(true).await?;
        let failing: Vec<bool> = {
            let mut state = self.state();
            items
                .iter()
                .map(|_| state.rng.random::<f64>() < self.plan.item_fail)
                .collect()
        };
        let sent: Vec<ScriptedUpdate> = items
            .iter()
            .zip(&failing)
            .filter(|(_, fail)| !**fail)
            .map(|(item, _)| item.clone())
            .collect();
        let answered = if sent.is_empty() {
            Ok(Vec::new())
        } else {
            scripted.bulk_update(index, sent).await
        };
        let mut answers = self.after(fate, answered).await?.into_iter();
        Ok(failing
            .into_iter()
            .map(|fail| match (fail, answers.next()) {
                (true, _) | (false, None) => Err(injected("to this update item")),
                (false, Some(answer)) => answer,
            })
            .collect())
    }
}
