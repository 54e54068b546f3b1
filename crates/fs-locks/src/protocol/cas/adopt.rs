//! The store side of an adoption (recovery's takeover of a dead owner's lock set; the
//! operation and its rules are in `crate::adopt`): one round reads the items not held yet and
//! writes, conditionally on the version read, those that can be taken. Always by
//! compare-and-set, whatever the client's protocol: no stored script takes over someone
//! else's lock.

use std::collections::{BTreeMap, HashMap};

use fs_model::FsPath;
use fs_store::{BulkOp, StoredDoc};
use serde_json::Value;

use super::written::sort_written;
use crate::calls::Calls;
use crate::clock::{lease_end, LeaseClock};
use crate::error::{Blocker, LockError, Result};
use crate::lock_doc::{shared_with, shared_without, HolderEntry, Observed, Owner};
use crate::outcome::Taken;
use crate::plan::LockItem;
use crate::script_params::{fresh_source, Request};
use fs_model::LockMode;

/// What to do with one item of an adoption, given what the store holds.
enum Step {
    /// Write this (create or conditional index) to hold it.
    Write(BulkOp, Value),
    /// It is already ours (an earlier write landed though its answer was lost).
    Have(Taken),
    /// Someone holds it validly: wait.
    Blocked(Blocker),
}

/// Who adopts, for whom, and when.
struct Adopter<'a> {
    owner: &'a Owner,
    predecessors: &'a [String],
    now: i64,
    expires_at: i64,
}

impl Adopter<'_> {
    fn is_predecessor(&self, pid: &str) -> bool {
        self.predecessors.iter().any(|p| p == pid)
    }

    /// The request an adoption makes, to name what blocks it.
    fn request(&self) -> Request<'_> {
        Request {
            owner: self.owner,
            items: &[],
            now: self.now,
            expires_at: self.expires_at,
            waiter_expires_at: self.expires_at,
            since: self.now,
            queue: false,
        }
    }

    fn fresh(&self, item: &LockItem) -> Value {
        fresh_source(item, self.owner, self.now, self.expires_at)
    }

    fn decide(&self, item: &LockItem, current: Option<&StoredDoc>) -> Step {
        let Some(doc) = current else {
            let source = self.fresh(item);
            let op = BulkOp::Create {
                id: item.id.clone(),
                source: source.clone(),
            };
            return Step::Write(op, source);
        };
        let observed = Observed::from_source(&doc.source);
        let pid = &self.owner.process_id;
        if observed.is_held_by(pid) {
            let mut item = item.clone();
            item.mode = observed.held_mode(pid).unwrap_or(item.mode);
            return Step::Have(Taken {
                item,
                version: doc.version,
                source: doc.source.clone(),
            });
        }
        let now = self.now;
        let only_predecessors = |holders: &BTreeMap<String, HolderEntry>| {
            observed.foreign_shares() == 0
                && holders
                    .iter()
                    .all(|(pid, h)| h.expires_at < now && self.is_predecessor(pid))
        };
        match (item.mode, &observed, &item.path) {
            (
                _,
                Observed::Exclusive {
                    expires_at: Some(t),
                    process_id: Some(pid),
                    ..
                },
                _,
            ) if *t > 0 && *t < now && self.is_predecessor(pid) => {
                // An expired exclusive lock where the journal had a share: the job's own
                // exclusive lock cannot be there, so it is someone else's; leave it to the
                // sweep of expired locks and wait.
                if item.mode != LockMode::Exclusive {
                    return Step::Blocked(self.request().blocker(item, &observed));
                }
                overwrite(item, doc, self.fresh(item))
            }
            (LockMode::Exclusive, Observed::Group { holders, .. }, _)
                if only_predecessors(holders) =>
            {
                overwrite(item, doc, self.fresh(item))
            }
            (mode, Observed::Group { holders, .. }, Some(path)) if mode != LockMode::Exclusive => {
                self.join_share(item, doc, holders, path)
            }
            _ => Step::Blocked(self.request().blocker(item, &observed)),
        }
    }

    /// A shared lock: it loses exactly the predecessors' expired shares and gains ours, in
    /// one conditional write, if the rest still lets us in.
    fn join_share(
        &self,
        item: &LockItem,
        doc: &StoredDoc,
        holders: &BTreeMap<String, HolderEntry>,
        path: &FsPath,
    ) -> Step {
        let expired: Vec<&str> = holders
            .iter()
            .filter(|(pid, h)| h.expires_at < self.now && self.is_predecessor(pid))
            .map(|(pid, _)| pid.as_str())
            .collect();
        let base = if expired.is_empty() {
            Some(doc.source.clone())
        } else {
            shared_without(&doc.source, &expired)
        };
        // The set was compatible when the job held it; make sure it still is.
        if let Some(base) = &base {
            let rest = Observed::from_source(base);
            if rest
                .conflict(&self.owner.process_id, item.mode, self.now, self.now, false)
                .is_some()
            {
                return Step::Blocked(self.request().blocker(item, &rest));
            }
        }
        let source = shared_with(
            base.as_ref(),
            self.owner,
            path,
            item.mode,
            (self.now, self.expires_at),
        );
        overwrite(item, doc, source)
    }
}

/// Writes `source` over `doc`, conditional on the version read.
fn overwrite(item: &LockItem, doc: &StoredDoc, source: Value) -> Step {
    let op = BulkOp::Index {
        id: item.id.clone(),
        source: source.clone(),
        if_version: Some(doc.version),
    };
    Step::Write(op, source)
}

/// What one adoption round took, and what stopped the rest.
pub(crate) struct AdoptRound {
    /// The documents now ours.
    pub(crate) taken: Vec<Taken>,
    /// Where their leases end.
    pub(crate) expires_at: i64,
    /// The first item held by someone else, or contended.
    pub(crate) blocked: Option<Blocker>,
    /// The first failure (the write request's, or an item's).
    pub(crate) failure: Option<LockError>,
}

/// One round of an adoption of `pending` by the owner of `calls`, on behalf of
/// `predecessors`: reads them and writes what can be taken, with leases that start when
/// `clock` says once the read is back.
///
/// # Errors
/// The read failed (nothing was taken).
pub(crate) async fn adopt_round(
    calls: &mut Calls<'_>,
    pending: &[&LockItem],
    predecessors: &[String],
    clock: &LeaseClock,
) -> Result<AdoptRound> {
    let ids: Vec<String> = pending.iter().map(|i| i.id.clone()).collect();
    let current: HashMap<String, StoredDoc> = calls.mget(&ids).await?;
    let now = clock.now_ms();
    let adopter = Adopter {
        owner: calls.owner,
        predecessors,
        now,
        expires_at: lease_end(now, calls.lease),
    };
    let mut round = AdoptRound {
        taken: Vec::new(),
        expires_at: adopter.expires_at,
        blocked: None,
        failure: None,
    };
    let mut ops = Vec::new();
    let mut writing = Vec::new();
    for &item in pending {
        match adopter.decide(item, current.get(&item.id)) {
            Step::Write(op, source) => {
                ops.push(op);
                writing.push((item, source));
            }
            Step::Have(t) => round.taken.push(t),
            Step::Blocked(b) => {
                round.blocked.get_or_insert(b);
            }
        }
    }
    if ops.is_empty() {
        return Ok(round);
    }
    match calls.bulk(ops).await {
        Ok(results) => {
            let written = sort_written(writing, results, "taking over");
            round.taken.extend(written.taken);
            // Changed since read, or fate unknown: read again next round.
            if let Some((item, e)) = written.again.first() {
                round.blocked.get_or_insert(Blocker::other(
                    item.label(),
                    "contended",
                    e.to_string(),
                ));
            }
            round.failure = written.failed;
        }
        Err(e) => round.failure = Some(e),
    }
    Ok(round)
}
