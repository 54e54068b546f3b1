//! What both protocols send to the lock logic: the request's context, the stored scripts and
//! the params of each, and the script's Rust twin run locally (the compare-and-set protocol
//! runs it on the document it read, then writes the result conditionally).

use fs_model::lock_scripts::{self, LockScript, ScriptError, ScriptOp};
use serde_json::{json, Value};

use crate::error::Blocker;
use crate::lock_doc::{exclusive_source, shared_with, HolderEntry, Observed, Owner, WaiterEntry};
use crate::plan::LockItem;
use fs_model::LockMode;

/// The stored scripts. Their painless sources sit in [`fs_model::lock_scripts`], each beside
/// the same logic in Rust (which stores and test servers without painless run instead).
/// `Debug.explain` is how painless says the book's `assert false` (the update fails with
/// `painless_explain_error`, which the caller reads as a refusal, never as a race).
pub(crate) const SCRIPTS: [LockScript; 5] = lock_scripts::LOCK_SCRIPTS;

pub(crate) const ACQUIRE: &str = lock_scripts::ACQUIRE.id;
pub(crate) const RELEASE: &str = lock_scripts::RELEASE.id;
pub(crate) const RENEW: &str = lock_scripts::RENEW.id;
pub(crate) const WAIT: &str = lock_scripts::WAIT.id;
pub(crate) const UNWAIT: &str = lock_scripts::UNWAIT.id;

/// One acquisition's context: who asks for what, when, and its place in the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) owner: &'a Owner,
    /// The lock items asked for, in plan order (none of them held by the client yet).
    pub(crate) items: &'a [LockItem],
    /// This attempt's time, epoch milliseconds by the lease clock.
    pub(crate) now: i64,
    /// Where a lease granted now ends.
    pub(crate) expires_at: i64,
    /// Where a waiter registration made now ends (a shorter lease, renewed by every attempt).
    pub(crate) waiter_expires_at: i64,
    /// The request's age: when its first attempt started. Older requests go first.
    pub(crate) since: i64,
    /// Whether older waiters count: false for a client that already holds locks (it may hold
    /// what they wait for, so queueing it behind them could deadlock).
    pub(crate) queue: bool,
}

impl Request<'_> {
    /// Returns the blocker that refused `item` for this request, as the document says.
    pub(crate) fn blocker(&self, item: &LockItem, observed: &Observed) -> Blocker {
        match observed.conflict(
            &self.owner.process_id,
            item.mode,
            self.since,
            self.now,
            self.queue,
        ) {
            Some(conflict) => Blocker::from_conflict((item.label(), &item.id), &conflict, self.now),
            None => Blocker {
                path: item.label(),
                id: item.id.clone(),
                lock_type: observed.mode().to_string(),
                holders: observed.describe_holders(),
                waiter: false,
                expired_ms_ago: None,
                processes: None,
            },
        }
    }
}

/// Returns the document that creates `item` for the request where none exists (the upsert).
pub(crate) fn fresh_source(item: &LockItem, owner: &Owner, now: i64, expires_at: i64) -> Value {
    match (item.mode, &item.path) {
        (LockMode::Exclusive, _) | (_, None) => {
            exclusive_source(owner, item.path.as_ref(), now, expires_at)
        }
        (mode, Some(path)) => shared_with(None, owner, path, mode, (now, expires_at)),
    }
}

/// The params of the acquire script for `item`.
pub(crate) fn acquire_params(item: &LockItem, req: &Request<'_>) -> Value {
    // Global and document locks have no path and are exclusive whatever was asked.
    let mode = if item.path.is_none() {
        LockMode::Exclusive
    } else {
        item.mode
    };
    let entry = HolderEntry::of(req.owner, mode, req.now, req.expires_at);
    json!({
        "process_id": req.owner.process_id,
        "mode": mode.as_str(),
        "entry": entry,
        "exclusive": exclusive_source(req.owner, item.path.as_ref(), req.now, req.expires_at),
        "path": item.path.as_ref().map(|p| p.as_str()),
        "since": req.since,
        "now": req.now,
        "queue": req.queue,
    })
}

/// The params of the release script.
pub(crate) fn release_params(owner: &Owner, now: i64) -> Value {
    json!({ "process_id": owner.process_id, "now": now })
}

/// The params of the renew script.
pub(crate) fn renew_params(owner: &Owner, expires_at: i64) -> Value {
    json!({ "process_id": owner.process_id, "expires_at": expires_at })
}

/// The params of the wait script: `item`'s waiter entry for the request.
pub(crate) fn wait_params(item: &LockItem, req: &Request<'_>) -> Value {
    let entry = WaiterEntry {
        mode: item.mode,
        since: req.since,
        expires_at: req.waiter_expires_at,
        holder: req.owner.holder.clone(),
        job: req.owner.job.clone(),
    };
    json!({ "process_id": req.owner.process_id, "entry": entry, "now": req.now })
}

/// Runs `script`'s Rust twin on a copy of `source`: the operation and the new source.
pub(crate) fn run_locally(
    script: &LockScript,
    source: &Value,
    params: &Value,
) -> Result<(ScriptOp, Value), ScriptError> {
    let mut fields = match source {
        Value::Object(fields) => fields.clone(),
        // Not an object: painless would see no fields at all.
        _ => serde_json::Map::new(),
    };
    let op = script.run(&mut fields, params)?;
    Ok((op, Value::Object(fields)))
}
