//! The lock documents fsrename writes: exclusive ones, and group documents joined and left.

use std::collections::BTreeMap;

use fs_model::FsPath;
use serde_json::{json, Map, Value};

use super::entries::{HolderEntry, Owner};
use super::observed::Observed;
use super::FOREIGN_SEEN;
use fs_model::LockMode;

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
        if let Some(process) = &owner.os_process {
            fields.insert("os_process".to_owned(), json!(process));
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
        fields.remove(FOREIGN_SEEN);
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

/// Returns `source` with the foreign shares noted under [`FOREIGN_SEEN`]: `count` of them,
/// seen unchanged since `since`.
pub fn with_foreign_seen(source: &Value, count: i64, since: i64) -> Value {
    let mut source = source.clone();
    if let Value::Object(fields) = &mut source {
        fields.insert(
            FOREIGN_SEEN.to_owned(),
            json!({ "count": count, "since": since }),
        );
    }
    source
}

/// Returns `source` without the waiter entries that expired before `now`.
pub fn without_dead_waiters(mut source: Value, now: i64) -> Value {
    if let Some(Value::Object(waiters)) = source.get_mut("waiters") {
        waiters.retain(|_, w| {
            w.get("expires_at")
                .and_then(Value::as_i64)
                .is_some_and(|t| t >= now)
        });
        if waiters.is_empty() {
            if let Value::Object(fields) = &mut source {
                fields.remove("waiters");
            }
        }
    }
    source
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(pid: &str) -> Owner {
        Owner {
            process_id: pid.to_owned(),
            holder: format!("job {pid}"),
            job: Some(format!("journal-{pid}")),
            os_process: None,
        }
    }

    fn clinton() -> FsPath {
        FsPath::parse("/clinton").expect("path")
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
