//! The stored painless scripts of the lock protocol, each beside a Rust function that does
//! exactly what it does.
//!
//! Elasticsearch runs the painless source; stores and test servers that run no painless (the
//! Elasticsearch-behaviour proxy of `fs-testkit`) run the Rust function instead, inside the
//! same read, apply, conditional-write cycle Elasticsearch's update uses. The two are kept side
//! by side, one script a file (`acquire`, `release`, `renew`, `wait` with `unwait`), so that a
//! reader can compare them line by line; the real-Elasticsearch tests check the painless
//! itself. What they share (the painless functions at the top of a script and their Rust
//! twins) is in `prelude`; Gray's tables are [`LockMode`](crate::LockMode)'s, written into the
//! painless at compile time.
//!
//! The scripts implement the four modes of multi-granularity locking (IS, IX, S, X) and the
//! waiters of fair waiting; `docs/locking.md` has the document shapes and the tables. They are
//! stored under ids of their own (`fsrename2-*`), so that an fsrename from before the modes,
//! whose scripts are stored under `fsrename-*`, and this one never run each other's scripts.
//! A server keeps what was stored under an id, so a changed painless source needs a new id
//! (the test `the_stored_sources_are_unchanged` guards this). The compare-and-set protocol
//! runs the same Rust functions on the document it read and writes the result conditionally:
//! one implementation of the lock logic for both protocols.
//!
//! Painless semantics the Rust follows: a missing field reads as `null`; `null != 'x'` is true
//! and `null == 'x'` false; `ctx.op = 'noop'` discards every change the script made;
//! `Debug.explain` fails the update with `painless_explain_error` (the book's `assert false`),
//! which callers read as a deliberate refusal, never as a race.

use serde_json::{Map, Value};

mod acquire;
pub(crate) mod prelude;
mod release;
mod renew;
mod wait;

pub use acquire::ACQUIRE;
pub use release::RELEASE;
pub use renew::RENEW;
pub use wait::{UNWAIT, WAIT};

/// What a script asks the update to do with the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptOp {
    /// Write the changed source (`ctx.op` left at `index`).
    Index,
    /// Change nothing (`ctx.op = 'noop'`).
    Noop,
    /// Delete the document (`ctx.op = 'delete'`).
    Delete,
}

/// Why a script did not finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The script refused on purpose (`Debug.explain`): Elasticsearch answers 400 with
    /// `painless_explain_error`.
    #[error("refused: {0}")]
    Refused(String),
    /// The script failed on the document it found (a field of the wrong type): Elasticsearch
    /// answers 400 with a `script_exception`.
    #[error("script error: {0}")]
    Failed(String),
}

/// One stored script: its id, its painless source, and the same logic in Rust.
#[derive(Debug, Clone, Copy)]
pub struct LockScript {
    /// The id it is stored under (`PUT _scripts/{id}`).
    pub id: &'static str,
    /// The painless source Elasticsearch runs.
    pub painless: &'static str,
    run: fn(&mut Map<String, Value>, &Value) -> Result<ScriptOp, ScriptError>,
}

impl LockScript {
    /// Runs the script on `source` (the document's `ctx._source`) with `params`. On
    /// [`ScriptOp::Noop`] and on an error, `source` must be thrown away: painless discards the
    /// changes of a script that does not end in `index`.
    ///
    /// # Errors
    /// [`ScriptError::Refused`] where the painless calls `Debug.explain`, [`ScriptError::Failed`]
    /// where it would throw.
    pub fn run(
        &self,
        source: &mut Map<String, Value>,
        params: &Value,
    ) -> Result<ScriptOp, ScriptError> {
        (self.run)(source, params)
    }
}

/// The refusal that says the owner holds the lock in a weaker mode and asked for a stronger
/// one (an upgrade, which fsrename does not do).
pub const UPGRADE_REFUSAL: &str = "fsrename: upgrade";

/// The refusal by an older waiter (fair waiting: no barging).
pub const WAITER_REFUSAL: &str = "fsrename: refused by an older waiter";

/// Every stored script of the lock protocol.
pub const LOCK_SCRIPTS: [LockScript; 5] = [ACQUIRE, RELEASE, RENEW, WAIT, UNWAIT];

/// Returns the lock script stored under `id`.
pub fn lock_script(id: &str) -> Option<&'static LockScript> {
    LOCK_SCRIPTS.iter().find(|s| s.id == id)
}

/// Returns the lock script whose painless source is `painless`, so that a server that runs no
/// painless can recognise what it is asked to store.
pub fn lock_script_by_source(painless: &str) -> Option<&'static LockScript> {
    LOCK_SCRIPTS.iter().find(|s| s.painless == painless)
}

/// Whether a lock document's source is group-shaped (fsrename's `holders`, or the book's
/// `lock_type: shared`) rather than exclusive-shaped: the first question every script asks,
/// and how a typed reader of lock documents must tell the two shapes apart. Anything that is
/// not an object reads as exclusive-shaped.
pub fn is_group_source(source: &Value) -> bool {
    source.as_object().is_some_and(prelude::is_group)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Documents and params the scripts' tests share.

    use serde_json::{json, Map, Value};

    use super::{LockScript, ScriptError, ScriptOp};

    /// Runs `script` on `doc`, returning what it answered and the document it left.
    pub(crate) fn run(
        script: &LockScript,
        doc: Value,
        params: Value,
    ) -> (Result<ScriptOp, ScriptError>, Value) {
        let Value::Object(mut source) = doc else {
            panic!("a test document is an object")
        };
        let result = script.run(&mut source, &params);
        (result, Value::Object(source))
    }

    /// A holder entry in `mode`, expiring at `expires_at`.
    pub(crate) fn entry(mode: &str, expires_at: i64) -> Value {
        json!({"holder": "h", "acquired_at": 1, "expires_at": expires_at, "mode": mode})
    }

    /// The acquire params of `pid` asking for `mode`, its request started at `since`; now is 10.
    pub(crate) fn ask(pid: &str, mode: &str, since: i64) -> Value {
        json!({"process_id": pid, "mode": mode, "path": "/x", "since": since, "now": 10,
               "queue": true, "entry": entry(mode, 50),
               "exclusive": {"lock_type": "exclusive", "process_id": pid, "path": "/x", "expires_at": 50}})
    }

    /// A group document on `/x` with these holders.
    pub(crate) fn group(holders: Value) -> Value {
        let n = holders.as_object().map_or(0, Map::len);
        json!({"lock_type": "shared", "lock_count": n, "path": "/x", "holders": holders})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sha2::{Digest, Sha256};

    #[test]
    fn scripts_are_found_by_id_and_by_source_and_are_new() {
        for script in LOCK_SCRIPTS {
            assert_eq!(lock_script(script.id).map(|s| s.id), Some(script.id));
            assert_eq!(
                lock_script_by_source(script.painless).map(|s| s.id),
                Some(script.id)
            );
            assert!(script.id.starts_with("fsrename2-"), "{}", script.id);
        }
        assert!(lock_script("fsrename-shared-acquire").is_none());
    }

    #[test]
    fn the_stored_sources_are_unchanged() {
        // Servers hold these sources under these ids: a change of a single byte needs a new id
        // (`fsrename3-*`) and, then, new digests here.
        let want = [
            (
                "fsrename2-acquire",
                "5326e9f873d0df0390f84a20a6dad4a1c7bdd420cb7630e598b317ea09ff4b93",
            ),
            (
                "fsrename2-release",
                "c5fe858cc7d2b3d03ca15bf85e7baa3b715f9c3a37418d6a75594aa09d83d8cc",
            ),
            (
                "fsrename2-renew",
                "8977c3602a832ee37f89af8ca3bf6053702d682b9fd44289c1491e6de8072137",
            ),
            (
                "fsrename2-wait",
                "223fd27a79c3b4ffe4fef76f187e86abbd37e48637524ba76033cd4cbbdd08d0",
            ),
            (
                "fsrename2-unwait",
                "9add29456bb37bea985f5e4ff500574cc718b20ba6244501f0bdb019095eea4e",
            ),
        ];
        for (script, (id, digest)) in LOCK_SCRIPTS.iter().zip(want) {
            assert_eq!(script.id, id);
            let got: String = Sha256::digest(script.painless.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(got, digest, "{id}");
        }
    }

    #[test]
    fn documents_are_told_apart_by_shape() {
        assert!(is_group_source(
            &json!({"lock_type": "shared", "lock_count": 1})
        ));
        assert!(is_group_source(
            &json!({"lock_type": "exclusive", "holders": {}})
        ));
        assert!(!is_group_source(&json!({"lock_type": "exclusive"})));
        assert!(!is_group_source(&json!({"holders": null})));
        assert!(!is_group_source(&json!({})));
        assert!(!is_group_source(&json!("shared")));
    }
}
