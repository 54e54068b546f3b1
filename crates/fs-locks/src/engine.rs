//! The acquisition and release protocol, on compare-and-set writes only.
//!
//! One attempt at a set of lock items:
//!
//! 1. Items this client already holds in a covering mode are granted from memory (reentrancy).
//! 2. One `mget` reads the rest, skipped when every item is an exclusive lock: those are plain
//!    creates, as in the book, and a conflict is read afterwards.
//! 3. Each document read is put through the acquire script's Rust twin
//!    ([`fs_model::lock_scripts::ACQUIRE`]), the same logic Elasticsearch runs in painless:
//!    refused (an incompatible holder, or an older waiter), already ours, or a new document.
//!    If any item is refused, nothing is written but our waiter entries on the documents that
//!    refused (fair waiting), and the attempt is refused.
//! 4. One `bulk` writes everything, in plan order: creates for missing documents, and for
//!    existing ones an `index` conditional on the version read.
//! 5. Items whose write conflicted (someone else wrote the document since we read it) are read
//!    again and retried at once, a bounded number of rounds; the first refusal undoes what the
//!    attempt took, so a caller never waits while holding a lock.
//!
//! A document that already holds our process id is adopted rather than written again: that is
//! the book's reentrant `process_id` check, and it also makes a retry safe when an earlier
//! write landed but its answer was lost.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fs_model::lock_scripts::{self, ScriptError, ScriptOp, UPGRADE_REFUSAL};
use fs_model::FsPath;
use fs_store::{BulkItemResult, BulkOp, DocStore, StoreError, StoredDoc, Version};
use serde_json::Value;

use crate::backoff::Backoff;
use crate::error::{Blocker, LockError, Result};
use crate::guard::FirstWrite;
use crate::lock_doc::{LockMode, Observed, Owner};
use crate::plan::LockItem;
use crate::script_params::{
    acquire_params, fresh_source, release_params, run_locally, wait_params, Request,
};

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
    /// When these calls started, by the lease clock: what tells a live waiter from an expired
    /// one when a lock is given back.
    pub(crate) now: i64,
}

impl<'a> Calls<'a> {
    pub(crate) fn new(store: &'a dyn DocStore, index: &'a str, now: i64) -> Calls<'a> {
        Calls {
            store,
            index,
            round_trips: 0,
            races: 0,
            now,
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

    /// The store's scripted updates; an error saying `context` where it runs none.
    fn scripted(&self, context: &str) -> Result<&'a dyn fs_store::ScriptedUpdates> {
        self.store.scripted().ok_or_else(|| LockError::Store {
            context: context.to_owned(),
            cause: StoreError::Rejected {
                context: self.store.describe(),
                status: None,
                message: "no scripts".into(),
            },
        })
    }

    /// Sends scripted updates in one request.
    pub(crate) async fn bulk_update(
        &mut self,
        items: Vec<fs_store::ScriptedUpdate>,
    ) -> Result<Vec<fs_store::UpdateItemResult>> {
        let context = format!("updating lock documents in `{}` by script", self.index);
        let scripted = self.scripted(&context)?;
        self.round_trips += 1;
        scripted
            .bulk_update(self.index, items)
            .await
            .map_err(LockError::store(context))
    }

    /// Makes `first`, then (only if it landed) the scripted updates, in one request and one
    /// transaction (the store [chains](fs_store::ScriptedUpdates::chains)).
    pub(crate) async fn bulk_update_after(
        &mut self,
        first: FirstWrite,
        items: Vec<fs_store::ScriptedUpdate>,
    ) -> Result<fs_store::Chained<fs_store::UpdateItemResult>> {
        let context = format!(
            "writing `{}/{}` and updating lock documents in `{}` by script",
            first.index,
            first.op.id(),
            self.index
        );
        let scripted = self.scripted(&context)?;
        self.round_trips += 1;
        scripted
            .bulk_update_after(&first.index, first.op, self.index, items)
            .await
            .map_err(LockError::store(context))
    }

    /// Makes `first` alone: `Ok(Err(why))` if it did not land.
    pub(crate) async fn write_first(
        &mut self,
        first: FirstWrite,
    ) -> Result<std::result::Result<Version, StoreError>> {
        let context = format!("writing `{}/{}`", first.index, first.op.id());
        self.round_trips += 1;
        let mut answers = self
            .store
            .bulk(&first.index, vec![first.op])
            .await
            .map_err(LockError::store(context.clone()))?;
        match answers.pop() {
            Some(answer) => Ok(answer),
            None => Err(LockError::Store {
                context,
                cause: StoreError::Backend {
                    context: self.store.describe(),
                    message: "a bulk request of one item got no answer".into(),
                },
            }),
        }
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

/// Returns the blocker that refused `item` for the request, as the document says.
pub(crate) fn blocker(item: &LockItem, observed: &Observed, req: &Request<'_>) -> Blocker {
    match observed.conflict(
        &req.owner.process_id,
        item.mode,
        req.since,
        req.now,
        req.queue,
    ) {
        Some(conflict) => Blocker::from_conflict(item.label(), &conflict, req.now),
        None => Blocker {
            path: item.label(),
            lock_type: observed.mode().to_string(),
            holders: observed.describe_holders(),
            waiter: false,
            expired_ms_ago: None,
        },
    }
}

fn decide(item: &LockItem, current: Option<&StoredDoc>, req: &Request<'_>) -> Result<Decision> {
    let Some(doc) = current else {
        let source = fresh_source(item, req.owner, req.now, req.expires_at);
        let op = BulkOp::Create {
            id: item.id.clone(),
            source: source.clone(),
        };
        return Ok(Decision::Write(op, source));
    };
    let params = acquire_params(item, req);
    match run_locally(&lock_scripts::ACQUIRE, &doc.source, &params) {
        Ok((ScriptOp::Index, source)) => {
            let op = BulkOp::Index {
                id: item.id.clone(),
                source: source.clone(),
                if_version: Some(doc.version),
            };
            Ok(Decision::Write(op, source))
        }
        Ok((ScriptOp::Noop, _)) | Ok((ScriptOp::Delete, _)) => {
            // Already ours, in a mode that covers the request.
            let observed = Observed::from_source(&doc.source);
            let mut item = item.clone();
            item.mode = observed
                .held_mode(&req.owner.process_id)
                .unwrap_or(item.mode);
            Ok(Decision::Adopt(Taken {
                item,
                version: doc.version,
                source: doc.source.clone(),
            }))
        }
        Err(ScriptError::Refused(why)) if why == UPGRADE_REFUSAL => {
            Err(LockError::Upgrade { path: item.label() })
        }
        Err(_) => Ok(Decision::Refused(blocker(
            item,
            &Observed::from_source(&doc.source),
            req,
        ))),
    }
}

/// The outcome of one attempt.
pub(crate) enum Attempt {
    /// Every item is now held; these are the documents written or adopted.
    Granted(Vec<Taken>),
    /// Refused; nothing is held. `blocker` is the first refusal; `refusing` every item that
    /// refused, where the request may register as a waiter.
    Refused {
        blocker: Blocker,
        refusing: Vec<LockItem>,
    },
}

impl Attempt {
    fn refused(blocker: Blocker) -> Attempt {
        Attempt::Refused {
            blocker,
            refusing: Vec::new(),
        }
    }
}

/// Makes one attempt at `items` (none of which the client holds yet). Never waits.
pub(crate) async fn attempt(
    calls: &mut Calls<'_>,
    items: &[LockItem],
    req: &Request<'_>,
) -> Result<Attempt> {
    let owner = req.owner;
    let mut taken: Vec<Taken> = Vec::with_capacity(items.len());
    let mut pending: Vec<&LockItem> = items.iter().collect();
    let mut read = items.iter().any(|i| i.mode != LockMode::Exclusive);
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
        let mut first_blocker = None;
        let mut refusing = Vec::new();
        for item in &pending {
            match decide(item, current.get(&item.id), req) {
                Ok(Decision::Write(op, source)) => {
                    ops.push(op);
                    writing.push((*item, source));
                }
                Ok(Decision::Adopt(t)) => taken.push(t),
                Ok(Decision::Refused(b)) => {
                    first_blocker.get_or_insert(b);
                    refusing.push((*item).clone());
                }
                Err(e) => return undo_then(calls, taken, owner, Err(e)).await,
            }
        }
        if let Some(blocker) = first_blocker {
            let refused = Attempt::Refused { blocker, refusing };
            return undo_then(calls, taken, owner, Ok(refused)).await;
        }
        if ops.is_empty() {
            return Ok(Attempt::Granted(taken));
        }
        let results = match calls.bulk(ops).await {
            Ok(results) => results,
            Err(e) => {
                // The request's fate is unknown: what of it landed is ours, and is given back
                // with the rest (read first: our writes were conditional on what we read).
                let unknown = writing
                    .into_iter()
                    .map(|(item, source)| Taken {
                        item: item.clone(),
                        version: Version {
                            seq_no: 0,
                            primary_term: 0,
                        },
                        source,
                    })
                    .collect();
                match read_ours(calls, unknown, owner).await {
                    Ok((ours, _)) => taken.extend(ours),
                    Err(read) => {
                        tracing::warn!(error = %read, "could not read back a lock attempt whose outcome is unknown; leases will expire what it took");
                    }
                }
                return undo_then(calls, taken, owner, Err(e)).await;
            }
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
        waiter: false,
        expired_ms_ago: None,
    };
    // The last round's writes that conflicted or whose fate is unknown: what of them is ours
    // is given back too.
    let last: Vec<Taken> = pending
        .into_iter()
        .map(|item| Taken {
            item: item.clone(),
            version: Version {
                seq_no: 0,
                primary_term: 0,
            },
            source: Value::Null,
        })
        .collect();
    match read_ours(calls, last, owner).await {
        Ok((ours, _)) => taken.extend(ours),
        Err(e) => {
            tracing::warn!(error = %e, "could not read back a contended lock attempt; leases will expire what it took");
        }
    }
    undo_then(calls, taken, owner, Ok(Attempt::refused(b))).await
}

/// Registers the request as a waiter on the documents of `items` (fair waiting), or renews its
/// registration there: an `mget` and a conditional `bulk`, again at once for the documents
/// that changed in between (a busy ancestor changes all the time, and a request that cannot
/// get its registration in is the one that starves), a bounded number of rounds. A document
/// that is gone is skipped: the next attempt is likely granted there. Returns the ids where
/// the request is now registered.
pub(crate) async fn register_waiter(
    calls: &mut Calls<'_>,
    items: &[LockItem],
    req: &Request<'_>,
    lease_ms: i64,
) -> Result<Vec<String>> {
    let mut registered = Vec::new();
    let mut pending: Vec<&LockItem> = items.iter().collect();
    for _ in 0..MAX_ROUNDS {
        if pending.is_empty() {
            break;
        }
        let ids: Vec<String> = pending.iter().map(|i| i.id.clone()).collect();
        let current = calls.mget(&ids).await?;
        let mut ops = Vec::new();
        let mut writing = Vec::new();
        for item in pending {
            let Some(doc) = current.get(&item.id) else {
                continue;
            };
            // Already registered with more than half a lease to run: nothing to write.
            let fresh_enough = Observed::from_source(&doc.source)
                .waiters()
                .get(&req.owner.process_id)
                .is_some_and(|w| w.since == req.since && w.expires_at - req.now > lease_ms / 2);
            if fresh_enough {
                registered.push(item.id.clone());
                continue;
            }
            let params = wait_params(item, req);
            if let Ok((ScriptOp::Index, source)) =
                run_locally(&lock_scripts::WAIT, &doc.source, &params)
            {
                ops.push(BulkOp::Index {
                    id: item.id.clone(),
                    source,
                    if_version: Some(doc.version),
                });
                writing.push(item);
            }
        }
        if ops.is_empty() {
            break;
        }
        let results = calls.bulk(ops).await?;
        let mut again = Vec::new();
        for (item, result) in writing.into_iter().zip(results) {
            match result {
                Ok(_) => registered.push(item.id.clone()),
                Err(e) if e.is_conflict() => again.push(item),
                Err(_) => {}
            }
        }
        pending = again;
    }
    Ok(registered)
}

/// Removes the request's waiter entries from `ids` (it gave up): read, then conditional
/// writes, a few rounds on conflicts. What is left expires with its lease.
pub(crate) async fn unregister_waiter(
    calls: &mut Calls<'_>,
    ids: &[String],
    owner: &Owner,
    now: i64,
) -> Result<()> {
    let mut pending = ids.to_vec();
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(20));
    for round in 0..MAX_ROUNDS {
        if pending.is_empty() {
            break;
        }
        if round > 0 {
            tokio::time::sleep(backoff.next_pause()).await;
        }
        let current = calls.mget(&pending).await?;
        let params = release_params(owner, now);
        let mut ops = Vec::new();
        let mut writing = Vec::new();
        for id in &pending {
            let Some(doc) = current.get(id) else { continue };
            match run_locally(&lock_scripts::UNWAIT, &doc.source, &params) {
                Ok((ScriptOp::Index, source)) => ops.push(BulkOp::Index {
                    id: id.clone(),
                    source,
                    if_version: Some(doc.version),
                }),
                Ok((ScriptOp::Delete, _)) => ops.push(BulkOp::Delete {
                    id: id.clone(),
                    if_version: Some(doc.version),
                }),
                _ => continue,
            }
            writing.push(id.clone());
        }
        if ops.is_empty() {
            break;
        }
        let results = calls.bulk(ops).await?;
        pending = writing
            .into_iter()
            .zip(results)
            .filter(|(_, r)| r.as_ref().is_err_and(|e| e.is_conflict()))
            .map(|(id, _)| id)
            .collect();
    }
    Ok(())
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
    /// Why the write to make before the release did not land, if it did not: then nothing
    /// was released (see [`crate::LockGuard::release_after`]).
    pub(crate) first_failed: Option<StoreError>,
}

/// Orders locks for release: the targets (S, X) before the intention locks, deepest first
/// within each, so that no ancestor becomes free while a lock below it is still held.
pub(crate) fn release_order(taken: &mut [Taken]) {
    taken.sort_by_key(|t| {
        let depth = t.item.path.as_ref().map_or(0, FsPath::depth);
        (
            t.item.mode.is_intention(),
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
        let (ours, lost) = read_ours(calls, busy, owner).await?;
        released
            .lost
            .extend(lost.into_iter().map(|(_, label)| label));
        pending.extend(ours);
    }
    // Items sent in a request whose fate is unknown (a connection cut after it was sent, or
    // an item answered 504): if we then find the lock gone, or someone else's, it is our own
    // release that landed (and whoever took the lock took it after it), not a loss. As in
    // the scripted release (`scripted.rs`).
    let mut unknown: HashSet<String> = HashSet::new();
    let mut rounds = 0u32;
    while !pending.is_empty() {
        rounds += 1;
        release_order(&mut pending);
        let now = calls.now;
        let ops: Vec<BulkOp> = pending.iter().map(|t| release_op(t, owner, now)).collect();
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
                // Gone: no longer ours.
                Err(StoreError::NotFound { .. })
                | Err(StoreError::Conflict { exists: false, .. }) => {
                    if !unknown.contains(&t.item.id) {
                        released.lost.push(t.item.label())
                    }
                }
                // Changed since we wrote it (a waiter registered, another holder came or
                // went, or someone took it over): read it again and see.
                Err(e) if e.is_conflict() || e.is_retryable() => {
                    if e.is_retryable() {
                        unknown.insert(t.item.id.clone());
                    }
                    again.push(t)
                }
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
            let (ours, lost) = read_ours(calls, again, owner).await?;
            released.lost.extend(
                lost.into_iter()
                    .filter(|(id, _)| !unknown.contains(id))
                    .map(|(_, label)| label),
            );
            pending = ours;
        }
    }
    Ok(released)
}

/// Returns true for a lock on a document that others shared, or waited on, when we last
/// wrote it: it has most likely changed since.
fn shared_with_others(t: &Taken, owner: &Owner) -> bool {
    let observed = Observed::from_source(&t.source);
    !observed.waiters().is_empty()
        || observed.foreign_shares() > 0
        || match &observed {
            Observed::Group { holders, .. } => holders.keys().any(|pid| *pid != owner.process_id),
            Observed::Exclusive { .. } => false,
        }
}

/// Reads `items` afresh and returns those still ours, with the version and source read, and
/// the ids and labels of exclusive locks now someone else's (taken over after our lease
/// expired, or after a release of ours whose answer was lost). The others are gone (a
/// retried delete that landed, or a share reaped after it expired).
async fn read_ours(
    calls: &mut Calls<'_>,
    items: Vec<Taken>,
    owner: &Owner,
) -> Result<(Vec<Taken>, Vec<(String, String)>)> {
    let ids: Vec<String> = items.iter().map(|t| t.item.id.clone()).collect();
    let mut fresh = calls.mget(&ids).await?;
    let mut ours = Vec::with_capacity(items.len());
    let mut lost = Vec::new();
    for mut t in items {
        match fresh.remove(&t.item.id) {
            Some(doc) if Observed::from_source(&doc.source).is_held_by(&owner.process_id) => {
                t.version = doc.version;
                t.source = doc.source;
                ours.push(t);
            }
            Some(_) if t.item.mode == LockMode::Exclusive => {
                lost.push((t.item.id.clone(), t.item.label()))
            }
            _ => {}
        }
    }
    Ok((ours, lost))
}

fn transient_unknown() -> StoreError {
    StoreError::Transient {
        context: "release".to_owned(),
        message: "outcome unknown".to_owned(),
    }
}

/// The write that gives `t` back: the release script's twin run on what we last read or
/// wrote, conditional on that version.
fn release_op(t: &Taken, owner: &Owner, now: i64) -> BulkOp {
    let id = t.item.id.clone();
    let if_version = Some(t.version);
    match run_locally(
        &lock_scripts::RELEASE,
        &t.source,
        &release_params(owner, now),
    ) {
        Ok((ScriptOp::Index, source)) => BulkOp::Index {
            id,
            source,
            if_version,
        },
        // Delete, or (not ours by what we know, or unreadable) a delete conditional on the
        // version we wrote, which fails harmlessly if anything changed.
        _ => BulkOp::Delete { id, if_version },
    }
}
