//! Leases of holders proven gone: ended at once, by the holder's own machine, instead of waited
//! out (see `os_process`).
//!
//! Ending a lease is all this does: the expiry of each holder whose process is proven gone is
//! set to now (less the clocks' skew, so that every recoverer agrees at once), by a write
//! conditional on the version read. What an expired lock means does not change: it still
//! refuses acquisitions, and only recovery (or an acquisition's [`Orphans`]) finishes what its
//! holder left and clears it. A holder that is not proven gone (another machine, no `/proc`,
//! its process still running) keeps its lease to the end.
//!
//! [`Orphans`]: crate::Orphans

use std::time::Duration;

use fs_store::RetryPolicy;
use serde_json::Value;

use crate::client::LockClient;
use crate::error::{Blocker, LockError, Result};
use crate::lock_doc::{lock_label, Observed};
use crate::os_process::OsProcess;

/// How long [`LockClient::end_gone_leases`] keeps reading and writing a lock document that
/// keeps changing or whose requests keep failing in transit: ten tries over about five
/// seconds, far below any lease and far above a network fault's burst.
const END_GONE_LEASES: RetryPolicy =
    RetryPolicy::new(Duration::from_millis(20), Duration::from_secs(1)).attempts(10);

/// What one try at ending the gone holders' leases of a document found.
enum Ending {
    /// It ended this many.
    Ended(usize),
    /// No gone holder's lease runs (or the document is gone).
    Nothing,
    /// The document changed since it was read: read it again.
    Changed,
    /// A request failed in transit; its write, if it was one and it landed unseen, ended
    /// `ended`.
    InTransit { ended: usize, error: LockError },
}

impl LockClient {
    /// Ends the lease of every holder of the lock document `id` whose process is proven gone,
    /// and whose lease has not ended yet; returns how many it ended. The write is conditional
    /// on the version read: if the document changed in between (a holder renewed, someone
    /// left), or the request failed in transit, it is read again and the ending tried again,
    /// for at most [`END_GONE_LEASES`]. Giving up early is not harmless: a lease left running
    /// keeps the dead job's locks, and recovery leaves its half-done change for the whole
    /// lease.
    ///
    /// # Errors
    /// [`LockError::Store`](crate::LockError::Store) if the document cannot be read, or the
    /// write fails otherwise than by a conflict or a transient error, or these last past
    /// [`END_GONE_LEASES`].
    pub async fn end_gone_leases(&self, id: &str) -> Result<usize> {
        let mut backoff = END_GONE_LEASES.start();
        // What a write whose fate is unknown would have ended: if a later read finds nothing
        // left to end, that write (or another recoverer's) landed.
        let mut unknown = 0;
        loop {
            let last = match self.try_end_gone_leases(id).await? {
                Ending::Ended(n) => return Ok(n),
                Ending::Nothing => return Ok(unknown),
                Ending::Changed => None,
                Ending::InTransit { ended, error } => {
                    unknown = unknown.max(ended);
                    Some(error)
                }
            };
            if !backoff.wait().await {
                return last.map_or(Ok(0), Err);
            }
        }
    }

    /// One read and, if a gone holder's lease still runs, one conditional write.
    ///
    /// # Errors
    /// Those no retry mends; a transient one is [`Ending::InTransit`].
    async fn try_end_gone_leases(&self, id: &str) -> Result<Ending> {
        let mut calls = self.calls();
        let doc = match calls.get(id).await {
            Ok(Some(doc)) => doc,
            Ok(None) => return Ok(Ending::Nothing),
            Err(error) if error.is_retryable() => return Ok(Ending::InTransit { ended: 0, error }),
            Err(e) => return Err(e),
        };
        let cutoff = calls.now - self.max_clock_skew_ms() - 1;
        let (source, ended) = ended_leases(&doc.source, cutoff, OsProcess::is_gone);
        if ended == 0 {
            return Ok(Ending::Nothing);
        }
        let label = lock_label(id, &doc.source);
        let context = format!("ending the lease of a gone holder of the lock on `{label}`");
        match calls.index(id, source, Some(doc.version), context).await {
            Ok(_) => {
                tracing::info!(lock = %label, holders = ended, "ended the lease of holders whose process is gone");
                Ok(Ending::Ended(ended))
            }
            Err(LockError::Store { cause, .. }) if cause.is_conflict() => Ok(Ending::Changed),
            Err(error) if error.is_retryable() => Ok(Ending::InTransit { ended, error }),
            Err(e) => Err(e),
        }
    }

    /// Ends the leases of the gone holders of each lock document in `ids` (see
    /// [`LockClient::end_gone_leases`]); returns how many it ended in all. A document that
    /// cannot be read or written after the retries is skipped, with a warning: its lease ends
    /// it anyway, and recovery waits for that.
    pub async fn end_gone_leases_of(&self, ids: &[String]) -> usize {
        let mut ended = 0;
        for id in ids {
            match self.end_gone_leases(id).await {
                Ok(n) => ended += n,
                Err(e) => {
                    tracing::warn!(lock = %id, error = %e, "could not end the leases of gone holders; their lease ends them")
                }
            }
        }
        ended
    }
}

impl LockClient {
    /// Ends the leases of the gone holders of every lock document (see
    /// [`LockClient::end_gone_leases`]): one listing of the lock index, then one read and one
    /// write for each document where a holder is proven gone. Returns how many leases it
    /// ended.
    ///
    /// # Errors
    /// [`LockError::Store`] if the lock index cannot be listed (a missing one holds nothing).
    pub async fn end_all_gone_leases(&self) -> Result<usize> {
        let locks = match self.list_locks().await {
            Ok(locks) => locks,
            Err(LockError::Store {
                cause: fs_store::StoreError::IndexNotFound { .. },
                ..
            }) => return Ok(0),
            Err(e) => return Err(e),
        };
        let now = self.now_ms();
        let ids: Vec<String> = locks
            .into_iter()
            .filter(|lock| has_gone_holder(&lock.observed, now))
            .map(|lock| lock.id)
            .collect();
        Ok(self.end_gone_leases_of(&ids).await)
    }
}

/// Returns true if a holder of `observed` whose lease runs past `now` is proven gone.
fn has_gone_holder(observed: &Observed, now: i64) -> bool {
    match observed {
        Observed::Exclusive {
            os_process: Some(process),
            expires_at: Some(t),
            ..
        } => *t >= now && process.is_gone(),
        Observed::Exclusive { .. } => false,
        Observed::Group { holders, .. } => holders
            .values()
            .any(|h| h.expires_at >= now && h.os_process.as_ref().is_some_and(OsProcess::is_gone)),
    }
}

/// Returns true if every holder that refuses in `blocker` recorded its process and each is
/// proven gone on this machine.
pub(crate) fn holders_gone(blocker: &Blocker) -> bool {
    !blocker.waiter
        && blocker.expired_ms_ago.is_none()
        && blocker
            .processes
            .as_ref()
            .is_some_and(|ps| !ps.is_empty() && ps.iter().all(OsProcess::is_gone))
}

/// Returns `source` with the lease of each holder that `gone` proves gone ended at `cutoff`
/// (those already ended before it left alone), and how many it ended.
fn ended_leases(source: &Value, cutoff: i64, gone: impl Fn(&OsProcess) -> bool) -> (Value, usize) {
    let mut source = source.clone();
    let observed = Observed::from_source(&source);
    let Value::Object(fields) = &mut source else {
        return (source, 0);
    };
    match observed {
        Observed::Exclusive {
            os_process: Some(process),
            expires_at: Some(t),
            ..
        } if t > cutoff && gone(&process) => {
            fields.insert("expires_at".to_owned(), Value::from(cutoff));
            (source, 1)
        }
        Observed::Exclusive { .. } => (source, 0),
        Observed::Group { holders, .. } => {
            let ended: Vec<&String> = holders
                .iter()
                .filter(|(_, h)| h.expires_at > cutoff && h.os_process.as_ref().is_some_and(&gone))
                .map(|(pid, _)| pid)
                .collect();
            if ended.is_empty() {
                return (source, 0);
            }
            if let Some(Value::Object(entries)) = fields.get_mut("holders") {
                for pid in &ended {
                    if let Some(Value::Object(entry)) = entries.get_mut(pid.as_str()) {
                        entry.insert("expires_at".to_owned(), Value::from(cutoff));
                    }
                }
            }
            // The document's own expiry is the latest of its holders'.
            let latest = holders
                .iter()
                .map(|(pid, h)| {
                    if ended.contains(&pid) {
                        cutoff
                    } else {
                        h.expires_at
                    }
                })
                .max()
                .unwrap_or(cutoff);
            fields.insert("expires_at".to_owned(), Value::from(latest));
            (source, ended.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn process(pid: u32) -> OsProcess {
        OsProcess {
            boot: "b".into(),
            pid_ns: 1,
            pid,
            start: 7,
        }
    }

    #[test]
    fn only_the_leases_of_gone_holders_end() {
        let gone = |p: &OsProcess| p.pid == 1;
        let exclusive = json!({"lock_type": "exclusive", "process_id": "a", "expires_at": 500,
            "os_process": process(1)});
        let (ended, n) = ended_leases(&exclusive, 100, gone);
        assert_eq!(n, 1);
        assert_eq!(ended["expires_at"], 100);
        assert_eq!(ended["process_id"], "a");
        // Alive, unrecorded, or already over: left alone.
        let alive = json!({"lock_type": "exclusive", "expires_at": 500, "os_process": process(2)});
        assert_eq!(ended_leases(&alive, 100, gone).1, 0);
        let unrecorded = json!({"lock_type": "exclusive", "expires_at": 500});
        assert_eq!(ended_leases(&unrecorded, 100, gone).1, 0);
        let over = json!({"lock_type": "exclusive", "expires_at": 50, "os_process": process(1)});
        assert_eq!(ended_leases(&over, 100, gone).1, 0);

        let group = json!({"lock_type": "shared", "lock_count": 3, "expires_at": 900, "path": "/a",
        "holders": {
            "dead": {"mode": "IX", "holder": "d", "expires_at": 900, "os_process": process(1)},
            "live": {"mode": "IX", "holder": "l", "expires_at": 600, "os_process": process(2)},
            "old": {"mode": "IS", "holder": "o", "expires_at": 800},
        }});
        let (ended, n) = ended_leases(&group, 100, gone);
        assert_eq!(n, 1);
        assert_eq!(ended["holders"]["dead"]["expires_at"], 100);
        assert_eq!(ended["holders"]["live"]["expires_at"], 600);
        assert_eq!(ended["holders"]["old"]["expires_at"], 800);
        assert_eq!(ended["expires_at"], 800, "the latest of the holders' now");
        assert_eq!(ended["lock_count"], 3, "nobody removed: only a lease ended");
    }
}
