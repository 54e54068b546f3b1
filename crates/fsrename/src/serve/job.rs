//! [`Job`]: what a job does ([`Work`]), where it is ([`JobState`]) and what it did; the
//! JSON of the API and the document of the jobs index.

use fs_model::FsPath;
use fs_rename::{JobKind, Strategy};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Accepted, waiting for a free slot.
    Queued,
    /// Waiting for its locks.
    WaitingForLocks,
    /// Holding its locks, checking and writing (rewriting, copying or deleting).
    Rewriting,
    /// Finished successfully.
    Done,
    /// Finished with an error.
    Failed,
}

impl JobState {
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::WaitingForLocks,
        JobState::Rewriting,
        JobState::Done,
        JobState::Failed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::WaitingForLocks => "waiting_for_locks",
            JobState::Rewriting => "rewriting",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    pub fn finished(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed)
    }
}

/// What a job does, shown in its JSON as `kind` with its paths: `{"kind": "rename", "from",
/// "to"}`, `{"kind": "copy", "from", "to"}`, `{"kind": "delete", "path", "recursive"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Work {
    /// `mv FROM TO`.
    Rename { from: FsPath, to: FsPath },
    /// `cp -r FROM TO`.
    Copy { from: FsPath, to: FsPath },
    /// `rm [-r] PATH`.
    Delete { path: FsPath, recursive: bool },
}

impl Work {
    pub fn kind(&self) -> JobKind {
        match self {
            Work::Rename { .. } => JobKind::Rename,
            Work::Copy { .. } => JobKind::Copy,
            Work::Delete { .. } => JobKind::Delete,
        }
    }

    /// `mv FROM TO`, `cp -r FROM TO`, `rm [-r] PATH`: for labels and logs.
    pub fn describe(&self) -> String {
        match self {
            Work::Rename { from, to } => format!("mv {from} {to}"),
            Work::Copy { from, to } => format!("cp -r {from} {to}"),
            Work::Delete { path, recursive } => {
                format!("rm{} {path}", if *recursive { " -r" } else { "" })
            }
        }
    }
}

/// What `GET /jobs/{id}` (and `/renames/{id}`, `/copies/{id}`, `/deletes/{id}`) shows, and
/// what the jobs index stores (see `records.rs`), so that every instance can show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    #[serde(flatten)]
    pub work: Work,
    pub strategy: Strategy,
    pub state: JobState,
    /// Documents written (rewritten, copied, deleted) so far, and to write.
    pub progress: Progress,
    /// The lock that made it wait last, if any.
    pub waiting_for: Option<String>,
    /// The job's [`fs_rename::RenameReport`], once it finished (kept as JSON: the jobs index
    /// hands it to any instance).
    pub report: Option<Value>,
    pub error: Option<String>,
    /// What went wrong without making the job fail: a job that was complete but could not
    /// release its locks is `done`, and says here which locks it left to expire (also in
    /// `report.locks_left`).
    pub warnings: Vec<String>,
    /// The instance that accepted the job.
    pub accepted_by: String,
    /// The instance running it: the one that accepted it, or the one that took it over when
    /// that one died.
    pub instance: String,
    /// The instance that died with the job, if another took it over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted_from: Option<String>,
    /// The journal id of its run, from just before its first write: an instance taking the
    /// job over reads there whether its writes happened ([`fs_rename::Journal::state_of`]).
    #[serde(default)]
    pub journal: Option<String>,
    /// Epoch milliseconds.
    pub submitted_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

/// Now, in epoch milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
