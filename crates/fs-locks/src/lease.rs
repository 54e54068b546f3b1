//! Leases: background renewal of held locks, and the explicit operations on expired ones.
//!
//! Taking over an expired lock is never a side effect of acquiring: an acquisition refused by
//! an expired lock keeps waiting. Only [`LockClient::reap_expired`] and
//! [`LockClient::take_over`] act on expired locks, and only with compare-and-set writes, so two
//! recoverers cannot both win and a holder that renews in time keeps its lock.

use std::sync::Weak;
use std::time::Duration;

use fs_store::BulkOp;
use tokio::sync::watch;

use crate::client::{Held, Inner, LockClient};
use crate::engine::Taken;
use crate::error::{LockError, Result};
use crate::guard::{Grant, LockGuard};
use crate::lock_doc::{exclusive_source, lock_label, shared_without, LockMode, Observed};
use crate::plan::LockItem;
use fs_model::lock_scripts::{self, ScriptOp};

/// Renews the client's locks every `every` until the client is dropped.
pub(crate) async fn renew_loop(
    weak: Weak<Inner>,
    mut stop_rx: watch::Receiver<()>,
    every: Duration,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Biased, as in `pause_unless_cancelled`: a fixed order keeps seeded replays exact.
        tokio::select! {
            biased;
            _ = ticker.tick() => {}
            // Errors once the client, which owns the sender, is gone.
            changed = stop_rx.changed() => if changed.is_err() { return },
        }
        let Some(inner) = weak.upgrade() else { return };
        if let Err(e) = renew(&inner).await {
            tracing::warn!(error = %e, process_id = %inner.owner.process_id, "lease renewal failed; will retry");
        }
    }
}

/// Pushes every held lock's expiry to now + lease: one `mget` of the shared documents (other
/// holders change them) and one `bulk` of conditional writes.
pub(crate) async fn renew(inner: &Inner) -> Result<u32> {
    let mut held = inner.held.lock().await;
    if held.is_empty() {
        return Ok(0);
    }
    let now = inner.clock.now_ms();
    let expires_at = crate::clock::lease_end(now, inner.lease);
    let mut calls = inner.calls();
    if inner.protocol().await? == crate::protocol::LockProtocol::Scripted {
        let ids: Vec<String> = held
            .iter()
            .filter(|(_, h)| !h.lost)
            .map(|(id, _)| id.clone())
            .collect();
        let results = calls
            .bulk_update(crate::scripted::renew_items(&ids, &inner.owner, expires_at))
            .await?;
        let mut labels = Vec::new();
        for (id, result) in ids.iter().zip(results) {
            match result {
                Ok(_) => {
                    if let Some(h) = held.get_mut(id) {
                        h.expires_at = expires_at;
                    }
                }
                // The script said the lock is no longer ours, or the document is gone. A 409 is
                // only a race with another holder's update: the next round renews it.
                Err(e) if e.is_refusal() || e.is_not_found() => {
                    if let Some(h) = held.get_mut(id) {
                        h.lost = true;
                        labels.push(h.taken.item.label());
                    }
                }
                Err(e) if e.is_conflict() => {
                    tracing::debug!(lock = %id, "a renewal lost a race; the next round renews it")
                }
                Err(e) => tracing::warn!(lock = %id, error = %e, "renewing a lock failed"),
            }
        }
        drop(held);
        inner.report_lost(&labels);
        return Ok(calls.round_trips);
    }
    // Every held document is read: other holders and waiters change them all, exclusive
    // ones included (a waiter registers on them).
    let ids: Vec<String> = held
        .iter()
        .filter(|(_, h)| !h.lost)
        .map(|(id, _)| id.clone())
        .collect();
    let fresh = calls.mget(&ids).await?;
    let params = crate::script_params::renew_params(&inner.owner, expires_at);
    // (id, new source, version it is conditional on) for every lock still ours.
    let mut writes = Vec::new();
    let mut lost = Vec::new();
    for id in &ids {
        let renewed = fresh.get(id).and_then(|doc| {
            match crate::script_params::run_locally(&lock_scripts::RENEW, &doc.source, &params) {
                Ok((ScriptOp::Index, source)) => Some((source, doc.version)),
                _ => None,
            }
        });
        match renewed {
            Some((source, version)) => writes.push((id.clone(), source, version)),
            // Gone, or no longer lists us: it was reaped or taken over.
            None => lost.push(id.clone()),
        }
    }
    let ops = writes
        .iter()
        .map(|(id, source, version)| BulkOp::Index {
            id: id.clone(),
            source: source.clone(),
            if_version: Some(*version),
        })
        .collect();
    let results = calls.bulk(ops).await?;
    for ((id, source, _), result) in writes.into_iter().zip(results) {
        let Some(h) = held.get_mut(&id) else { continue };
        match result {
            Ok(version) => {
                h.taken.version = version;
                h.taken.source = source;
                h.expires_at = expires_at;
            }
            // Someone changed the document since we read it: the next round renews it, well
            // within the lease (renewal runs every third of it).
            Err(e) if e.is_conflict() => {}
            Err(e) if e.is_not_found() => lost.push(id),
            Err(e) => tracing::warn!(lock = %id, error = %e, "renewing a lock failed"),
        }
    }
    let mut labels = Vec::with_capacity(lost.len());
    for id in &lost {
        if let Some(h) = held.get_mut(id) {
            h.lost = true;
            labels.push(h.taken.item.label());
        }
    }
    drop(held);
    inner.report_lost(&labels);
    Ok(calls.round_trips)
}

/// A holder of a lock document whose lease has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredHolder {
    /// Its process id (empty for an exclusive lock that records none).
    pub process_id: String,
    /// The rename journal entry its lock protects, if it recorded one.
    pub job: Option<String>,
}

/// A lock document as [`LockClient::read_expired`] read it: which holders had expired, and
/// the version that [`LockClient::reap_expired_holders`] writes conditionally on.
#[derive(Debug, Clone)]
pub struct ExpiredLock {
    /// The lock document's id.
    pub id: String,
    /// The locked path it records, or its id.
    pub label: String,
    /// Its holders whose lease had ended when it was read (none if all are valid).
    pub expired: Vec<ExpiredHolder>,
    observed: Observed,
    doc: fs_store::StoredDoc,
    now: i64,
}

/// What [`LockClient::reap_expired`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reaped {
    /// There was no lock document.
    Nothing,
    /// An expired exclusive lock was deleted; its holder's description.
    Exclusive(String),
    /// Expired holders' shares were removed from a shared lock; their process ids. Empty when
    /// no share had expired.
    Shares(Vec<String>),
}

impl LockClient {
    /// Renews every held lock now instead of waiting for the background task; returns the
    /// round trips it took.
    ///
    /// # Errors
    /// [`LockError::Store`] if the store failed.
    pub async fn renew_now(&self) -> Result<u32> {
        renew(&self.inner).await
    }

    /// Removes what has expired from the lock document `id`: an exclusive lock whose lease
    /// ended is deleted; from a shared lock exactly the expired holders' shares are removed
    /// (foreign shares, which record no lease, are kept).
    ///
    /// # Errors
    /// [`LockError::NotExpired`] for an exclusive lock that is still valid or records no
    /// lease; [`LockError::Store`] if the document changed meanwhile (call again).
    pub async fn reap_expired(&self, id: &str) -> Result<Reaped> {
        self.reap_expired_sparing(id, &Default::default()).await
    }

    /// As [`LockClient::reap_expired`], but leaves alone the locks and shares of the process
    /// ids in `spare`, expired or not: recovery spares the owners of open rename journals,
    /// whose expired locks still protect a half-done rename until it is finished. An
    /// exclusive lock of a spared owner yields [`Reaped::Nothing`].
    ///
    /// # Errors
    /// As [`LockClient::reap_expired`].
    pub async fn reap_expired_sparing(
        &self,
        id: &str,
        spare: &std::collections::HashSet<String>,
    ) -> Result<Reaped> {
        let Some(lock) = self.read_expired(id).await? else {
            return Ok(Reaped::Nothing);
        };
        if let Observed::Exclusive { process_id, .. } = &lock.observed {
            if process_id.as_ref().is_some_and(|p| spare.contains(p)) {
                return Ok(Reaped::Nothing);
            }
            if lock.expired.is_empty() {
                let expires_at = match &lock.observed {
                    Observed::Exclusive { expires_at, .. } => expires_at.unwrap_or(0),
                    Observed::Group { .. } => 0,
                };
                return Err(LockError::NotExpired {
                    path: lock.label.clone(),
                    holders: lock.observed.describe_holders(),
                    expires_at,
                });
            }
        }
        let reap: Vec<&str> = lock
            .expired
            .iter()
            .map(|h| h.process_id.as_str())
            .filter(|pid| !spare.contains(*pid))
            .collect();
        self.reap_expired_holders(&lock, &reap).await
    }

    /// Reads the lock document `id` and says which of its holders' leases have ended: the
    /// first half of a reap that must decide something (fence their journal entries) before
    /// clearing them. `None` if there is no such document.
    ///
    /// # Errors
    /// [`LockError::Store`] if it cannot be read.
    pub async fn read_expired(&self, id: &str) -> Result<Option<ExpiredLock>> {
        let mut calls = self.inner.calls();
        let Some(check) = ExpiryCheck::read(&self.inner, &mut calls, id).await? else {
            return Ok(None);
        };
        let now = check.now;
        let expired = match &check.observed {
            Observed::Exclusive {
                process_id,
                expires_at: Some(t),
                job,
                ..
            } if *t > 0 && *t < now => vec![ExpiredHolder {
                process_id: process_id.clone().unwrap_or_default(),
                job: job.clone(),
            }],
            Observed::Exclusive { .. } => Vec::new(),
            Observed::Group { holders, .. } => holders
                .iter()
                .filter(|(_, h)| h.expires_at < now)
                .map(|(pid, h)| ExpiredHolder {
                    process_id: pid.clone(),
                    job: h.job.clone(),
                })
                .collect(),
        };
        Ok(Some(ExpiredLock {
            id: id.to_owned(),
            label: check.label,
            expired,
            observed: check.observed,
            doc: check.doc,
            now,
        }))
    }

    /// Clears the expired holders `reap` (process ids among [`ExpiredLock::expired`]) from the
    /// lock `lock` read, conditional on its version then: an exclusive lock is deleted, shares
    /// are removed. A holder that renewed since, or anyone else's write, makes it fail with a
    /// conflict, and nothing is cleared.
    ///
    /// # Errors
    /// [`LockError::Store`] if the document changed since it was read (read it again).
    pub async fn reap_expired_holders(&self, lock: &ExpiredLock, reap: &[&str]) -> Result<Reaped> {
        let chosen: Vec<&str> = lock
            .expired
            .iter()
            .map(|h| h.process_id.as_str())
            .filter(|pid| reap.contains(pid))
            .collect();
        let (store, index) = (&self.inner.store, &self.inner.lock_index);
        let context = format!("reaping the lock on `{}`", lock.label);
        let version = Some(lock.doc.version);
        let (written, reaped) = match &lock.observed {
            Observed::Exclusive { .. } => {
                if chosen.is_empty() {
                    return Ok(Reaped::Nothing);
                }
                let reaped = Reaped::Exclusive(lock.observed.describe_holders());
                (store.delete(index, &lock.id, version).await, reaped)
            }
            Observed::Group { .. } => {
                let dead_waiters = lock
                    .observed
                    .waiters()
                    .values()
                    .any(|w| w.expires_at < lock.now);
                if chosen.is_empty() && !dead_waiters {
                    return Ok(Reaped::Shares(Vec::new()));
                }
                // Expired waiters go too: a waiter that died or gave up blocks nobody, but
                // its entry would keep an otherwise empty document alive.
                let pruned = shared_without(&lock.doc.source, &chosen)
                    .map(|source| without_dead_waiters(source, lock.now))
                    .filter(|source| !Observed::from_source(source).is_empty());
                let written = match pruned {
                    Some(source) => store.index(index, &lock.id, source, version).await,
                    None => store.delete(index, &lock.id, version).await,
                };
                (
                    written,
                    Reaped::Shares(chosen.into_iter().map(str::to_owned).collect()),
                )
            }
        };
        written.map_err(LockError::store(context))?;
        Ok(reaped)
    }

    /// Takes over the expired exclusive lock `id` (a tree, global or document lock): rewrites
    /// it, conditional on the version read, with this client as owner, and returns a guard as
    /// if this client had acquired it. Recovery uses this to finish a dead job's rename under
    /// the dead job's own lock.
    ///
    /// # Errors
    /// [`LockError::NotExpired`] if the lock is still valid, records no lease, or is shared;
    /// [`LockError::Store`] if it changed meanwhile (someone renewed or took it first).
    pub async fn take_over(&self, id: &str) -> Result<LockGuard> {
        let inner = &self.inner;
        let mut held = inner.held.lock().await;
        let mut calls = inner.calls();
        let Some(lock) = ExpiryCheck::read(inner, &mut calls, id).await? else {
            return Err(LockError::LeaseLost {
                path: id.to_owned(),
            });
        };
        lock.expired_exclusive()?;
        let (doc, now, label) = (lock.doc, lock.now, lock.label);
        let path = fs_model::FsPath::parse(&label).ok();
        let source = exclusive_source(
            &inner.owner,
            path.as_ref(),
            now,
            crate::clock::lease_end(now, inner.lease),
        );
        calls.round_trips += 1;
        let version = inner
            .store
            .index(&inner.lock_index, id, source.clone(), Some(doc.version))
            .await
            .map_err(LockError::store(format!(
                "taking over the lock on `{label}`"
            )))?;
        let item = LockItem {
            id: id.to_owned(),
            path,
            mode: LockMode::Exclusive,
        };
        let taken = Taken {
            item,
            version,
            source,
        };
        held.insert(
            id.to_owned(),
            Held {
                taken,
                refcount: 1,
                lost: false,
                expires_at: crate::clock::lease_end(now, inner.lease),
            },
        );
        drop(held);
        self.start_renewer();
        let grant = Grant {
            races: 0,
            round_trips: calls.round_trips,
            attempts: 1,
            waited: Duration::ZERO,
        };
        Ok(LockGuard::new(
            self.clone(),
            vec![id.to_owned()],
            format!("taken-over lock on `{label}`"),
            grant,
        ))
    }
}

/// Returns `source` without the waiter entries that expired before `now`.
fn without_dead_waiters(mut source: serde_json::Value, now: i64) -> serde_json::Value {
    if let Some(serde_json::Value::Object(waiters)) = source.get_mut("waiters") {
        waiters.retain(|_, w| {
            w.get("expires_at")
                .and_then(serde_json::Value::as_i64)
                .is_some_and(|t| t >= now)
        });
        if waiters.is_empty() {
            if let serde_json::Value::Object(fields) = &mut source {
                fields.remove("waiters");
            }
        }
    }
    source
}

/// A lock document read to decide whether it has expired.
struct ExpiryCheck {
    doc: fs_store::StoredDoc,
    observed: Observed,
    label: String,
    now: i64,
}

impl ExpiryCheck {
    async fn read(
        inner: &Inner,
        calls: &mut crate::engine::Calls<'_>,
        id: &str,
    ) -> Result<Option<ExpiryCheck>> {
        let Some(doc) = calls.get(id).await? else {
            return Ok(None);
        };
        Ok(Some(ExpiryCheck {
            observed: Observed::from_source(&doc.source),
            label: lock_label(id, &doc.source),
            now: inner.clock.now_ms(),
            doc,
        }))
    }

    /// Succeeds only for an exclusive lock whose recorded lease has ended.
    fn expired_exclusive(&self) -> Result<()> {
        let expires_at = match &self.observed {
            Observed::Exclusive { expires_at, .. } => expires_at.unwrap_or(0),
            Observed::Group { .. } => 0,
        };
        if expires_at == 0 || expires_at >= self.now {
            return Err(LockError::NotExpired {
                path: self.label.clone(),
                holders: self.observed.describe_holders(),
                expires_at,
            });
        }
        Ok(())
    }
}
