//! [`Job`]: what a job does ([`Work`]), where it is ([`JobState`]) and what it did: the line
//! `fsrename mv --json` (and `cp`, `rm`) ends with, the JSON of the service's job resources,
//! and the document of the jobs index. One definition, serialised the same way everywhere.

use fs_model::FsPath;
use fs_rename::{JobKind, RenameReport, Strategy};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
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
    /// Every state, in the order a job goes through them.
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::WaitingForLocks,
        JobState::Rewriting,
        JobState::Done,
        JobState::Failed,
    ];

    /// Returns the state's name, as its JSON says it.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::WaitingForLocks => "waiting_for_locks",
            JobState::Rewriting => "rewriting",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    /// Returns true once the job is over: `done` or `failed`.
    pub fn finished(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed)
    }
}

/// What a job does, shown in its JSON as `kind` with its paths: `{"kind": "rename", "from",
/// "to"}`, `{"kind": "copy", "from", "to"}`, `{"kind": "delete", "path", "recursive"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Work {
    /// `mv FROM TO`.
    Rename {
        /// What is renamed.
        #[schema(value_type = PathName)]
        from: FsPath,
        /// Its new path.
        #[schema(value_type = PathName)]
        to: FsPath,
    },
    /// `cp -r FROM TO`.
    Copy {
        /// What is copied.
        #[schema(value_type = PathName)]
        from: FsPath,
        /// The copy's path.
        #[schema(value_type = PathName)]
        to: FsPath,
    },
    /// `rm [-r] PATH`.
    Delete {
        /// What is removed.
        #[schema(value_type = PathName)]
        path: FsPath,
        /// Whether a directory goes with everything under it.
        recursive: bool,
    },
}

impl Work {
    /// Returns what kind of job it is.
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

/// The `type` of a [`Job`], in its JSON: always `job`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobType {
    /// A job.
    #[default]
    Job,
}

/// `"job"`, inline, as every line's `type` is described.
impl JsonSchema for JobType {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "JobType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "const": "job", "description": "What the line is." })
    }
}

// The doc comments of this type and its fields are also its description in
// `GET /openapi.json` and in `fsrename schema`: written for their readers. The jobs index is
// `serve/records.rs`.
/// A rename, copy or delete: what `GET /jobs/{id}` (and `/renames/{id}`, `/copies/{id}`,
/// `/deletes/{id}`) shows, what the jobs index stores so that every instance can show it, and
/// the last line of `fsrename mv --json` (`cp`, `rm`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema)]
pub struct Job {
    /// `job`: what this object is, as on every line of the JSON contract.
    #[serde(rename = "type", default)]
    tag: JobType,
    /// The job's id (a job of the command line gets one too).
    pub id: String,
    /// What it does: `kind` (`rename`, `copy` or `delete`) and its paths.
    #[serde(flatten)]
    pub work: Work,
    /// The locking scheme: `tree`, `global` or `document`.
    #[schema(value_type = StrategyName)]
    pub strategy: Strategy,
    /// Where the job is: `queued`, `waiting_for_locks`, `rewriting`, `done` or `failed`.
    // Private, with `waiting_for`: they change together (`Job::enter`, `Job::wait_for`).
    state: JobState,
    /// Documents written (rewritten, copied, deleted) so far, and to write.
    pub progress: Progress,
    /// The lock in the job's way while it waits for its locks (`waiting_for_locks`); null in
    /// every other state.
    waiting_for: Option<String>,
    /// The job's report, once it finished: what it did and cost, as far as it got (its
    /// phases in whole milliseconds, `locking_ms` and so on).
    #[schema(value_type = Option<Object>)]
    pub report: Option<RenameReport>,
    /// Why it failed, in words; null unless `failed`.
    pub error: Option<String>,
    /// What went wrong without making the job fail: a job that was complete but could not
    /// release its locks is `done`, and says here which locks it left to expire (also in
    /// `report.locks_left`).
    pub warnings: Vec<String>,
    /// The token that submitted it (`serve` with tokens: its name in the token file, or
    /// `FSRENAME_TOKEN`); absent for a job of a service without tokens or of the command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    /// The instance that accepted the job (`cli` for a job of the command line).
    pub accepted_by: String,
    /// The instance running it: the one that accepted it, or the one that took it over when
    /// that one died (`cli` for a job of the command line).
    pub instance: String,
    /// The instance that died with the job, if another took it over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted_from: Option<String>,
    /// The journal id of its run, from when it starts (stored before its first write): an
    /// instance taking the job over reads in the journal whether its writes happened
    /// (`Journal::state_of`).
    #[serde(default)]
    pub journal: Option<String>,
    /// When it was accepted, epoch milliseconds.
    pub submitted_at: i64,
    /// When it started, epoch milliseconds; null while `queued`.
    pub started_at: Option<i64>,
    /// When it finished, epoch milliseconds; null until `done` or `failed`.
    pub finished_at: Option<i64>,
}

impl Job {
    /// A job just accepted by `instance`: queued, nothing done.
    pub fn accepted(id: String, work: Work, strategy: Strategy, instance: String) -> Job {
        Job {
            tag: JobType::Job,
            id,
            work,
            strategy,
            state: JobState::Queued,
            progress: Progress::default(),
            waiting_for: None,
            report: None,
            error: None,
            warnings: Vec::new(),
            submitted_by: None,
            accepted_by: instance.clone(),
            instance,
            adopted_from: None,
            journal: None,
            submitted_at: now_ms(),
            started_at: None,
            finished_at: None,
        }
    }

    /// A job the command line ran (`fsrename mv`, `cp`, `rm`) from `started_at` (epoch ms) to
    /// now, as the service would show it: `done` with its report, or `failed` with `error` and
    /// the report as far as it got (none for a job that was never run).
    pub fn ran_here(
        work: Work,
        strategy: Strategy,
        (journal, started_at): (Option<String>, i64),
        report: Option<RenameReport>,
        error: Option<String>,
    ) -> Job {
        let mut job = Job::accepted(fs_model::entropy::uuid(), work, strategy, CLI.to_owned());
        job.submitted_at = started_at;
        job.started_at = Some(started_at);
        job.finished_at = Some(now_ms());
        job.enter(if error.is_none() {
            JobState::Done
        } else {
            JobState::Failed
        });
        if let Some(report) = &report {
            job.progress = Progress {
                done: report.rewritten,
                total: report.found,
            };
            job.warnings.clone_from(&report.warnings);
        }
        job.report = report;
        job.error = error;
        job.journal = journal;
        job
    }

    /// Rewrites with `redact` every text of the job that may name a path besides its own:
    /// the lock it waits for, its error and warnings, and what its report says of the locks it
    /// left.
    pub fn redact_with(&mut self, redact: impl Fn(&str) -> String) {
        if let Some(blocker) = &mut self.waiting_for {
            *blocker = redact(blocker);
        }
        if let Some(error) = &mut self.error {
            *error = redact(error);
        }
        for warning in &mut self.warnings {
            *warning = redact(warning);
        }
        if let Some(report) = &mut self.report {
            for text in report.locks_left.iter_mut().chain(&mut report.warnings) {
                *text = redact(text);
            }
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

/// Documents written (rewritten, copied, deleted) so far, and to write.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, JsonSchema)]
pub struct Progress {
    /// Written so far.
    pub done: u64,
    /// To write (0 until the job has counted them).
    pub total: u64,
}

/// The instance of a job the command line ran: `accepted_by` and `instance` say it.
pub const CLI: &str = "cli";

/// The strategies a client may ask for: every [`Strategy`] but `none`, which exists only for
/// the demonstration.
pub const SUBMITTABLE: [Strategy; 3] = [Strategy::Tree, Strategy::Global, Strategy::Document];

/// Parses a strategy a job may be given (`--strategy`, a request's `strategy`): one of
/// [`SUBMITTABLE`].
///
/// # Errors
/// Any other name, with a message that lists only what is accepted.
pub fn submittable_strategy(name: &str) -> Result<Strategy, String> {
    let names = SUBMITTABLE.map(Strategy::as_str);
    let accepted = match names.split_last() {
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    match SUBMITTABLE.iter().find(|s| s.as_str() == name) {
        Some(strategy) => Ok(*strategy),
        None if name == Strategy::None.as_str() => Err(format!(
            "`none` exists only for the demonstration (`fsrename demo`): expected {accepted}"
        )),
        None => Err(format!("unknown strategy `{name}`: expected {accepted}")),
    }
}

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

impl PartialSchema for PathName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(fs_model::INPUT_PATH_PATTERN))
            .min_length(Some(1))
            .max_length(Some(fs_model::MAX_PATH_BYTES))
            .description(Some(
                "An absolute path in the tree: `/`, or `/a/b` (in a request, a directory's may \
                 end with `/`)",
            ))
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
        .pattern(Some(fs_model::BELOW_ROOT_PATTERN))
        .min_length(Some(2))
        .max_length(Some(fs_model::MAX_PATH_BYTES))
        .description(Some(
            "An absolute path under the `path` listed (so never `/`): the `next` of the page \
             before",
        ))
        .examples([serde_json::json!("/clinton/projects/elasticsearch")])
}

/// Now, in epoch milliseconds, by the lease clock: the server's clock once the process has
/// read it. Instances of a service judge each other's heartbeats by these times, so a
/// machine whose clock runs behind must not make a live instance look dead to the others.
pub fn now_ms() -> i64 {
    fs_locks::LeaseClock::new().now_ms()
}
