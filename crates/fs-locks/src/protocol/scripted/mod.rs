//! The scripted protocol: the book's painless scripts, one bulk request per acquisition.
//!
//! Acquire: one `bulk` of `update` items in plan order, each with a stored script and an
//! upsert document (the same document the compare-and-set protocol would create). A script
//! that refuses fails its item; the attempt then reads the refusing document to name its
//! holder, undoes what it took, and is refused. Release and renewal are one `bulk` each, and
//! their scripts can be sent again safely: a second release finds nothing of ours and does
//! nothing.

use async_trait::async_trait;
use fs_store::{DocStore, ScriptedUpdate, Version};

use super::{write_first, Giveback, Protocol, Renewal};
use crate::calls::{self, Calls};
use crate::error::Result;
use crate::lock_doc::Owner;
use crate::outcome::{Attempt, Released};
use crate::script_params::{
    release_params, renew_params, wait_params, Request, RENEW, UNWAIT, WAIT,
};

mod attempt;
mod release;

/// The scripted protocol.
pub(crate) struct Scripted;

#[async_trait]
impl Protocol for Scripted {
    async fn attempt(&self, calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Attempt> {
        attempt::send_acquire(calls, req).await
    }

    /// No upsert: a document gone meanwhile has nothing to wait for.
    async fn join_queue(&self, calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Vec<String>> {
        let items = req.items;
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

    async fn leave_queue(&self, calls: &mut Calls<'_>, ids: &[String]) -> Result<()> {
        let (owner, now) = (calls.owner, calls.now);
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

    async fn release(&self, calls: &mut Calls<'_>, back: Giveback) -> Result<Released> {
        let (owner, patience) = (calls.owner, calls.lease);
        let Giveback { taken, first } = back;
        // Where the store chains them, `first` and the release go in one transaction.
        if first.is_some() && !taken.is_empty() && calls.chains() {
            return release::release(calls, taken, owner, patience, first).await;
        }
        if let Some(why) = write_first(calls, first).await? {
            return Ok(Released::first_failed(why));
        }
        release::release(calls, taken, owner, patience, None).await
    }

    /// One `bulk` of the renew script.
    async fn renew(
        &self,
        calls: &mut Calls<'_>,
        ids: &[String],
        until: i64,
    ) -> Result<Vec<Renewal>> {
        let results = calls
            .bulk_update(renew_items(ids, calls.owner, until))
            .await?;
        let mut renewals = Vec::with_capacity(ids.len());
        for (id, result) in ids.iter().zip(results) {
            match result {
                Ok(_) => renewals.push(Renewal::Renewed {
                    id: id.clone(),
                    written: None,
                }),
                // The script said the lock is no longer ours, or the document is gone. A 409
                // is only a race with another holder's update: the next round renews it.
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

    fn chains_release(&self, store: &dyn DocStore) -> bool {
        calls::chains(store)
    }
}

/// Versions are not needed to release or renew by script; this stands in for them.
pub(super) const UNKNOWN: Version = Version {
    seq_no: -1,
    primary_term: -1,
};

/// How many rounds an attempt or a release resends the items that lost a race (a 409 from two
/// updates of one document at once, after the server's own `retry_on_conflict` ran out) before
/// an attempt counts as refused. A race is not a refusal: the document's state did not say no.
pub(super) const RACE_ROUNDS: usize = 8;

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
