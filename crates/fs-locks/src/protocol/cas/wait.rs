//! Fair waiting by compare-and-set: a refused request's waiter entries written, renewed and
//! removed with conditional writes of the wait and unwait scripts' twins.

use std::time::Duration;

use fs_model::lock_scripts::{self, ScriptOp};
use fs_store::BulkOp;

use super::written::MAX_ROUNDS;
use crate::backoff::Backoff;
use crate::calls::Calls;
use crate::error::Result;
use crate::lock_doc::Observed;
use crate::plan::LockItem;
use crate::script_params::{release_params, run_locally, wait_params, Request};

/// Registers the request as a waiter on the documents of `req.items` (fair waiting), or renews its
/// registration there: an `mget` and a conditional `bulk`, again at once for the documents
/// that changed in between (a busy ancestor changes all the time, and a request that cannot
/// get its registration in is the one that starves), a bounded number of rounds. A document
/// that is gone is skipped: the next attempt is likely granted there. Returns the ids where
/// the request is now registered.
pub(super) async fn register_waiter(
    calls: &mut Calls<'_>,
    req: &Request<'_>,
) -> Result<Vec<String>> {
    let items = req.items;
    let lease_ms = req.waiter_expires_at.saturating_sub(req.now);
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
pub(super) async fn unregister_waiter(calls: &mut Calls<'_>, ids: &[String]) -> Result<()> {
    let (owner, now) = (calls.owner, calls.now);
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
