//! [`LockClient`]: one lock owner, its configuration and the locks it holds. The operations
//! on it (acquire, release, leases, adoption, foreign shares, listing) live in modules of
//! their own above this one and reach its state through the methods here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fs_model::lock_index_body;
use fs_store::{DocStore, SharedStore};
use tokio::sync::{watch, Mutex, MutexGuard};

use crate::backoff::Backoff;
use crate::calls::Calls;
use crate::clock::LeaseClock;
use crate::error::{LateRenewal, LockError, Result};
use crate::events::{EventSink, LockEvent};
use crate::lender::Lender;
use crate::lock_doc::Owner;
use crate::orphans::Orphans;
use crate::plan::LockItem;
use crate::protocol::{LockProtocol, Protocol, ProtocolMemo};

mod held;
mod renew;

pub(crate) use held::HeldLocks;

/// One lock owner: a process id, a label, and the locks it holds.
///
/// Cheap to clone; clones are the same owner, so they share locks reentrantly. Jobs that must
/// exclude each other use separate clients. While the client holds locks, a background task
/// renews their leases every `renew_every`; it stops when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct LockClient {
    inner: Arc<Inner>,
}

/// How a client is set up: what [`LockClientBuilder`](crate::LockClientBuilder) gathers.
pub(crate) struct Settings {
    pub(crate) store: SharedStore,
    pub(crate) lock_index: String,
    pub(crate) owner: Owner,
    pub(crate) lease: Duration,
    pub(crate) renew_every: Duration,
    pub(crate) max_clock_skew: Duration,
    pub(crate) wait: Duration,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) on_event: Option<EventSink>,
    pub(crate) protocol_wanted: LockProtocol,
    pub(crate) memo: ProtocolMemo,
    pub(crate) cancel: Option<watch::Receiver<bool>>,
    pub(crate) orphans: Option<Arc<dyn Orphans>>,
    /// Where tree locks borrow their intention locks, if the process shares them.
    pub(crate) lender: Option<Arc<dyn Lender>>,
}

struct Inner {
    settings: Settings,
    clock: LeaseClock,
    /// A tokio mutex: held across the store round trips of an attempt, a release or a
    /// renewal, which must not interleave for one owner.
    held: Mutex<HeldLocks>,
    renewer_started: AtomicBool,
    /// Dropped with the client, which stops the renewal task.
    stop_tx: watch::Sender<()>,
    /// The labels of locks this client lost (lease expired and taken over or removed).
    lost_tx: watch::Sender<Vec<String>>,
    /// When the renewal started, last ran and last succeeded (a std mutex: never held across
    /// an await).
    renewals: std::sync::Mutex<RenewalTimes>,
}

/// When a client's background renewal started, last ran, and last succeeded.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RenewalTimes {
    pub(crate) started: Option<tokio::time::Instant>,
    pub(crate) last_attempt: Option<tokio::time::Instant>,
    pub(crate) last_success: Option<tokio::time::Instant>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("lock_index", &self.settings.lock_index)
            .field("owner", &self.settings.owner)
            .field("lease", &self.settings.lease)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// Returns a client set up as `settings` say, holding nothing.
    pub(crate) fn new(settings: Settings) -> LockClient {
        let (stop_tx, _) = watch::channel(());
        let (lost_tx, _) = watch::channel(Vec::new());
        LockClient {
            inner: Arc::new(Inner {
                settings,
                clock: LeaseClock::new(),
                held: Mutex::new(HeldLocks::default()),
                renewer_started: AtomicBool::new(false),
                stop_tx,
                lost_tx,
                renewals: std::sync::Mutex::new(RenewalTimes::default()),
            }),
        }
    }

    fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Returns the protocol this client writes lock documents with, deciding it on first use.
    ///
    /// # Errors
    /// [`LockError::Store`] if [`LockProtocol::Scripted`] was asked for and the store runs no
    /// scripts, or storing them failed.
    pub async fn protocol(&self) -> Result<LockProtocol> {
        let settings = self.settings();
        settings
            .memo
            .decide(settings.protocol_wanted, settings.store.as_ref())
            .await
    }

    /// Returns the steps of the protocol in use, deciding it on first use.
    pub(crate) async fn steps(&self) -> Result<&'static dyn Protocol> {
        self.sync_clock().await;
        Ok(self.protocol().await?.steps())
    }

    /// Returns true while this client's protocol is `Auto`, deciding it would cost requests,
    /// and nothing has needed it yet. On a server that may run scripts, deciding costs a `GET`
    /// of a stored script (and, where it runs none, a refused `PUT`); until a lock document
    /// is found to exist, nothing needs it: a missing document is created with the same
    /// source by either protocol, and what a client created it can give back by
    /// compare-and-set. A store without scripted updates decides for compare-and-set with no
    /// request, and one that chains them (the embedded store) runs them in its own
    /// transaction: those decide at once.
    pub(crate) fn undecided(&self) -> bool {
        let settings = self.settings();
        settings.protocol_wanted == LockProtocol::Auto
            && settings.memo.decided().is_none()
            && settings.store.scripted().is_some_and(|s| !s.chains())
    }

    /// Returns true when an attempt starts by creating every document in one `bulk` of
    /// `_create`s: while the protocol is [undecided](LockClient::undecided), and by
    /// compare-and-set on a server until a lock document has been found existing (a missing
    /// document needs no read: the `mget` before the writes is saved on a quiet tree; see
    /// [`ProtocolMemo`](crate::ProtocolMemo)). A store that chains its writes (the embedded
    /// one) reads in the same transaction, so there is nothing to save.
    pub(crate) fn creates_first(&self) -> bool {
        if self.undecided() {
            return true;
        }
        let settings = self.settings();
        let cas = settings.protocol_wanted == LockProtocol::Cas
            || settings.memo.decided() == Some(LockProtocol::Cas);
        cas && !settings.memo.found_existing()
            && !settings.store.scripted().is_some_and(|s| s.chains())
    }

    /// Records that an attempt found a lock document existing (see
    /// [`creates_first`](LockClient::creates_first)).
    pub(crate) fn note_existing(&self) {
        self.settings().memo.note_existing();
    }

    /// Returns the steps that give locks back: the protocol in use, or compare-and-set (which
    /// works on every store) while it is [undecided](LockClient::undecided).
    pub(crate) async fn release_steps(&self) -> Result<&'static dyn Protocol> {
        if self.undecided() {
            return Ok(LockProtocol::Cas.steps());
        }
        self.steps().await
    }

    /// Returns this client's owner identity.
    pub fn owner(&self) -> &Owner {
        &self.settings().owner
    }

    /// Returns the lock index.
    pub fn lock_index(&self) -> &str {
        &self.settings().lock_index
    }

    /// Returns the store.
    pub fn store(&self) -> &dyn DocStore {
        self.settings().store.as_ref()
    }

    /// Returns the store, to share (a scan holds it).
    pub(crate) fn shared_store(&self) -> &SharedStore {
        &self.settings().store
    }

    /// Creates the lock index with its mappings if it does not exist.
    ///
    /// # Errors
    /// [`LockError::Store`] if the store refuses.
    pub async fn ensure_index(&self) -> Result<()> {
        let index = self.lock_index();
        self.store()
            .create_index(index, &lock_index_body())
            .await
            .map(|_| ())
            .map_err(LockError::store(format!("creating lock index `{index}`")))
    }

    /// Returns a handle for the store calls of one operation, starting now.
    pub(crate) fn calls(&self) -> Calls<'_> {
        let at = (self.store(), self.lock_index());
        Calls::new(at, self.owner(), self.lease(), self.now_ms())
    }

    /// Sets the process's lease clock to the server's, if no client has yet
    /// ([`LeaseClock::sync`]): before the first lease this process writes or judges.
    pub(crate) async fn sync_clock(&self) {
        LeaseClock::sync(self.store()).await;
    }

    /// Returns the time by the lease clock, epoch milliseconds.
    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Returns the lease clock.
    pub(crate) fn clock(&self) -> &LeaseClock {
        &self.inner.clock
    }

    /// Returns how long a lock lives without renewal.
    pub(crate) fn lease(&self) -> Duration {
        self.settings().lease
    }

    /// Returns how long an acquisition (or adoption) keeps trying.
    pub(crate) fn wait(&self) -> Duration {
        self.settings().wait
    }

    /// Returns a fresh backoff between refused attempts.
    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(self.settings().backoff_base, self.settings().backoff_max)
    }

    /// Returns the receiver that cancels acquisitions, if any.
    pub(crate) fn cancel(&self) -> Option<watch::Receiver<bool>> {
        self.settings().cancel.clone()
    }

    /// Returns what acquisitions do about a dead holder's lock, if anything.
    pub(crate) fn orphans(&self) -> Option<&Arc<dyn Orphans>> {
        self.settings().orphans.as_ref()
    }

    /// Returns where tree locks borrow their intention locks, if anywhere.
    pub(crate) fn lender(&self) -> Option<&Arc<dyn Lender>> {
        self.settings().lender.as_ref()
    }

    /// Returns the clock skew this client allows between processes: a lease is over for its
    /// holder that much before it is over for anyone else.
    pub fn max_clock_skew(&self) -> Duration {
        self.settings().max_clock_skew
    }

    /// Returns how often the held locks are renewed.
    pub(crate) fn renew_every(&self) -> Duration {
        self.settings().renew_every
    }

    /// Returns the clock skew allowed, in milliseconds.
    pub(crate) fn max_clock_skew_ms(&self) -> i64 {
        i64::try_from(self.settings().max_clock_skew.as_millis()).unwrap_or(i64::MAX)
    }

    /// How long a request is refused before it registers as a waiter: ten of the shortest
    /// pauses (50 ms by default). Contention shorter than that is settled by retrying, as
    /// before the queue; a request that has waited longer stops younger ones from barging
    /// past it.
    pub(crate) fn queue_after(&self) -> Duration {
        self.settings().backoff_base * 10
    }

    /// The longest pause of a waiter that only holders block (the head of the queue): a
    /// tenth of the longest pause, at least the shortest.
    pub(crate) fn head_pause(&self) -> Duration {
        (self.settings().backoff_max / 10).max(self.settings().backoff_base)
    }

    /// How long a waiter registration lasts unless the waiter's next attempt renews it: four
    /// of the longest pauses between attempts (at least a second, at most the lock lease).
    /// Short, so that a waiter that died or gave up without removing its entry blocks nobody
    /// for long.
    pub(crate) fn waiter_lease(&self) -> Duration {
        (self.settings().backoff_max * 4)
            .max(Duration::from_secs(1))
            .min(self.settings().lease)
    }

    /// Tells the event sink, if any.
    pub(crate) fn emit(&self, event: LockEvent) {
        if let Some(sink) = &self.settings().on_event {
            sink(event);
        }
    }

    /// Records and announces that the locks `labels` are lost.
    pub(crate) fn report_lost(&self, labels: &[String]) {
        if labels.is_empty() {
            return;
        }
        tracing::warn!(locks = ?labels, process_id = %self.owner().process_id, "lost locks");
        self.inner
            .lost_tx
            .send_modify(|lost| lost.extend(labels.iter().cloned()));
    }

    /// Locks the held locks: acquisitions, releases and renewals of one owner do not
    /// interleave.
    pub(crate) async fn held(&self) -> MutexGuard<'_, HeldLocks> {
        self.inner.held.lock().await
    }

    /// Returns a receiver of the labels of locks this client has lost; it changes when a
    /// renewal or release finds a lock taken over or removed after its lease expired. A job
    /// should stop writing as soon as it sees a lost lock.
    pub fn lost_locks(&self) -> watch::Receiver<Vec<String>> {
        self.inner.lost_tx.subscribe()
    }

    /// Forgets `ids` without touching the store (they were released by other means, or are
    /// left to expire).
    pub(crate) async fn forget(&self, ids: &[String]) {
        self.held().await.forget(ids);
    }

    /// Returns how long all the locks this client holds are certainly still its own: the
    /// earliest expiry it wrote, less now and the allowed clock skew; zero once any of them
    /// is lost or past that point, `None` when it holds nothing. A job checks this after each
    /// read and before writing what it read: past it, a recoverer may have taken over.
    ///
    /// The intention locks borrowed from the process's lender count too: a job's own locks
    /// protect nothing once the hold on their ancestors is over.
    pub async fn lease_left(&self) -> Option<Duration> {
        let held = self.held().await;
        if held.any_lost() {
            return Some(Duration::ZERO);
        }
        let borrowed = held.borrowed_ids();
        let own = held.earliest_expiry();
        drop(held);
        let lent = match self.lender() {
            Some(lender) if !borrowed.is_empty() => Some(lender.held_until(&borrowed).await),
            _ => None,
        };
        let earliest = match (own, lent) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        let left = earliest
            .saturating_sub(self.now_ms())
            .saturating_sub(self.max_clock_skew_ms());
        Some(Duration::from_millis(u64::try_from(left).unwrap_or(0)))
    }

    /// Fails with [`LockError::LeaseLost`] (naming a lost lock, or else `what`) when a lock of
    /// this client is lost or its lease is past ([`lease_left`](Self::lease_left) is zero).
    /// A writer calls it before writing what it read; a reader after reading, since what it
    /// read is only known to be one state of the tree if nobody could have taken over
    /// meanwhile.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`], as above.
    pub async fn ensure_held(&self, what: &str) -> Result<()> {
        if let Some(lost) = self.inner.lost_tx.borrow().first() {
            return Err(LockError::LeaseLost {
                path: lost.clone(),
                renewal: None,
            });
        }
        if self.lease_left().await.is_some_and(|left| left.is_zero()) {
            return Err(LockError::LeaseLost {
                path: what.to_owned(),
                renewal: self.late_renewal(),
            });
        }
        Ok(())
    }

    /// Returns the lock items this client holds (with the mode each document really has),
    /// sorted by id: what a rename journal records so recovery can take them over.
    pub async fn held_items(&self) -> Vec<LockItem> {
        let mut items = self.held().await.items();
        items.sort_by(|a, b| a.id.cmp(&b.id));
        items
    }

    /// Returns the ids of the lock documents this client holds, sorted.
    pub async fn held_ids(&self) -> Vec<String> {
        let mut ids = self.held().await.ids();
        ids.sort();
        ids
    }

    /// Starts the background renewal of this client's leases, once.
    pub(crate) fn start_renewer(&self) {
        if self.inner.renewer_started.swap(true, Ordering::AcqRel) {
            return;
        }
        self.renewals().started = Some(tokio::time::Instant::now());
        let weak = Arc::downgrade(&self.inner);
        let stop_rx = self.inner.stop_tx.subscribe();
        let every = self.settings().renew_every;
        tokio::spawn(renew::renew_loop(weak, stop_rx, every));
    }

    /// The times of this client's renewals, for [`LateRenewal`].
    pub(crate) fn renewals(&self) -> std::sync::MutexGuard<'_, RenewalTimes> {
        self.inner
            .renewals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What this client knows of its renewals, once its lease is found over.
    fn late_renewal(&self) -> Option<LateRenewal> {
        let times = *self.renewals();
        let started = times.started?;
        Some(LateRenewal {
            every: self.settings().renew_every,
            since_attempt: times.last_attempt.unwrap_or(started).elapsed(),
            since_success: times.last_success.unwrap_or(started).elapsed(),
        })
    }

    /// Renews every held lock now instead of waiting for the background task; returns the
    /// round trips it took.
    ///
    /// # Errors
    /// [`LockError::Store`] if the store failed.
    pub async fn renew_now(&self) -> Result<u32> {
        renew::renew(self).await
    }
}
