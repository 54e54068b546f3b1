//! Release: giving back what guards hold, by the protocol in use, after the write a release
//! may depend on ([`FirstWrite`]).

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::outcome::{FirstWrite, ReleaseReport, ReleasedAfter};
use crate::protocol::Giveback;

/// What a release does with its locks when the write it depends on does not land
/// ([`LockClient::release_ids_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfFirstFails {
    /// Gives them up: no longer renewed, they are left to expire.
    GiveUp,
    /// Keeps them held, as if the release had not been asked for.
    Keep,
}

impl LockClient {
    /// Returns true if the store makes a write and the release of this client's locks in one
    /// request and one transaction ([`crate::LockGuard::release_after`]): the scripted
    /// protocol on a store that [chains](fs_store::ScriptedUpdates::chains) (the embedded
    /// store).
    pub async fn chains_release(&self) -> bool {
        // An undecided client's store does not chain: the answer is no, and deciding the
        // protocol to give it would cost requests (see `LockClient::undecided`).
        if self.undecided() {
            return false;
        }
        match self.steps().await {
            Ok(steps) => steps.chains_release(self.store()),
            Err(_) => false,
        }
    }

    /// Gives back the intention locks `ids` that a guard borrowed from the process's lender,
    /// once its own locks are released (deepest first): to lend again, or, where the guard's
    /// job stopped half-way (`orphan`), to keep until the lender's other borrowers are done
    /// and then leave to expire for recovery.
    pub(crate) async fn return_borrowed(&self, ids: &[String], orphan: bool) {
        if ids.is_empty() {
            return;
        }
        self.held().await.unborrow(ids);
        let Some(lender) = self.lender() else {
            return;
        };
        if orphan {
            lender.orphan(ids).await;
        } else {
            lender.give_back(ids).await;
        }
    }

    /// Gives up one hold on each of `ids`; releases in the store those no guard holds any more.
    pub(crate) async fn release_ids(&self, ids: &[String]) -> Result<ReleaseReport> {
        match self
            .release_ids_after(ids, None, IfFirstFails::GiveUp)
            .await
        {
            ReleasedAfter::Released(result) => result,
            // Nothing to write first, so nothing failed there.
            ReleasedAfter::FirstFailed(cause) => Err(LockError::Store {
                context: "releasing locks".into(),
                cause,
            }),
        }
    }

    /// [`LockClient::release_ids`], after `first` if there is one: where the protocol and the
    /// store chain them, in one request; else `first` alone, then the release once it landed.
    /// If `first` does not land, the holds on `ids` are given up ([`IfFirstFails::GiveUp`]:
    /// the locks are left to expire) or kept as they were ([`IfFirstFails::Keep`]: the guard
    /// goes on holding them).
    pub(crate) async fn release_ids_after(
        &self,
        ids: &[String],
        first: Option<FirstWrite>,
        if_fails: IfFirstFails,
    ) -> ReleasedAfter {
        let mut held = self.held().await;
        // Nothing can change the holds meanwhile (renewals wait for this lock), so putting
        // these back undoes the give-up exactly.
        let before = (if_fails == IfFirstFails::Keep).then(|| held.clone());
        let given_up = held.give_up(ids, self.max_clock_skew_ms());
        let mut calls = self.calls();
        let released = match self.release_steps().await {
            Ok(steps) => {
                let back = Giveback {
                    taken: given_up.last,
                    first,
                };
                steps.release(&mut calls, back).await
            }
            Err(e) => Err(e),
        };
        if let (Ok(released), Some(before)) = (&released, before) {
            if released.first_failed.is_some() {
                *held = before;
            }
        }
        drop(held);
        let mut released = match released {
            Ok(released) => released,
            Err(e) => return ReleasedAfter::Released(Err(e)),
        };
        if let Some(why) = released.first_failed {
            return ReleasedAfter::FirstFailed(why);
        }
        // A lock found gone while its lease still ran was released by our own write, whose
        // first answer was lost: on a cluster, the coordinating node sends a dead primary's
        // items again to the promoted replica, where our delete finds nothing (a 404, or a
        // 409 on a conditional delete) on a connection that never broke.
        let now = self.now_ms();
        let leased = &given_up.leased;
        released
            .lost
            .retain(|label| leased.get(label).is_none_or(|&until| until <= now));
        self.report_lost(&released.lost);
        if let Some(path) = given_up.lost_before.first().or(released.lost.first()) {
            return ReleasedAfter::Released(Err(LockError::LeaseLost {
                path: path.clone(),
                renewal: None,
            }));
        }
        ReleasedAfter::Released(Ok(ReleaseReport {
            round_trips: calls.round_trips,
            races: calls.races,
        }))
    }
}
