//! [`FinishOrphans`]: a job in the way of a job that died finishes it first.
//!
//! A job that died (killed, or stopped by Ctrl-C after its journal entry) leaves its locks,
//! and its half-done work, to recovery: its locks refuse everyone until then. Run again at
//! once, the same `mv` used to wait out the dead job's lease and then fail (`--wait` equals
//! `--lease` by default), telling the user to run `fsrename recover`. A lock client given a
//! [`FinishOrphans`] does that itself: refused by a lock whose holders' leases have all ended
//! (which on the holder's own machine is at once, when its process is proven gone: see
//! `fs_locks::OsProcess`), it runs a recovery, which rolls the dead job forward and clears its
//! locks, and tries again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fs_locks::{Blocker, Orphans};
use fs_store::SharedStore;

use super::{Recovered, Recovery};

/// Finishes, through a [`Recovery`] run, what the dead holders of a lock in a job's way left;
/// remembers what it finished, for the job to tell. One run at a time per value: the jobs of
/// a process that meet the same dead lock wait for the one run, then try again.
pub struct FinishOrphans {
    recovery: Recovery,
    /// Held while a run is under way (a tokio mutex: held across the run's awaits).
    running: tokio::sync::Mutex<()>,
    finished: Mutex<Vec<Recovered>>,
}

impl std::fmt::Debug for FinishOrphans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinishOrphans")
            .field("recovery", &self.recovery)
            .finish_non_exhaustive()
    }
}

impl FinishOrphans {
    /// Finishes orphans of the tree index `index` on `store`, with locks leased for `lease`
    /// while it does, waiting up to `wait` for them.
    pub fn new(store: SharedStore, index: &str, lease: Duration, wait: Duration) -> Arc<Self> {
        Arc::new(FinishOrphans {
            recovery: Recovery::new(store, index).lease(lease).wait(wait),
            running: tokio::sync::Mutex::new(()),
            finished: Mutex::new(Vec::new()),
        })
    }

    /// Returns the jobs it finished so far, oldest first.
    pub fn finished(&self) -> Vec<Recovered> {
        self.finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl Orphans for FinishOrphans {
    async fn settle(&self, blocker: &Blocker) -> bool {
        let _one = self.running.lock().await;
        match self.recovery.run().await {
            Ok(report) => {
                for done in &report.finished {
                    tracing::info!(job = %done.job_id, kind = %done.kind, from = %done.from, to = %done.to, lock = %blocker.path, "finished a job that died, which was in the way");
                }
                self.finished
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(report.finished);
                // Whatever it did, the lock may be free now: try again at once.
                true
            }
            Err(e) => {
                tracing::warn!(lock = %blocker.path, error = %e, "could not finish what a job that died left; waiting for its locks");
                false
            }
        }
    }
}
