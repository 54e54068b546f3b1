//! Adopting a dead owner's lock set: how recovery takes over everything a job held.
//!
//! A rename journal lists the lock items its job held. Recovery takes them over as a set, on
//! behalf of the entry's *predecessors* (the job and any earlier recoverer of it), and only
//! theirs:
//!
//! - an exclusive lock of a predecessor whose lease ended is rewritten with the recoverer as
//!   owner, conditional on the version read (so of two recoverers, or a recoverer and a holder
//!   renewing late, exactly one wins); a missing one is created;
//! - a shared lock loses exactly the predecessors' expired shares and gains the recoverer's,
//!   in one conditional write; a missing one is created;
//! - anything else refuses, and the adoption waits and tries again: a valid lock, and also an
//!   expired lock or share of someone else. That one may protect another unfinished rename
//!   (its own recovery deals with it), or protect none (the sweep fences and clears it);
//!   overwriting it would strip another rename of its protection.
//!
//! Unlike an acquisition, an adoption keeps what it has taken while it waits for the rest. It
//! is safe from deadlock because only the one recoverer that claimed the journal adopts its
//! set, the sets of two open journals do not conflict (their jobs held them at once), and
//! ordinary acquisitions never hold while waiting. An adoption that times out leaves what it
//! took to expire again, still listed in the journal, so the next recovery run resumes it.

use std::collections::HashMap;

use fs_store::{BulkOp, StoredDoc};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::{Held, LockClient};
use crate::engine::Taken;
use crate::error::{Blocker, LockError, Result};
use crate::guard::{Grant, LockGuard};
use crate::lock_doc::{shared_with, shared_without, LockMode, Observed, Owner};
use crate::plan::LockItem;

/// What to do with one item of an adoption, given what the store holds.
enum Step {
    /// Write this (create or conditional index) to hold it.
    Write(BulkOp, serde_json::Value),
    /// It is already ours (an earlier write landed though its answer was lost).
    Have(Taken),
    /// Someone holds it validly: wait.
    Blocked(Blocker),
}

fn decide(
    item: &LockItem,
    current: Option<&StoredDoc>,
    owner: &Owner,
    predecessors: &[String],
    (now, expires_at): (i64, i64),
) -> Step {
    let fresh = || crate::script_params::fresh_source(item, owner, now, expires_at);
    let req = crate::script_params::Request {
        owner,
        now,
        expires_at,
        waiter_expires_at: expires_at,
        since: now,
        queue: false,
    };
    let Some(doc) = current else {
        let source = fresh();
        let op = BulkOp::Create {
            id: item.id.clone(),
            source: source.clone(),
        };
        return Step::Write(op, source);
    };
    let observed = Observed::from_source(&doc.source);
    if observed.is_held_by(&owner.process_id) {
        let mut item = item.clone();
        item.mode = observed.held_mode(&owner.process_id).unwrap_or(item.mode);
        return Step::Have(Taken {
            item,
            version: doc.version,
            source: doc.source.clone(),
        });
    }
    let cas = |source: serde_json::Value| {
        let op = BulkOp::Index {
            id: item.id.clone(),
            source: source.clone(),
            if_version: Some(doc.version),
        };
        Step::Write(op, source)
    };
    let predecessor = |pid: &str| predecessors.iter().any(|p| p == pid);
    let only_predecessors = |holders: &std::collections::BTreeMap<String, crate::HolderEntry>| {
        observed.foreign_shares() == 0
            && holders
                .iter()
                .all(|(pid, h)| h.expires_at < now && predecessor(pid))
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
        ) if *t > 0 && *t < now && predecessor(pid) => {
            match (item.mode, &item.path) {
                // An expired exclusive lock where the journal had a share: the job's own
                // exclusive lock cannot be there, so it is someone else's; leave it to the
                // sweep of expired locks and wait.
                (mode, _) if mode != LockMode::Exclusive => {
                    Step::Blocked(crate::engine::blocker(item, &observed, &req))
                }
                _ => cas(fresh()),
            }
        }
        (LockMode::Exclusive, Observed::Group { holders, .. }, _) if only_predecessors(holders) => {
            cas(fresh())
        }
        (mode, Observed::Group { holders, .. }, Some(path)) if mode != LockMode::Exclusive => {
            let expired: Vec<&str> = holders
                .iter()
                .filter(|(pid, h)| h.expires_at < now && predecessor(pid))
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
                    .conflict(&owner.process_id, item.mode, now, now, false)
                    .is_some()
                {
                    return Step::Blocked(crate::engine::blocker(item, &rest, &req));
                }
            }
            cas(shared_with(
                base.as_ref(),
                owner,
                path,
                item.mode,
                (now, expires_at),
            ))
        }
        _ => Step::Blocked(crate::engine::blocker(item, &observed, &req)),
    }
}

impl LockClient {
    /// Takes over the lock set `items` of owners that died (recovery): the expired locks and
    /// shares of `predecessors` (the process ids that held the set before: a journal entry's
    /// owner and earlier recoverers) become this client's, missing ones are created, and
    /// anything else (a valid lock, someone else's expired one) is waited for, up to the
    /// client's wait. Returns a guard over all of them, as if this client had acquired them.
    ///
    /// # Errors
    /// [`LockError::Timeout`] naming a lock still held when the wait ran out; what was taken
    /// is then left to expire (not released), so a later recovery can resume.
    /// [`LockError::Cancelled`], [`LockError::Store`].
    pub async fn adopt(
        &self,
        wanted: String,
        items: Vec<LockItem>,
        predecessors: &[String],
    ) -> Result<LockGuard> {
        let inner = &self.inner;
        let started = Instant::now();
        let deadline = started + inner.wait;
        let mut backoff = Backoff::new(inner.backoff_base, inner.backoff_max);
        let (mut round_trips, mut attempts) = (0, 0);
        let mut mine: Vec<String> = Vec::new();
        let mut cancel = inner.cancel.clone();
        loop {
            attempts += 1;
            let outcome = self.adopt_round(&items, predecessors, &mut mine).await;
            round_trips += outcome.1;
            let blocker = match outcome.0 {
                Ok(None) => break,
                Ok(Some(blocker)) => blocker,
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    Blocker::other("-", "store", e.to_string())
                }
                Err(e) => {
                    self.forget(&mine).await;
                    return Err(e);
                }
            };
            let now = Instant::now();
            if now >= deadline || cancel.as_ref().is_some_and(|c| *c.borrow()) {
                self.forget(&mine).await;
                if cancel.as_ref().is_some_and(|c| *c.borrow()) {
                    return Err(LockError::Cancelled { wanted });
                }
                return Err(LockError::Timeout {
                    wanted,
                    blocker: Box::new(blocker),
                    waited: started.elapsed(),
                    attempts,
                });
            }
            let pause = backoff.next_pause().min(deadline - now);
            crate::acquire::pause_unless_cancelled(pause, cancel.as_mut()).await;
        }
        {
            let mut held = inner.held.lock().await;
            for item in &items {
                if let Some(h) = held.get_mut(&item.id) {
                    h.refcount += 1;
                }
            }
        }
        let grant = Grant {
            races: 0,
            round_trips,
            attempts,
            waited: started.elapsed(),
        };
        let ids = items.iter().map(|i| i.id.clone()).collect();
        Ok(LockGuard::new(self.clone(), ids, wanted, grant))
    }

    /// One round: reads the items not held yet and writes what can be taken. Returns the
    /// first blocker, or `None` once every item is held.
    async fn adopt_round(
        &self,
        items: &[LockItem],
        predecessors: &[String],
        mine: &mut Vec<String>,
    ) -> (Result<Option<Blocker>>, u32) {
        let inner = &self.inner;
        let mut held = inner.held.lock().await;
        let pending: Vec<&LockItem> = items.iter().filter(|i| !held.contains_key(&i.id)).collect();
        if pending.is_empty() {
            return (Ok(None), 0);
        }
        let mut calls = inner.calls();
        let ids: Vec<String> = pending.iter().map(|i| i.id.clone()).collect();
        let current: HashMap<String, StoredDoc> = match calls.mget(&ids).await {
            Ok(docs) => docs,
            Err(e) => return (Err(e), calls.round_trips),
        };
        let now = inner.clock.now_ms();
        let expires_at = crate::clock::lease_end(now, inner.lease);
        let mut ops = Vec::new();
        let mut writing = Vec::new();
        let mut blocked = None;
        let mut taken = Vec::new();
        for item in pending {
            let times = (now, expires_at);
            match decide(
                item,
                current.get(&item.id),
                &inner.owner,
                predecessors,
                times,
            ) {
                Step::Write(op, source) => {
                    ops.push(op);
                    writing.push((item, source));
                }
                Step::Have(t) => taken.push(t),
                Step::Blocked(b) => {
                    blocked.get_or_insert(b);
                }
            }
        }
        let mut failure = None;
        if !ops.is_empty() {
            match calls.bulk(ops).await {
                Ok(results) => {
                    for ((item, source), result) in writing.into_iter().zip(results) {
                        match result {
                            Ok(version) => taken.push(Taken {
                                item: item.clone(),
                                version,
                                source,
                            }),
                            // Changed since read, or fate unknown: read again next round.
                            Err(e) if e.is_conflict() || e.is_retryable() => {
                                blocked.get_or_insert(Blocker::other(
                                    item.label(),
                                    "contended",
                                    e.to_string(),
                                ));
                            }
                            Err(e) => {
                                let context = format!("taking over the lock on `{}`", item.label());
                                failure.get_or_insert(LockError::store(context)(e));
                            }
                        }
                    }
                }
                Err(e) => failure = Some(e),
            }
        }
        let took_any = !taken.is_empty();
        for t in taken {
            mine.push(t.item.id.clone());
            held.insert(
                t.item.id.clone(),
                Held {
                    taken: t,
                    refcount: 0,
                    lost: false,
                    expires_at,
                },
            );
        }
        drop(held);
        if took_any {
            self.start_renewer();
        }
        let trips = calls.round_trips;
        match failure {
            Some(e) => (Err(e), trips),
            None => (Ok(blocked), trips),
        }
    }
}
