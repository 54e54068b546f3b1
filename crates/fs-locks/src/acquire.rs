//! Acquisition: attempts in a loop, backing off while refused, never waiting while holding
//! anything; each attempt grants from memory what this client already holds (reentrancy) and
//! asks the store, by the protocol in use, for the rest.
//!
//! **Fair waiting.** A request keeps its age (`since`: when its first attempt started) across
//! attempts. Refused, it registers as a waiter on the documents that refused it, with a lease
//! of its own that every later attempt renews; a younger request that wants a mode
//! incompatible with an older live waiter's is refused there (no barging). A grant removes
//! the request's own waiter entries; giving up (deadline, cancellation) removes them; a
//! waiter that dies stops counting when its lease runs out. A client that already holds locks
//! neither queues behind waiters nor registers (wait-die by age: holders never wait for a
//! waiter, so no cycle can form); `docs/locking.md` states the bound.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::{Held, LockClient};
use crate::engine::{self, Attempt};
use crate::error::{Blocker, LockError, Result};
use crate::events::LockEvent;
use crate::guard::{Grant, LockGuard};
use crate::plan::LockItem;
use crate::protocol::LockProtocol;
use crate::script_params::Request;
use crate::scripted;

/// One attempt's outcome: granted (`None`) or the blocker, plus the round trips and races.
struct Tried {
    outcome: Result<Option<Blocker>>,
    round_trips: u32,
    races: u32,
}

impl LockClient {
    /// Acquires `items` (in order), retrying refused attempts with backoff until the wait
    /// deadline. Never waits while holding any of them.
    pub(crate) async fn acquire(&self, wanted: String, items: Vec<LockItem>) -> Result<LockGuard> {
        let started = Instant::now();
        let deadline = started + self.inner.wait;
        let since = self.inner.clock.now_ms();
        let mut backoff = Backoff::new(self.inner.backoff_base, self.inner.backoff_max);
        let mut round_trips = 0;
        let mut races = 0;
        let mut attempts = 0;
        let mut waiting_on: BTreeSet<String> = BTreeSet::new();
        let mut cancel = self.inner.cancel.clone();
        loop {
            if cancel.as_ref().is_some_and(|c| *c.borrow()) {
                self.stop_waiting(&waiting_on).await;
                return Err(LockError::Cancelled { wanted });
            }
            attempts += 1;
            // Short contention passes without a queue: a request registers as a waiter only
            // once it has been refused for a while (see `queue_after`).
            let queue_now = started.elapsed() >= queue_after(&self.inner);
            let tried = self
                .attempt(&items, since, queue_now, &mut waiting_on)
                .await;
            round_trips += tried.round_trips;
            races += tried.races;
            let blocker = match tried.outcome {
                Ok(None) => {
                    let grant = Grant {
                        round_trips,
                        races,
                        attempts,
                        waited: started.elapsed(),
                    };
                    let ids = items.iter().map(|i| i.id.clone()).collect();
                    tracing::debug!(%wanted, round_trips, attempts, "locks granted");
                    self.inner.emit(LockEvent::Granted {
                        wanted: wanted.clone(),
                        grant,
                    });
                    return Ok(LockGuard::new(self.clone(), ids, wanted, grant));
                }
                Ok(Some(blocker)) => blocker,
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "transient failure taking locks; retrying");
                    Blocker::other("-", "store", e.to_string())
                }
                Err(e) => {
                    self.stop_waiting(&waiting_on).await;
                    return Err(e);
                }
            };
            let now = Instant::now();
            if now >= deadline {
                self.stop_waiting(&waiting_on).await;
                return Err(LockError::Timeout {
                    wanted,
                    blocker: Box::new(blocker),
                    waited: started.elapsed(),
                    attempts,
                });
            }
            tracing::debug!(%wanted, %blocker, attempts, "locks refused; backing off");
            self.inner.emit(LockEvent::Refused {
                wanted: wanted.clone(),
                blocker: blocker.clone(),
                attempts,
            });
            let mut pause = backoff.next_pause();
            if !waiting_on.is_empty() && !blocker.waiter {
                // At the head of the queue: younger requests wait for us, so the time between
                // a holder leaving and our next attempt is lost to everyone. Poll faster.
                pause = pause.min(head_pause(&self.inner));
            }
            pause_unless_cancelled(pause.min(deadline - now), cancel.as_mut()).await;
        }
    }

    /// Removes this request's waiter entries (it gave up). A failure is logged: the entries
    /// expire with their lease.
    async fn stop_waiting(&self, ids: &BTreeSet<String>) {
        if ids.is_empty() {
            return;
        }
        let inner = &self.inner;
        let ids: Vec<String> = ids.iter().cloned().collect();
        let mut calls = inner.calls();
        let now = calls.now;
        let removed = match inner.protocol().await {
            Ok(LockProtocol::Scripted) => {
                scripted::unregister_waiter(&mut calls, &ids, &inner.owner, now).await
            }
            Ok(_) => engine::unregister_waiter(&mut calls, &ids, &inner.owner, now).await,
            Err(e) => Err(e),
        };
        if let Err(e) = removed {
            tracing::warn!(error = %e, "could not remove a waiter registration; its lease will expire it");
        }
    }

    /// One attempt; returns the blocker if refused, the round trips spent and the races lost
    /// and sent again. A refused request that queues registers as a waiter on the documents
    /// that refused it (`waiting_on` collects them).
    async fn attempt(
        &self,
        items: &[LockItem],
        since: i64,
        queue_now: bool,
        waiting_on: &mut BTreeSet<String>,
    ) -> Tried {
        let inner = &self.inner;
        let mut held = inner.held.lock().await;
        let mut needed = Vec::new();
        for item in items {
            match held.get(&item.id) {
                Some(h) if h.taken.item.mode.covers(item.mode) => {}
                Some(_) => {
                    return Tried {
                        outcome: Err(LockError::Upgrade { path: item.label() }),
                        round_trips: 0,
                        races: 0,
                    }
                }
                None => needed.push(item.clone()),
            }
        }
        let mut calls = inner.calls();
        let done = |outcome, calls: &engine::Calls<'_>| Tried {
            outcome,
            round_trips: calls.round_trips,
            races: calls.races,
        };
        if !needed.is_empty() {
            let now = calls.now;
            let req = Request {
                owner: &inner.owner,
                now,
                expires_at: crate::clock::lease_end(now, inner.lease),
                waiter_expires_at: crate::clock::lease_end(now, waiter_lease(inner)),
                since,
                // A client that holds locks already may hold what the waiters wait for.
                queue: held.is_empty(),
            };
            let protocol = match inner.protocol().await {
                Ok(p) => p,
                Err(e) => return done(Err(e), &calls),
            };
            let attempted = match protocol {
                LockProtocol::Scripted => {
                    scripted::attempt(&mut calls, &needed, &req, inner.lease).await
                }
                _ => engine::attempt(&mut calls, &needed, &req).await,
            };
            match attempted {
                Ok(Attempt::Granted(taken)) => {
                    for t in taken {
                        waiting_on.remove(&t.item.id);
                        held.insert(
                            t.item.id.clone(),
                            Held {
                                taken: t,
                                refcount: 0,
                                lost: false,
                                expires_at: req.expires_at,
                            },
                        );
                    }
                }
                Ok(Attempt::Refused { blocker, refusing }) => {
                    if req.queue && (queue_now || !waiting_on.is_empty()) && !refusing.is_empty() {
                        let lease_ms =
                            i64::try_from(waiter_lease(inner).as_millis()).unwrap_or(i64::MAX);
                        let registered = match protocol {
                            LockProtocol::Scripted => {
                                scripted::register_waiter(&mut calls, &refusing, &req).await
                            }
                            _ => {
                                engine::register_waiter(&mut calls, &refusing, &req, lease_ms).await
                            }
                        };
                        match registered {
                            Ok(ids) => waiting_on.extend(ids),
                            Err(e) => {
                                tracing::debug!(error = %e, "could not register as a waiter; the next attempt tries again")
                            }
                        }
                    }
                    return done(Ok(Some(blocker)), &calls);
                }
                Err(e) => return done(Err(e), &calls),
            }
        }
        for item in items {
            if let Some(h) = held.get_mut(&item.id) {
                h.refcount += 1;
            }
        }
        drop(held);
        self.start_renewer();
        done(Ok(None), &calls)
    }
}

/// How long a request is refused before it registers as a waiter: ten of the shortest pauses
/// (50 ms by default). Contention shorter than that is settled by retrying, as before the
/// queue; a request that has waited longer stops younger ones from barging past it.
pub(crate) fn queue_after(inner: &crate::client::Inner) -> Duration {
    inner.backoff_base * 10
}

/// The longest pause of a waiter that only holders block (the head of the queue): a tenth
/// of the longest pause, at least the shortest.
pub(crate) fn head_pause(inner: &crate::client::Inner) -> Duration {
    (inner.backoff_max / 10).max(inner.backoff_base)
}

/// How long a waiter registration lasts unless the waiter's next attempt renews it: four of
/// the longest pauses between attempts (at least a second, at most the lock lease). Short, so
/// that a waiter that died or gave up without removing its entry blocks nobody for long.
pub(crate) fn waiter_lease(inner: &crate::client::Inner) -> Duration {
    (inner.backoff_max * 4)
        .max(Duration::from_secs(1))
        .min(inner.lease)
}

/// Sleeps for `pause`, or less if `cancel` changes meanwhile (the caller's loop then sees the
/// cancellation on its next turn and stops).
pub(crate) async fn pause_unless_cancelled(
    pause: Duration,
    cancel: Option<&mut watch::Receiver<bool>>,
) {
    let pause = tokio::time::sleep(pause);
    match cancel {
        Some(cancel) => {
            // Biased: when both are ready the order does not matter, and a fixed one keeps
            // seeded replays exact (an unbiased select draws from tokio's own generator).
            tokio::select! {
                biased;
                () = pause => {}
                _ = cancel.changed() => {}
            }
        }
        None => pause.await,
    }
}
