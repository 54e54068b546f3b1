//! The acquisition and release protocol, on compare-and-set writes only.
//!
//! One attempt at a set of lock items:
//!
//! 1. Items this client already holds in a covering mode are granted from memory (reentrancy).
//! 2. One `mget` reads the rest, skipped when the set has no shared lock: exclusive locks are
//!    plain creates, as in the book, and a conflict is read afterwards.
//! 3. If any item is refused by what was read (an exclusive lock of another owner, or a shared
//!    lock where we want exclusive), nothing is written and the attempt is refused.
//! 4. One `bulk` writes everything, in plan order: creates for missing documents, and for
//!    shared documents an `index` conditional on the version read that adds our holder entry.
//! 5. Items whose write conflicted (someone else wrote the document since we read it) are read
//!    again and retried at once, a bounded number of rounds; the first refusal undoes what the
//!    attempt took, so a caller never waits while holding a lock.
//!
//! A document that already holds our process id is adopted rather than written again: that is
//! the book's reentrant `process_id` check, and it also makes a retry safe when an earlier
//! write landed but its answer was lost.

use std::collections::HashMap;
use std::time::Duration;

use fs_model::FsPath;
use fs_store::{BulkItemResult, BulkOp, DocStore, StoreError, StoredDoc, Version};
use serde_json::Value;

use crate::backoff::Backoff;
use crate::error::{Blocker, LockError, Result};
use crate::lock_doc::{exclusive_source, shared_with, shared_without, LockMode, Observed, Owner};
use crate::plan::LockItem;

/// How many read-and-write rounds an attempt makes on contended documents before it counts as
/// refused (and backs off, holding nothing).
const MAX_ROUNDS: usize = 8;

/// The shortest time a contended release keeps trying. A release that gives up strands locks
/// until their leases expire, so it persists, backing off (jittered, exponential) between
/// contended rounds so that a stream of acquirers cannot starve it.
const MIN_RELEASE_PATIENCE: Duration = Duration::from_secs(5);

/// The largest number of items in one `mget` or `bulk` request.
const CHUNK: usize = 5_000;

/// A store handle that counts its round trips.
pub(crate) struct Calls<'a> {
    store: &'a dyn DocStore,
    index: &'a str,
    pub(crate) round_trips: u32,
    /// Scripted updates sent again because they lost a race with another update.
    pub(crate) races: u32,
}

impl<'a> Calls<'a> {
    pub(crate) fn new(store: &'a dyn DocStore, index: &'a str) -> Calls<'a> {
        Calls {
            store,
            index,
            round_trips: 0,
            races: 0,
        }
    }

    pub(crate) async fn mget(&mut self, ids: &[String]) -> Result<HashMap<String, StoredDoc>> {
        let mut found = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            self.round_trips += 1;
            let docs = self
                .store
                .mget(self.index, chunk)
                .await
                .map_err(LockError::store(format!(
                    "reading lock documents in `{}`",
                    self.index
                )))?;
            found.extend(docs.into_iter().flatten().map(|d| (d.id.clone(), d)));
        }
        Ok(found)
    }

    pub(crate) async fn get(&mut self, id: &str) -> Result<Option<StoredDoc>> {
        self.round_trips += 1;
        self.store
            .get(self.index, id)
            .await
            .map_err(LockError::store(format!(
                "reading lock `{id}` in `{}`",
                self.index
            )))
    }

    /// Sends scripted updates in one request.
    pub(crate) async fn bulk_update(
        &mut self,
        items: Vec<fs_store::ScriptedUpdate>,
    ) -> Result<Vec<fs_store::UpdateItemResult>> {
        let context = format!("updating lock documents in `{}` by script", self.index);
        let Some(scripted) = self.store.scripted() else {
            return Err(LockError::Store {
                context,
                cause: StoreError::Rejected {
                    context: self.store.describe(),
                    status: None,
                    message: "no scripts".into(),
                },
            });
        };
        self.round_trips += 1;
        scripted
            .bulk_update(self.index, items)
            .await
            .map_err(LockError::store(context))
    }

    pub(crate) async fn bulk(&mut self, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let mut results = Vec::with_capacity(ops.len());
        let mut ops = ops.into_iter().peekable();
        while ops.peek().is_some() {
            let chunk: Vec<BulkOp> = ops.by_ref().take(CHUNK).collect();
            self.round_trips += 1;
            let answers = self
                .store
                .bulk(self.index, chunk)
                .await
                .map_err(LockError::store(format!(
                    "writing lock documents in `{}`",
                    self.index
                )))?;
            results.extend(answers);
        }
        Ok(results)
    }
}

/// A lock document this owner has written (or adopted): what is needed to release or renew it
/// without reading it first.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    /// The item, with the mode the document really has (an adopted exclusive document may
    /// cover a shared request).
    pub(crate) item: LockItem,
    pub(crate) version: Version,
    pub(crate) source: Value,
}

/// How one item of an attempt is to be handled, given what the store holds.
enum Decision {
    Write(BulkOp, Value),
    Adopt(Taken),
    Refused(Blocker),
}

pub(crate) fn blocker(item: &LockItem, observed: &Observed) -> Blocker {
    let lock_type = match observed.mode() {
        LockMode::Exclusive => "exclusive",
        _ => "shared",
    };
    Blocker {
        path: item.label(),
        lock_type: lock_type.to_owned(),
        holders: observed.describe_holders(),
    }
}

/// Returns the document that creates `item` for `owner` where none exists.
pub(crate) fn fresh_source(item: &LockItem, owner: &Owner, now: i64, expires_at: i64) -> Value {
    match (item.mode, &item.path) {
        (LockMode::IntentExclusive, Some(path)) => shared_with(None, owner, path, now, expires_at),
        _ => exclusive_source(owner, item.path.as_ref(), now, expires_at),
    }
}

fn decide(
    item: &LockItem,
    current: Option<&StoredDoc>,
    owner: &Owner,
    now: i64,
    expires_at: i64,
) -> Result<Decision> {
    let Some(doc) = current else {
        let source = fresh_source(item, owner, now, expires_at);
        let op = BulkOp::Create {
            id: item.id.clone(),
            source: source.clone(),
        };
        return Ok(Decision::Write(op, source));
    };
    let observed = Observed::from_source(&doc.source);
    if observed.is_held_by(&owner.process_id) {
        if observed.mode() == LockMode::IntentExclusive && item.mode == LockMode::Exclusive {
            return Err(LockError::Upgrade { path: item.label() });
        }
        let mut item = item.clone();
        item.mode = observed.mode();
        return Ok(Decision::Adopt(Taken {
            item,
            version: doc.version,
            source: doc.source.clone(),
        }));
    }
    match (item.mode, observed.mode(), &item.path) {
        (LockMode::IntentExclusive, LockMode::IntentExclusive, Some(path)) => {
            let source = shared_with(Some(&doc.source), owner, path, now, expires_at);
            let op = BulkOp::Index {
                id: item.id.clone(),
                source: source.clone(),
                if_version: Some(doc.version),
            };
            Ok(Decision::Write(op, source))
        }
        _ => Ok(Decision::Refused(blocker(item, &observed))),
    }
}

/// The outcome of one attempt.
pub(crate) enum Attempt {
    /// Every item is now held; these are the documents written or adopted.
    Granted(Vec<Taken>),
    /// An item was refused; nothing is held.
    Refused(Blocker),
}

/// Makes one attempt at `items` (none of which the client holds yet). Never waits.
pub(crate) async fn attempt(
    calls: &mut Calls<'_>,
    items: &[LockItem],
    owner: &Owner,
    now: i64,
    lease: Duration,
) -> Result<Attempt> {
    let expires_at = crate::clock::lease_end(now, lease);
    let mut taken: Vec<Taken> = Vec::with_capacity(items.len());
    let mut pending: Vec<&LockItem> = items.iter().collect();
    let mut read = items.iter().any(|i| i.mode == LockMode::IntentExclusive);
    for _ in 0..MAX_ROUNDS {
        let current = if read {
            let ids: Vec<String> = pending.iter().map(|i| i.id.clone()).collect();
            match calls.mget(&ids).await {
                Ok(docs) => docs,
                Err(e) => return undo_then(calls, taken, owner, Err(e)).await,
            }
        } else {
            HashMap::new()
        };
        let mut ops = Vec::new();
        let mut writing = Vec::new();
        for item in &pending {
            match decide(item, current.get(&item.id), owner, now, expires_at) {
                Ok(Decision::Write(op, source)) => {
                    ops.push(op);
                    writing.push((*item, source));
                }
                Ok(Decision::Adopt(t)) => taken.push(t),
                Ok(Decision::Refused(b)) => {
                    return undo_then(calls, taken, owner, Ok(Attempt::Refused(b))).await
                }
                Err(e) => return undo_then(calls, taken, owner, Err(e)).await,
            }
        }
        if ops.is_empty() {
            return Ok(Attempt::Granted(taken));
        }
        let results = match calls.bulk(ops).await {
            Ok(results) => results,
            Err(e) => return undo_then(calls, taken, owner, Err(e)).await,
        };
        let mut again = Vec::new();
        for ((item, source), result) in writing.into_iter().zip(results) {
            match result {
                Ok(version) => taken.push(Taken {
                    item: item.clone(),
                    version,
                    source,
                }),
                // Someone wrote the document since we read it, or the item's fate is unknown:
                // read it again next round and decide afresh.
                Err(e) if e.is_conflict() || e.is_retryable() => again.push(item),
                Err(e) => {
                    let context = format!("taking the lock on `{}`", item.label());
                    return undo_then(calls, taken, owner, Err(LockError::store(context)(e))).await;
                }
            }
        }
        if again.is_empty() {
            return Ok(Attempt::Granted(taken));
        }
        pending = again;
        read = true;
    }
    let contended = pending.first().map(|i| i.label()).unwrap_or_default();
    let b = Blocker {
        path: contended,
        lock_type: "contended".to_owned(),
        holders: format!("writers that changed it in each of {MAX_ROUNDS} rounds"),
    };
    undo_then(calls, taken, owner, Ok(Attempt::Refused(b))).await
}

/// Releases what a failed attempt took, then returns `outcome`. A failure to undo is logged,
/// not returned: the attempt's own outcome matters more, and leases expire what is left.
async fn undo_then(
    calls: &mut Calls<'_>,
    taken: Vec<Taken>,
    owner: &Owner,
    outcome: Result<Attempt>,
) -> Result<Attempt> {
    if !taken.is_empty() {
        if let Err(e) = release(calls, taken, owner, MIN_RELEASE_PATIENCE).await {
            tracing::warn!(error = %e, "could not undo a refused lock attempt; leases will expire it");
        }
    }
    outcome
}

/// What a release found.
#[derive(Debug, Default)]
pub(crate) struct Released {
    /// Locks that were no longer ours (taken over or removed after our lease expired).
    pub(crate) lost: Vec<String>,
}

/// Orders locks for release: exclusive before shared, deepest first within each, so that no
/// ancestor becomes free while a lock below it is still held.
fn release_order(taken: &mut [Taken]) {
    taken.sort_by_key(|t| {
        let depth = t.item.path.as_ref().map_or(0, FsPath::depth);
        (
            t.item.mode == LockMode::IntentExclusive,
            std::cmp::Reverse(depth),
            t.item.id.clone(),
        )
    });
}

/// Releases `taken` in one bulk request (more only when shared documents changed under us),
/// trying for `patience` (at least [`MIN_RELEASE_PATIENCE`]) when they keep changing.
///
/// A share is removed with a write conditional on the version read, so between reading a
/// shared document and writing it back nothing may wait: after a refused round the backoff
/// comes first, then the fresh read, then the write. (Waiting between the read and the write
/// made the write all but sure to fail on a busy ancestor, and releases took hundreds of
/// milliseconds under 16 concurrent renames.) A share of a document that others shared when
/// we last wrote it has most likely changed since, so it is read before the first write too.
pub(crate) async fn release(
    calls: &mut Calls<'_>,
    mut taken: Vec<Taken>,
    owner: &Owner,
    patience: Duration,
) -> Result<Released> {
    let deadline = tokio::time::Instant::now() + patience.max(MIN_RELEASE_PATIENCE);
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
    let mut released = Released::default();
    let (busy, quiet): (Vec<Taken>, Vec<Taken>) = std::mem::take(&mut taken)
        .into_iter()
        .partition(|t| shared_with_others(t, owner));
    let mut pending = quiet;
    if !busy.is_empty() {
        pending.extend(read_ours(calls, busy, owner).await?);
    }
    let mut rounds = 0u32;
    while !pending.is_empty() {
        rounds += 1;
        release_order(&mut pending);
        let ops: Vec<BulkOp> = pending.iter().map(|t| release_op(t, owner)).collect();
        let results = match calls.bulk(ops).await {
            Ok(results) => results,
            // The request's fate is unknown: read what is still ours and go on.
            Err(e) if e.is_retryable() => {
                pending.iter().map(|_| Err(transient_unknown())).collect()
            }
            Err(e) => return Err(e),
        };
        let mut again = Vec::new();
        for (t, result) in pending.into_iter().zip(results) {
            match result {
                Ok(_) => {}
                // Gone, or an exclusive lock rewritten by someone else: no longer ours.
                Err(StoreError::NotFound { .. })
                | Err(StoreError::Conflict { exists: false, .. }) => {
                    released.lost.push(t.item.label())
                }
                Err(e) if e.is_conflict() && t.item.mode == LockMode::Exclusive => {
                    released.lost.push(t.item.label())
                }
                Err(e) if e.is_conflict() || e.is_retryable() => again.push(t),
                Err(e) => {
                    let context = format!("releasing the lock on `{}`", t.item.label());
                    return Err(LockError::store(context)(e));
                }
            }
        }
        pending = Vec::new();
        if !again.is_empty() {
            if tokio::time::Instant::now() >= deadline {
                let left: Vec<String> = again.iter().map(|t| t.item.label()).collect();
                return Err(LockError::Store {
                    context: format!("releasing {}", left.join(", ")),
                    cause: StoreError::Transient {
                        context: "release".to_owned(),
                        message: format!("the documents kept changing for {rounds} rounds"),
                    },
                });
            }
            tokio::time::sleep(backoff.next_pause()).await;
            pending = read_ours(calls, again, owner).await?;
        }
    }
    Ok(released)
}

/// Returns true for a share of a document that others shared too when we last wrote it.
fn shared_with_others(t: &Taken, owner: &Owner) -> bool {
    if t.item.mode != LockMode::IntentExclusive {
        return false;
    }
    let observed = Observed::from_source(&t.source);
    observed.foreign_shares() > 0
        || match &observed {
            Observed::Shared { holders, .. } => holders.keys().any(|pid| *pid != owner.process_id),
            Observed::Exclusive { .. } => false,
        }
}

/// Reads `items` afresh and returns those still ours, with the version and source read.
/// The others are gone (a retried delete that landed, or a share reaped after it expired).
async fn read_ours(calls: &mut Calls<'_>, items: Vec<Taken>, owner: &Owner) -> Result<Vec<Taken>> {
    let ids: Vec<String> = items.iter().map(|t| t.item.id.clone()).collect();
    let mut fresh = calls.mget(&ids).await?;
    let mut ours = Vec::with_capacity(items.len());
    for mut t in items {
        match fresh.remove(&t.item.id) {
            Some(doc) if Observed::from_source(&doc.source).is_held_by(&owner.process_id) => {
                t.version = doc.version;
                t.source = doc.source;
                ours.push(t);
            }
            _ => {}
        }
    }
    Ok(ours)
}

fn transient_unknown() -> StoreError {
    StoreError::Transient {
        context: "release".to_owned(),
        message: "outcome unknown".to_owned(),
    }
}

fn release_op(t: &Taken, owner: &Owner) -> BulkOp {
    let id = t.item.id.clone();
    let if_version = Some(t.version);
    if t.item.mode == LockMode::IntentExclusive {
        if let Some(source) = shared_without(&t.source, &[owner.process_id.as_str()]) {
            return BulkOp::Index {
                id,
                source,
                if_version,
            };
        }
    }
    BulkOp::Delete { id, if_version }
}
