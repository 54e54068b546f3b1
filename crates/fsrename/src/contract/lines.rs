//! The lines of the command line's verbs that are not reports of the library's: an entry of
//! `ls` and `find`, the closing reports of `ls`, `find`, `locks`, `mkdir`, `touch`, `demo`, the
//! watcher's "caught up", and the error a verb ends with when it has no report to give.

use fs_model::{FsDoc, FsPath};
use schemars::JsonSchema;
use serde::Serialize;

use super::Contract;

/// An entry of the tree, as `ls --json` and `find --json` print it: the document's id and its
/// fields (`path`, `parent`, `name`, `depth`, `kind`, `size`, `modified` in epoch
/// milliseconds, and where known `identity` and the stored text, `content`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct EntryLine<'a> {
    /// The document's id in the store (kept by renames).
    pub id: &'a str,
    /// The document.
    #[serde(flatten)]
    pub doc: &'a FsDoc,
}

impl Contract for EntryLine<'_> {
    const TYPE: &'static str = "entry";
}

/// The last line of `ls --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LsReport {
    /// The path listed.
    pub path: FsPath,
    /// Whether everything under it was listed (`-R`).
    pub recursive: bool,
    /// Whether it was listed under a shared lock (`--consistent`).
    pub consistent: bool,
    /// Entries printed (0 for an empty directory).
    pub entries: u64,
}

impl Contract for LsReport {
    const TYPE: &'static str = "ls_report";
}

/// The last line of `find --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FindReport {
    /// Where it looked.
    pub path: FsPath,
    /// The name pattern, if one was given.
    pub name: Option<String>,
    /// The words looked for, if any were given.
    pub text: Option<String>,
    /// Entries printed (0 when nothing matched).
    pub found: u64,
    /// The most it prints (`--limit`).
    pub limit: u64,
    /// Whether more matched than it printed.
    pub more: bool,
    /// With `text`: whether any document under `path` stores text at all (`index --content`
    /// stores it); when not, no search by words can find anything there. Null without `text`.
    pub text_stored: Option<bool>,
}

impl Contract for FindReport {
    const TYPE: &'static str = "find_report";
}

/// The last line of `locks --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LocksReport {
    /// Lock documents printed (0 when nothing is locked).
    pub locks: u64,
}

impl Contract for LocksReport {
    const TYPE: &'static str = "locks_report";
}

/// The report of `mkdir --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MkdirReport {
    /// The directory asked for.
    pub path: FsPath,
    /// The directories created, parents first (none when `-p` found it there).
    pub created: Vec<FsPath>,
}

impl Contract for MkdirReport {
    const TYPE: &'static str = "mkdir_report";
}

/// The report of `touch --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TouchReport {
    /// The file.
    pub path: FsPath,
}

impl Contract for TouchReport {
    const TYPE: &'static str = "touch_report";
}

/// What `index --watch --json` says when the store is in step with every change seen.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct CaughtUp {}

impl Contract for CaughtUp {
    const TYPE: &'static str = "watch_caught_up";
}

/// One run of `demo --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DemoRun {
    /// Which run, in words.
    pub title: String,
    /// What it is meant to show.
    pub expectation: String,
    /// Whether it showed that.
    pub as_expected: bool,
    /// What it showed, in words.
    pub verdict: String,
    /// Documents before the jobs.
    pub documents_before: u64,
    /// Documents after them.
    pub documents_after: u64,
    /// Where README's document ended up.
    pub readme_at: Option<String>,
    /// Documents still under `/clinton` afterwards.
    pub left_under_clinton: u64,
    /// The tree check afterwards: `clean`, `unfinished` or `broken`.
    pub fsck: fs_rename::Verdict,
}

impl Contract for DemoRun {
    const TYPE: &'static str = "demo_run";
}

/// The last line of `demo --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DemoReport {
    /// Runs made.
    pub runs: u64,
    /// Whether every run showed what it should (the exit code is 0 then).
    pub as_expected: bool,
    /// The runs that did not.
    pub failed: Vec<String>,
}

impl Contract for DemoReport {
    const TYPE: &'static str = "demo_report";
}

/// The last line of a verb that could not give its report: refused, failed or stopped. Its
/// words are also on standard error.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorLine {
    /// The verb: `mv`, `ls`...
    pub verb: String,
    /// What went wrong, in words.
    pub error: String,
    /// The exit code the process ends with: 1 failed, 2 bad usage, 3 a lock not granted in
    /// time, 130 stopped by SIGINT (Ctrl-C), 143 stopped by SIGTERM.
    pub exit_code: u8,
    /// The journal entry of a job stopped after its first write, which `fsrename recover`
    /// finishes (null otherwise).
    pub journal: Option<String>,
}

impl Contract for ErrorLine {
    const TYPE: &'static str = "error";
}
