//! Acquisition: attempts in a loop, backing off while refused, never waiting while holding
//! anything; each attempt grants from memory what this client already holds (reentrancy) and
//! asks the store, by the protocol in use, for the rest.

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
use crate::scripted;

impl LockClient {
    /// Acquires `items` (in order), retrying refused attempts with backoff until the wait
    /// deadline. Never waits while holding any of them.
    pub(crate) async fn acquire(&self, wanted: String, items: Vec<LockItem>) -> Result<LockGuard> {
        let started = Instant::now();
        let deadline = started + self.inner.wait;
        let mut backoff = Backoff::new(self.inner.backoff_base, self.inner.backoff_max);
        let mut round_trips = 0;
        let mut races = 0;
        let mut attempts = 0;
        let mut cancel = self.inner.cancel.clone();
        loop {
            if cancel.as_ref().is_some_and(|c| *c.borrow()) {
                return Err(LockError::Cancelled { wanted });
            }
            attempts += 1;
            let (outcome, trips, raced) = self.attempt(&items).await;
            round_trips += trips;
            races += raced;
            let blocker = match outcome {
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
                    Blocker {
                        path: "-".into(),
                        lock_type: "store".into(),
                        holders: e.to_string(),
                    }
                }
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(LockError::Timeout {
                    wanted,
                    blocker,
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
            pause_unless_cancelled(backoff.next_pause().min(deadline - now), cancel.as_mut()).await;
        }
    }

    /// One attempt; returns the blocker if refused, the round trips spent and the races lost
    /// and sent again.
    async fn attempt(&self, items: &[LockItem]) -> (Result<Option<Blocker>>, u32, u32) {
        let inner = &self.inner;
        let mut held = inner.held.lock().await;
        let mut needed = Vec::new();
        for item in items {
            match held.get(&item.id) {
                Some(h) if h.taken.item.mode.covers(item.mode) => {}
                Some(_) => return (Err(LockError::Upgrade { path: item.label() }), 0, 0),
                None => needed.push(item.clone()),
            }
        }
        let mut calls = inner.calls();
        if !needed.is_empty() {
            let now = inner.clock.now_ms();
            let attempted = match inner.protocol().await {
                Ok(LockProtocol::Scripted) => {
                    scripted::attempt(&mut calls, &needed, &inner.owner, now, inner.lease).await
                }
                Ok(_) => engine::attempt(&mut calls, &needed, &inner.owner, now, inner.lease).await,
                Err(e) => Err(e),
            };
            match attempted {
                Ok(Attempt::Granted(taken)) => {
                    for t in taken {
                        held.insert(
                            t.item.id.clone(),
                            Held {
                                taken: t,
                                refcount: 0,
                                lost: false,
                                expires_at: crate::clock::lease_end(now, inner.lease),
                            },
                        );
                    }
                }
                Ok(Attempt::Refused(blocker)) => {
                    return (Ok(Some(blocker)), calls.round_trips, calls.races)
                }
                Err(e) => return (Err(e), calls.round_trips, calls.races),
            }
        }
        for item in items {
            if let Some(h) = held.get_mut(&item.id) {
                h.refcount += 1;
            }
        }
        drop(held);
        self.start_renewer();
        (Ok(None), calls.round_trips, calls.races)
    }
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
