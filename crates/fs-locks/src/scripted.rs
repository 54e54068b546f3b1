//! The scripted protocol: the book's painless scripts, one bulk request per acquisition.
//!
//! Acquire: one `bulk` of `update` items in plan order, each with a stored script and an
//! upsert document (the same document the compare-and-set protocol would create). A script
//! that refuses fails its item; the attempt then reads the refusing document to name its
//! holder, undoes what it took, and is refused. Release and renewal are one `bulk` each, and
//! their scripts can be sent again safely: a second release finds nothing of ours and does
//! nothing.

use std::time::Duration;

use fs_model::lock_scripts::UPGRADE_REFUSAL;
use fs_model::FsPath;
use fs_store::{Chained, ScriptedUpdate, StoreError, UpdateResult, Version};

use crate::backoff::Backoff;
use crate::engine::{Attempt, Calls, Released, Taken};
use crate::error::{Blocker, LockError, Result};
use crate::guard::FirstWrite;
use crate::lock_doc::{Observed, Owner};
use crate::plan::LockItem;
use crate::protocol::{ACQUIRE, RELEASE, RENEW, UNWAIT, WAIT};
use crate::script_params::{
    acquire_params, fresh_source, release_params, renew_params, wait_params, Request,
};

/// Versions are not needed to release or renew by script; this stands in for them.
const UNKNOWN: Version = Version {
    seq_no: -1,
    primary_term: -1,
};

/// Returns the update items that acquire `items`, in order.
pub(crate) fn acquire_items(items: &[LockItem], req: &Request<'_>) -> Vec<ScriptedUpdate> {
    items
        .iter()
        .map(|item| ScriptedUpdate {
            id: item.id.clone(),
            script: ACQUIRE.to_owned(),
            params: acquire_params(item, req),
            upsert: Some(fresh_source(item, req.owner, req.now, req.expires_at)),
        })
        .collect()
}

/// Returns the update items that release `taken`: the targets first, then deepest first.
pub(crate) fn release_items(taken: &[Taken], owner: &Owner, now: i64) -> Vec<ScriptedUpdate> {
    let mut ordered: Vec<&Taken> = taken.iter().collect();
    ordered.sort_by_key(|t| {
        let depth = t.item.path.as_ref().map_or(0, FsPath::depth);
        (
            t.item.mode.is_intention(),
            std::cmp::Reverse(depth),
            t.item.id.clone(),
        )
    });
    ordered
        .into_iter()
        .map(|t| ScriptedUpdate {
            id: t.item.id.clone(),
            script: RELEASE.to_owned(),
            params: release_params(owner, now),
            upsert: None,
        })
        .collect()
}

/// Returns the update items that renew `ids`.
pub(crate) fn renew_items(ids: &[String], owner: &Owner, expires_at: i64) -> Vec<ScriptedUpdate> {
    ids.iter()
        .map(|id| ScriptedUpdate {
            id: id.clone(),
            script: RENEW.to_owned(),
            params: renew_params(owner, expires_at),
            upsert: None,
        })
        .collect()
}

/// Registers the request as a waiter on `items` (no upsert: a document gone meanwhile has
/// nothing to wait for). Returns the ids where it is registered.
pub(crate) async fn register_waiter(
    calls: &mut Calls<'_>,
    items: &[LockItem],
    req: &Request<'_>,
) -> Result<Vec<String>> {
    let updates: Vec<ScriptedUpdate> = items
        .iter()
        .map(|item| ScriptedUpdate {
            id: item.id.clone(),
            script: WAIT.to_owned(),
            params: wait_params(item, req),
            upsert: None,
        })
        .collect();
    let results = calls.bulk_update(updates).await?;
    Ok(items
        .iter()
        .zip(results)
        .filter(|(_, r)| r.is_ok())
        .map(|(i, _)| i.id.clone())
        .collect())
}

/// Item `i` of an attempt whose fate is unknown, to give back.
fn maybe_taken(items: &[LockItem], updates: &[ScriptedUpdate], i: usize) -> Taken {
    Taken {
        item: items[i].clone(),
        version: UNKNOWN,
        source: updates[i].upsert.clone().unwrap_or_default(),
    }
}

/// Gives back what a failed or refused attempt took (or may have taken). A failure is logged:
/// the attempt's own outcome matters more, and leases expire what is left.
async fn undo(calls: &mut Calls<'_>, taken: Vec<Taken>, owner: &Owner, lease: Duration) {
    if taken.is_empty() {
        return;
    }
    if let Err(e) = release(calls, taken, owner, lease.min(Duration::from_secs(5)), None).await {
        tracing::warn!(error = %e, "could not undo a refused lock attempt; leases will expire it");
    }
}

/// Removes the request's waiter entries from `ids`.
pub(crate) async fn unregister_waiter(
    calls: &mut Calls<'_>,
    ids: &[String],
    owner: &Owner,
    now: i64,
) -> Result<()> {
    let updates = ids
        .iter()
        .map(|id| ScriptedUpdate {
            id: id.clone(),
            script: UNWAIT.to_owned(),
            params: release_params(owner, now),
            upsert: None,
        })
        .collect();
    calls.bulk_update(updates).await.map(|_| ())
}

/// How many rounds an attempt or a release resends the items that lost a race (a 409 from two
/// updates of one document at once, after the server's own `retry_on_conflict` ran out) before
/// an attempt counts as refused. A race is not a refusal: the document's state did not say no.
const RACE_ROUNDS: usize = 8;

/// Makes one scripted attempt at `items`. Never waits for a holder; resends items that lost a
/// race with another update of the same document.
pub(crate) async fn attempt(
    calls: &mut Calls<'_>,
    items: &[LockItem],
    req: &Request<'_>,
    lease: Duration,
) -> Result<Attempt> {
    let owner = req.owner;
    let updates = acquire_items(items, req);
    let mut taken = Vec::with_capacity(items.len());
    let mut refused: Vec<LockItem> = Vec::new();
    let mut failure = None;
    let mut pending: Vec<usize> = (0..items.len()).collect();
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(50));
    for round in 0..RACE_ROUNDS {
        let batch = pending.iter().map(|&i| updates[i].clone()).collect();
        let results = match calls.bulk_update(batch).await {
            Ok(results) => results,
            Err(e) => {
                // The request's fate is unknown (a connection cut after it was sent, say):
                // what it may have taken is given back with the rest, or it would stay held
                // until its lease ran out while this request waits, fails or tries again. A
                // release of a lock we do not hold changes nothing.
                taken.extend(pending.iter().map(|&i| maybe_taken(items, &updates, i)));
                undo(calls, taken, owner, lease).await;
                return Err(e);
            }
        };
        let mut raced = Vec::new();
        for (i, result) in pending.iter().copied().zip(results) {
            match result {
                Ok(outcome) => taken.push(Taken {
                    item: items[i].clone(),
                    version: outcome.version.unwrap_or(UNKNOWN),
                    source: updates[i].upsert.clone().unwrap_or_default(),
                }),
                Err(StoreError::Refused { reason, .. }) if reason.contains(UPGRADE_REFUSAL) => {
                    failure.get_or_insert((
                        items[i].clone(),
                        LockError::Upgrade {
                            path: items[i].label(),
                        },
                    ));
                }
                Err(e) if e.is_refusal() => refused.push(items[i].clone()),
                // Our scripts are safe to send again: a lock already ours in a covering mode
                // is left as it is.
                Err(e) if e.is_conflict() && round + 1 < RACE_ROUNDS => raced.push(i),
                // Still racing after every round: as busy as a refusal, and as harmless.
                Err(e) if e.is_conflict() => refused.push(items[i].clone()),
                Err(e) => {
                    if e.is_retryable() {
                        // Its fate is unknown: given back with the rest, as above.
                        taken.push(maybe_taken(items, &updates, i));
                    }
                    let context = format!("taking the lock on `{}`", items[i].label());
                    failure.get_or_insert((items[i].clone(), LockError::store(context)(e)));
                }
            }
        }
        calls.races += u32::try_from(raced.len()).unwrap_or(u32::MAX);
        if raced.is_empty() || !refused.is_empty() || failure.is_some() {
            break;
        }
        tracing::debug!(
            items = raced.len(),
            "scripted lock updates lost a race; sending them again"
        );
        tokio::time::sleep(backoff.next_pause()).await;
        pending = raced;
    }
    if refused.is_empty() && failure.is_none() {
        // Plan order, as the caller expects.
        taken.sort_by_key(|t| items.iter().position(|i| i.id == t.item.id));
        return Ok(Attempt::Granted(taken));
    }
    undo(calls, taken, owner, lease).await;
    if let Some((_, e)) = failure {
        return Err(e);
    }
    let Some(item) = refused.first().cloned() else {
        return Err(unreachable_state());
    };
    // Name the holder: one read, only when refused.
    let blocker = match calls.get(&item.id).await? {
        Some(doc) => crate::engine::blocker(&item, &Observed::from_source(&doc.source), req),
        None => Blocker::other(item.label(), "released", "a holder that has left since"),
    };
    Ok(Attempt::Refused {
        blocker,
        refusing: refused,
    })
}

fn unreachable_state() -> LockError {
    LockError::Store {
        context: "a scripted lock attempt".into(),
        cause: StoreError::Backend {
            context: "scripted".into(),
            message: "neither granted nor refused".into(),
        },
    }
}

/// Releases `taken` in one scripted bulk request, sending it again on transient failures.
/// With `first`, the first request makes that write too, before the updates and in the same
/// transaction ([`Calls::bulk_update_after`]); if it does not land, nothing is released.
pub(crate) async fn release(
    calls: &mut Calls<'_>,
    taken: Vec<Taken>,
    owner: &Owner,
    patience: Duration,
    mut first: Option<FirstWrite>,
) -> Result<Released> {
    let mut released = Released::default();
    if taken.is_empty() {
        return Ok(released);
    }
    let updates = release_items(&taken, owner, calls.now);
    let labels: Vec<String> = {
        let mut by_id: std::collections::HashMap<&str, String> = taken
            .iter()
            .map(|t| (t.item.id.as_str(), t.item.label()))
            .collect();
        updates
            .iter()
            .map(|u| by_id.remove(u.id.as_str()).unwrap_or_else(|| u.id.clone()))
            .collect()
    };
    let deadline = tokio::time::Instant::now() + patience;
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(500));
    let mut pending: Vec<usize> = (0..updates.len()).collect();
    // Items sent in a request whose fate is unknown (the connection cut after it was sent, say):
    // if a resend finds our entry gone, it is our own first release that landed, as a retried
    // delete is in the compare-and-set release.
    let mut unknown = vec![false; updates.len()];
    while !pending.is_empty() {
        let batch: Vec<ScriptedUpdate> = pending.iter().map(|&i| updates[i].clone()).collect();
        let sent = match first.clone() {
            // A failed request changed nothing (one transaction): it is sent whole again.
            Some(write) => match calls.bulk_update_after(write, batch).await {
                Ok(Chained::Ran(_, results)) => {
                    first = None;
                    Ok(results)
                }
                Ok(Chained::FirstFailed(why)) => {
                    released.first_failed = Some(why);
                    return Ok(released);
                }
                Err(e) => Err(e),
            },
            None => calls.bulk_update(batch).await,
        };
        let results = match sent {
            Ok(results) => results,
            Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                for &i in &pending {
                    unknown[i] = true;
                }
                tokio::time::sleep(backoff.next_pause()).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut again = Vec::new();
        for (i, result) in pending.into_iter().zip(results) {
            match result {
                // Our entry is gone: our own earlier release, or a loss.
                Ok(o) if o.result == UpdateResult::Noop => {
                    if !unknown[i] {
                        released.lost.push(labels[i].clone())
                    }
                }
                Ok(_) => {}
                Err(StoreError::NotFound { .. }) => {
                    if !unknown[i] {
                        released.lost.push(labels[i].clone())
                    }
                }
                // A race with another update of the same document (two releases of one share,
                // say) is not a failure: our release script is safe to send again.
                Err(e)
                    if (e.is_retryable() || e.is_conflict())
                        && tokio::time::Instant::now() < deadline =>
                {
                    if e.is_conflict() {
                        calls.races += 1;
                    } else {
                        unknown[i] = true;
                    }
                    again.push(i)
                }
                Err(e) => {
                    return Err(LockError::store(format!(
                        "releasing the lock on `{}`",
                        labels[i]
                    ))(e))
                }
            }
        }
        if !again.is_empty() {
            tokio::time::sleep(backoff.next_pause()).await;
        }
        pending = again;
    }
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock_doc::{exclusive_source, shared_with, LockMode};
    use crate::plan::TreeLockRequest;
    use serde_json::json;

    fn owner() -> Owner {
        Owner {
            process_id: "p1".into(),
            holder: "job".into(),
            job: Some("journal-1".into()),
        }
    }

    #[test]
    fn both_protocols_create_the_same_documents() {
        let path = FsPath::parse("/clinton/projects/README.txt").expect("path");
        let items = TreeLockRequest::path(&path).items().expect("items");
        let owner = owner();
        let req = Request {
            owner: &owner,
            now: 10,
            expires_at: 40,
            waiter_expires_at: 20,
            since: 10,
            queue: true,
        };
        let updates = acquire_items(&items, &req);
        assert_eq!(updates.len(), 3);
        let clinton = FsPath::parse("/clinton").expect("path");
        assert_eq!(
            updates[0].upsert,
            Some(shared_with(
                None,
                &owner,
                &clinton,
                LockMode::IntentExclusive,
                (10, 40)
            ))
        );
        assert_eq!(
            updates[2].upsert,
            Some(exclusive_source(&owner, Some(&path), 10, 40))
        );
        assert!(updates.iter().all(|u| u.script == ACQUIRE));
        assert_eq!(updates[0].params["entry"]["expires_at"], 40);
        assert_eq!(updates[0].params["mode"], "IX");
        assert_eq!(updates[2].params["mode"], "X");
    }

    #[test]
    fn release_goes_targets_first_then_deepest_first() {
        let path = FsPath::parse("/a/b/c").expect("path");
        let items = TreeLockRequest::path(&path).items().expect("items");
        let taken: Vec<Taken> = items
            .into_iter()
            .map(|item| Taken {
                item,
                version: UNKNOWN,
                source: json!({}),
            })
            .collect();
        let order: Vec<String> = release_items(&taken, &owner(), 0)
            .into_iter()
            .map(|u| u.id)
            .collect();
        assert_eq!(order, ["/a/b/c", "/a/b", "/a"]);
    }
}
