//! The scripted protocol: the book's painless scripts, one bulk request per acquisition.
//!
//! Acquire: one `bulk` of `update` items in plan order, each with a stored script and an
//! upsert document (the same document the compare-and-set protocol would create). A script
//! that refuses fails its item; the attempt then reads the refusing document to name its
//! holder, undoes what it took, and is refused. Release and renewal are one `bulk` each, and
//! their scripts can be sent again safely: a second release finds nothing of ours and does
//! nothing.

use std::time::Duration;

use async_trait::async_trait;
use fs_model::lock_scripts::UPGRADE_REFUSAL;
use fs_store::{
    Chained, DocStore, ScriptedUpdate, StoreError, UpdateItemResult, UpdateResult, Version,
};

use super::{write_first, Protocol, Renewal};
use crate::backoff::Backoff;
use crate::calls::{self, Calls};
use crate::error::{Blocker, LockError, Result};
use crate::lock_doc::{Observed, Owner};
use crate::outcome::{Attempt, FirstWrite, Released, Taken};
use crate::plan::LockItem;
use crate::script_params::{
    acquire_params, fresh_source, release_params, renew_params, wait_params, Request, ACQUIRE,
    RELEASE, RENEW, UNWAIT, WAIT,
};

/// The scripted protocol.
pub(crate) struct Scripted;

#[async_trait]
impl Protocol for Scripted {
    async fn attempt(
        &self,
        calls: &mut Calls<'_>,
        items: &[LockItem],
        req: &Request<'_>,
        lease: Duration,
    ) -> Result<Attempt> {
        attempt(calls, items, req, lease).await
    }

    async fn register_waiter(
        &self,
        calls: &mut Calls<'_>,
        items: &[LockItem],
        req: &Request<'_>,
        _waiter_lease: Duration,
    ) -> Result<Vec<String>> {
        register_waiter(calls, items, req).await
    }

    async fn unregister_waiter(
        &self,
        calls: &mut Calls<'_>,
        ids: &[String],
        owner: &Owner,
    ) -> Result<()> {
        unregister_waiter(calls, ids, owner).await
    }

    async fn release(
        &self,
        calls: &mut Calls<'_>,
        taken: Vec<Taken>,
        owner: &Owner,
        patience: Duration,
        first: Option<FirstWrite>,
    ) -> Result<Released> {
        // Where the store chains them, `first` and the release go in one transaction.
        if first.is_some() && !taken.is_empty() && calls.chains() {
            return release(calls, taken, owner, patience, first).await;
        }
        if let Some(why) = write_first(calls, first).await? {
            return Ok(Released::first_failed(why));
        }
        release(calls, taken, owner, patience, None).await
    }

    async fn renew(
        &self,
        calls: &mut Calls<'_>,
        ids: &[String],
        owner: &Owner,
        expires_at: i64,
    ) -> Result<Vec<Renewal>> {
        renew(calls, ids, owner, expires_at).await
    }

    fn chains_release(&self, store: &dyn DocStore) -> bool {
        calls::chains(store)
    }
}

/// Versions are not needed to release or renew by script; this stands in for them.
const UNKNOWN: Version = Version {
    seq_no: -1,
    primary_term: -1,
};

/// Returns the update items that acquire `items`, in order.
fn acquire_items(items: &[LockItem], req: &Request<'_>) -> Vec<ScriptedUpdate> {
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
fn release_items(taken: &[Taken], owner: &Owner, now: i64) -> Vec<ScriptedUpdate> {
    let mut ordered: Vec<&Taken> = taken.iter().collect();
    ordered.sort_by_key(|t| t.release_key());
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
fn renew_items(ids: &[String], owner: &Owner, expires_at: i64) -> Vec<ScriptedUpdate> {
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
async fn register_waiter(
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

/// Removes the request's waiter entries from `ids`.
async fn unregister_waiter(calls: &mut Calls<'_>, ids: &[String], owner: &Owner) -> Result<()> {
    let now = calls.now;
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

/// Makes one scripted attempt at `items`. Never waits for a holder; resends items that lost a
/// race with another update of the same document.
async fn attempt(
    calls: &mut Calls<'_>,
    items: &[LockItem],
    req: &Request<'_>,
    lease: Duration,
) -> Result<Attempt> {
    let owner = req.owner;
    let updates = acquire_items(items, req);
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

/// Releases `taken` in one scripted bulk request, sending it again on transient failures.
/// With `first`, the first request makes that write too, before the updates and in the same
/// transaction ([`Calls::bulk_update_after`]); if it does not land, nothing is released.
async fn release(
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
        let sent = match send(calls, batch, &mut first).await {
            Ok(Ok(results)) => Ok(results),
            Ok(Err(why)) => return Ok(Released::first_failed(why)),
            Err(e) => Err(e),
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
        let gone_ok = |i: usize| unknown[i];
        let sorted = sort_answers(&pending, results, &labels, gone_ok, deadline)?;
        released.lost.extend(sorted.lost);
        calls.races += sorted.races;
        for &i in &sorted.unknown {
            unknown[i] = true;
        }
        let again = sorted.again;
        if !again.is_empty() {
            tokio::time::sleep(backoff.next_pause()).await;
        }
        pending = again;
    }
    Ok(released)
}

/// Renews `ids` by the renew script, in one `bulk`.
async fn renew(
    calls: &mut Calls<'_>,
    ids: &[String],
    owner: &Owner,
    expires_at: i64,
) -> Result<Vec<Renewal>> {
    let results = calls
        .bulk_update(renew_items(ids, owner, expires_at))
        .await?;
    let mut renewals = Vec::with_capacity(ids.len());
    for (id, result) in ids.iter().zip(results) {
        match result {
            Ok(_) => renewals.push(Renewal::Renewed {
                id: id.clone(),
                written: None,
            }),
            // The script said the lock is no longer ours, or the document is gone. A 409 is
            // only a race with another holder's update: the next round renews it.
            Err(e) if e.is_refusal() || e.is_not_found() => {
                renewals.push(Renewal::Lost { id: id.clone() })
            }
            Err(e) if e.is_conflict() => {
                tracing::debug!(lock = %id, "a renewal lost a race; the next round renews it")
            }
            Err(e) => tracing::warn!(lock = %id, error = %e, "renewing a lock failed"),
        }
    }
    Ok(renewals)
}

/// Sends `batch`, after `first` if it is still to be made (then in one transaction: a
/// failed request changed nothing, and is sent whole again). `first` is spent once it landed;
/// `Ok(Err(why))` if it did not land, and nothing else ran.
async fn send(
    calls: &mut Calls<'_>,
    batch: Vec<ScriptedUpdate>,
    first: &mut Option<FirstWrite>,
) -> Result<std::result::Result<Vec<UpdateItemResult>, StoreError>> {
    match first.clone() {
        Some(write) => match calls.bulk_update_after(write, batch).await? {
            Chained::Ran(_, results) => {
                *first = None;
                Ok(Ok(results))
            }
            Chained::FirstFailed(why) => Ok(Err(why)),
        },
        None => Ok(Ok(calls.bulk_update(batch).await?)),
    }
}

/// The answers to one round of a scripted release, sorted.
struct ReleaseAnswers {
    /// The labels of locks found no longer ours.
    lost: Vec<String>,
    /// Items that lost a race.
    races: u32,
    /// Items whose fate is unknown (a transient failure).
    unknown: Vec<usize>,
    /// Items to send again.
    again: Vec<usize>,
}

/// Sorts the `results` of sending the release updates `sent` (indices into `labels`). An
/// entry found gone is a loss unless `gone_ok` (our own earlier send, whose fate was unknown,
/// removed it); races and transient failures are sent again until `deadline`.
fn sort_answers(
    sent: &[usize],
    results: Vec<UpdateItemResult>,
    labels: &[String],
    gone_ok: impl Fn(usize) -> bool,
    deadline: tokio::time::Instant,
) -> Result<ReleaseAnswers> {
    let mut sorted = ReleaseAnswers {
        lost: Vec::new(),
        races: 0,
        unknown: Vec::new(),
        again: Vec::new(),
    };
    for (&i, result) in sent.iter().zip(results) {
        match result {
            // Our entry is gone: our own earlier release, or a loss.
            Ok(o) if o.result == UpdateResult::Noop => {
                if !gone_ok(i) {
                    sorted.lost.push(labels[i].clone())
                }
            }
            Ok(_) => {}
            Err(StoreError::NotFound { .. }) => {
                if !gone_ok(i) {
                    sorted.lost.push(labels[i].clone())
                }
            }
            // A race with another update of the same document (two releases of one share,
            // say) is not a failure: our release script is safe to send again.
            Err(e)
                if (e.is_retryable() || e.is_conflict())
                    && tokio::time::Instant::now() < deadline =>
            {
                if e.is_conflict() {
                    sorted.races += 1;
                } else {
                    sorted.unknown.push(i);
                }
                sorted.again.push(i)
            }
            Err(e) => {
                return Err(LockError::store(format!(
                    "releasing the lock on `{}`",
                    labels[i]
                ))(e))
            }
        }
    }
    Ok(sorted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock_doc::{exclusive_source, shared_with};
    use crate::mode::LockMode;
    use crate::plan::TreeLockRequest;
    use fs_model::FsPath;
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
