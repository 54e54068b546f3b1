//! The compare-and-set release: conditional writes of the release script's twin, read again
//! and resent while the documents keep changing.

use std::collections::HashSet;
use std::time::Duration;

use fs_model::lock_scripts::{self, ScriptOp};
use fs_store::{BulkItemResult, BulkOp, StoreError};

use crate::backoff::Backoff;
use crate::calls::Calls;
use crate::error::{LockError, Result};
use crate::lock_doc::{Observed, Owner};
use crate::outcome::{Released, Taken};
use crate::script_params::{release_params, run_locally};
use fs_model::LockMode;

/// The shortest time a contended release keeps trying. A release that gives up strands locks
/// until their leases expire, so it persists, backing off (jittered, exponential) between
/// contended rounds so that a stream of acquirers cannot starve it.
pub(super) const MIN_RELEASE_PATIENCE: Duration = Duration::from_secs(5);

/// Releases `taken` in one bulk request (more only when shared documents changed under us),
/// trying for `patience` (at least [`MIN_RELEASE_PATIENCE`]) when they keep changing.
///
/// A share is removed with a write conditional on the version read, so between reading a
/// shared document and writing it back nothing may wait: after a refused round the backoff
/// comes first, then the fresh read, then the write. (Waiting between the read and the write
/// made the write all but sure to fail on a busy ancestor, and releases took hundreds of
/// milliseconds under 16 concurrent renames.) A share of a document that others shared when
/// we last wrote it has most likely changed since, so it is read before the first write too.
pub(super) async fn release(
    calls: &mut Calls<'_>,
    taken: Vec<Taken>,
    owner: &Owner,
    patience: Duration,
) -> Result<Released> {
    let deadline = tokio::time::Instant::now() + patience.max(MIN_RELEASE_PATIENCE);
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
    let mut released = Released::default();
    let (busy, quiet): (Vec<Taken>, Vec<Taken>) = taken
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
    // the scripted release.
    let mut unknown: HashSet<String> = HashSet::new();
    let mut rounds = 0u32;
    while !pending.is_empty() {
        rounds += 1;
        pending.sort_by_key(Taken::release_key);
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
        let again = sort_answers(pending, results, &mut unknown, &mut released)?;
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

/// Sorts the answers to one release round: a lock found gone is lost (unless an earlier send
/// of ours whose fate is unknown removed it, in `unknown`); the locks to read again and
/// resend are returned.
fn sort_answers(
    sent: Vec<Taken>,
    results: Vec<BulkItemResult>,
    unknown: &mut HashSet<String>,
    released: &mut Released,
) -> Result<Vec<Taken>> {
    let mut again = Vec::new();
    for (t, result) in sent.into_iter().zip(results) {
        match result {
            Ok(_) => {}
            // Gone: no longer ours.
            Err(StoreError::NotFound { .. }) | Err(StoreError::Conflict { exists: false, .. }) => {
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
    Ok(again)
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
pub(super) async fn read_ours(
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
