//! The lock documents: their shapes, how an existing one is read, and how ours are written.
//!
//! The book's fields keep their meaning so a client following the book and fsrename exclude
//! each other (`docs/locking.md` has the full table):
//!
//! - **exclusive-shaped** (X, and the global and document locks): `{"lock_type": "exclusive"}`,
//!   created with `_create`; fsrename adds `process_id`, `holder`, `path`, `acquired_at`,
//!   `expires_at`, and `job` when the owner works for a journaled job. The book's document
//!   lock is `{"process_id": ...}`.
//! - **group** (IS, IX, S; the book's shared lock): `{"lock_type": "shared", "lock_count": N}`;
//!   fsrename adds `path`, `expires_at` (the latest of its holders') and `holders`, one entry
//!   per holding process with its `mode`: `{"<process_id>": {"mode": "IX", "holder": ...,
//!   "acquired_at": ..., "expires_at": ..., "job": ...}}`. An entry without `mode` (written
//!   before the modes) is IX. While an S is held the document says `lock_type: exclusive`, so
//!   that the book's shared-lock script refuses rather than barges in.
//! - either shape may carry `waiters`: requests refused there that wait their turn, by
//!   process id: `{"mode", "since", "expires_at", "holder", "job"}`. A group document may hold
//!   only waiters (`lock_count` 0, no holders).
//!
//! `job` names the journal entry the lock protects (before or after it is written):
//! whoever wants to clear an expired lock first fences that entry (see `fs_rename::Journal`),
//! so a holder that was only paused cannot journal a job whose locks are gone. `lock_count`
//! is the number of fsrename holders plus any foreign shares (a book client's increment adds
//! to the count without an entry), so a retried increment by the same process is a no-op and
//! an expired holder's share can be removed without touching anyone else's.

use std::collections::BTreeMap;

use fs_model::FsPath;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The four modes of multi-granularity locking (Gray): intention locks on the ancestors of
/// what is locked, and shared (read) or exclusive (write) locks on it.
///
/// The book's tree locking uses two of them: its "shared" lock on every ancestor of a change is
/// [`LockMode::IntentExclusive`], its exclusive lock is [`LockMode::Exclusive`]. Readers of a
/// whole subtree take [`LockMode::Shared`] on it and [`LockMode::IntentShared`] on its ancestors.
/// Serialized as `IS`, `IX`, `S`, `X`; the book's words `shared` and `exclusive` (what journals
/// written before the modes recorded) read as `IX` and `X`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LockMode {
    /// IS: something below is being read. Refuses only [`LockMode::Exclusive`].
    #[serde(rename = "IS")]
    IntentShared,
    /// IX: something below is being changed (the book's shared lock). Refuses
    /// [`LockMode::Shared`] and [`LockMode::Exclusive`].
    #[serde(rename = "IX", alias = "shared")]
    IntentExclusive,
    /// S: the whole subtree is being read and must not change. Refuses
    /// [`LockMode::IntentExclusive`] and [`LockMode::Exclusive`].
    #[serde(rename = "S")]
    Shared,
    /// X: the whole subtree is being changed. Refuses every other lock.
    #[serde(rename = "X", alias = "exclusive")]
    Exclusive,
}

impl LockMode {
    /// Every mode, weakest first.
    pub const ALL: [LockMode; 4] = [
        LockMode::IntentShared,
        LockMode::IntentExclusive,
        LockMode::Shared,
        LockMode::Exclusive,
    ];

    /// Returns Gray's abbreviation: `IS`, `IX`, `S` or `X`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::IntentShared => "IS",
            LockMode::IntentExclusive => "IX",
            LockMode::Shared => "S",
            LockMode::Exclusive => "X",
        }
    }

    /// Parses `IS`, `IX`, `S`, `X` (and the book's `shared` = IX and `exclusive` = X). Anything
    /// else is `None`.
    pub fn parse(text: &str) -> Option<LockMode> {
        match text {
            "IS" => Some(LockMode::IntentShared),
            "IX" | "shared" => Some(LockMode::IntentExclusive),
            "S" => Some(LockMode::Shared),
            "X" | "exclusive" => Some(LockMode::Exclusive),
            _ => None,
        }
    }

    /// Returns true if grants in `self` and `other` on the same path by two owners can
    /// coexist: Gray's compatibility table.
    pub fn compatible(self, other: LockMode) -> bool {
        use LockMode::*;
        matches!(
            (self, other),
            (IntentShared, IntentShared | IntentExclusive | Shared)
                | (IntentExclusive, IntentShared | IntentExclusive)
                | (Shared, IntentShared | Shared)
        )
    }

    /// Returns true if holding `self` makes a request for `other` on the same path by the same
    /// owner needless (reentrancy).
    pub fn covers(self, other: LockMode) -> bool {
        use LockMode::*;
        self == other
            || self == Exclusive
            || (other == IntentShared && matches!(self, IntentExclusive | Shared))
    }

    /// Returns true for the intention modes (IS, IX), which are taken on ancestors.
    pub fn is_intention(self) -> bool {
        matches!(self, LockMode::IntentShared | LockMode::IntentExclusive)
    }

    /// Returns the intention mode a lock in this mode takes on every ancestor: IS for S, IX
    /// for X.
    pub fn intention(self) -> LockMode {
        match self {
            LockMode::IntentShared | LockMode::Shared => LockMode::IntentShared,
            LockMode::IntentExclusive | LockMode::Exclusive => LockMode::IntentExclusive,
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who holds a lock: a process id (a UUID per lock client), a readable label, and the
/// journaled rename it works for, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The `process_id` of the book: unique per lock client.
    pub process_id: String,
    /// A label for people reading lock documents, e.g. `mv /a /b on host-1`.
    pub holder: String,
    /// The id of the rename journal entry these locks protect, written into every lock
    /// document of this owner.
    pub job: Option<String>,
}

fn intent_exclusive() -> LockMode {
    LockMode::IntentExclusive
}

/// One fsrename holder of a group lock document, as stored under `holders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderEntry {
    /// The mode it holds: IS, IX or S (IX where the entry records none).
    #[serde(default = "intent_exclusive")]
    pub mode: LockMode,
    /// The holder's readable label.
    #[serde(default)]
    pub holder: String,
    /// When it took its share, in epoch milliseconds.
    #[serde(default)]
    pub acquired_at: i64,
    /// When its share expires unless renewed, in epoch milliseconds.
    #[serde(default)]
    pub expires_at: i64,
    /// The rename journal entry its share protects, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

impl HolderEntry {
    /// Returns `owner`'s entry for a lock in `mode` taken at `now` until `expires_at`.
    pub fn of(owner: &Owner, mode: LockMode, now: i64, expires_at: i64) -> HolderEntry {
        HolderEntry {
            mode,
            holder: owner.holder.clone(),
            acquired_at: now,
            expires_at,
            job: owner.job.clone(),
        }
    }
}

/// A request waiting its turn on a lock document, as stored under `waiters`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterEntry {
    /// The mode it waits for.
    #[serde(default = "intent_exclusive")]
    pub mode: LockMode,
    /// Its age: when the request started, epoch milliseconds. Older requests go first.
    #[serde(default)]
    pub since: i64,
    /// When its registration expires unless renewed (a dead waiter stops counting then).
    #[serde(default)]
    pub expires_at: i64,
    /// The waiting owner's readable label.
    #[serde(default)]
    pub holder: String,
    /// The journal entry of the job it works for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

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
}

impl Observed {
    /// Reads a lock document's source.
    pub fn from_source(source: &Value) -> Observed {
        let text = |field: &str| source.get(field).and_then(Value::as_str).map(str::to_owned);
        let waiters: BTreeMap<String, WaiterEntry> = source
            .get("waiters")
            .and_then(|w| serde_json::from_value(w.clone()).ok())
            .unwrap_or_default();
        let holders_field = source.get("holders").filter(|h| !h.is_null());
        if holders_field.is_some()
            || source.get("lock_type").and_then(Value::as_str) == Some("shared")
        {
            let holders: BTreeMap<String, HolderEntry> = holders_field
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
        match self {
            Observed::Exclusive {
                process_id: p,
                expires_at,
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
                });
            }
            Observed::Group { holders, .. } => {
                let refusing: Vec<(&String, &HolderEntry)> = holders
                    .iter()
                    .filter(|(pid, h)| *pid != process_id && !h.mode.compatible(mode))
                    .collect();
                let foreign =
                    self.foreign_shares() > 0 && !LockMode::IntentExclusive.compatible(mode);
                if !refusing.is_empty() || foreign {
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
                    return Some(Conflict {
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
                    });
                }
            }
        }
        if !queue {
            return None;
        }
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

/// Returns the locked path a lock document records, or its id where it records none: what
/// messages call the lock.
pub fn lock_label(id: &str, source: &Value) -> String {
    source
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or(id)
        .to_owned()
}

/// Returns the source of an exclusive lock document (also a global or document lock).
pub fn exclusive_source(owner: &Owner, path: Option<&FsPath>, now: i64, expires_at: i64) -> Value {
    let mut doc = json!({
        "lock_type": "exclusive",
        "process_id": owner.process_id,
        "holder": owner.holder,
        "acquired_at": now,
        "expires_at": expires_at,
    });
    if let Value::Object(fields) = &mut doc {
        if let Some(path) = path {
            fields.insert("path".to_owned(), json!(path.as_str()));
        }
        if let Some(job) = &owner.job {
            fields.insert("job".to_owned(), json!(job));
        }
    }
    doc
}

/// Returns the group lock document after `owner` joins it in `mode` (IS, IX or S): a new
/// document when `current` is `None`, else `current` with one more holder (its waiters and any
/// field a foreign client put there kept). The caller has checked that `owner` may join.
pub fn shared_with(
    current: Option<&Value>,
    owner: &Owner,
    path: &FsPath,
    mode: LockMode,
    (now, expires_at): (i64, i64),
) -> Value {
    let entry = HolderEntry::of(owner, mode, now, expires_at);
    let (lock_count, mut holders) = match current.map(Observed::from_source) {
        Some(Observed::Group {
            lock_count,
            holders,
            ..
        }) => (lock_count, holders),
        _ => (0, BTreeMap::new()),
    };
    holders.insert(owner.process_id.clone(), entry);
    shared_doc(current, Some(path), lock_count + 1, &holders)
}

/// Returns the group lock document after the holders in `leaving` give up their locks, or
/// `None` if nobody holds anything and nobody waits there, and the document should be
/// deleted. Foreign shares and waiters are kept.
pub fn shared_without(current: &Value, leaving: &[&str]) -> Option<Value> {
    let Observed::Group {
        lock_count,
        mut holders,
        waiters,
    } = Observed::from_source(current)
    else {
        return None;
    };
    let before = holders.len();
    holders.retain(|pid, _| !leaving.contains(&pid.as_str()));
    let removed = (before - holders.len()) as i64;
    // Never below the holders still listed, whatever a foreign client did to the count.
    let lock_count = (lock_count - removed).max(holders.len() as i64);
    (lock_count > 0 || !waiters.is_empty())
        .then(|| shared_doc(Some(current), None, lock_count, &holders))
}

/// Returns the group lock document without its foreign shares (`lock_count` down to the
/// holders listed) and without the note of them (`foreign_seen`), or `None` if nobody holds
/// anything and nobody waits there, and the document should be deleted.
pub fn shared_with_foreign_cleared(current: &Value) -> Option<Value> {
    let Observed::Group {
        holders, waiters, ..
    } = Observed::from_source(current)
    else {
        return None;
    };
    let mut current = current.clone();
    if let Value::Object(fields) = &mut current {
        fields.remove(crate::foreign::FOREIGN_SEEN);
    }
    let lock_count = holders.len() as i64;
    (lock_count > 0 || !waiters.is_empty())
        .then(|| shared_doc(Some(&current), None, lock_count, &holders))
}

/// Builds a group lock document; `path` is set when creating, else the current one is kept.
fn shared_doc(
    current: Option<&Value>,
    path: Option<&FsPath>,
    lock_count: i64,
    holders: &BTreeMap<String, HolderEntry>,
) -> Value {
    // Keep any field a foreign client put there.
    let mut fields = match current {
        Some(Value::Object(fields)) => fields.clone(),
        _ => Map::new(),
    };
    let latest = holders.values().map(|h| h.expires_at).max();
    let reading = holders.values().any(|h| h.mode == LockMode::Shared);
    // An S must look exclusive to the book's shared-lock script, which refuses only that.
    let lock_type = if reading { "exclusive" } else { "shared" };
    fields.insert("lock_type".to_owned(), json!(lock_type));
    fields.insert("lock_count".to_owned(), json!(lock_count));
    if let Some(path) = path {
        fields.insert("path".to_owned(), json!(path.as_str()));
    }
    fields.insert("holders".to_owned(), json!(holders));
    match latest {
        Some(latest) => fields.insert("expires_at".to_owned(), json!(latest)),
        None => fields.remove("expires_at"),
    };
    Value::Object(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(pid: &str) -> Owner {
        Owner {
            process_id: pid.to_owned(),
            holder: format!("job {pid}"),
            job: Some(format!("journal-{pid}")),
        }
    }

    fn clinton() -> FsPath {
        FsPath::parse("/clinton").expect("path")
    }

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

    #[test]
    fn shares_count_once_per_process() {
        let first = shared_with(
            None,
            &owner("a"),
            &clinton(),
            LockMode::IntentExclusive,
            (1, 10),
        );
        assert_eq!(first["lock_count"], 1);
        let second = shared_with(
            Some(&first),
            &owner("b"),
            &clinton(),
            LockMode::IntentExclusive,
            (2, 20),
        );
        assert_eq!(second["lock_count"], 2);
        assert_eq!(second["expires_at"], 20);
        let one_left = shared_without(&second, &["a"]).expect("b still holds");
        assert_eq!(one_left["lock_count"], 1);
        assert!(Observed::from_source(&one_left).is_held_by("b"));
        assert_eq!(
            shared_without(&one_left, &["b"]),
            None,
            "last share deletes"
        );
    }

    #[test]
    fn foreign_shares_survive_our_release() {
        let book = json!({"lock_type": "shared", "lock_count": 1});
        let joined = shared_with(
            Some(&book),
            &owner("a"),
            &clinton(),
            LockMode::IntentExclusive,
            (1, 10),
        );
        assert_eq!(joined["lock_count"], 2);
        let left = shared_without(&joined, &["a"]).expect("foreign share remains");
        assert_eq!(left["lock_count"], 1);
        assert_eq!(Observed::from_source(&left).foreign_shares(), 1);
    }

    #[test]
    fn locks_name_the_journal_entry_they_protect() {
        let exclusive = exclusive_source(&owner("a"), Some(&clinton()), 1, 10);
        assert_eq!(exclusive["job"], "journal-a");
        assert!(matches!(
            Observed::from_source(&exclusive),
            Observed::Exclusive { job: Some(j), .. } if j == "journal-a"
        ));
        let shared = shared_with(
            None,
            &owner("b"),
            &clinton(),
            LockMode::IntentExclusive,
            (1, 10),
        );
        assert_eq!(shared["holders"]["b"]["job"], "journal-b");
        let anonymous = Owner {
            job: None,
            ..owner("c")
        };
        let plain = exclusive_source(&anonymous, None, 1, 10);
        assert!(plain.get("job").is_none(), "no job, no field: {plain}");
        let joined = shared_with(
            Some(&shared),
            &anonymous,
            &clinton(),
            LockMode::IntentExclusive,
            (1, 10),
        );
        assert!(joined["holders"]["c"].get("job").is_none());
        assert_eq!(Observed::from_source(&joined).jobs(), ["journal-b"]);
        assert!(Observed::from_source(&plain).jobs().is_empty());
    }
}
