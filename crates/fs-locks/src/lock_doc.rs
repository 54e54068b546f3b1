//! The lock documents: their shapes, how an existing one is read, and how ours are written.
//!
//! The book's fields keep their meaning so a client following the book and fsrename exclude
//! each other:
//!
//! - exclusive: `{"lock_type": "exclusive"}`, created with `_create`; fsrename adds
//!   `process_id`, `holder`, `path`, `acquired_at`, `expires_at`, and `job` when the owner
//!   works for a journaled rename. Global and document locks have the same shape (the book's
//!   document lock is `{"process_id": ...}`).
//! - shared: `{"lock_type": "shared", "lock_count": N}`; fsrename adds `path`, `expires_at`
//!   (the latest of its holders') and `holders`, one entry per holding process:
//!   `{"<process_id>": {"holder": ..., "acquired_at": ..., "expires_at": ..., "job": ...}}`.
//!
//! `job` names the rename journal entry the lock protects (before or after it is written):
//! whoever wants to clear an expired lock first fences that entry (see `fs_rename::Journal`),
//! so a holder that was only paused cannot journal a rename whose locks are gone. `lock_count`
//!   is the number of fsrename holders plus any foreign shares (a book client's increment adds
//!   to the count without an entry), so a retried increment by the same process is a no-op and
//!   an expired holder's share can be removed without touching anyone else's.

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

/// One fsrename holder of a shared lock, as stored under `holders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderEntry {
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
    /// Returns `owner`'s entry for a share taken at `now` until `expires_at`.
    pub fn of(owner: &Owner, now: i64, expires_at: i64) -> HolderEntry {
        HolderEntry {
            holder: owner.holder.clone(),
            acquired_at: now,
            expires_at,
            job: owner.job.clone(),
        }
    }
}

/// What an existing lock document says, read leniently: the book's documents carry only some
/// of the fields, and anything unreadable counts as an exclusive lock held by someone else.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// An exclusive lock (also global and document locks). `process_id` is `None` for a
    /// foreign document without one.
    Exclusive {
        /// The owner's process id, if recorded.
        process_id: Option<String>,
        /// The owner's label, if recorded.
        holder: Option<String>,
        /// When it expires unless renewed, if recorded.
        expires_at: Option<i64>,
        /// The rename journal entry it protects, if recorded.
        job: Option<String>,
    },
    /// A shared lock.
    Shared {
        /// The book's `lock_count`: all holders, foreign ones included.
        lock_count: i64,
        /// fsrename's holders by process id.
        holders: BTreeMap<String, HolderEntry>,
    },
}

impl Observed {
    /// Reads a lock document's source.
    pub fn from_source(source: &Value) -> Observed {
        let text = |field: &str| source.get(field).and_then(Value::as_str).map(str::to_owned);
        if source.get("lock_type").and_then(Value::as_str) == Some("shared") {
            let holders: BTreeMap<String, HolderEntry> = source
                .get("holders")
                .and_then(|h| serde_json::from_value(h.clone()).ok())
                .unwrap_or_default();
            let lock_count = source
                .get("lock_count")
                .and_then(Value::as_i64)
                .unwrap_or(holders.len() as i64);
            return Observed::Shared {
                lock_count,
                holders,
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
        }
    }

    /// Returns the mode of this lock.
    pub fn mode(&self) -> LockMode {
        match self {
            Observed::Exclusive { .. } => LockMode::Exclusive,
            Observed::Shared { .. } => LockMode::IntentExclusive,
        }
    }

    /// Returns true if `process_id` holds this lock (exclusively, or a share of it).
    pub fn is_held_by(&self, process_id: &str) -> bool {
        match self {
            Observed::Exclusive { process_id: p, .. } => p.as_deref() == Some(process_id),
            Observed::Shared { holders, .. } => holders.contains_key(process_id),
        }
    }

    /// Returns the rename journal entries this lock protects, one per holder that records
    /// one, sorted and without repeats.
    pub fn jobs(&self) -> Vec<&str> {
        let mut jobs: Vec<&str> = match self {
            Observed::Exclusive { job, .. } => job.iter().map(String::as_str).collect(),
            Observed::Shared { holders, .. } => {
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
            Observed::Shared {
                lock_count,
                holders,
            } => (*lock_count - holders.len() as i64).max(0),
            Observed::Exclusive { .. } => 0,
        }
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
            Observed::Shared { holders, .. } => {
                let mut parts: Vec<String> = holders
                    .iter()
                    .map(|(p, e)| format!("{} (process {p})", e.holder))
                    .collect();
                let foreign = self.foreign_shares();
                if foreign > 0 {
                    parts.push(format!("{foreign} share(s) without a process_id"));
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

/// Returns `source` (an exclusive lock of ours) with a new expiry.
pub fn renewed_exclusive(source: &Value, expires_at: i64) -> Value {
    let mut doc = source.clone();
    if let Value::Object(fields) = &mut doc {
        fields.insert("expires_at".to_owned(), json!(expires_at));
    }
    doc
}

/// Returns the shared lock document after `owner` joins it: a new document when `current` is
/// `None`, else `current` with one more holder. The caller has checked that `current` is a
/// shared lock `owner` does not hold yet.
pub fn shared_with(
    current: Option<&Value>,
    owner: &Owner,
    path: &FsPath,
    now: i64,
    expires_at: i64,
) -> Value {
    let entry = HolderEntry::of(owner, now, expires_at);
    let (lock_count, mut holders) = match current.map(Observed::from_source) {
        Some(Observed::Shared {
            lock_count,
            holders,
        }) => (lock_count, holders),
        _ => (0, BTreeMap::new()),
    };
    holders.insert(owner.process_id.clone(), entry);
    shared_doc(current, Some(path), lock_count + 1, &holders)
}

/// Returns the shared lock document after the holders in `leaving` give up their shares, or
/// `None` if no share is left and the document should be deleted. Foreign shares are kept.
pub fn shared_without(current: &Value, leaving: &[&str]) -> Option<Value> {
    let Observed::Shared {
        lock_count,
        mut holders,
    } = Observed::from_source(current)
    else {
        return None;
    };
    let before = holders.len();
    holders.retain(|pid, _| !leaving.contains(&pid.as_str()));
    let removed = (before - holders.len()) as i64;
    // Never below the holders still listed, whatever a foreign client did to the count.
    let lock_count = (lock_count - removed).max(holders.len() as i64);
    (lock_count > 0).then(|| shared_doc(Some(current), None, lock_count, &holders))
}

/// Returns the shared lock document with `process_id`'s share renewed until `expires_at`, or
/// `None` if it holds no share there.
pub fn shared_renewed(current: &Value, process_id: &str, expires_at: i64) -> Option<Value> {
    let Observed::Shared {
        lock_count,
        mut holders,
    } = Observed::from_source(current)
    else {
        return None;
    };
    holders.get_mut(process_id)?.expires_at = expires_at;
    Some(shared_doc(Some(current), None, lock_count, &holders))
}

/// Builds a shared lock document; `path` is set when creating, else the current one is kept.
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
    fields.insert("lock_type".to_owned(), json!("shared"));
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
        let first = shared_with(None, &owner("a"), &clinton(), 1, 10);
        assert_eq!(first["lock_count"], 1);
        let second = shared_with(Some(&first), &owner("b"), &clinton(), 2, 20);
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
        let joined = shared_with(Some(&book), &owner("a"), &clinton(), 1, 10);
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
        let shared = shared_with(None, &owner("b"), &clinton(), 1, 10);
        assert_eq!(shared["holders"]["b"]["job"], "journal-b");
        let anonymous = Owner {
            job: None,
            ..owner("c")
        };
        let plain = exclusive_source(&anonymous, None, 1, 10);
        assert!(plain.get("job").is_none(), "no job, no field: {plain}");
        let joined = shared_with(Some(&shared), &anonymous, &clinton(), 1, 10);
        assert!(joined["holders"]["c"].get("job").is_none());
        assert_eq!(Observed::from_source(&joined).jobs(), ["journal-b"]);
        assert!(Observed::from_source(&plain).jobs().is_empty());
    }

    #[test]
    fn renewal_touches_only_the_renewing_holder() {
        let doc = shared_with(None, &owner("a"), &clinton(), 1, 10);
        let doc = shared_with(Some(&doc), &owner("b"), &clinton(), 1, 10);
        let renewed = shared_renewed(&doc, "a", 99).expect("a holds");
        assert_eq!(renewed["holders"]["a"]["expires_at"], 99);
        assert_eq!(renewed["holders"]["b"]["expires_at"], 10);
        assert_eq!(shared_renewed(&doc, "z", 99), None);
    }
}
