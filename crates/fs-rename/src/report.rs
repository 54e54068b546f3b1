//! What a job (rename, copy or delete) reports: events while it runs, and a report when it
//! ends.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fs_model::FsPath;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::kind::JobKind;
use crate::strategy::Strategy;
use crate::tree::Entry;

/// Something a running job (a rename, a copy or a delete) did, in order.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RenameEvent {
    /// A lock attempt was refused; the job backs off and tries again.
    Waiting {
        /// The lock in the way, with its holder.
        blocker: String,
        /// Attempts so far.
        attempts: u32,
    },
    /// The locks are held.
    Locked {
        /// Round trips the acquisition took.
        round_trips: u32,
        /// Time spent waiting for them (in JSON `waited_ms`, milliseconds).
        #[serde(rename = "waited_ms", with = "fs_model::millis")]
        #[schemars(with = "u64")]
        waited: Duration,
    },
    /// The checks passed; `total` documents are to be moved (copied, deleted).
    Checked {
        /// Documents at or under the source (the path of a delete).
        total: u64,
    },
    /// The journal entry is written: from here on the rename is finished by recovery if the
    /// job stops.
    Journaled {
        /// The journal entry's id.
        job: String,
    },
    /// Documents rewritten (copied, deleted) so far.
    Progress {
        /// Written.
        done: u64,
        /// To write.
        total: u64,
    },
    /// The journal entry is closed: every document is in place, and the locks are released
    /// next.
    Closed {
        /// The journal entry's id.
        job: String,
    },
    /// Bulk items failed transiently and are being sent again.
    Retrying {
        /// How many.
        items: usize,
    },
    /// The locks were released. Not sent when the release failed after a complete rename:
    /// the report's [`RenameReport::locks_left`] says what was left to expire.
    Released,
}

/// A callback told of every [`RenameEvent`]; it runs on the job's task, so keep it quick.
pub type ProgressSink = Arc<dyn Fn(RenameEvent) + Send + Sync>;

/// Points where a caller may step into a running job: for demonstrations that need a
/// precise interleaving, and for fault injection in tests. Every method defaults to nothing.
#[async_trait]
pub trait RenameHooks: Send + Sync {
    /// Called once the locks are held (or at once, without locks), before the checks.
    async fn locked(&self) {}
    /// Called once the checks passed and the job found its locks still its own, just
    /// before it writes its journal entry at `job_id`. What the hook records here survives
    /// the job: `fsrename serve` stores the id with the job, so that an instance taking over
    /// the job of a dead one can tell from the journal whether it was applied
    /// ([`crate::Journal::state_of`]). An `Err` stops the job before its journal entry and
    /// its first write ([`crate::RenameError::NotJournaled`], with the reason given): for a
    /// record that could not be made.
    async fn journaling(&self, _job_id: &str) -> Result<(), String> {
        Ok(())
    }
    /// Called with a page of documents just before they are rewritten (copied, or, for a
    /// delete, deleted: a delete's pages come deepest first, one depth per page).
    async fn before_write(&self, _page: &[Entry]) {}
    /// Called after the last write, while the locks are still held.
    async fn rewritten(&self) {}
    /// Called once the rename of `from` to `to` is complete (after [`RenameHooks::rewritten`]),
    /// by the job or by the recovery that finished it, while the locks are still held: the
    /// moment its effect is in place. Renames only: copies and deletes call
    /// [`RenameHooks::rewritten`] alone.
    async fn committed(&self, _from: &FsPath, _to: &FsPath) {}
    /// Whether [`RenameHooks::rewritten`] and [`RenameHooks::committed`] must be called while
    /// the job still holds its locks: yes, unless the hooks say otherwise. Where they need
    /// not, a small rename on a store that makes several writes in one transaction (the
    /// embedded store) may write, journal itself and release its locks in one, and calls them
    /// just after.
    fn need_locks_after_writes(&self) -> bool {
        true
    }
}

/// Time spent in each phase of a rename. In JSON (`mv --json`, the service's reports) each is
/// a whole number of milliseconds, `locking_ms` and so on ([`fs_model::millis`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PhaseTimes {
    /// Taking the locks, waiting included.
    #[serde(rename = "locking_ms", with = "fs_model::millis")]
    #[schemars(with = "u64")]
    pub locking: Duration,
    /// Refreshing and checking source and destination.
    #[serde(rename = "checking_ms", with = "fs_model::millis")]
    #[schemars(with = "u64")]
    pub checking: Duration,
    /// Scanning and rewriting the documents.
    #[serde(rename = "rewriting_ms", with = "fs_model::millis")]
    #[schemars(with = "u64")]
    pub rewriting: Duration,
    /// Releasing the locks.
    #[serde(rename = "releasing_ms", with = "fs_model::millis")]
    #[schemars(with = "u64")]
    pub releasing: Duration,
}

/// What a job (a rename, a copy or a delete) did and cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RenameReport {
    /// What the job did.
    pub kind: JobKind,
    /// The source (a delete's path).
    pub from: FsPath,
    /// The destination (a delete's path again).
    pub to: FsPath,
    /// The locking scheme.
    pub strategy: Strategy,
    /// Documents found at or under the source.
    pub found: u64,
    /// Documents written: rewritten by a rename, created by a copy (or found already created
    /// by this job, after a resend), deleted by a delete.
    pub rewritten: u64,
    /// Store round trips, locks included.
    pub round_trips: u64,
    /// Attempts the lock acquisition took.
    pub lock_attempts: u32,
    /// Bulk items sent again after a transient failure.
    pub retries: u64,
    /// Items whose resend met a conflict that was the job's own first send, landed with its
    /// answer lost (a connection cut after the server carried the request out): read back,
    /// recognised, and counted as written, never reported as someone else's change.
    pub ambiguous_resolved: u64,
    /// Times the job started over because a recovery had fenced it off before it journaled
    /// (its locks had expired meanwhile; nothing had been rewritten).
    pub restarts: u32,
    /// Time per phase.
    pub phases: PhaseTimes,
    /// The locks (paths, or lock document ids for global and document locks) that the job
    /// could not release after its rename was complete, as far as a read after the failed
    /// release could tell (all of them when it could not). They are no longer renewed: they
    /// expire with their lease, and recovery (`fsrename recover`, or a running
    /// `fsrename serve`) deletes them then. Empty when the release succeeded, and on a failed
    /// rename (its error says what happened to its locks).
    pub locks_left: Vec<String>,
    /// Things that went wrong without making the rename fail, one sentence each: a release
    /// that failed after the rename was complete, and what becomes of the locks it left.
    pub warnings: Vec<String>,
    /// Whether the server rewrote the documents, in one task (see
    /// [`Rewrite`](crate::Rewrite)), rather than this client page by page.
    pub on_server: bool,
}

impl RenameReport {
    pub(crate) fn new(
        kind: JobKind,
        from: &FsPath,
        to: &FsPath,
        strategy: Strategy,
    ) -> RenameReport {
        RenameReport {
            kind,
            from: from.clone(),
            to: to.clone(),
            strategy,
            found: 0,
            rewritten: 0,
            round_trips: 0,
            lock_attempts: 0,
            retries: 0,
            ambiguous_resolved: 0,
            restarts: 0,
            phases: PhaseTimes::default(),
            locks_left: Vec::new(),
            warnings: Vec::new(),
            on_server: false,
        }
    }

    /// Returns the total time of the job.
    pub fn elapsed(&self) -> Duration {
        let p = self.phases;
        p.locking + p.checking + p.rewriting + p.releasing
    }
}
