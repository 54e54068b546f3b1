//! Expired leases: the explicit operations on locks whose holders' leases ended (renewal of
//! our own is the client's, in `client/renew.rs`).
//!
//! Taking over an expired lock is never a side effect of acquiring: an acquisition refused by
//! an expired lock keeps waiting. Only [`LockClient::reap_expired`] and
//! [`LockClient::take_over`] act on expired locks, and only with compare-and-set writes, so two
//! recoverers cannot both win and a holder that renews in time keeps its lock.

use std::collections::HashSet;
use std::time::Duration;

use fs_store::StoredDoc;

use crate::calls::Calls;
use crate::client::LockClient;
use crate::clock::lease_end;
use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::lock_doc::{
    exclusive_source, lock_label, shared_without, without_dead_waiters, Observed,
};
use crate::outcome::{Grant, Taken};
use crate::plan::LockItem;
use fs_model::LockMode;

/// A holder of a lock document whose lease has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredHolder {
    /// Its process id (empty for an exclusive lock that records none).
    pub process_id: String,
    /// The rename journal entry its lock protects, if it recorded one.
    pub job: Option<String>,
    /// When its lease ended, epoch milliseconds (0 where the lock records none).
    pub expires_at: i64,
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
    doc: StoredDoc,
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
    pub async fn reap_expired_sparing(&self, id: &str, spare: &HashSet<String>) -> Result<Reaped> {
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
        let mut calls = self.calls();
        let Some(check) = ExpiryCheck::read(self, &mut calls, id).await? else {
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
                expires_at: *t,
            }],
            Observed::Exclusive { .. } => Vec::new(),
            Observed::Group { holders, .. } => holders
                .iter()
                .filter(|(_, h)| h.expires_at < now)
                .map(|(pid, h)| ExpiredHolder {
                    process_id: pid.clone(),
                    job: h.job.clone(),
                    expires_at: h.expires_at,
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
        let mut calls = self.calls();
        let context = format!("reaping the lock on `{}`", lock.label);
        let version = Some(lock.doc.version);
        let (source, reaped) = match &lock.observed {
            Observed::Exclusive { .. } => {
                if chosen.is_empty() {
                    return Ok(Reaped::Nothing);
                }
                (None, Reaped::Exclusive(lock.observed.describe_holders()))
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
                let shares = chosen.into_iter().map(str::to_owned).collect();
                (pruned, Reaped::Shares(shares))
            }
        };
        calls
            .index_or_delete(&lock.id, source, version, context)
            .await?;
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
        let mut held = self.held().await;
        let mut calls = self.calls();
        let Some(lock) = ExpiryCheck::read(self, &mut calls, id).await? else {
            return Err(LockError::LeaseLost {
                path: id.to_owned(),
                renewal: None,
            });
        };
        lock.expired_exclusive()?;
        let (doc, now, label) = (lock.doc, lock.now, lock.label);
        let path = fs_model::FsPath::parse(&label).ok();
        let expires_at = lease_end(now, self.lease());
        let source = exclusive_source(self.owner(), path.as_ref(), now, expires_at);
        let context = format!("taking over the lock on `{label}`");
        let version = calls
            .index(id, source.clone(), Some(doc.version), context)
            .await?;
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
        held.hold(taken, expires_at);
        held.add_refs([id]);
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

/// A lock document read to decide whether it has expired.
struct ExpiryCheck {
    doc: StoredDoc,
    observed: Observed,
    label: String,
    now: i64,
}

impl ExpiryCheck {
    async fn read(
        client: &LockClient,
        calls: &mut Calls<'_>,
        id: &str,
    ) -> Result<Option<ExpiryCheck>> {
        let Some(doc) = calls.get(id).await? else {
            return Ok(None);
        };
        Ok(Some(ExpiryCheck {
            observed: Observed::from_source(&doc.source),
            label: lock_label(id, &doc.source),
            now: client.now_ms(),
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
