//! [`Observed`]: an existing lock document read leniently, and why it refuses a request
//! ([`Conflict`]).

use std::collections::BTreeMap;

use serde_json::Value;

use super::entries::{HolderEntry, WaiterEntry};
use crate::os_process::OsProcess;
use fs_model::LockMode;

/// What an existing lock document says, read leniently: the book's documents carry only some
/// of the fields, and anything unreadable counts as an exclusive lock held by someone else.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// An exclusive-shaped lock (X, also global and document locks). `process_id` is `None`
    /// for a foreign document without one.
    Exclusive {
        /// The owner's process id, if recorded.
        process_id: Option<String>,
        /// The owner's label, if recorded.
        holder: Option<String>,
        /// When it expires unless renewed, if recorded.
        expires_at: Option<i64>,
        /// The journal entry it protects, if recorded.
        job: Option<String>,
        /// The owner's operating-system process, if recorded.
        os_process: Option<OsProcess>,
        /// Requests waiting their turn, by process id.
        waiters: BTreeMap<String, WaiterEntry>,
    },
    /// A group lock document: holders in IS, IX or S (and the book's shares), or only waiters.
    Group {
        /// The book's `lock_count`: all holders, foreign ones included.
        lock_count: i64,
        /// fsrename's holders by process id.
        holders: BTreeMap<String, HolderEntry>,
        /// Requests waiting their turn, by process id.
        waiters: BTreeMap<String, WaiterEntry>,
    },
}

/// Why a request cannot be granted on a document, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The mode of what refuses (the strongest of the refusing holders), or the waiter's.
    pub mode: LockMode,
    /// Who: labels and process ids.
    pub holders: String,
    /// True when the refusal comes from an older waiter, not a holder.
    pub waiter: bool,
    /// When every refusing holder's lease ended, if they all have (a dead holder: only
    /// `fsrename recover` clears it); the latest of their expiries.
    pub expired_at: Option<i64>,
    /// The operating-system processes of the refusing holders, when every one of them
    /// recorded its own (none for a waiter, or where a holder or a foreign share recorded
    /// none): what a process on their machine can prove gone.
    pub processes: Option<Vec<OsProcess>>,
}

impl Observed {
    /// Reads a lock document's source.
    pub fn from_source(source: &Value) -> Observed {
        let text = |field: &str| source.get(field).and_then(Value::as_str).map(str::to_owned);
        let waiters: BTreeMap<String, WaiterEntry> = source
            .get("waiters")
            .and_then(|w| serde_json::from_value(w.clone()).ok())
            .unwrap_or_default();
        // The painless and its Rust twins tell the two shapes apart the same way.
        if fs_model::lock_scripts::is_group_source(source) {
            let holders: BTreeMap<String, HolderEntry> = source
                .get("holders")
                .and_then(|h| serde_json::from_value(h.clone()).ok())
                .unwrap_or_default();
            let lock_count = source
                .get("lock_count")
                .and_then(Value::as_i64)
                .unwrap_or(holders.len() as i64);
            return Observed::Group {
                lock_count,
                holders,
                waiters,
            };
        }
        Observed::Exclusive {
            process_id: source.get("process_id").map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            holder: text("holder"),
            expires_at: source.get("expires_at").and_then(Value::as_i64),
            job: text("job"),
            os_process: source
                .get("os_process")
                .and_then(|p| serde_json::from_value(p.clone()).ok()),
            waiters,
        }
    }

    /// Returns the strongest mode anyone holds here: X for an exclusive-shaped document; for a
    /// group, S if an S is held, else IX if an IX (or a foreign share) is, else IS (also for a
    /// document that holds only waiters).
    pub fn mode(&self) -> LockMode {
        match self {
            Observed::Exclusive { .. } => LockMode::Exclusive,
            Observed::Group { holders, .. } => {
                let strongest = holders.values().map(|h| h.mode).max();
                match strongest {
                    Some(LockMode::Shared) => LockMode::Shared,
                    _ if self.foreign_shares() > 0 => LockMode::IntentExclusive,
                    Some(mode) => mode,
                    None => LockMode::IntentShared,
                }
            }
        }
    }

    /// Returns the mode `process_id` holds here, if it holds anything.
    pub fn held_mode(&self, process_id: &str) -> Option<LockMode> {
        match self {
            Observed::Exclusive { process_id: p, .. } => {
                (p.as_deref() == Some(process_id)).then_some(LockMode::Exclusive)
            }
            Observed::Group { holders, .. } => holders.get(process_id).map(|h| h.mode),
        }
    }

    /// Returns true if `process_id` holds this lock (in any mode).
    pub fn is_held_by(&self, process_id: &str) -> bool {
        self.held_mode(process_id).is_some()
    }

    /// Returns true if nobody holds anything here (a group document with only waiters).
    pub fn is_unheld(&self) -> bool {
        matches!(self, Observed::Group { holders, lock_count, .. } if holders.is_empty() && *lock_count <= 0)
    }

    /// Returns true if nobody holds anything here and nobody waits (a document to delete).
    pub fn is_empty(&self) -> bool {
        self.is_unheld() && self.waiters().is_empty()
    }

    /// Returns the requests waiting their turn here, by process id.
    pub fn waiters(&self) -> &BTreeMap<String, WaiterEntry> {
        match self {
            Observed::Exclusive { waiters, .. } | Observed::Group { waiters, .. } => waiters,
        }
    }

    /// Returns the waiters in queue order (oldest first), live or not.
    pub fn queue(&self) -> Vec<(&String, &WaiterEntry)> {
        let mut queue: Vec<(&String, &WaiterEntry)> = self.waiters().iter().collect();
        queue.sort_by(|a, b| (a.1.since, a.0).cmp(&(b.1.since, b.0)));
        queue
    }

    /// Returns the journal entries this lock protects, one per holder that records one,
    /// sorted and without repeats.
    pub fn jobs(&self) -> Vec<&str> {
        let mut jobs: Vec<&str> = match self {
            Observed::Exclusive { job, .. } => job.iter().map(String::as_str).collect(),
            Observed::Group { holders, .. } => {
                holders.values().filter_map(|h| h.job.as_deref()).collect()
            }
        };
        jobs.sort_unstable();
        jobs.dedup();
        jobs
    }

    /// Returns the number of shares held by clients that left no holder entry (the book's).
    pub fn foreign_shares(&self) -> i64 {
        match self {
            Observed::Group {
                lock_count,
                holders,
                ..
            } => (*lock_count - holders.len() as i64).max(0),
            Observed::Exclusive { .. } => 0,
        }
    }

    /// Says why `process_id`'s request for `mode` (started at `since`) would be refused here
    /// at `now`, or `None` if it would not (what the acquire script decides, told for people).
    /// `queue`: whether older waiters count.
    pub fn conflict(
        &self,
        process_id: &str,
        mode: LockMode,
        since: i64,
        now: i64,
        queue: bool,
    ) -> Option<Conflict> {
        match self.holder_conflict(process_id, mode, now) {
            Some(conflict) => Some(conflict),
            None if queue => self.waiter_conflict(process_id, mode, since, now),
            None => None,
        }
    }

    /// The holders (other than `process_id`) that refuse a request for `mode` at `now`.
    fn holder_conflict(&self, process_id: &str, mode: LockMode, now: i64) -> Option<Conflict> {
        let holders = match self {
            Observed::Exclusive {
                process_id: p,
                expires_at,
                os_process,
                ..
            } => {
                if p.as_deref() == Some(process_id) {
                    return None;
                }
                return Some(Conflict {
                    mode: LockMode::Exclusive,
                    holders: self.describe_holders(),
                    waiter: false,
                    expired_at: expires_at.filter(|t| *t > 0 && *t < now),
                    processes: os_process.clone().map(|p| vec![p]),
                });
            }
            Observed::Group { holders, .. } => holders,
        };
        let refusing: Vec<(&String, &HolderEntry)> = holders
            .iter()
            .filter(|(pid, h)| *pid != process_id && !h.mode.compatible(mode))
            .collect();
        let foreign = self.foreign_shares() > 0 && !LockMode::IntentExclusive.compatible(mode);
        if refusing.is_empty() && !foreign {
            return None;
        }
        let mut parts: Vec<String> = refusing
            .iter()
            .map(|(p, h)| format!("{} (process {p})", h.holder))
            .collect();
        if foreign {
            parts.push(format!(
                "{} share(s) without a process_id",
                self.foreign_shares()
            ));
        }
        let all_expired = !foreign && refusing.iter().all(|(_, h)| h.expires_at < now);
        Some(Conflict {
            mode: refusing
                .iter()
                .map(|(_, h)| h.mode)
                .max()
                .unwrap_or(LockMode::IntentExclusive),
            holders: parts.join(", "),
            waiter: false,
            expired_at: all_expired
                .then(|| refusing.iter().map(|(_, h)| h.expires_at).max())
                .flatten(),
            processes: if foreign {
                None
            } else {
                refusing
                    .iter()
                    .map(|(_, h)| h.os_process.clone())
                    .collect::<Option<Vec<OsProcess>>>()
            },
        })
    }

    /// The oldest live waiter, older than the request (`since`, then process id), that wants
    /// a mode incompatible with `mode`: it goes first.
    fn waiter_conflict(
        &self,
        process_id: &str,
        mode: LockMode,
        since: i64,
        now: i64,
    ) -> Option<Conflict> {
        let older = self.queue().into_iter().find(|(pid, w)| {
            *pid != process_id
                && w.expires_at >= now
                && (w.since, pid.as_str()) < (since, process_id)
                && !w.mode.compatible(mode)
        })?;
        Some(Conflict {
            mode: older.1.mode,
            holders: format!(
                "{} (process {}), waiting since {} ms",
                older.1.holder, older.0, older.1.since
            ),
            waiter: true,
            expired_at: None,
            processes: None,
        })
    }

    /// Describes who holds this lock, for messages: labels and process ids, foreign shares.
    pub fn describe_holders(&self) -> String {
        match self {
            Observed::Exclusive {
                process_id, holder, ..
            } => match (holder, process_id) {
                (Some(h), Some(p)) => format!("{h} (process {p})"),
                (None, Some(p)) => format!("process {p}"),
                (Some(h), None) => h.clone(),
                (None, None) => "a client that did not record a process_id".to_owned(),
            },
            Observed::Group { holders, .. } => {
                let mut parts: Vec<String> = holders
                    .iter()
                    .map(|(p, e)| format!("{} {} (process {p})", e.mode, e.holder))
                    .collect();
                let foreign = self.foreign_shares();
                if foreign > 0 {
                    parts.push(format!("{foreign} share(s) without a process_id"));
                }
                if parts.is_empty() {
                    parts.push("nobody (only waiters)".to_owned());
                }
                parts.join(", ")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_books_documents_are_understood() {
        let exclusive = Observed::from_source(&json!({"lock_type": "exclusive"}));
        assert_eq!(exclusive.mode(), LockMode::Exclusive);
        assert!(!exclusive.is_held_by("anyone"));
        let shared = Observed::from_source(&json!({"lock_type": "shared", "lock_count": 2}));
        assert_eq!(shared.foreign_shares(), 2);
        let document = Observed::from_source(&json!({"process_id": 123}));
        assert!(document.is_held_by("123"));
        let global = Observed::from_source(&json!({}));
        assert_eq!(
            global.mode(),
            LockMode::Exclusive,
            "anything unreadable is exclusive"
        );
    }
}
