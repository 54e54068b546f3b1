//! One scripted attempt: the acquire script sent for every item in one `bulk`, the items
//! that lost a race sent again, what was taken given back unless all was granted.

use std::time::Duration;

use fs_model::lock_scripts::UPGRADE_REFUSAL;
use fs_store::{ScriptedUpdate, StoreError, UpdateItemResult};

use super::release::release;
use super::{RACE_ROUNDS, UNKNOWN};
use crate::backoff::Backoff;
use crate::calls::Calls;
use crate::error::{Blocker, LockError, Result};
use crate::lock_doc::{Observed, Owner};
use crate::outcome::{Attempt, Taken};
use crate::plan::LockItem;
use crate::script_params::{acquire_params, fresh_source, Request, ACQUIRE};

/// Returns the update items that acquire `req.items`, in order.
fn acquire_items(req: &Request<'_>) -> Vec<ScriptedUpdate> {
    req.items
        .iter()
        .map(|item| ScriptedUpdate {
            id: item.id.clone(),
            script: ACQUIRE.to_owned(),
            params: acquire_params(item, req),
            upsert: Some(fresh_source(item, req.owner, req.now, req.expires_at)),
        })
        .collect()
}

/// Item `i` of an attempt whose fate is unknown, to give back.
fn maybe_taken(items: &[LockItem], updates: &[ScriptedUpdate], i: usize) -> Taken {
    Taken::unknown(
        items[i].clone(),
        updates[i].upsert.clone().unwrap_or_default(),
    )
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

/// The answers to an attempt's updates so far.
#[derive(Default)]
struct Answers {
    /// What the attempt holds, or may hold (fate unknown).
    taken: Vec<Taken>,
    /// The items refused.
    refused: Vec<LockItem>,
    /// The first item that failed, and why.
    failure: Option<LockError>,
}

impl Answers {
    /// Sorts the `results` of sending the updates `sent` (indices into `items` and
    /// `updates`); returns the indices that lost a race, to send again unless this was the
    /// `last` round.
    fn sort(
        &mut self,
        (items, updates): (&[LockItem], &[ScriptedUpdate]),
        sent: &[usize],
        results: Vec<UpdateItemResult>,
        last: bool,
    ) -> Vec<usize> {
        let mut raced = Vec::new();
        for (i, result) in sent.iter().copied().zip(results) {
            match result {
                Ok(outcome) => self.taken.push(Taken {
                    item: items[i].clone(),
                    version: outcome.version.unwrap_or(UNKNOWN),
                    source: updates[i].upsert.clone().unwrap_or_default(),
                }),
                Err(StoreError::Refused { reason, .. }) if reason.contains(UPGRADE_REFUSAL) => {
                    self.failure.get_or_insert(LockError::Upgrade {
                        path: items[i].label(),
                    });
                }
                Err(e) if e.is_refusal() => self.refused.push(items[i].clone()),
                // Our scripts are safe to send again: a lock already ours in a covering mode
                // is left as it is.
                Err(e) if e.is_conflict() && !last => raced.push(i),
                // Still racing after every round: as busy as a refusal, and as harmless.
                Err(e) if e.is_conflict() => self.refused.push(items[i].clone()),
                Err(e) => {
                    if e.is_retryable() {
                        // Its fate is unknown: given back with the rest.
                        self.taken.push(maybe_taken(items, updates, i));
                    }
                    let context = format!("taking the lock on `{}`", items[i].label());
                    self.failure.get_or_insert(LockError::store(context)(e));
                }
            }
        }
        raced
    }
}

/// Makes one scripted attempt at `req.items`. Never waits for a holder; resends items that lost a
/// race with another update of the same document.
pub(super) async fn send_acquire(calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Attempt> {
    let (lease, owner, items) = (calls.lease, req.owner, req.items);
    let updates = acquire_items(req);
    let mut answers = Answers::default();
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
                let mut taken = answers.taken;
                taken.extend(pending.iter().map(|&i| maybe_taken(items, &updates, i)));
                undo(calls, taken, owner, lease).await;
                return Err(e);
            }
        };
        let last = round + 1 == RACE_ROUNDS;
        let raced = answers.sort((items, &updates), &pending, results, last);
        calls.races += u32::try_from(raced.len()).unwrap_or(u32::MAX);
        if raced.is_empty() || !answers.refused.is_empty() || answers.failure.is_some() {
            break;
        }
        tracing::debug!(
            items = raced.len(),
            "scripted lock updates lost a race; sending them again"
        );
        tokio::time::sleep(backoff.next_pause()).await;
        pending = raced;
    }
    let Answers {
        mut taken,
        refused,
        failure,
    } = answers;
    if refused.is_empty() && failure.is_none() {
        // Plan order, as the caller expects.
        taken.sort_by_key(|t| items.iter().position(|i| i.id == t.item.id));
        return Ok(Attempt::Granted(taken));
    }
    undo(calls, taken, owner, lease).await;
    if let Some(e) = failure {
        return Err(e);
    }
    let Some(item) = refused.first().cloned() else {
        return Err(unreachable_state());
    };
    // Name the holder: one read, only when refused.
    let blocker = match calls.get(&item.id).await? {
        Some(doc) => req.blocker(&item, &Observed::from_source(&doc.source)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock_doc::{exclusive_source, shared_with};
    use crate::plan::TreeLockRequest;
    use fs_model::FsPath;
    use fs_model::LockMode;

    fn owner() -> Owner {
        Owner {
            process_id: "p1".into(),
            holder: "job".into(),
            job: Some("journal-1".into()),
            os_process: None,
        }
    }

    #[test]
    fn both_protocols_create_the_same_documents() {
        let path = FsPath::parse("/clinton/projects/README.txt").expect("path");
        let items = TreeLockRequest::path(&path).items().expect("items");
        let owner = owner();
        let req = Request {
            owner: &owner,
            items: &items,
            now: 10,
            expires_at: 40,
            waiter_expires_at: 20,
            since: 10,
            queue: true,
        };
        let updates = acquire_items(&req);
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
}
