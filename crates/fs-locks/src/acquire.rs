//! Acquisition: the entry points that take locks (tree, rename, read, copy, global and
//! document locks), and the loop behind them: attempts, backing off while refused, never
//! waiting while holding anything; each attempt grants from memory what this client already
//! holds (reentrancy) and asks the store, by the protocol in use, for the rest.
//!
//! **Fair waiting.** A request keeps its age (`since`: when its first attempt started) across
//! attempts. Refused, it registers as a waiter on the documents that refused it, with a lease
//! of its own that every later attempt renews; a younger request that wants a mode
//! incompatible with an older live waiter's is refused there (no barging). A grant removes
//! the request's own waiter entries; giving up (deadline, cancellation) removes them; a
//! waiter that dies stops counting when its lease runs out. A client that already holds locks
//! neither queues behind waiters nor registers (wait-die by age: holders never wait for a
//! waiter, so no cycle can form); `docs/locking.md` states the bound.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use fs_model::{FsPath, GLOBAL_LOCK_ID};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::calls::Calls;
use crate::client::LockClient;
use crate::clock::lease_end;
use crate::error::{Blocker, LockError, Result};
use crate::events::LockEvent;
use crate::gone::holders_gone;
use crate::guard::LockGuard;
use crate::outcome::{Attempt, Grant};
use crate::plan::{LockItem, TreeLockRequest};
use crate::protocol::{create_missing, Giveback, LockProtocol, Protocol};
use crate::script_params::Request;
use fs_model::LockMode;

impl LockClient {
    /// Takes the book's tree lock on `path`: shared on its ancestors, exclusive on it.
    ///
    /// # Errors
    /// [`LockError::Timeout`] naming the blocking lock and its holder; [`LockError::RootLock`].
    pub async fn lock_tree(&self, path: &FsPath) -> Result<LockGuard> {
        self.lock_request(&TreeLockRequest::path(path)).await
    }

    /// Takes the locks a rename of `from` to `to` needs, in one acquisition.
    ///
    /// # Errors
    /// [`LockError::MoveIntoItself`], [`LockError::Timeout`], [`LockError::RootLock`].
    pub async fn lock_rename(&self, from: &FsPath, to: &FsPath) -> Result<LockGuard> {
        self.lock_request(&TreeLockRequest::rename(from, to)?).await
    }

    /// Takes a shared lock on the subtree at `path` (intention-shared on its ancestors): while
    /// it is held nothing at or under `path` is renamed, copied over or deleted.
    ///
    /// # Errors
    /// As [`LockClient::lock_tree`]; [`LockError::RootLock`] for `/`.
    pub async fn lock_read(&self, path: &FsPath) -> Result<LockGuard> {
        self.lock_request(&TreeLockRequest::read(path)).await
    }

    /// Takes the locks a copy of `from` to `to` needs, in one acquisition: shared on the
    /// source, exclusive on the destination.
    ///
    /// # Errors
    /// [`LockError::MoveIntoItself`], [`LockError::Timeout`], [`LockError::RootLock`].
    pub async fn lock_copy(&self, from: &FsPath, to: &FsPath) -> Result<LockGuard> {
        self.lock_request(&TreeLockRequest::copy(from, to)?).await
    }

    /// Takes the locks of a tree-lock request.
    ///
    /// # Errors
    /// As [`LockClient::lock_tree`].
    pub async fn lock_request(&self, request: &TreeLockRequest) -> Result<LockGuard> {
        let items = request.items()?;
        let wanted = describe_wanted(&items);
        self.sync_clock().await;
        if let Some(guard) = self.borrowing(&wanted, &items).await {
            return Ok(guard);
        }
        self.acquire(wanted, items).await
    }

    /// Where the client has a [lender](crate::SharedIntentions): borrows the intention locks
    /// of `items` from it and takes the targets in one attempt. `None` if the lender cannot
    /// lend them at once or the targets are refused: what was borrowed is given back, and the
    /// caller takes everything itself, as without a lender (so a request never waits holding
    /// a borrowed lock either).
    async fn borrowing(&self, wanted: &str, items: &[LockItem]) -> Option<LockGuard> {
        let lender = self.lender()?;
        let (ancestors, targets): (Vec<LockItem>, Vec<LockItem>) =
            items.iter().cloned().partition(|i| i.mode.is_intention());
        if ancestors.is_empty() {
            return None;
        }
        let started = Instant::now();
        let since = self.now_ms();
        let lent = lender.borrow(&ancestors, since).await?;
        let ids: Vec<String> = lent.iter().map(|i| i.id.clone()).collect();
        self.held().await.borrow(&lent);
        let mut waiting_on = BTreeSet::new();
        let tried = self
            .attempt(&targets, since, false, true, &mut waiting_on)
            .await;
        if !matches!(tried.outcome, Ok(None)) {
            self.return_borrowed(&ids, false).await;
            return None;
        }
        let acq = Acquisition {
            wanted: wanted.to_owned(),
            items: targets,
            started,
            since,
            round_trips: tried.round_trips,
            races: tried.races,
            attempts: 1,
            waiting_on,
            settled: BTreeSet::new(),
        };
        Some(self.granted(acq).with_borrowed(ids))
    }

    /// Takes the book's global lock (the document `global`).
    ///
    /// # Errors
    /// [`LockError::Timeout`] naming the holder.
    pub async fn lock_global(&self) -> Result<LockGuard> {
        let item = LockItem {
            id: GLOBAL_LOCK_ID.to_owned(),
            path: None,
            mode: LockMode::Exclusive,
        };
        self.acquire("the global lock".to_owned(), vec![item]).await
    }

    /// Takes the book's document locks: one lock document per tree document, with the same
    /// id, created in bulk. `docs` pairs each document id with its path (kept in the lock
    /// document for people reading it).
    ///
    /// # Errors
    /// [`LockError::Timeout`] naming a locked document and its holder.
    pub async fn lock_documents(&self, docs: &[(String, Option<FsPath>)]) -> Result<LockGuard> {
        let mut seen = HashSet::new();
        let items: Vec<LockItem> = docs
            .iter()
            .filter(|(id, _)| seen.insert(id.clone()))
            .map(|(id, path)| LockItem {
                id: id.clone(),
                path: path.clone(),
                mode: LockMode::Exclusive,
            })
            .collect();
        let wanted = format!("document locks on {} documents", items.len());
        self.acquire(wanted, items).await
    }
}

/// Says what a tree-lock request takes, for messages: "tree lock on `/a` and `/b` (shared)".
fn describe_wanted(items: &[LockItem]) -> String {
    let targets: Vec<String> = items
        .iter()
        .filter(|i| !i.mode.is_intention())
        .map(|i| match i.mode {
            LockMode::Shared => format!("`{}` (shared)", i.label()),
            _ => format!("`{}`", i.label()),
        })
        .collect();
    format!("tree lock on {}", targets.join(" and "))
}

/// One attempt's outcome: granted (`None`) or the blocker, plus the round trips and races.
pub(crate) struct Tried {
    pub(crate) outcome: Result<Option<Blocker>>,
    round_trips: u32,
    races: u32,
}

impl Tried {
    fn of(outcome: Result<Option<Blocker>>, calls: &Calls<'_>) -> Tried {
        Tried {
            outcome,
            round_trips: calls.round_trips,
            races: calls.races,
        }
    }
}

/// One acquisition under way: what it wants, since when, and what it cost so far.
struct Acquisition {
    wanted: String,
    items: Vec<LockItem>,
    started: Instant,
    /// The request's age by the lease clock (older requests go first).
    since: i64,
    round_trips: u32,
    races: u32,
    attempts: u32,
    /// The documents where the request is registered as a waiter.
    waiting_on: BTreeSet<String>,
    /// The documents whose dead holders [`Orphans`](crate::Orphans) was asked to settle.
    settled: BTreeSet<String>,
}

impl LockClient {
    /// Acquires `items` (in order), retrying refused attempts with backoff until the wait
    /// deadline. Never waits while holding any of them.
    pub(crate) async fn acquire(&self, wanted: String, items: Vec<LockItem>) -> Result<LockGuard> {
        self.sync_clock().await;
        let started = Instant::now();
        let deadline = started + self.wait();
        let mut backoff = self.backoff();
        let mut cancel = self.cancel();
        let mut acq = Acquisition {
            wanted,
            items,
            started,
            since: self.now_ms(),
            round_trips: 0,
            races: 0,
            attempts: 0,
            waiting_on: BTreeSet::new(),
            settled: BTreeSet::new(),
        };
        loop {
            if cancel.as_ref().is_some_and(|c| *c.borrow()) {
                self.stop_waiting(&acq.waiting_on).await;
                return Err(LockError::Cancelled { wanted: acq.wanted });
            }
            acq.attempts += 1;
            // Short contention passes without a queue: a request registers as a waiter only
            // once it has been refused for a while (see `queue_after`).
            let queue_now = started.elapsed() >= self.queue_after();
            let tried = self
                .attempt(&acq.items, acq.since, queue_now, false, &mut acq.waiting_on)
                .await;
            acq.round_trips += tried.round_trips;
            acq.races += tried.races;
            let mut blocker = match tried.outcome {
                Ok(None) => return Ok(self.granted(acq)),
                Ok(Some(blocker)) => blocker,
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "transient failure taking locks; retrying");
                    Blocker::other("-", "store", e.to_string())
                }
                Err(e) => {
                    self.stop_waiting(&acq.waiting_on).await;
                    return Err(e);
                }
            };
            // A dead holder's lock: its lease ended at once where its process is proven
            // gone, and what it left finished where the client can (`Orphans`), once per
            // document, before any waiting.
            if holders_gone(&blocker) && self.end_gone_leases(&blocker.id).await.unwrap_or(0) > 0 {
                blocker.expired_ms_ago = Some(0);
            }
            if blocker.expired_ms_ago.is_some() && self.settle_orphans(&mut acq, &blocker).await {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                self.stop_waiting(&acq.waiting_on).await;
                return Err(LockError::Timeout {
                    wanted: acq.wanted,
                    blocker: Box::new(blocker),
                    waited: started.elapsed(),
                    attempts: acq.attempts,
                });
            }
            let wanted = &acq.wanted;
            let attempts = acq.attempts;
            tracing::debug!(%wanted, %blocker, attempts, "locks refused; backing off");
            self.emit(LockEvent::Refused {
                wanted: wanted.clone(),
                blocker: blocker.clone(),
                attempts,
            });
            let mut pause = backoff.next_pause();
            if !acq.waiting_on.is_empty() && !blocker.waiter {
                // At the head of the queue: younger requests wait for us, so the time between
                // a holder leaving and our next attempt is lost to everyone. Poll faster.
                pause = pause.min(self.head_pause());
            }
            pause_unless_cancelled(pause.min(deadline - now), cancel.as_mut()).await;
        }
    }

    /// The guard of a granted acquisition, told to the event sink.
    fn granted(&self, acq: Acquisition) -> LockGuard {
        let grant = Grant {
            round_trips: acq.round_trips,
            races: acq.races,
            attempts: acq.attempts,
            waited: acq.started.elapsed(),
        };
        let ids = acq.items.iter().map(|i| i.id.clone()).collect();
        let wanted = acq.wanted;
        tracing::debug!(%wanted, round_trips = grant.round_trips, attempts = grant.attempts, "locks granted");
        self.emit(LockEvent::Granted {
            wanted: wanted.clone(),
            grant,
        });
        LockGuard::new(self.clone(), ids, wanted, grant)
    }

    /// Asks the client's [`Orphans`](crate::Orphans), if it has one, to settle what the dead
    /// holders of `blocker` left; true if it did something (the caller tries again at once).
    /// Asked once per document per acquisition, and only while this client holds nothing:
    /// settling takes locks of its own, which must never wait on ours.
    async fn settle_orphans(&self, acq: &mut Acquisition, blocker: &Blocker) -> bool {
        let Some(orphans) = self.orphans() else {
            return false;
        };
        if blocker.waiter || !acq.settled.insert(blocker.id.clone()) {
            return false;
        }
        if !self.held().await.is_empty() {
            return false;
        }
        tracing::info!(lock = %blocker.path, holders = %blocker.holders, "a dead holder's lock is in the way: finishing what it left");
        orphans.settle(blocker).await
    }

    /// Removes this request's waiter entries (it gave up). A failure is logged: the entries
    /// expire with their lease.
    async fn stop_waiting(&self, ids: &BTreeSet<String>) {
        if ids.is_empty() {
            return;
        }
        let ids: Vec<String> = ids.iter().cloned().collect();
        let mut calls = self.calls();
        let removed = match self.steps().await {
            Ok(steps) => steps.leave_queue(&mut calls, &ids).await,
            Err(e) => Err(e),
        };
        if let Err(e) = removed {
            tracing::warn!(error = %e, "could not remove a waiter registration; its lease will expire it");
        }
    }

    /// One attempt; returns the blocker if refused, the round trips spent and the races lost
    /// and sent again. A refused request that queues registers as a waiter on the documents
    /// that refused it (`waiting_on` collects them). With `respect_queue` it queues behind older
    /// waiters even though its client holds locks, for it never waits holding them (refused,
    /// it gives them back): a job that borrowed its ancestors, a lender taking a hold.
    pub(crate) async fn attempt(
        &self,
        items: &[LockItem],
        since: i64,
        queue_now: bool,
        respect_queue: bool,
        waiting_on: &mut BTreeSet<String>,
    ) -> Tried {
        let mut held = self.held().await;
        let needed = match held.needed(items) {
            Ok(needed) => needed,
            Err(e) => {
                return Tried {
                    outcome: Err(e),
                    round_trips: 0,
                    races: 0,
                }
            }
        };
        let mut calls = self.calls();
        if !needed.is_empty() {
            let now = calls.now;
            let req = Request {
                owner: self.owner(),
                items: &needed,
                now,
                expires_at: lease_end(now, self.lease()),
                waiter_expires_at: lease_end(now, self.waiter_lease()),
                since,
                // A client that holds locks already may hold what the waiters wait for.
                queue: respect_queue || held.is_empty(),
            };
            match self.attempt_by_protocol(&mut calls, &req).await {
                Ok((Attempt::Granted(taken), _)) => {
                    for t in taken {
                        waiting_on.remove(&t.item.id);
                        held.hold(t, req.expires_at);
                    }
                }
                Ok((Attempt::Refused { blocker, refusing }, steps)) => {
                    if req.queue && (queue_now || !waiting_on.is_empty()) && !refusing.is_empty() {
                        let waiting = (steps, &mut calls, &req);
                        waiting_on.extend(self.register_waiter(waiting, &refusing).await);
                    }
                    return Tried::of(Ok(Some(blocker)), &calls);
                }
                Err(e) => return Tried::of(Err(e), &calls),
            }
        }
        held.add_refs(items.iter().map(|i| i.id.as_str()));
        drop(held);
        self.start_renewer();
        Tried::of(Ok(None), &calls)
    }

    /// Makes one attempt at `req.items` by the protocol in use; returns its outcome and the
    /// protocol's steps. While the protocol is [undecided](LockClient::undecided) (or is
    /// compare-and-set and no document has been found existing yet:
    /// [`creates_first`](LockClient::creates_first)), the attempt starts by creating every
    /// document in one `bulk` (what either protocol writes on a missing document), and
    /// decides the protocol only when one exists already: a quiet tree costs one request,
    /// with no read and no question about scripts.
    async fn attempt_by_protocol(
        &self,
        calls: &mut Calls<'_>,
        req: &Request<'_>,
    ) -> Result<(Attempt, &'static dyn Protocol)> {
        if !self.creates_first() {
            let steps = self.steps().await?;
            return Ok((steps.attempt(calls, req).await?, steps));
        }
        let created = create_missing(calls, req).await?;
        let cas = LockProtocol::Cas.steps();
        if created.existing.is_empty() {
            return Ok((Attempt::Granted(created.taken), cas));
        }
        self.note_existing();
        // A document exists: someone holds it or waits on it (or an answer of ours was
        // lost). Taking it is a read-modify-write, which is where the protocols differ.
        let (steps, outcome) = match self.steps().await {
            Ok(steps) => {
                let rest = Request {
                    items: &created.existing,
                    ..*req
                };
                (steps, steps.attempt(calls, &rest).await)
            }
            Err(e) => (cas, Err(e)),
        };
        match outcome {
            Ok(Attempt::Granted(more)) => {
                let mut taken = created.taken;
                taken.extend(more);
                Ok((Attempt::Granted(taken), steps))
            }
            outcome => {
                // Refused or failed: what the creates took goes back too, so that the caller
                // never waits holding a lock.
                if !created.taken.is_empty() {
                    let back = Giveback {
                        taken: created.taken,
                        first: None,
                    };
                    if let Err(e) = steps.release(calls, back).await {
                        tracing::warn!(error = %e, "could not undo a refused lock attempt; leases will expire it");
                    }
                }
                outcome.map(|attempt| (attempt, steps))
            }
        }
    }

    /// Registers the request as a waiter on the documents of `refusing`; returns where it is
    /// registered. A failure is logged: the next attempt tries again.
    async fn register_waiter(
        &self,
        (steps, calls, req): (&dyn Protocol, &mut Calls<'_>, &Request<'_>),
        refusing: &[LockItem],
    ) -> Vec<String> {
        let req = Request {
            items: refusing,
            ..*req
        };
        match steps.join_queue(calls, &req).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::debug!(error = %e, "could not register as a waiter; the next attempt tries again");
                Vec::new()
            }
        }
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
