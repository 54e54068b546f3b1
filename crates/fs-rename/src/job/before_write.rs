//! What every page of a job goes through before its write ([`Renamer::before_page`]): the
//! journal's [`Gate`], the test hook, a cancellation, and the check that the locks are still
//! this job's.
//!
//! The gate: reading under the locks is safe before the job is journaled; writing is not (a
//! job that stops half-way must leave an entry for recovery to finish). So the entry goes out
//! while the first pages are read, and each page's write waits at the gate: it opens once the
//! entry has landed, and stays shut for good if it did not (the job then writes nothing). On a
//! remote store this takes the journal's round trip, and the first page's read, off a large
//! rename's critical path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fs_locks::LockClient;
use fs_model::FsPath;
use tokio::sync::watch;

use super::Renamer;
use crate::error::{RenameError, Result};
use crate::kind::JobKind;
use crate::tree::{Entry, FsTree};

/// What a job's writes go through: the tree they write, the locks they need (checked before
/// every page) and the journal's gate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hold<'a> {
    pub(crate) tree: &'a FsTree,
    pub(crate) locks: &'a LockClient,
    pub(crate) gate: &'a Gate,
}

impl<'a> Hold<'a> {
    /// A hold whose gate never waits: a job with nothing to journal first, or a recovery
    /// finishing a journaled job.
    pub(crate) fn open(tree: &'a FsTree, locks: &'a LockClient) -> Hold<'a> {
        // Never dropped, so one open gate serves every hold.
        static OPEN: Gate = Gate {
            state: None,
            sent: None,
        };
        Hold {
            tree,
            locks,
            gate: &OPEN,
        }
    }
}

/// The side the writes wait on. [`Hold::open`] holds one that never waits (a recovery
/// finishing a journaled job, or a job with no locks and no journal).
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    /// `None`: open for good, nothing to wait on.
    state: Option<watch::Receiver<Option<bool>>>,
    /// Turns true when a page has passed on its way to being written: from then on the job
    /// may have changed the tree. `None` for the open gate, which does not tell.
    sent: Option<Arc<AtomicBool>>,
}

/// The side that says whether the entry landed.
#[derive(Debug)]
pub(crate) struct Keeper {
    state: watch::Sender<Option<bool>>,
}

impl Gate {
    /// A shut gate and its keeper.
    pub fn shut() -> (Keeper, Gate) {
        let (state, receiver) = watch::channel(None);
        (
            Keeper { state },
            Gate {
                state: Some(receiver),
                sent: Some(Arc::new(AtomicBool::new(false))),
            },
        )
    }

    /// Waits for the keeper's answer: true once the entry landed, false if it did not (or the
    /// keeper went away without an answer, which counts as not landed: nothing is written).
    pub async fn passed(&self) -> bool {
        let Some(mut state) = self.state.clone() else {
            return true;
        };
        let answer = match state.wait_for(Option::is_some).await {
            Ok(answer) => answer.unwrap_or(false),
            Err(_) => false,
        };
        answer
    }

    /// Returns false only if no page has passed this gate: the job sent no write, and the
    /// tree is as it found it. True for the open gate, which does not count.
    pub fn let_any_through(&self) -> bool {
        self.sent
            .as_ref()
            .is_none_or(|sent| sent.load(Ordering::SeqCst))
    }

    /// Notes that a page passes, to be written.
    fn let_through(&self) {
        if let Some(sent) = &self.sent {
            sent.store(true, Ordering::SeqCst);
        }
    }
}

impl Keeper {
    /// Opens the gate (`landed`) or shuts it for good.
    pub fn decide(self, landed: bool) {
        // Nobody waiting (the writes already ended) is fine.
        let _ = self.state.send(Some(landed));
    }
}

impl Renamer {
    /// What every page of a rename, a copy or a delete goes through before its write: the
    /// journal's gate (a page read before the entry landed waits for it), the hook, a
    /// cancellation, and the check that the locks are still this job's (a page read while
    /// they were is written only if they still are). A cancellation reports
    /// `(kind, rewritten, found)`: what the job does, and how far it got.
    ///
    /// A gate that stays shut also ends the job as cancelled: the caller, which knows why the
    /// entry did not land, reports that instead.
    pub(super) async fn before_page(
        &self,
        hold: Hold<'_>,
        entries: &[Entry],
        path: &FsPath,
        (kind, rewritten, found): (JobKind, u64, u64),
    ) -> Result<()> {
        if !hold.gate.passed().await {
            return Err(RenameError::Cancelled {
                kind,
                rewritten,
                found,
            });
        }
        if let Some(hooks) = &self.config.hooks {
            hooks.before_write(entries).await;
        }
        if self.config.cancel.as_ref().is_some_and(|c| *c.borrow()) {
            return Err(RenameError::Cancelled {
                kind,
                rewritten,
                found,
            });
        }
        hold.locks.ensure_held(path.as_str()).await?;
        hold.gate.let_through();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_pass_only_once_the_entry_landed() {
        assert!(
            Gate {
                state: None,
                sent: None
            }
            .passed()
            .await
        );

        let (keeper, gate) = Gate::shut();
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.passed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a shut gate waits for the answer");
        keeper.decide(true);
        assert!(waiting.await.expect("the waiter"));
        assert!(gate.passed().await, "the answer stays");

        let (keeper, gate) = Gate::shut();
        keeper.decide(false);
        assert!(!gate.passed().await);

        let (keeper, gate) = Gate::shut();
        drop(keeper);
        assert!(!gate.passed().await, "no answer counts as not landed");
    }
}
