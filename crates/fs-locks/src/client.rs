//! [`LockClient`]: one lock owner, its held locks, and the acquire/release entry points.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fs_model::{lock_index_body, FsPath, GLOBAL_LOCK_ID};
use fs_store::{DocStore, SharedStore};
use tokio::sync::{watch, Mutex};

use crate::clock::LeaseClock;
use crate::engine::{self, Calls, Taken};
use crate::error::{LockError, Result};
use crate::events::{EventSink, LockEvent};
use crate::guard::{FirstWrite, LockGuard, ReleaseReport, ReleasedAfter};
use crate::lease;
use crate::lock_doc::{LockMode, Owner};
use crate::plan::{LockItem, TreeLockRequest};
use crate::protocol::{self, LockProtocol};
use crate::scripted;

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
    pub(crate) max_clock_skew: Duration,
    pub(crate) wait: Duration,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) on_event: Option<EventSink>,
    pub(crate) protocol_wanted: LockProtocol,
    pub(crate) cancel: Option<watch::Receiver<bool>>,
    /// The protocol in use, decided on first use.
    pub(crate) protocol: crate::protocol::ProtocolMemo,
    pub(crate) clock: LeaseClock,
    /// A tokio mutex: held across the store round trips of an attempt, a release or a
    /// renewal, which must not interleave for one owner. Ordered by id, so that renewals and
    /// releases send their items in the same order every time (a seeded replay depends on it).
    pub(crate) held: Mutex<BTreeMap<String, Held>>,
    pub(crate) renewer_started: AtomicBool,
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
            .0
            .get_or_try_init(|| protocol::resolve(self.protocol_wanted, self.store.as_ref()))
            .await
            .copied()
    }

    /// Makes `first` (if any), then releases `taken` if it landed: in one request where the
    /// store chains them, else one after the other.
    pub(crate) async fn release_taken_after(
        &self,
        calls: &mut Calls<'_>,
        taken: Vec<Taken>,
        first: Option<FirstWrite>,
    ) -> Result<engine::Released> {
        let protocol = self.protocol().await?;
        let first = match first {
            Some(first)
                if protocol == LockProtocol::Scripted && !taken.is_empty() && self.chains() =>
            {
                return scripted::release(calls, taken, &self.owner, self.lease, Some(first)).await
            }
            Some(first) => first,
            None => {
                return match protocol {
                    LockProtocol::Scripted => {
                        scripted::release(calls, taken, &self.owner, self.lease, None).await
                    }
                    _ => engine::release(calls, taken, &self.owner, self.lease).await,
                }
            }
        };
        if let Err(why) = calls.write_first(first).await? {
            return Ok(engine::Released {
                lost: Vec::new(),
                first_failed: Some(why),
            });
        }
        match protocol {
            LockProtocol::Scripted => {
                scripted::release(calls, taken, &self.owner, self.lease, None).await
            }
            _ => engine::release(calls, taken, &self.owner, self.lease).await,
        }
    }

    /// Whether the store makes a write and a scripted release in one transaction.
    fn chains(&self) -> bool {
        self.store.scripted().is_some_and(|s| s.chains())
    }

    pub(crate) fn emit(&self, event: LockEvent) {
        if let Some(sink) = &self.on_event {
            sink(event);
        }
    }

    pub(crate) fn calls(&self) -> Calls<'_> {
        Calls::new(self.store.as_ref(), &self.lock_index, self.clock.now_ms())
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

    /// Gives up one hold on each of `ids`; releases in the store those no guard holds any more.
    pub(crate) async fn release_ids(&self, ids: &[String]) -> Result<ReleaseReport> {
        match self.release_ids_after(ids, None).await {
            ReleasedAfter::Released(result) => result,
            // Nothing to write first, so nothing failed there.
            ReleasedAfter::FirstFailed(cause) => Err(LockError::Store {
                context: "releasing locks".into(),
                cause,
            }),
        }
    }

    /// Returns true if the store makes a write and the release of this client's locks in one
    /// request and one transaction ([`crate::LockGuard::release_after`]): the scripted
    /// protocol on a store that [chains](fs_store::ScriptedUpdates::chains) (the embedded
    /// store).
    pub async fn chains_release(&self) -> bool {
        matches!(self.inner.protocol().await, Ok(LockProtocol::Scripted)) && self.inner.chains()
    }

    /// [`LockClient::release_ids`], after `first` if there is one.
    pub(crate) async fn release_ids_after(
        &self,
        ids: &[String],
        first: Option<FirstWrite>,
    ) -> ReleasedAfter {
        let inner = &self.inner;
        let mut held = inner.held.lock().await;
        let mut last = Vec::new();
        let mut lost_before = Vec::new();
        // Until when each lock released is ours beyond doubt: nobody may take over or remove a
        // lock before its lease ran out (and the clocks' skew with it).
        let mut leased: HashMap<String, i64> = HashMap::new();
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
                    let skew = i64::try_from(inner.max_clock_skew.as_millis()).unwrap_or(i64::MAX);
                    leased.insert(h.taken.item.label(), h.expires_at.saturating_sub(skew));
                    last.push(h.taken);
                }
            }
        }
        let mut calls = inner.calls();
        let released = inner.release_taken_after(&mut calls, last, first).await;
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
        let now = inner.clock.now_ms();
        released
            .lost
            .retain(|label| leased.get(label).is_none_or(|&until| until <= now));
        inner.report_lost(&released.lost);
        if let Some(path) = lost_before.first().or(released.lost.first()) {
            return ReleasedAfter::Released(Err(LockError::LeaseLost { path: path.clone() }));
        }
        ReleasedAfter::Released(Ok(ReleaseReport {
            round_trips: calls.round_trips,
            races: calls.races,
        }))
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
            return Err(LockError::LeaseLost { path: lost.clone() });
        }
        if self.lease_left().await.is_some_and(|left| left.is_zero()) {
            return Err(LockError::LeaseLost {
                path: what.to_owned(),
            });
        }
        Ok(())
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
