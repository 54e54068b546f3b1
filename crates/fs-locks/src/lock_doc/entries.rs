//! The entries of a lock document: who holds it ([`Owner`], [`HolderEntry`]) and who waits
//! there ([`WaiterEntry`]).

use serde::{Deserialize, Serialize};

use fs_model::LockMode;

use crate::os_process::OsProcess;

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
    /// The operating-system process it runs in, written into every lock document of this
    /// owner (`os_process`), so that a process on the same machine can prove it gone once it
    /// ended without waiting out its lease (see [`OsProcess`]).
    pub os_process: Option<OsProcess>,
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
    /// The operating-system process of the holder, if it recorded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_process: Option<OsProcess>,
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
            os_process: owner.os_process.clone(),
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
