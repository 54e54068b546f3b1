//! Adopting a dead owner's lock set: how recovery takes over everything a job held.
//!
//! A rename journal lists the lock items its job held. Recovery takes them over as a set, on
//! behalf of the entry's *predecessors* (the job and any earlier recoverer of it), and only
//! theirs:
//!
//! - an exclusive lock of a predecessor whose lease ended is rewritten with the recoverer as
//!   owner, conditional on the version read (so of two recoverers, or a recoverer and a holder
//!   renewing late, exactly one wins); a missing one is created;
//! - a shared lock loses exactly the predecessors' expired shares and gains the recoverer's,
//!   in one conditional write; a missing one is created;
//! - anything else refuses, and the adoption waits and tries again: a valid lock, and also an
//!   expired lock or share of someone else. That one may protect another unfinished rename
//!   (its own recovery deals with it), or protect none (the sweep fences and clears it);
//!   overwriting it would strip another rename of its protection.
//!
//! Unlike an acquisition, an adoption keeps what it has taken while it waits for the rest. It
//! is safe from deadlock because only the one recoverer that claimed the journal adopts its
//! set, the sets of two open journals do not conflict (their jobs held them at once), and
//! ordinary acquisitions never hold while waiting. An adoption that times out leaves what it
//! took to expire again, still listed in the journal, so the next recovery run resumes it.

use tokio::time::Instant;

use crate::acquire::pause_unless_cancelled;
use crate::client::LockClient;
use crate::error::{Blocker, LockError, Result};
use crate::guard::LockGuard;
use crate::outcome::Grant;
use crate::plan::LockItem;
use crate::protocol::{adopt_round, AdoptRound};

impl LockClient {
    /// Takes over the lock set `items` of owners that died (recovery): the expired locks and
    /// shares of `predecessors` (the process ids that held the set before: a journal entry's
    /// owner and earlier recoverers) become this client's, missing ones are created, and
    /// anything else (a valid lock, someone else's expired one) is waited for, up to the
    /// client's wait. Returns a guard over all of them, as if this client had acquired them.
    ///
    /// # Errors
    /// [`LockError::Timeout`] naming a lock still held when the wait ran out; what was taken
    /// is then left to expire (not released), so a later recovery can resume.
    /// [`LockError::Cancelled`], [`LockError::Store`].
    pub async fn adopt(
        &self,
        wanted: String,
        items: Vec<LockItem>,
        predecessors: &[String],
    ) -> Result<LockGuard> {
        let started = Instant::now();
        let deadline = started + self.wait();
        let mut backoff = self.backoff();
        let (mut round_trips, mut attempts) = (0, 0);
        let mut mine: Vec<String> = Vec::new();
        let mut cancel = self.cancel();
        loop {
            attempts += 1;
            let outcome = self.adopt_round(&items, predecessors, &mut mine).await;
            round_trips += outcome.1;
            let blocker = match outcome.0 {
                Ok(None) => break,
                Ok(Some(blocker)) => blocker,
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    Blocker::other("-", "store", e.to_string())
                }
                Err(e) => {
                    self.forget(&mine).await;
                    return Err(e);
                }
            };
            let now = Instant::now();
            if now >= deadline || cancel.as_ref().is_some_and(|c| *c.borrow()) {
                self.forget(&mine).await;
                if cancel.as_ref().is_some_and(|c| *c.borrow()) {
                    return Err(LockError::Cancelled { wanted });
                }
                return Err(LockError::Timeout {
                    wanted,
                    blocker: Box::new(blocker),
                    waited: started.elapsed(),
                    attempts,
                });
            }
            let pause = backoff.next_pause().min(deadline - now);
            pause_unless_cancelled(pause, cancel.as_mut()).await;
        }
        self.held()
            .await
            .add_refs(items.iter().map(|i| i.id.as_str()));
        let grant = Grant {
            races: 0,
            round_trips,
            attempts,
            waited: started.elapsed(),
        };
        let ids = items.iter().map(|i| i.id.clone()).collect();
        Ok(LockGuard::new(self.clone(), ids, wanted, grant))
    }

    /// One round: reads the items not held yet and writes what can be taken (by
    /// compare-and-set); what it took is held from then on, and listed in `mine`. Returns the
    /// first blocker, or `None` once every item is held, and the round trips spent.
    async fn adopt_round(
        &self,
        items: &[LockItem],
        predecessors: &[String],
        mine: &mut Vec<String>,
    ) -> (Result<Option<Blocker>>, u32) {
        let mut held = self.held().await;
        let pending: Vec<&LockItem> = items.iter().filter(|i| !held.contains(&i.id)).collect();
        if pending.is_empty() {
            return (Ok(None), 0);
        }
        let mut calls = self.calls();
        let round = adopt_round(&mut calls, &pending, predecessors, self.clock()).await;
        let AdoptRound {
            taken,
            expires_at,
            blocked,
            failure,
        } = match round {
            Ok(round) => round,
            Err(e) => return (Err(e), calls.round_trips),
        };
        let took_any = !taken.is_empty();
        for t in taken {
            mine.push(t.item.id.clone());
            held.hold(t, expires_at);
        }
        drop(held);
        if took_any {
            self.start_renewer();
        }
        let trips = calls.round_trips;
        match failure {
            Some(e) => (Err(e), trips),
            None => (Ok(blocked), trips),
        }
    }
}
