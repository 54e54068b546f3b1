//! The scripted release: the release script sent for every lock in one `bulk` (after the
//! write it depends on, in the same transaction where the store chains them), sent again on
//! races and transient failures.

use std::collections::HashMap;
use std::time::Duration;

use fs_store::{Chained, ScriptedUpdate, StoreError, UpdateItemResult, UpdateResult};

use crate::backoff::Backoff;
use crate::calls::Calls;
use crate::error::{LockError, Result};
use crate::lock_doc::Owner;
use crate::outcome::{FirstWrite, Released, Taken};
use crate::script_params::{release_params, RELEASE};

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

/// Releases `taken` in one scripted bulk request, sending it again on transient failures.
/// With `first`, the first request makes that write too, before the updates and in the same
/// transaction ([`Calls::bulk_update_after`]); if it does not land, nothing is released.
pub(super) async fn release(
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
        let mut by_id: HashMap<&str, String> = taken
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
    use crate::plan::TreeLockRequest;
    use crate::protocol::scripted::UNKNOWN;
    use fs_model::FsPath;
    use serde_json::json;

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
        let owner = Owner {
            process_id: "p1".into(),
            holder: "job".into(),
            job: None,
            os_process: None,
        };
        let order: Vec<String> = release_items(&taken, &owner, 0)
            .into_iter()
            .map(|u| u.id)
            .collect();
        assert_eq!(order, ["/a/b/c", "/a/b", "/a"]);
    }
}
