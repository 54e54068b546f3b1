//! [`LockClient`]: one lock owner, its held locks, and the acquire/release entry points.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fs_model::{lock_index_body, FsPath, GLOBAL_LOCK_ID};
use fs_store::{DocStore, SharedStore};
use tokio::sync::{watch, Mutex};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::clock::LeaseClock;
use crate::engine::{self, Attempt, Calls, Taken};
use crate::error::{Blocker, LockError, Result};
use crate::guard::{Grant, LockGuard, ReleaseReport};
use crate::lease;
use crate::lock_doc::{LockMode, Owner};
use crate::plan::{LockItem, TreeLockRequest};
use crate::protocol::{self, LockProtocol};
use crate::scripted;

/// Builds a [`LockClient`].
#[derive(Clone)]
pub struct LockClientBuilder {
    store: SharedStore,
    lock_index: String,
    holder: String,
    process_id: Option<String>,
    job: Option<String>,
    lease: Duration,
    renew_every: Option<Duration>,
    wait: Duration,
    backoff_base: Duration,
    backoff_max: Duration,
    on_event: Option<EventSink>,
    protocol: LockProtocol,
    cancel: Option<watch::Receiver<bool>>,
    max_clock_skew: Option<Duration>,
}

/// Something that happened to an acquisition, for progress reports and timelines.
#[derive(Debug, Clone, PartialEq)]
pub enum LockEvent {
    /// An attempt was refused; the client backs off and tries again.
    Refused {
        /// What was being locked.
        wanted: String,
        /// The lock in the way.
        blocker: Blocker,
        /// Attempts so far.
        attempts: u32,
    },
    /// The locks were granted.
    Granted {
        /// What was locked.
        wanted: String,
        /// What it cost.
        grant: Grant,
    },
}

/// A callback told of every [`LockEvent`]. It runs on the acquiring task: keep it quick.
pub type EventSink = Arc<dyn Fn(LockEvent) + Send + Sync>;

impl std::fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("lock_index", &self.lock_index)
            .field("holder", &self.holder)
            .field("lease", &self.lease)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl LockClientBuilder {
    /// Sets how lock documents are written. Default: [`LockProtocol::Auto`] (scripted where
    /// the store runs scripts, compare-and-set otherwise).
    pub fn protocol(mut self, protocol: LockProtocol) -> LockClientBuilder {
        self.protocol = protocol;
        self
    }

    /// Stops acquisitions when `cancel` turns true: a waiting acquisition fails with
    /// [`LockError::Cancelled`] at once, holding nothing. Default: never cancelled.
    pub fn cancel(mut self, cancel: watch::Receiver<bool>) -> LockClientBuilder {
        self.cancel = Some(cancel);
        self
    }

    /// Calls `sink` with every [`LockEvent`] of this client's acquisitions. Default: none.
    pub fn on_event(mut self, sink: EventSink) -> LockClientBuilder {
        self.on_event = Some(sink);
        self
    }

    /// Sets the readable label written into lock documents. Default: `fsrename`.
    pub fn holder(mut self, holder: impl Into<String>) -> LockClientBuilder {
        self.holder = holder.into();
        self
    }

    /// Sets the process id. Default: a fresh random UUID, which is what keeps two clients
    /// apart; set it only to act as an owner whose id you know (tests, recovery).
    pub fn process_id(mut self, process_id: impl Into<String>) -> LockClientBuilder {
        self.process_id = Some(process_id.into());
        self
    }

    /// Names the rename journal entry these locks protect; every lock document this client
    /// writes records it as `job`. A recovery that finds the locks expired fences that entry
    /// before clearing them, so a holder that was only paused cannot journal its rename
    /// afterwards. Default: none (locks that protect no journaled rename).
    pub fn job(mut self, job: impl Into<String>) -> LockClientBuilder {
        self.job = Some(job.into());
        self
    }

    /// Sets how long a lock lives without renewal. Default: 30 s.
    pub fn lease(mut self, lease: Duration) -> LockClientBuilder {
        self.lease = lease;
        self
    }

    /// Sets how often held locks are renewed. Default: a third of the lease.
    pub fn renew_every(mut self, every: Duration) -> LockClientBuilder {
        self.renew_every = Some(every);
        self
    }

    /// Sets how long an acquisition keeps retrying before it fails with
    /// [`LockError::Timeout`]; zero makes a single attempt. Default: 30 s.
    pub fn wait(mut self, wait: Duration) -> LockClientBuilder {
        self.wait = wait;
        self
    }

    /// Sets the backoff between refused attempts: full jitter, doubling from `base` up to
    /// `max`. Default: 5 ms to 500 ms.
    pub fn backoff(mut self, base: Duration, max: Duration) -> LockClientBuilder {
        self.backoff_base = base;
        self.backoff_max = max;
        self
    }

    /// Sets the largest difference assumed between this machine's clock and a recoverer's.
    /// A recoverer treats a lock as expired when its own clock passes the recorded expiry, so
    /// a holder counts its locks as lost this much before that ([`LockClient::lease_left`]).
    /// Default: a tenth of the lease, at most 2 s.
    pub fn max_clock_skew(mut self, skew: Duration) -> LockClientBuilder {
        self.max_clock_skew = Some(skew);
        self
    }

    /// Returns the client.
    pub fn build(self) -> LockClient {
        let max_clock_skew = self
            .max_clock_skew
            .unwrap_or((self.lease / 10).min(Duration::from_secs(2)));
        let renew_every = self
            .renew_every
            .unwrap_or(self.lease / 3)
            .max(Duration::from_millis(1));
        let (stop_tx, _) = watch::channel(());
        let (lost_tx, _) = watch::channel(Vec::new());
        LockClient {
            inner: Arc::new(Inner {
                store: self.store,
                lock_index: self.lock_index,
                owner: Owner {
                    process_id: self.process_id.unwrap_or_else(fs_model::entropy::uuid),
                    holder: self.holder,
                    job: self.job,
                },
                lease: self.lease,
                renew_every,
                max_clock_skew,
                wait: self.wait,
                backoff_base: self.backoff_base,
                backoff_max: self.backoff_max,
                on_event: self.on_event,
                protocol_wanted: self.protocol,
                cancel: self.cancel,
                protocol: tokio::sync::OnceCell::new(),
                clock: LeaseClock::new(),
                held: Mutex::new(BTreeMap::new()),
                renewer_started: AtomicBool::new(false),
                stop_tx,
                lost_tx,
            }),
        }
    }
}

/// A lock held by this client.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) taken: Taken,
    /// How many guards of this client hold it (reentrancy).
    pub(crate) refcount: u32,
    /// Set when renewal found the lock taken over or removed: it is no longer ours, so release
    /// leaves the document alone and reports the loss.
    pub(crate) lost: bool,
    /// When our hold ends unless renewed (epoch milliseconds, by our clock): the expiry we
    /// last wrote successfully.
    pub(crate) expires_at: i64,
}

/// One lock owner: a process id, a label, and the locks it holds.
///
/// Cheap to clone; clones are the same owner, so they share locks reentrantly. Jobs that must
/// exclude each other use separate clients. While the client holds locks, a background task
/// renews their leases every `renew_every`; it stops when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: SharedStore,
    pub(crate) lock_index: String,
    pub(crate) owner: Owner,
    pub(crate) lease: Duration,
    pub(crate) renew_every: Duration,
    max_clock_skew: Duration,
    pub(crate) wait: Duration,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_max: Duration,
    on_event: Option<EventSink>,
    protocol_wanted: LockProtocol,
    pub(crate) cancel: Option<watch::Receiver<bool>>,
    /// The protocol in use, decided on first use.
    protocol: tokio::sync::OnceCell<LockProtocol>,
    pub(crate) clock: LeaseClock,
    /// A tokio mutex: held across the store round trips of an attempt, a release or a
    /// renewal, which must not interleave for one owner. Ordered by id, so that renewals and
    /// releases send their items in the same order every time (a seeded replay depends on it).
    pub(crate) held: Mutex<BTreeMap<String, Held>>,
    renewer_started: AtomicBool,
    /// Dropped with the client, which stops the renewal task.
    pub(crate) stop_tx: watch::Sender<()>,
    /// The labels of locks this client lost (lease expired and taken over or removed).
    pub(crate) lost_tx: watch::Sender<Vec<String>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("lock_index", &self.lock_index)
            .field("owner", &self.owner)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Returns the protocol in use, deciding it (and storing the scripts) on first use.
    pub(crate) async fn protocol(&self) -> Result<LockProtocol> {
        self.protocol
            .get_or_try_init(|| protocol::resolve(self.protocol_wanted, self.store.as_ref()))
            .await
            .copied()
    }

    /// Releases `taken` with the protocol in use.
    pub(crate) async fn release_taken(
        &self,
        calls: &mut Calls<'_>,
        taken: Vec<Taken>,
    ) -> Result<engine::Released> {
        match self.protocol().await? {
            LockProtocol::Scripted => {
                scripted::release(calls, taken, &self.owner, self.lease).await
            }
            _ => engine::release(calls, taken, &self.owner, self.lease).await,
        }
    }

    pub(crate) fn emit(&self, event: LockEvent) {
        if let Some(sink) = &self.on_event {
            sink(event);
        }
    }

    pub(crate) fn calls(&self) -> Calls<'_> {
        Calls::new(self.store.as_ref(), &self.lock_index)
    }

    pub(crate) fn report_lost(&self, labels: &[String]) {
        if labels.is_empty() {
            return;
        }
        tracing::warn!(locks = ?labels, process_id = %self.owner.process_id, "lost locks");
        self.lost_tx
            .send_modify(|lost| lost.extend(labels.iter().cloned()));
    }
}

impl LockClient {
    /// Starts building a client for the lock index `lock_index` (see
    /// [`fs_model::lock_index_name`]).
    pub fn builder(store: SharedStore, lock_index: impl Into<String>) -> LockClientBuilder {
        LockClientBuilder {
            store,
            lock_index: lock_index.into(),
            holder: "fsrename".to_owned(),
            process_id: None,
            job: None,
            lease: Duration::from_secs(30),
            renew_every: None,
            wait: Duration::from_secs(30),
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_millis(500),
            on_event: None,
            protocol: LockProtocol::Auto,
            cancel: None,
            max_clock_skew: None,
        }
    }

    /// Returns the protocol this client writes lock documents with, deciding it on first use.
    ///
    /// # Errors
    /// [`LockError::Store`] if [`LockProtocol::Scripted`] was asked for and the store runs no
    /// scripts, or storing them failed.
    pub async fn protocol(&self) -> Result<LockProtocol> {
        self.inner.protocol().await
    }

    /// Returns this client's owner identity.
    pub fn owner(&self) -> &Owner {
        &self.inner.owner
    }

    /// Returns the lock index.
    pub fn lock_index(&self) -> &str {
        &self.inner.lock_index
    }

    /// Returns the store.
    pub fn store(&self) -> &dyn DocStore {
        self.inner.store.as_ref()
    }

    /// Creates the lock index with its mappings if it does not exist.
    ///
    /// # Errors
    /// [`LockError::Store`] if the store refuses.
    pub async fn ensure_index(&self) -> Result<()> {
        let index = &self.inner.lock_index;
        self.inner
            .store
            .create_index(index, &lock_index_body())
            .await
            .map(|_| ())
            .map_err(LockError::store(format!("creating lock index `{index}`")))
    }

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

    /// Takes the locks of a tree-lock request.
    ///
    /// # Errors
    /// As [`LockClient::lock_tree`].
    pub async fn lock_request(&self, request: &TreeLockRequest) -> Result<LockGuard> {
        let items = request.items()?;
        let wanted = describe_wanted(&items);
        self.acquire(wanted, items).await
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
        let mut seen = std::collections::HashSet::new();
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

    /// Acquires `items` (in order), retrying refused attempts with backoff until the wait
    /// deadline. Never waits while holding any of them.
    async fn acquire(&self, wanted: String, items: Vec<LockItem>) -> Result<LockGuard> {
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
                Some(h)
                    if h.taken.item.mode == LockMode::Exclusive
                        || item.mode == LockMode::Shared => {}
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

    /// Gives up one hold on each of `ids`; releases in the store those no guard holds any more.
    pub(crate) async fn release_ids(&self, ids: &[String]) -> Result<ReleaseReport> {
        let inner = &self.inner;
        let mut held = inner.held.lock().await;
        let mut last = Vec::new();
        let mut lost_before = Vec::new();
        for id in ids {
            let Some(h) = held.get_mut(id) else { continue };
            if h.lost {
                lost_before.push(h.taken.item.label());
            }
            h.refcount = h.refcount.saturating_sub(1);
            if h.refcount > 0 {
                continue;
            }
            if let Some(h) = held.remove(id) {
                if !h.lost {
                    last.push(h.taken);
                }
            }
        }
        let mut calls = inner.calls();
        let released = inner.release_taken(&mut calls, last).await?;
        drop(held);
        inner.report_lost(&released.lost);
        if let Some(path) = lost_before.first().or(released.lost.first()) {
            return Err(LockError::LeaseLost { path: path.clone() });
        }
        Ok(ReleaseReport {
            round_trips: calls.round_trips,
            races: calls.races,
        })
    }

    /// Returns a receiver of the labels of locks this client has lost; it changes when a
    /// renewal or release finds a lock taken over or removed after its lease expired. A job
    /// should stop writing as soon as it sees a lost lock.
    pub fn lost_locks(&self) -> watch::Receiver<Vec<String>> {
        self.inner.lost_tx.subscribe()
    }

    /// Forgets `ids` without touching the store (they were released by other means).
    pub(crate) async fn forget(&self, ids: &[String]) {
        let mut held = self.inner.held.lock().await;
        for id in ids {
            held.remove(id);
        }
    }

    /// Returns how long all the locks this client holds are certainly still its own: the
    /// earliest expiry it wrote, less now and the allowed clock skew; zero once any of them
    /// is lost or past that point, `None` when it holds nothing. A job checks this after each
    /// read and before writing what it read: past it, a recoverer may have taken over.
    pub async fn lease_left(&self) -> Option<Duration> {
        let held = self.inner.held.lock().await;
        if held.values().any(|h| h.lost) {
            return Some(Duration::ZERO);
        }
        let earliest = held.values().map(|h| h.expires_at).min()?;
        let skew = i64::try_from(self.inner.max_clock_skew.as_millis()).unwrap_or(i64::MAX);
        let left = earliest
            .saturating_sub(self.inner.clock.now_ms())
            .saturating_sub(skew);
        Some(Duration::from_millis(u64::try_from(left).unwrap_or(0)))
    }

    /// Returns the lock items this client holds (with the mode each document really has),
    /// sorted by id: what a rename journal records so recovery can take them over.
    pub async fn held_items(&self) -> Vec<LockItem> {
        let held = self.inner.held.lock().await;
        let mut items: Vec<LockItem> = held.values().map(|h| h.taken.item.clone()).collect();
        items.sort_by(|a, b| a.id.cmp(&b.id));
        items
    }

    /// Returns the ids of the lock documents this client holds, sorted.
    pub async fn held_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.inner.held.lock().await.keys().cloned().collect();
        ids.sort();
        ids
    }

    pub(crate) fn start_renewer(&self) {
        if self.inner.renewer_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let stop_rx = self.inner.stop_tx.subscribe();
        tokio::spawn(lease::renew_loop(weak, stop_rx, self.inner.renew_every));
    }
}

fn describe_wanted(items: &[LockItem]) -> String {
    let exclusive: Vec<String> = items
        .iter()
        .filter(|i| i.mode == LockMode::Exclusive)
        .map(|i| format!("`{}`", i.label()))
        .collect();
    format!("tree lock on {}", exclusive.join(" and "))
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
