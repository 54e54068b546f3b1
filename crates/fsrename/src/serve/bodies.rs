//! The bodies the API reads and writes, each one type that the handler serializes (or whose
//! fields it reads) and that `GET /openapi.json` describes (`ToSchema`), so that the
//! description cannot drift from the answers. The job itself ([`super::job::Job`]) lives
//! beside its meaning, in `job.rs`.
//!
//! Types of the crates below the binary (`FsPath`, `FsDoc`, `Strategy`, `LockInfo`) know
//! nothing of HTTP, so they carry no schema: a path is described as a string, a document by
//! [`DocSchema`] (checked against a real document's JSON in the tests below), a strategy by
//! `job::StrategyName` (built from `Strategy` itself), and a lock is answered as
//! [`LockView`], built here from the lock document.

use fs_model::{FsDoc, FsPath};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::{IntoParams, IntoResponses, ToSchema};

use super::error::ErrorBody;
use crate::contract::job::{after_path, PathName, StrategyName};
pub use crate::contract::LockView;
use crate::contract::{Job, JobState};

/// `POST /renames` and `POST /copies`: what to move or copy, and where.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"from": "/clinton/projects", "to": "/gormley/projects"}))]
#[allow(dead_code)] // Read field by field (`api::from_to`), for errors that name the field.
pub struct MoveRequest {
    /// The absolute path to move or copy (`/` cannot be moved).
    #[schema(value_type = PathName)]
    from: String,
    /// The absolute path it becomes; not inside `from`.
    #[schema(value_type = PathName)]
    to: String,
    /// The service's `--strategy` when absent or null.
    #[schema(value_type = Option<StrategyName>)]
    strategy: Option<String>,
}

/// The fields of a [`MoveRequest`], as the handler checks them.
pub const MOVE_FIELDS: [&str; 3] = ["from", "to", "strategy"];

/// `POST /deletes`: what to remove.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"path": "/clinton/notes", "recursive": true}))]
#[allow(dead_code)] // Read field by field (`api::submit_delete`), for errors that name the field.
pub struct DeleteRequest {
    /// The absolute path to remove (not `/`).
    #[schema(value_type = PathName)]
    path: String,
    /// Whether a directory goes with everything under it (`rm -r`); false when absent or null,
    /// and then a directory with entries makes the job fail.
    recursive: Option<bool>,
    /// The service's `--strategy` when absent or null.
    #[schema(value_type = Option<StrategyName>)]
    strategy: Option<String>,
}

/// The fields of a [`DeleteRequest`], as the handler checks them.
pub const DELETE_FIELDS: [&str; 3] = ["path", "recursive", "strategy"];

/// `POST /session`: the token a page was given.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // Read as a field of the JSON body (`middleware::session`).
pub struct SessionRequest {
    /// The service's token (`FSRENAME_TOKEN`).
    token: String,
}

/// The answer to `POST /session`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionAnswer {
    /// Whether the service wants a token at all (if not, the page needs no session).
    pub token_required: bool,
}

/// The answer to an accepted job (202): where to follow it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    /// The job's id.
    pub id: String,
    /// `rename`, `copy` or `delete`.
    #[schema(value_type = String, pattern = "^(rename|copy|delete)$")]
    pub kind: fs_rename::JobKind,
    /// `queued`.
    pub state: JobState,
    /// Where to follow the job, as in the `Location` header: `/renames/{id}`, `/copies/{id}`
    /// or `/deletes/{id}`.
    pub location: String,
}

/// The answers to a submitted job (`POST /renames`, `/copies`, `/deletes`), for the
/// description: the handlers answer [`Accepted`] or an [`ErrorBody`] with these statuses.
#[derive(IntoResponses)]
#[allow(dead_code)] // Only a description: the handlers build the answers themselves.
pub enum Submitted {
    /// Accepted: follow it at `location`.
    #[response(status = 202, headers(("location" = String, description = "Where to follow the job")))]
    // Inlined: a derived `IntoResponses` does not register the schemas it refers to.
    Accepted(#[to_schema] Accepted),
    /// A bad field, named in `field`.
    #[response(status = 400)]
    Bad(ErrorBody),
    /// A body over `--body-limit`.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// `--queue` unfinished jobs wait already.
    #[response(status = 429)]
    Full(ErrorBody),
    /// The job could not be stored in the jobs index (it is not accepted).
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// `?limit=` of the job lists.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Read from the query string (`api::recent`), for errors that name it.
pub struct ListQuery {
    /// The most jobs to show (100 by default).
    #[param(schema_with = jobs_limit)]
    limit: Option<u64>,
}

/// A whole number from `minimum` to the largest the handlers read (`usize`): `int64`, the
/// widest format OpenAPI names, would say that 2^63 and above are refused, and they are not.
fn whole_number(minimum: usize, description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(minimum))
        .maximum(Some(usize::MAX))
        .description(Some(description))
}

/// The schema of `?limit=` of the job lists.
fn jobs_limit() -> ObjectBuilder {
    whole_number(0, "The most jobs to show (100 by default)")
}

/// The schema of `?depth=` of `GET /tree`.
fn tree_depth() -> ObjectBuilder {
    whole_number(
        1,
        "How many levels down (1 by default; any depth past the deepest entry means all)",
    )
}

/// `GET /jobs`: this instance's most recent jobs, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

/// `GET /renames`: this instance's most recent renames, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct RenameList {
    pub renames: Vec<Job>,
}

/// `GET /copies`: this instance's most recent copies, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct CopyList {
    pub copies: Vec<Job>,
}

/// `GET /deletes`: this instance's most recent deletes, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeleteList {
    pub deletes: Vec<Job>,
}

/// `GET /healthz` when the store answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: &'static str,
    /// The store, as `--store` names it (credentials left out).
    pub store: String,
}

/// The query of `GET /tree`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Read from the query string (`api::tree`), for errors that name the field.
pub struct TreeQuery {
    /// The directory to list (`/` by default); 404 if there is nothing there.
    #[param(value_type = Option<PathName>)]
    path: Option<String>,
    /// How many levels down (1 by default; any depth past the deepest entry means all).
    #[param(schema_with = tree_depth)]
    depth: Option<u64>,
    /// The most entries in the answer (10 000 by default, and at most).
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<u64>,
    /// Lists from just after this path (the `next` of the page before), which must be under
    /// `path` (400 otherwise).
    #[param(schema_with = after_path)]
    after: Option<String>,
}

/// `GET /tree`: a page of the entries under a path, in path order.
#[derive(Debug, Serialize, ToSchema)]
pub struct TreePage {
    /// The directory listed.
    #[schema(value_type = PathName)]
    pub path: FsPath,
    /// How many levels down.
    pub depth: u64,
    pub entries: Vec<TreeEntry>,
    /// Whether more entries follow (as `next` is not null).
    pub truncated: bool,
    /// The `after` of the next page, null at the end.
    #[schema(value_type = Option<PathName>)]
    pub next: Option<FsPath>,
}

/// One entry of the tree: the document's id and the document.
#[derive(Debug, Serialize, ToSchema)]
pub struct TreeEntry {
    pub id: String,
    #[schema(value_type = DocSchema)]
    pub doc: FsDoc,
}

/// How a document of the tree (`FsDoc`) is written out.
#[derive(ToSchema)]
#[schema(as = Doc)]
#[allow(dead_code)] // Only a description: the answers serialize `FsDoc` itself.
pub struct DocSchema {
    path: String,
    /// Null only for the root.
    parent: Option<String>,
    name: String,
    depth: u64,
    #[schema(pattern = "^(file|dir)$")]
    kind: String,
    /// Bytes; 0 for a directory.
    size: u64,
    /// Epoch milliseconds.
    modified: i64,
    /// The file on disk it was indexed from (device and inode), where known.
    #[schema(value_type = Option<Object>)]
    identity: Option<()>,
    /// The file's text, when indexed with `--content`.
    content: Option<String>,
}

/// One event of `GET /events`, as a client of Server-Sent Events reads it: its name and its
/// data, one JSON object (docs/service.md, "The live feed", says what each holds).
#[derive(ToSchema)]
#[allow(dead_code)] // Only a description: `events.rs` writes the frames.
pub struct FeedEvent {
    /// `snapshot` (first, and for a client that fell behind), `locks`, `jobs`, `error` or `note`.
    #[schema(pattern = "^(snapshot|locks|jobs|error|note)$")]
    event: String,
    /// One JSON object, with `at` (the server's clock, epoch ms): `{at, locks, jobs, story}`
    /// for a snapshot, `{at, locks}`, `{at, jobs}`, `{at, error}`, `{at, kind, ...}` for a note.
    data: String,
}

/// `GET /locks`: every lock document.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockList {
    pub locks: Vec<LockView>,
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;
    use utoipa::PartialSchema;

    use super::*;

    /// The properties a schema names, and those it requires.
    fn properties(schema: RefOr<Schema>) -> (Vec<String>, Vec<String>) {
        let RefOr::T(Schema::Object(object)) = schema else {
            panic!("not an object schema");
        };
        let mut names: Vec<String> = object.properties.keys().cloned().collect();
        names.sort();
        (names, object.required)
    }

    #[test]
    fn the_document_schema_names_every_field_of_a_document() {
        let path = FsPath::parse("/a/b").expect("path");
        let mut doc = FsDoc::file(path, 3, 7);
        doc.content = Some("text".into());
        doc.identity = Some(fs_model::Identity { dev: 1, ino: 2 });
        let json = serde_json::to_value(&doc).expect("json");
        let mut keys: Vec<String> = json.as_object().expect("object").keys().cloned().collect();
        keys.sort();
        let (names, required) = properties(DocSchema::schema());
        assert_eq!(keys, names);
        // What the document always writes is required; what it skips when empty is not.
        let bare = serde_json::to_value(FsDoc::dir(FsPath::root(), 0)).expect("json");
        let mut always: Vec<String> = bare.as_object().expect("object").keys().cloned().collect();
        always.sort();
        let mut required = required;
        required.retain(|r| r != "parent");
        always.retain(|r| r != "parent");
        required.sort();
        assert_eq!(always, required);
    }

    #[test]
    fn the_request_schemas_name_the_fields_the_handlers_accept() {
        let (names, _) = properties(MoveRequest::schema());
        let mut fields = MOVE_FIELDS.map(str::to_owned).to_vec();
        fields.sort();
        assert_eq!(names, fields);
        let (names, _) = properties(DeleteRequest::schema());
        let mut fields = DELETE_FIELDS.map(str::to_owned).to_vec();
        fields.sort();
        assert_eq!(names, fields);
    }

    #[test]
    fn every_strategy_named_parses_and_none_is_not_offered() {
        use crate::contract::job::SUBMITTABLE;
        use fs_rename::Strategy;
        for s in SUBMITTABLE {
            assert_eq!(s.as_str().parse::<Strategy>().ok(), Some(s));
        }
        assert!(!SUBMITTABLE.contains(&Strategy::None));
    }
}
