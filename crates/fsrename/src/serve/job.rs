//! [`Job`]: what a job does ([`Work`]), where it is ([`JobState`]) and what it did; the
//! JSON of the API and the document of the jobs index.

use fs_model::FsPath;
use fs_rename::{JobKind, Strategy};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Work {
    /// `mv FROM TO`.
    Rename {
        #[schema(value_type = PathName)]
        from: FsPath,
        #[schema(value_type = PathName)]
        to: FsPath,
    },
    /// `cp -r FROM TO`.
    Copy {
        #[schema(value_type = PathName)]
        from: FsPath,
        #[schema(value_type = PathName)]
        to: FsPath,
    },
    /// `rm [-r] PATH`.
    Delete {
        #[schema(value_type = PathName)]
        path: FsPath,
        recursive: bool,
    },
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

// The doc comments of this type and its fields are also its description in
// `GET /openapi.json`: written for the API's readers. The jobs index is `records.rs`.
/// What `GET /jobs/{id}` (and `/renames/{id}`, `/copies/{id}`, `/deletes/{id}`) shows, and
/// what the jobs index stores, so that every instance can show it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Job {
    pub id: String,
    #[serde(flatten)]
    pub work: Work,
    #[schema(value_type = StrategyName)]
    pub strategy: Strategy,
    // Private, with `waiting_for`: they change together (`Job::enter`, `Job::wait_for`).
    state: JobState,
    /// Documents written (rewritten, copied, deleted) so far, and to write.
    pub progress: Progress,
    /// The lock in the job's way while it waits for its locks (`waiting_for_locks`); null in
    /// every other state.
    waiting_for: Option<String>,
    /// The job's report (a `RenameReport`, with its `kind`), once it finished; kept as JSON,
    /// so that the jobs index hands it to any instance.
    #[schema(value_type = Option<Object>)]
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
    /// The journal id of its run, from when it starts (stored before its first write): an
    /// instance taking the job over reads in the journal whether its writes happened
    /// (`Journal::state_of`).
    #[serde(default)]
    pub journal: Option<String>,
    /// Epoch milliseconds.
    pub submitted_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

impl Job {
    /// A job just accepted by `instance`: queued, nothing done.
    pub fn accepted(id: String, work: Work, strategy: Strategy, instance: String) -> Job {
        Job {
            id,
            work,
            strategy,
            state: JobState::Queued,
            progress: Progress::default(),
            waiting_for: None,
            report: None,
            error: None,
            warnings: Vec::new(),
            accepted_by: instance.clone(),
            instance,
            adopted_from: None,
            journal: None,
            submitted_at: now_ms(),
            started_at: None,
            finished_at: None,
        }
    }

    /// Where the job is.
    pub fn state(&self) -> JobState {
        self.state
    }

    /// Moves the job to `state`. Nothing is in its way there until it reports a lock it waits
    /// for ([`Job::wait_for`]): a lock named once stays no longer than the wait, so a job that
    /// got its locks, finished, failed or was cancelled names none.
    pub fn enter(&mut self, state: JobState) {
        self.state = state;
        self.waiting_for = None;
    }

    /// The job waits for `blocker`, a lock another holds.
    pub fn wait_for(&mut self, blocker: String) {
        self.state = JobState::WaitingForLocks;
        self.waiting_for = Some(blocker);
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

/// The strategies a client may ask for: every [`Strategy`] but `none`, which exists only for
/// the demonstration.
pub const SUBMITTABLE: [Strategy; 3] = [Strategy::Tree, Strategy::Global, Strategy::Document];

/// The schema of a strategy's name (`GET /openapi.json`), built from [`SUBMITTABLE`] so that
/// it lists what the handlers accept. `Strategy` lives below the binary and knows nothing of
/// HTTP, so it carries no schema of its own.
pub struct StrategyName;

impl PartialSchema for StrategyName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(SUBMITTABLE.iter().map(|s| s.as_str())))
            .description(Some(
                "The locking scheme: `tree` (tree locks), `global` (one job at a time) or \
                 `document` (a lock per document)",
            ))
            .into()
    }
}

impl ToSchema for StrategyName {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("Strategy")
    }
}

/// The schema of a path (`GET /openapi.json`): what [`FsPath::parse`] accepts, as a pattern.
/// `/`, or `/`-separated components that are not empty, `.` or `..`, without control
/// characters; at most [`fs_model::MAX_PATH_BYTES`] long. The lengths are counted in bytes by
/// the parser and in characters by JSON Schema, so a path of multibyte characters may match
/// and still be refused (400, naming the field).
pub struct PathName;

/// One or more components, each after a `/`. A component: anything without `/` or a control
/// character (Unicode's Cc, as `char::is_control`), with at least one character that is not
/// a dot, or three dots or more.
macro_rules! components {
    () => {
        r"(/([^/\x00-\x1F\x7F-\x9F]*[^/.\x00-\x1F\x7F-\x9F][^/\x00-\x1F\x7F-\x9F]*|\.\.\.+))+"
    };
}

/// `/`, or components.
const PATH_PATTERN: &str = concat!("^(/|", components!(), ")$");

/// Components: any path but `/`.
const BELOW_ROOT_PATTERN: &str = concat!("^", components!(), "$");

impl PartialSchema for PathName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(PATH_PATTERN))
            .min_length(Some(1))
            .max_length(Some(fs_model::MAX_PATH_BYTES))
            .description(Some("An absolute path in the tree: `/`, or `/a/b`"))
            .examples([serde_json::json!("/clinton/projects")])
            .into()
    }
}

impl ToSchema for PathName {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("Path")
    }
}

/// The schema of `GET /tree`'s `after` (`GET /openapi.json`, inlined): a path as
/// [`PathName`] but `/`, which is under nothing. It must also be under the `path` listed, a
/// rule across two parameters that a schema cannot state: its description says so, and its
/// example is under `path`'s, so that a client (or a fuzzer) that takes the examples sends a
/// request the service accepts (it once took `path`'s own, refused as not under itself).
pub fn after_path() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(BELOW_ROOT_PATTERN))
        .min_length(Some(2))
        .max_length(Some(fs_model::MAX_PATH_BYTES))
        .description(Some(
            "An absolute path under the `path` listed (so never `/`): the `next` of the page \
             before",
        ))
        .examples([serde_json::json!("/clinton/projects/elasticsearch")])
}

/// Now, in epoch milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
