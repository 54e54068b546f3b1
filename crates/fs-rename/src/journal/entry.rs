//! The journal's documents: an entry (what a job set out to do, and the locks that protect
//! it), a fence (the tombstone that keeps a job from journaling), and how they are read and
//! written.

use fs_locks::{LockItem, LockMode};
use fs_model::FsPath;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{RenameError, Result};
use crate::kind::JobKind;
use crate::strategy::Strategy;

/// A journal entry: what a job set out to do and which locks protect it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The job id (the document id). A copy's new document ids derive from it
    /// ([`fs_model::FsDoc::copy_id`]), so the recovery of a copy writes the same ids.
    pub job_id: String,
    /// What the job does. Entries written before copies and deletes existed have none and
    /// are renames.
    #[serde(default)]
    pub kind: JobKind,
    /// The source (a delete's path).
    pub from: String,
    /// The destination (a delete's path again).
    pub to: String,
    /// The locking scheme the job used.
    pub strategy: Strategy,
    /// Always `running`: finished jobs delete their entry.
    pub state: String,
    /// The process id of the lock owner working on it: the job, then each recoverer that
    /// claims it.
    pub owner: String,
    /// The owners before `owner` (the job, earlier recoverers): their expired locks and
    /// shares are part of this rename, so the sweep of expired locks leaves them alone.
    #[serde(default)]
    pub previous_owners: Vec<String>,
    /// The owner's readable label.
    pub holder: String,
    /// When the job started writing, epoch milliseconds.
    pub started_at: i64,
    /// The lease of the job's locks, in milliseconds.
    pub lease_ms: u64,
    /// How many recoverers have claimed it.
    #[serde(default)]
    pub recoveries: u32,
    /// The lock documents that protect the job, which recovery takes over.
    pub locks: Vec<JournalLock>,
}

/// The tombstone a recovery leaves at the journal id of a job whose expired locks it cleared
/// before the job journaled: the job can never journal afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalFence {
    /// The fenced job id (the document id).
    pub job_id: String,
    /// Always `fenced`: what tells a tombstone from an entry.
    pub state: String,
    /// When, epoch milliseconds.
    pub fenced_at: i64,
    /// Who fenced it.
    pub fenced_by: String,
}

/// What [`Journal::fence`](crate::journal::Journal::fence) found at a job's journal id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceOutcome {
    /// The id is fenced: the job can never journal. `new` if this call fenced it.
    Fenced {
        /// True if this call created the tombstone.
        new: bool,
    },
    /// The job has journaled: its locks protect a job to recover, not to clear.
    Open(Box<JournalEntry>),
}

/// A document of the journal index.
pub(super) enum JournalDoc {
    Entry(JournalEntry),
    Fence(JournalFence),
}

pub(super) const FENCED: &str = "fenced";

/// The `fenced_by` of the tombstone a close leaves: what tells a finished job from a fenced one.
pub(super) const CLOSED_BY: &str = "closed: the job is done";

/// The `fenced_by` of the tombstone a job leaves when it stopped after its entry landed but
/// before its first write ([`Journal::withdraw`](crate::journal::Journal::withdraw)): it
/// changed nothing, and is no more done than a fenced job.
pub(super) const WITHDRAWN_BY: &str = "withdrawn: the job stopped before its first write";

impl JournalFence {
    /// True if this tombstone is a finished job's ([`Journal::close`](crate::journal::Journal::close)):
    /// its writes are all in place. False for a fence or a withdrawal: it wrote nothing.
    pub fn is_closed(&self) -> bool {
        self.fenced_by == CLOSED_BY
    }

    /// True if this tombstone is a job's own withdrawal: its entry landed, and it stopped
    /// before its first write.
    pub fn is_withdrawn(&self) -> bool {
        self.fenced_by == WITHDRAWN_BY
    }
}

/// What the journal says of a job id ([`Journal::state_of`](crate::journal::Journal::state_of)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalState {
    /// Journaled and not finished: recovery rolls it forward once its locks expire.
    Open(Box<JournalEntry>),
    /// Finished: every write is in place.
    Closed,
    /// Fenced off before it journaled, or withdrawn by the job itself after journaling and
    /// before its first write: either way it wrote nothing.
    Fenced,
    /// No document: it has not journaled (or its tombstone was removed after the retention).
    Absent,
}

pub(super) fn parse_doc(index: &str, id: &str, source: Value) -> Result<JournalDoc> {
    let bad = |e: serde_json::Error| RenameError::BadDocument {
        index: index.to_owned(),
        id: id.to_owned(),
        message: e.to_string(),
    };
    if source.get("state").and_then(Value::as_str) == Some(FENCED) {
        serde_json::from_value(source)
            .map(JournalDoc::Fence)
            .map_err(bad)
    } else {
        serde_json::from_value(source)
            .map(JournalDoc::Entry)
            .map_err(bad)
    }
}

/// One lock a journal entry lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalLock {
    /// The lock document id.
    pub id: String,
    /// The locked path, where the lock has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Shared or exclusive.
    pub mode: LockMode,
}

impl JournalLock {
    /// Returns the lock as an item to take over.
    pub fn item(&self) -> LockItem {
        LockItem {
            id: self.id.clone(),
            path: self.path.as_deref().and_then(|p| FsPath::parse(p).ok()),
            mode: self.mode,
        }
    }
}

impl From<&LockItem> for JournalLock {
    fn from(item: &LockItem) -> JournalLock {
        JournalLock {
            id: item.id.clone(),
            path: item.path.as_ref().map(|p| p.as_str().to_owned()),
            mode: item.mode,
        }
    }
}

impl JournalEntry {
    /// Returns the source and destination as paths.
    ///
    /// # Errors
    /// [`RenameError::BadDocument`] if either is not a valid path.
    pub fn paths(&self, index: &str) -> Result<(FsPath, FsPath)> {
        let parse = |p: &str| {
            FsPath::parse(p).map_err(|e| RenameError::BadDocument {
                index: index.to_owned(),
                id: self.job_id.clone(),
                message: format!("journal path `{p}`: {e}"),
            })
        };
        Ok((parse(&self.from)?, parse(&self.to)?))
    }
}

pub(super) fn to_source(entry: &JournalEntry, index: &str) -> Result<serde_json::Value> {
    serde_json::to_value(entry).map_err(|e| RenameError::BadDocument {
        index: index.to_owned(),
        id: entry.job_id.clone(),
        message: e.to_string(),
    })
}
