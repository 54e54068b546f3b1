//! The protocol marker: one document in the journal index that says which fsrename protocol
//! the tree is kept by, so that a recoverer too old for it refuses to run rather than break it.
//!
//! Protocol 2 is intention locks shared by a process (`fs_locks::SharedIntentions`, on by
//! default in `fsrename serve` from 0.2.0): a *hold* names no journal entry, and a recovery
//! that does not know holds would clear an expired one as a lock that protects nothing,
//! without fencing the jobs that borrowed it (`docs/locking.md`). A service that shares
//! writes the marker before its first job ([`Journal::declare_protocol`]).
//!
//! **Why in the journal index.** Every recovery, of every version that has a journal, lists
//! it before it sweeps a lock, and stops at the first document it cannot read. The marker is
//! shaped so that none before 0.2.0 can read it: its `kind`, the first field, is not a kind of
//! job but the words an older fsrename then prints, naming the version it needs (`unknown
//! variant "fsrename protocol 2: ...", expected one of rename, copy, delete`). So an older
//! `fsrename recover`, `fsck` or service stops with that message, before touching a lock. From
//! 0.2.0 on the marker is read for what it is: a protocol this version knows is passed over,
//! a newer one refused ([`RenameError::NewerProtocol`]) with the words its writer left.

use fs_store::StoreError;
use serde_json::{json, Value};

use super::Journal;
use crate::error::{RenameError, Result};

/// The protocol this version keeps a tree by.
pub const PROTOCOL: u64 = 2;

/// The id of the marker in the journal index.
pub const PROTOCOL_ID: &str = "fsrename-protocol";

/// The version of fsrename that introduced [`PROTOCOL`].
const NEEDS: &str = "0.2.0";

/// The marker this version writes.
fn marker(now: i64) -> Value {
    json!({
        "kind": format!(
            "fsrename protocol {PROTOCOL}: run fsrename {NEEDS} or later on this tree (its \
             services share intention locks, which an older recovery would clear unfenced)"
        ),
        "protocol": PROTOCOL,
        "needs": NEEDS,
        "written_by": env!("CARGO_PKG_VERSION"),
        "written_at": now,
    })
}

/// Checks the marker found in `index`: `Ok` for a protocol this version knows.
///
/// # Errors
/// [`RenameError::NewerProtocol`] for a newer one; [`RenameError::BadDocument`] for a marker
/// without a protocol number.
pub(super) fn check(index: &str, source: &Value) -> Result<()> {
    let Some(protocol) = source.get("protocol").and_then(Value::as_u64) else {
        return Err(RenameError::BadDocument {
            index: index.to_owned(),
            id: PROTOCOL_ID.to_owned(),
            message: "the protocol marker has no `protocol` number".to_owned(),
        });
    };
    if protocol <= PROTOCOL {
        return Ok(());
    }
    let needs = source
        .get("needs")
        .and_then(Value::as_str)
        .unwrap_or("a newer version");
    Err(RenameError::NewerProtocol {
        index: index.to_owned(),
        protocol,
        needs: needs.to_owned(),
    })
}

impl Journal {
    /// Writes the protocol marker, unless one of this protocol or newer is there: before a
    /// process lends intention locks (protocol 2). Creates the index if it is missing.
    ///
    /// # Errors
    /// [`RenameError::NewerProtocol`] if the tree is kept by a newer protocol;
    /// [`RenameError::Store`].
    pub async fn declare_protocol(&self) -> Result<()> {
        let context = || format!("writing the protocol marker in `{}`", self.index);
        let found = match self.store.get(&self.index, PROTOCOL_ID).await {
            Ok(found) => found,
            Err(StoreError::IndexNotFound { .. }) => {
                self.ensure_index().await?;
                None
            }
            Err(e) => return Err(RenameError::store(context())(e)),
        };
        if let Some(doc) = found {
            check(&self.index, &doc.source)?;
            if doc.source.get("protocol").and_then(Value::as_u64) == Some(PROTOCOL) {
                return Ok(());
            }
        }
        // When it was written, for whoever reads it: nothing depends on it.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.store
            .index(&self.index, PROTOCOL_ID, marker(now), None)
            .await
            .map(|_| ())
            .map_err(RenameError::store(context()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::entry::parse_doc;

    #[test]
    fn the_marker_is_no_journal_entry_an_older_version_can_read() {
        // What an older fsrename does with it: parse it as an entry, and stop with its words.
        let Err(refused) = parse_doc("fs-journal", PROTOCOL_ID, marker(0)) else {
            panic!("an older version reads the marker as an entry");
        };
        let message = refused.to_string();
        assert!(
            message.contains("run fsrename 0.2.0 or later on this tree"),
            "{message}"
        );
    }

    #[test]
    fn a_known_protocol_passes_and_a_newer_one_is_refused_with_its_words() {
        assert!(check("j", &marker(0)).is_ok());
        assert!(check("j", &json!({"protocol": 1})).is_ok());
        let newer = json!({"protocol": PROTOCOL + 1, "needs": "9.0.0"});
        let refused = check("j", &newer).expect_err("newer");
        assert!(refused.to_string().contains("9.0.0"), "{refused}");
        assert!(check("j", &json!({"kind": "x"})).is_err());
    }
}
