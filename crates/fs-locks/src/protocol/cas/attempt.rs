//! One compare-and-set attempt at a set of lock items (see the [module above](super)).

use std::collections::HashMap;

use fs_model::lock_scripts::{self, ScriptError, ScriptOp, UPGRADE_REFUSAL};
use fs_store::{BulkOp, StoredDoc};
use serde_json::Value;

use super::release::{read_ours, release, MIN_RELEASE_PATIENCE};
use super::written::{sort_written, MAX_ROUNDS};
use crate::calls::Calls;
use crate::error::{Blocker, LockError, Result};
use crate::lock_doc::{Observed, Owner};
use crate::outcome::{Attempt, Taken};
use crate::plan::LockItem;
use crate::script_params::{acquire_params, fresh_source, run_locally, Request};
use fs_model::LockMode;

/// How one item of an attempt is to be handled, given what the store holds.
enum Decision {
    Write(BulkOp, Value),
    Adopt(Taken),
    Refused(Blocker),
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
        Err(_) => Ok(Decision::Refused(
            req.blocker(item, &Observed::from_source(&doc.source)),
        )),
    }
}

/// How one read-and-write round of an attempt ended (an error: the attempt fails).
enum Round<'i> {
    /// Every item is held.
    Granted,
    /// Refused: the attempt is.
    Refused(Attempt),
    /// These items were written by someone else meanwhile, or their fate is unknown: read
    /// them again and decide afresh.
    Again(Vec<&'i LockItem>),
}

/// Makes one attempt at `req.items` (none of which the client holds yet). Never waits.
pub(super) async fn read_decide_write(calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Attempt> {
    let (owner, items) = (req.owner, req.items);
    let mut taken: Vec<Taken> = Vec::with_capacity(items.len());
    let mut pending: Vec<&LockItem> = items.iter().collect();
    let mut read = items.iter().any(|i| i.mode != LockMode::Exclusive);
    for _ in 0..MAX_ROUNDS {
        match round(calls, &pending, read, req, &mut taken).await {
            Ok(Round::Granted) => return Ok(Attempt::Granted(taken)),
            Ok(Round::Refused(refused)) => {
                return undo_then(calls, taken, owner, Ok(refused)).await
            }
            Ok(Round::Again(again)) => {
                pending = again;
                read = true;
            }
            Err(e) => return undo_then(calls, taken, owner, Err(e)).await,
        }
    }
    let contended = pending.first().map(|i| i.label()).unwrap_or_default();
    let b = Blocker::other(
        contended,
        "contended",
        format!("writers that changed it in each of {MAX_ROUNDS} rounds"),
    );
    // The last round's writes that conflicted or whose fate is unknown: what of them is ours
    // is given back too.
    let last: Vec<Taken> = pending
        .into_iter()
        .map(|item| Taken::unknown(item.clone(), Value::Null))
        .collect();
    match read_ours(calls, last, owner).await {
        Ok((ours, _)) => taken.extend(ours),
        Err(e) => {
            tracing::warn!(error = %e, "could not read back a contended lock attempt; leases will expire what it took");
        }
    }
    undo_then(calls, taken, owner, Ok(Attempt::refused(b))).await
}

/// One round: reads `pending` (if `read`), decides each, writes what can be taken. What it
/// took goes to `taken`, also when it fails (the caller gives it back).
async fn round<'i>(
    calls: &mut Calls<'_>,
    pending: &[&'i LockItem],
    read: bool,
    req: &Request<'_>,
    taken: &mut Vec<Taken>,
) -> Result<Round<'i>> {
    let current = if read {
        let ids: Vec<String> = pending.iter().map(|i| i.id.clone()).collect();
        calls.mget(&ids).await?
    } else {
        HashMap::new()
    };
    let mut ops = Vec::new();
    let mut writing = Vec::new();
    let mut first_blocker = None;
    let mut refusing = Vec::new();
    for &item in pending {
        match decide(item, current.get(&item.id), req)? {
            Decision::Write(op, source) => {
                ops.push(op);
                writing.push((item, source));
            }
            Decision::Adopt(t) => taken.push(t),
            Decision::Refused(b) => {
                first_blocker.get_or_insert(b);
                refusing.push(item.clone());
            }
        }
    }
    if let Some(blocker) = first_blocker {
        return Ok(Round::Refused(Attempt::Refused { blocker, refusing }));
    }
    if ops.is_empty() {
        return Ok(Round::Granted);
    }
    let results = match calls.bulk(ops).await {
        Ok(results) => results,
        Err(e) => {
            // The request's fate is unknown: what of it landed is ours, and is given back
            // with the rest (read first: our writes were conditional on what we read).
            let unknown = writing
                .into_iter()
                .map(|(item, source)| Taken::unknown(item.clone(), source))
                .collect();
            match read_ours(calls, unknown, req.owner).await {
                Ok((ours, _)) => taken.extend(ours),
                Err(read) => {
                    tracing::warn!(error = %read, "could not read back a lock attempt whose outcome is unknown; leases will expire what it took");
                }
            }
            return Err(e);
        }
    };
    let written = sort_written(writing, results, "taking");
    taken.extend(written.taken);
    if let Some(e) = written.failed {
        return Err(e);
    }
    if written.again.is_empty() {
        return Ok(Round::Granted);
    }
    Ok(Round::Again(
        written.again.into_iter().map(|(item, _)| item).collect(),
    ))
}

/// Releases what a failed attempt took, then returns `outcome`. A failure to undo is logged,
/// not returned: the attempt's own outcome matters more, and leases expire what is left.
async fn undo_then(
    calls: &mut Calls<'_>,
    taken: Vec<Taken>,
    owner: &Owner,
    outcome: Result<Attempt>,
) -> Result<Attempt> {
    give_back(calls, taken, owner).await;
    outcome
}

/// Releases what an attempt took before it failed or was refused. A failure is logged: leases
/// expire what is left.
async fn give_back(calls: &mut Calls<'_>, taken: Vec<Taken>, owner: &Owner) {
    if !taken.is_empty() {
        if let Err(e) = release(calls, taken, owner, MIN_RELEASE_PATIENCE).await {
            tracing::warn!(error = %e, "could not undo a refused lock attempt; leases will expire it");
        }
    }
}

/// What one `bulk` of plain creates left ([`create_missing`]).
pub(crate) struct Created {
    /// The items whose document it created: now held.
    pub(crate) taken: Vec<Taken>,
    /// The items whose document exists already (or whose create's fate is unknown): they need
    /// the protocol's read-modify-write.
    pub(crate) existing: Vec<LockItem>,
}

/// Creates the lock document of every item of `req` in one `bulk` of `_create`s, with the
/// source a grant writes on a missing document: the document either protocol writes there
/// (compare-and-set's create, the scripted upsert), so it takes no decision between them.
/// A document that exists already answers 409 and is left for the caller to read.
///
/// # Errors
/// The request failed, or an item failed for good; what it created is given back first.
pub(crate) async fn create_missing(calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Created> {
    let mut ops = Vec::with_capacity(req.items.len());
    let mut writing = Vec::with_capacity(req.items.len());
    for item in req.items {
        let source = fresh_source(item, req.owner, req.now, req.expires_at);
        ops.push(BulkOp::Create {
            id: item.id.clone(),
            source: source.clone(),
        });
        writing.push((item, source));
    }
    let results = match calls.bulk(ops).await {
        Ok(results) => results,
        Err(e) => {
            // As in a round: what of the request landed is ours, and is given back.
            let unknown = writing
                .into_iter()
                .map(|(item, source)| Taken::unknown(item.clone(), source))
                .collect();
            let taken = match read_ours(calls, unknown, req.owner).await {
                Ok((ours, _)) => ours,
                Err(read) => {
                    tracing::warn!(error = %read, "could not read back a lock attempt whose outcome is unknown; leases will expire what it took");
                    Vec::new()
                }
            };
            give_back(calls, taken, req.owner).await;
            return Err(e);
        }
    };
    let written = sort_written(writing, results, "taking");
    if let Some(e) = written.failed {
        give_back(calls, written.taken, req.owner).await;
        return Err(e);
    }
    Ok(Created {
        taken: written.taken,
        existing: written
            .again
            .into_iter()
            .map(|(item, _)| item.clone())
            .collect(),
    })
}
