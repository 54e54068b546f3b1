//! [`ScriptingStore`]: runs the stored lock scripts the way Elasticsearch runs a scripted
//! update, on any store, so that the scripted protocol can be tested where no painless runs.
//!
//! One update is [`scripted_update`]: read the document, run the script (the Rust twin of the
//! painless, from [`fs_model::lock_scripts`]), write conditionally on the version read (a
//! create where the upsert goes in). A lost race is run again up to `retry_on_conflict` times,
//! then answered [`StoreError::Conflict`](fs_store::StoreError::Conflict); a script's `Debug.explain` is
//! [`StoreError::Refused`](fs_store::StoreError::Refused). The Elasticsearch-behaviour proxy runs every scripted update
//! through this same function, so the deterministic simulation and the HTTP tests test one
//! implementation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fs_model::lock_scripts::LockScript;
use fs_store::{
    plan_update, unknown_script, Capabilities, DocStore, PlannedWrite, Result, ScriptedUpdate,
    ScriptedUpdates, SharedStore, StoreLayer, StoredLockScripts, UpdateItemResult, UpdateOutcome,
};

/// How many times [`ScriptingStore`] re-runs a raced update, as the Elasticsearch store's
/// `retry_on_conflict` asks the server to.
pub const RETRY_ON_CONFLICT: u32 = 3;

/// What [`scripted_update`] did besides its result: the races it lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateRaces {
    /// Conditional writes that lost a race.
    pub lost: u64,
    /// Of those, the ones run again.
    pub retried: u64,
}

/// Runs `update` of `index` with `script` on `store`, as Elasticsearch runs a scripted update
/// with an upsert. Between the read and the write it waits up to `race_window` (chosen by
/// `pause`, so that a deterministic caller can pass a fixed or zero one), and always yields,
/// so that concurrent updates interleave there as they do on a server.
pub async fn scripted_update(
    store: &dyn DocStore,
    index: &str,
    script: &LockScript,
    update: &ScriptedUpdate,
    retry_on_conflict: u32,
    pause: Duration,
) -> (UpdateItemResult, UpdateRaces) {
    let mut races = UpdateRaces::default();
    loop {
        let current = match store.get(index, &update.id).await {
            Ok(current) => current,
            Err(e) => return (Err(e), races),
        };
        let planned = match plan_update(index, script, update, current) {
            Ok(planned) => planned,
            Err(e) => return (Err(e), races),
        };
        let result = planned.result();
        let written = match planned {
            PlannedWrite::Noop(version) => Ok(version),
            PlannedWrite::Create(upsert) => {
                between(pause).await;
                store.create(index, &update.id, upsert).await
            }
            PlannedWrite::Index { source, version } => {
                between(pause).await;
                store.index(index, &update.id, source, Some(version)).await
            }
            PlannedWrite::Delete(version) => {
                between(pause).await;
                store.delete(index, &update.id, Some(version)).await
            }
        };
        match written {
            Ok(version) => {
                let outcome = UpdateOutcome {
                    result,
                    version: Some(version),
                };
                return (Ok(outcome), races);
            }
            Err(e) if e.is_conflict() => {
                races.lost += 1;
                if races.retried < u64::from(retry_on_conflict) {
                    races.retried += 1;
                    continue;
                }
                return (Err(e), races);
            }
            Err(e) => return (Err(e), races),
        }
    }
}

/// Waits `pause` between an update's read and its write; a zero pause still yields, so that
/// concurrent updates interleave there.
pub(crate) async fn between(pause: Duration) {
    if pause.is_zero() {
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(pause).await;
    }
}

/// A store wrapper that stores the lock scripts and runs them with [`scripted_update`], so
/// that a store with no scripts of its own (the embedded store in the simulation) runs the
/// scripted protocol with Elasticsearch's races. It offers every other capability of the
/// store it wraps, and scripts of its own in place of the wrapped store's.
#[derive(Debug)]
pub struct ScriptingStore {
    scripts: Scripts,
}

/// The scripts of a [`ScriptingStore`]: its `scripts` capability.
#[derive(Debug)]
struct Scripts {
    inner: SharedStore,
    stored: StoredLockScripts,
    races: AtomicU64,
}

impl ScriptingStore {
    /// Wraps `inner`.
    pub fn new(inner: SharedStore) -> ScriptingStore {
        ScriptingStore {
            scripts: Scripts {
                inner,
                stored: StoredLockScripts::default(),
                races: AtomicU64::new(0),
            },
        }
    }

    /// Returns how many conditional writes of scripted updates lost a race so far.
    pub fn races(&self) -> u64 {
        self.scripts.races.load(Ordering::Relaxed)
    }
}

impl StoreLayer for ScriptingStore {
    fn inner(&self) -> &dyn DocStore {
        &*self.scripts.inner
    }

    fn on_describe(&self) -> String {
        format!("scripting({})", self.scripts.inner.describe())
    }

    fn on_capabilities<'a>(&'a self, offered: Capabilities<'a>) -> Capabilities<'a> {
        Capabilities {
            scripts: Some(&self.scripts),
            ..offered
        }
    }
}

#[async_trait]
impl ScriptedUpdates for Scripts {
    async fn put_script(&self, id: &str, source: &str) -> Result<bool> {
        Ok(self.stored.store(id, source))
    }

    async fn bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        let mut results = Vec::with_capacity(items.len());
        for item in &items {
            let Some(script) = self.stored.get(&item.script) else {
                results.push(Err(unknown_script(index, item)));
                continue;
            };
            let (result, races) = scripted_update(
                self.inner.as_ref(),
                index,
                script,
                item,
                RETRY_ON_CONFLICT,
                Duration::ZERO,
            )
            .await;
            self.races.fetch_add(races.lost, Ordering::Relaxed);
            results.push(result);
        }
        Ok(results)
    }
}
