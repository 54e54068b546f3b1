//! The HTTP API: routes, request validation, JSON answers. Each handler carries its
//! `#[utoipa::path]`: the router is built from the same list of handlers as the OpenAPI
//! description (`openapi.rs`), so a route cannot be served without being described.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRef, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use fs_locks::{LeaseClock, LockClient};
use fs_model::FsPath;
use fs_rename::{FsTree, JobKind, Strategy};
use fs_store::Scope;
use serde_json::{Map, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::audit::{Audit, Paths, Requester, Written};
use super::bodies::{
    Accepted, CopyList, DeleteList, DeleteRequest, FeedEvent, Health, JobList, ListQuery, LockList,
    LockView, MoveRequest, RenameList, Submitted, TreeEntry, TreePage, TreeQuery, DELETE_FIELDS,
    MOVE_FIELDS,
};
use super::error::{unreadable, ApiError, ErrorBody};
use super::events::Feed;
use super::grants::{Caller, Capability, NotGranted};
use super::jobs::{Jobs, Refusal};
use crate::contract::job::submittable_strategy;
use crate::contract::{Job, Work};

/// The most entries `GET /tree` returns in one answer.
const TREE_LIMIT: usize = 10_000;

/// What the API's handlers share: the jobs, and the audit trail.
#[derive(Clone)]
pub struct ApiState {
    jobs: Jobs,
    audit: Audit,
}

impl FromRef<ApiState> for Jobs {
    fn from_ref(state: &ApiState) -> Jobs {
        state.jobs.clone()
    }
}

impl FromRef<ApiState> for Audit {
    fn from_ref(state: &ApiState) -> Audit {
        state.audit.clone()
    }
}

/// The API's routes, the page's, and the event feed, with their descriptions.
pub fn routes(jobs: Jobs, feed: Feed, audit: Audit) -> OpenApiRouter {
    let api = OpenApiRouter::new()
        .routes(routes!(list_renames, submit_rename))
        .routes(routes!(get_rename))
        .routes(routes!(list_copies, submit_copy))
        .routes(routes!(get_copy))
        .routes(routes!(list_deletes, submit_delete))
        .routes(routes!(get_delete))
        .routes(routes!(list_jobs))
        .routes(routes!(get_job))
        .routes(routes!(locks))
        .routes(routes!(tree))
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .with_state(ApiState { jobs, audit });
    let events = OpenApiRouter::new()
        .routes(routes!(events))
        .with_state(feed);
    api.merge(events).merge(super::page::routes())
}

/// `GET /events`: the live feed.
#[utoipa::path(get, path = "/events", tag = "live",
    description = "The live feed of the locks and this instance's jobs, as Server-Sent Events. \
        Each event's data is one JSON object: `snapshot` `{at, locks, jobs, story}` first (and \
        again for a client that fell behind), then `locks` `{at, locks}`, `jobs` `{at, jobs}`, \
        `error` `{at, error}` and `note` `{at, kind, ...}` as things change (see docs/service.md). \
        The stream does not end until the client goes away or the service shuts down.",
    responses(
        (status = 200, description = "The stream", content_type = "text/event-stream", body = FeedEvent),
    ))]
async fn events(
    feed: State<Feed>,
    Extension(requester): Extension<Requester>,
) -> impl IntoResponse {
    Feed::route(feed, requester.caller).await
}

/// Reads a request body as a JSON object whose fields are all among `allowed`; `wanted`
/// says what is expected, for the error message.
fn object(
    body: Result<Bytes, BytesRejection>,
    allowed: &[&str],
    wanted: &str,
) -> Result<Map<String, Value>, ApiError> {
    let body = body.map_err(unreadable)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad("body", format!("malformed JSON: {e}")))?;
    let Value::Object(fields) = value else {
        return Err(ApiError::bad(
            "body",
            format!("expected a JSON object with {wanted}"),
        ));
    };
    if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::bad(
            "body",
            format!("unknown field `{unknown}`: expected {wanted}"),
        ));
    }
    Ok(fields)
}

/// The path in the field `name`, which must be there.
fn path_field(fields: &Map<String, Value>, name: &'static str) -> Result<FsPath, ApiError> {
    let text = fields
        .get(name)
        .ok_or_else(|| ApiError::bad(name, format!("`{name}` is missing")))?
        .as_str()
        .ok_or_else(|| ApiError::bad(name, format!("`{name}` must be a string")))?;
    // A directory's path as a shell completes it (`/a/b/`) is the directory's.
    FsPath::parse_input(text)
        .map(|(path, _)| path)
        .map_err(|e| ApiError::bad(name, e.to_string()))
}

/// The strategy in the field `strategy`, or the service's default.
fn strategy_field(jobs: &Jobs, fields: &Map<String, Value>) -> Result<Strategy, ApiError> {
    match fields.get("strategy") {
        None | Some(Value::Null) => Ok(jobs.config().strategy),
        Some(Value::String(s)) => submittable_strategy(s).map_err(|e| ApiError::bad("strategy", e)),
        Some(_) => Err(ApiError::bad("strategy", "`strategy` must be a string")),
    }
}

/// `POST /renames {"from", "to", "strategy"?}`.
#[utoipa::path(post, path = "/renames", tag = "jobs",
    description = "Submits a rename (`mv FROM TO`). The body is read as JSON whatever its content type.",
    request_body = MoveRequest,
    responses(Submitted))]
async fn submit_rename(
    State(state): State<ApiState>,
    Extension(requester): Extension<Requester>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let work =
        from_to(&state.jobs, body, "move").map(|(from, to, s)| (Work::Rename { from, to }, s));
    submit(&state, &requester, work).await
}

/// `POST /copies {"from", "to", "strategy"?}`: `cp -r`.
#[utoipa::path(post, path = "/copies", tag = "jobs",
    description = "Submits a copy (`cp -r FROM TO`). The body is read as JSON whatever its content type.",
    request_body = MoveRequest,
    responses(Submitted))]
async fn submit_copy(
    State(state): State<ApiState>,
    Extension(requester): Extension<Requester>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let work = from_to(&state.jobs, body, "copy").map(|(from, to, s)| (Work::Copy { from, to }, s));
    submit(&state, &requester, work).await
}

/// Reads the body of a rename or a copy (`verb`: `move` or `copy`, for messages): `from`, `to`
/// and the strategy. Refuses to move the root, and a `to` inside `from`.
fn from_to(
    jobs: &Jobs,
    body: Result<Bytes, BytesRejection>,
    verb: &str,
) -> Result<(FsPath, FsPath, Strategy), ApiError> {
    let fields = object(body, &MOVE_FIELDS, "`from`, `to` and optionally `strategy`")?;
    let (from, to) = (path_field(&fields, "from")?, path_field(&fields, "to")?);
    let strategy = strategy_field(jobs, &fields)?;
    if verb == "move" && from.is_root() {
        return Err(ApiError::bad("from", "the root `/` cannot be moved"));
    }
    if to.is_inside(&from) {
        return Err(ApiError::bad(
            "to",
            format!("cannot {verb} `{from}` into itself (`{to}`)"),
        ));
    }
    Ok((from, to, strategy))
}

/// `POST /deletes {"path", "recursive"?, "strategy"?}`: `rm [-r]`; `recursive` defaults to
/// false, which refuses a directory with entries.
#[utoipa::path(post, path = "/deletes", tag = "jobs",
    description = "Submits a delete (`rm [-r] PATH`). The body is read as JSON whatever its content type.",
    request_body = DeleteRequest,
    responses(Submitted))]
async fn submit_delete(
    State(state): State<ApiState>,
    Extension(requester): Extension<Requester>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let work = delete_of(&state.jobs, body);
    submit(&state, &requester, work).await
}

/// Reads the body of a delete: `path`, `recursive` (false when absent) and the strategy.
/// Refuses the root.
fn delete_of(
    jobs: &Jobs,
    body: Result<Bytes, BytesRejection>,
) -> Result<(Work, Strategy), ApiError> {
    let fields = object(
        body,
        &DELETE_FIELDS,
        "`path` and optionally `recursive` and `strategy`",
    )?;
    let path = path_field(&fields, "path")?;
    let recursive = match fields.get("recursive") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::bad(
                "recursive",
                "`recursive` must be true or false",
            ))
        }
    };
    let strategy = strategy_field(jobs, &fields)?;
    if path.is_root() {
        return Err(ApiError::bad("path", "the root `/` cannot be removed"));
    }
    Ok((Work::Delete { path, recursive }, strategy))
}

/// Submits `work` as read from a request (or the reason it was refused), for `requester`:
/// checks its grants (before anything is looked up), takes its place in the queue, writes its
/// line in the audit trail, stores it and starts it. 202 with the job's id, state and location;
/// 403 for what the caller may not do, 429 if the queue is full, 503 if the job cannot be
/// audited or stored. Every answer's line is written here, before it goes out.
async fn submit(
    state: &ApiState,
    requester: &Requester,
    work: Result<(Work, Strategy), ApiError>,
) -> Response {
    let (paths, outcome) = match work {
        Err(e) => (None, Err(e)),
        Ok((work, strategy)) => {
            let paths = Paths::of(&work);
            let outcome = match requester.caller.check_work(&work) {
                Err(refused) => Err(ApiError::from(refused)),
                Ok(()) => accept(state, requester, work, strategy).await,
            };
            (Some(paths), outcome)
        }
    };
    let mut response = match outcome {
        Ok(response) => response,
        Err(e) => {
            let line = Audit::line(
                requester,
                paths,
                e.status(),
                format!("refused: {}", e.message()),
                None,
            );
            if let Err(failed) = state.audit.write(&line).await {
                tracing::error!(error = %failed, "the audit trail could not be written");
            }
            e.into_response()
        }
    };
    response.extensions_mut().insert(Written);
    response
}

/// Takes `work`'s place in the queue, writes its line (synced before the job is stored, so
/// that no instance runs a job the trail does not hold), stores and starts it. A job stored
/// after its line was written that then cannot be stored gets a second line saying so.
async fn accept(
    state: &ApiState,
    requester: &Requester,
    work: Work,
    strategy: Strategy,
) -> Result<Response, ApiError> {
    let collection = collection(work.kind());
    let paths = Paths::of(&work);
    let submitted_by = requester.named.then(|| requester.caller.name().to_owned());
    let reserved = state
        .jobs
        .reserve(work, strategy, submitted_by)
        .map_err(refused)?;
    let id = reserved.job().map(|job| job.id.clone());
    let line = Audit::line(
        requester,
        Some(paths.clone()),
        StatusCode::ACCEPTED,
        "accepted".to_owned(),
        id.clone(),
    );
    // Not written: the job is not accepted (its place goes back with `reserved`).
    state.audit.write(&line).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the job was not accepted: the audit trail cannot be written: {e:#}"),
        )
    })?;
    match state.jobs.store_and_run(reserved).await {
        Ok(job) => {
            let location = format!("/{collection}/{}", job.id);
            let body = Json(Accepted {
                kind: job.work.kind(),
                state: job.state(),
                location: location.clone(),
                id: job.id,
            });
            Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)], body).into_response())
        }
        Err(refusal) => {
            let e = refused(refusal);
            let line = Audit::line(
                requester,
                Some(paths),
                e.status(),
                format!("not stored after all: {}", e.message()),
                id,
            );
            if let Err(failed) = state.audit.write(&line).await {
                tracing::error!(error = %failed, "the audit trail could not be written");
            }
            Ok(e.into_response())
        }
    }
}

/// The answer to a job the queue or the store refused.
fn refused(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::Full { limit } => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("the queue is full ({limit} unfinished jobs): try again later"),
        ),
        Refusal::Store(e) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the job was not accepted: {e}"),
        ),
    }
}

/// The path segment of a kind's jobs: `renames`, `copies`, `deletes`.
fn collection(kind: JobKind) -> &'static str {
    match kind {
        JobKind::Rename => "renames",
        JobKind::Copy => "copies",
        JobKind::Delete => "deletes",
    }
}

/// The job `id`, if it is of `kind` (any kind for `None`): this instance's, or another's from
/// the jobs index.
async fn find(
    jobs: &Jobs,
    caller: &Caller,
    id: Result<Path<String>, PathRejection>,
    kind: Option<JobKind>,
) -> Result<Json<Job>, ApiError> {
    let Path(id) = id?;
    let id = id.as_str();
    let found = jobs.find(id).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot read job `{id}`: {e}"),
        )
    })?;
    // Another's job, outside the caller's `admin` grants, is absent, as a job that never was.
    let found = found.filter(|job| caller.sees_job(job));
    match found {
        Some(job) if kind.is_none_or(|k| job.work.kind() == k) => {
            Ok(Json(caller.redacted_job(job)))
        }
        Some(job) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "job `{id}` is a {}: see /{}/{id} or /jobs/{id}",
                job.work.kind(),
                collection(job.work.kind())
            ),
        )),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no job `{id}` (finished jobs are forgotten after a while)"),
        )),
    }
}

/// The answers of the routes that show one job (`GET /jobs/{id}` and its kind's).
macro_rules! one_job {
    ($name:ident, $path:literal, $kind:expr, $what:literal) => {
        #[doc = concat!("`GET ", $path, "`: ", $what, ".")]
        #[utoipa::path(get, path = $path, tag = "jobs",
            description = concat!("Shows ", $what, ": from this instance if it runs the job, \
                otherwise from the jobs index (any instance on the store answers)."),
            params(("id" = String, Path, description = "The job's id")),
            responses(
                (status = 200, description = "The job", body = Job),
                (status = 400, description = "An id that cannot be read", body = ErrorBody),
                (status = 404, description = "No such job (or one of another kind: the message \
                    names where to look)", body = ErrorBody),
                (status = 503, description = "The jobs index cannot be read", body = ErrorBody),
            ))]
        async fn $name(
            State(jobs): State<Jobs>,
            Extension(requester): Extension<Requester>,
            id: Result<Path<String>, PathRejection>,
        ) -> Result<Json<Job>, ApiError> {
            find(&jobs, &requester.caller, id, $kind).await
        }
    };
}

one_job!(
    get_rename,
    "/renames/{id}",
    Some(JobKind::Rename),
    "a rename"
);
one_job!(get_copy, "/copies/{id}", Some(JobKind::Copy), "a copy");
one_job!(
    get_delete,
    "/deletes/{id}",
    Some(JobKind::Delete),
    "a delete"
);
one_job!(get_job, "/jobs/{id}", None, "a job of any kind");

/// The query string as a map: a query that cannot be read is a 400 in JSON.
type QueryMap = Result<Query<HashMap<String, String>>, QueryRejection>;

/// The most recent jobs of `kind` (all for `None`); `?limit=` (100).
fn recent(
    jobs: &Jobs,
    caller: &Caller,
    query: QueryMap,
    kind: Option<JobKind>,
) -> Result<Vec<Job>, ApiError> {
    let Query(query) = query?;
    // Any `usize`, as the description says (`bodies::whole_number`).
    let limit = match query.get("limit") {
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| ApiError::bad("limit", format!("`{n}` is not a number")))?,
        None => 100,
    };
    if caller.is_unrestricted() {
        return Ok(jobs.recent(kind, limit));
    }
    // Those the caller sees, then the limit: a page of another's jobs hides none of its own.
    Ok(jobs
        .recent(kind, usize::MAX)
        .into_iter()
        .filter(|job| caller.sees_job(job))
        .take(limit)
        .map(|job| caller.redacted_job(job))
        .collect())
}

/// The answers of the routes that list jobs (`GET /jobs` and its kinds').
macro_rules! job_list {
    ($name:ident, $path:literal, $kind:expr, $list:ident, $key:ident, $what:literal) => {
        #[doc = concat!("`GET ", $path, "`: ", $what, ".")]
        #[utoipa::path(get, path = $path, tag = "jobs",
            description = concat!("Lists ", $what, " of this instance, newest first (finished \
                jobs beyond `--history` are forgotten here)."),
            params(ListQuery),
            responses(
                (status = 200, description = "The jobs", body = $list),
                (status = 400, description = "A `limit` that is not a number", body = ErrorBody),
            ))]
        async fn $name(
            State(jobs): State<Jobs>,
            Extension(requester): Extension<Requester>,
            query: QueryMap,
        ) -> Result<Json<$list>, ApiError> {
            Ok(Json($list {
                $key: recent(&jobs, &requester.caller, query, $kind)?,
            }))
        }
    };
}

job_list!(
    list_renames,
    "/renames",
    Some(JobKind::Rename),
    RenameList,
    renames,
    "the renames"
);
job_list!(
    list_copies,
    "/copies",
    Some(JobKind::Copy),
    CopyList,
    copies,
    "the copies"
);
job_list!(
    list_deletes,
    "/deletes",
    Some(JobKind::Delete),
    DeleteList,
    deletes,
    "the deletes"
);
job_list!(
    list_jobs,
    "/jobs",
    None,
    JobList,
    jobs,
    "the jobs of every kind"
);

/// `GET /locks`.
#[utoipa::path(get, path = "/locks", tag = "locks",
    description = "Every lock document: path, mode, holders, waiters, expiry.",
    responses(
        (status = 200, description = "The locks", body = LockList),
        (status = 503, description = "The lock index cannot be read", body = ErrorBody),
    ))]
async fn locks(
    State(jobs): State<Jobs>,
    Extension(requester): Extension<Requester>,
) -> Result<Json<LockList>, ApiError> {
    let caller = &requester.caller;
    let lock_index = fs_model::lock_index_name(&jobs.config().index);
    let client = LockClient::builder(Arc::clone(jobs.store()), lock_index).build();
    let locks = client
        .list_locks()
        .await
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let now = LeaseClock::new().now_ms();
    let locks = locks
        .iter()
        .map(|l| LockView::new(l, now))
        .filter(|view| caller.sees_lock(view))
        .map(|view| caller.redacted_lock(view))
        .collect();
    Ok(Json(LockList { locks }))
}

/// `GET /tree?path=/x&depth=2&limit=200&after=/x/m`: the entries under `path`, `depth` levels
/// down (default 1), in path order, at most `limit` of them (default and most
/// [`TREE_LIMIT`]), from just after `after` on; 404 if there is nothing at `path`. `next`
/// is the path to pass as `after` for the next page, or `null` at the end (`truncated` says
/// the same, as before paging).
#[utoipa::path(get, path = "/tree", tag = "tree",
    description = "The entries under a path, `depth` levels down, in path order, a page at a time.",
    params(TreeQuery),
    responses(
        (status = 200, description = "A page of entries", body = TreePage),
        (status = 400, description = "A bad parameter, named in `field`", body = ErrorBody),
        (status = 404, description = "Nothing at `path` (`field` names it)", body = ErrorBody),
        (status = 503, description = "The store cannot be read", body = ErrorBody),
    ))]
async fn tree(
    State(jobs): State<Jobs>,
    Extension(requester): Extension<Requester>,
    query: QueryMap,
) -> Result<Json<TreePage>, ApiError> {
    let caller = &requester.caller;
    let Query(query) = query?;
    let path = match query.get("path") {
        Some(p) => FsPath::parse_input(p)
            .map(|(path, _)| path)
            .map_err(|e| ApiError::bad("path", e.to_string()))?,
        None => FsPath::root(),
    };
    // Any `usize` from 1, as the description says (`bodies::whole_number`): a depth past the
    // deepest entry reads as "everything below".
    let depth: usize = match query.get("depth") {
        Some(d) => match d.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(ApiError::bad(
                    "depth",
                    format!("`{d}` is not a depth (a whole number of levels, at least 1)"),
                ))
            }
        },
        None => 1,
    };
    let limit = match query.get("limit") {
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=TREE_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::bad(
                    "limit",
                    format!("`{l}` is not a number of entries from 1 to {TREE_LIMIT}"),
                ))
            }
        },
        None => TREE_LIMIT,
    };
    let after = match query.get("after") {
        Some(a) => {
            let after = FsPath::parse(a).map_err(|e| ApiError::bad("after", e.to_string()))?;
            if !after.is_descendant_of(&path) {
                return Err(ApiError::bad(
                    "after",
                    format!("`{after}` is not under `{path}`: pass the `next` of the page before"),
                ));
            }
            Some(after)
        }
        None => None,
    };
    let tree = FsTree::new(Arc::clone(jobs.store()), jobs.config().index.clone());
    let unavailable =
        |e: fs_rename::RenameError| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    // Checked before anything is looked up: the answer says nothing of what the caller may
    // not read, not even whether it exists.
    if !caller.reads(&path) {
        if !caller.passes_through(&path) {
            return Err(NotGranted {
                needed: Capability::Read,
                on: path,
            }
            .into());
        }
        let (entries, more) = on_the_way(&tree, caller, &path, depth, limit, after.as_ref())
            .await
            .map_err(unavailable)?;
        let next = more
            .then(|| entries.last().map(|e| e.doc.path.clone()))
            .flatten();
        return Ok(Json(TreePage {
            path,
            depth: depth as u64,
            entries,
            truncated: more,
            next,
        }));
    }
    // A listing of nothing does not say whether `path` is an empty directory or nothing at
    // all: asked (after a refresh, which the listing needs too).
    match fs_rename::stat(&tree, &path).await {
        Ok(_) => {}
        Err(fs_rename::RenameError::SourceNotFound { .. }) => {
            return Err(
                ApiError::new(StatusCode::NOT_FOUND, format!("no `{path}` in the tree"))
                    .naming("path"),
            )
        }
        Err(e) => return Err(unavailable(e)),
    }
    let max_depth = path.depth().saturating_add(depth);
    let listed = fs_rename::list_page(
        tree.store(),
        tree.index(),
        &path,
        depth > 1,
        after.as_ref(),
        limit,
        |e| e.doc.depth <= max_depth,
    )
    .await
    .map_err(unavailable)?;
    let next = listed
        .more
        .then(|| listed.entries.last().map(|e| e.doc.path.clone()))
        .flatten();
    let entries = listed
        .entries
        .into_iter()
        .map(|e| TreeEntry {
            id: e.id,
            doc: e.doc,
        })
        .collect();
    Ok(Json(TreePage {
        path,
        depth: depth as u64,
        entries,
        truncated: listed.more,
        next,
    }))
}

/// The entries `depth` levels under `path` that a caller who may not read `path` sees: the
/// directories on the way down to what it may read (by the names its grants spell), and what
/// it may read, in path order, at most `limit` after `after`; and whether more follow.
async fn on_the_way(
    tree: &FsTree,
    caller: &Caller,
    path: &FsPath,
    depth: usize,
    limit: usize,
    after: Option<&FsPath>,
) -> fs_rename::Result<(Vec<TreeEntry>, bool)> {
    let max_depth = path.depth().saturating_add(depth);
    let roots: Vec<FsPath> = caller
        .readable_roots()
        .filter(|root| root.is_descendant_of(path))
        .cloned()
        .collect();
    let mut found: std::collections::BTreeMap<FsPath, TreeEntry> = Default::default();
    for root in &roots {
        let mut way: Vec<FsPath> = root
            .ancestors()
            .into_iter()
            .filter(|a| a.is_descendant_of(path))
            .collect();
        way.push(root.clone());
        let mut reached = true;
        for step in way.into_iter().filter(|step| step.depth() <= max_depth) {
            if found.contains_key(&step) {
                continue;
            }
            match fs_rename::stat(tree, &step).await {
                Ok(entry) => {
                    found.insert(
                        step,
                        TreeEntry {
                            id: entry.id,
                            doc: entry.doc,
                        },
                    );
                }
                // Nothing further down this way.
                Err(fs_rename::RenameError::SourceNotFound { .. }) => {
                    reached = false;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if reached && root.depth() < max_depth {
            let listed = fs_rename::list_page(
                tree.store(),
                tree.index(),
                root,
                true,
                after.filter(|a| a.is_descendant_of(root)),
                limit.saturating_add(1),
                |e| e.doc.depth <= max_depth,
            )
            .await?;
            for e in listed.entries {
                found.insert(
                    e.doc.path.clone(),
                    TreeEntry {
                        id: e.id,
                        doc: e.doc,
                    },
                );
            }
        }
    }
    let mut entries: Vec<TreeEntry> = found
        .into_values()
        .filter(|e| after.is_none_or(|a| e.doc.path > *a))
        .collect();
    let more = entries.len() > limit;
    entries.truncate(limit);
    Ok((entries, more))
}

/// `GET /healthz`.
#[utoipa::path(get, path = "/healthz", tag = "service",
    description = "Whether the store answers.",
    responses(
        (status = 200, description = "The store answers", body = Health),
        (status = 503, description = "The store does not answer", body = ErrorBody),
    ))]
async fn healthz(State(jobs): State<Jobs>) -> Response {
    let index = &jobs.config().index;
    match jobs
        .store()
        .count(index, &Scope::Exact(FsPath::root()))
        .await
    {
        Ok(_) => Json(Health {
            status: "ok",
            store: jobs.store().describe(),
        })
        .into_response(),
        Err(e) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unreachable: {e}"),
        )
        .into_response(),
    }
}

/// `GET /metrics`.
#[utoipa::path(get, path = "/metrics", tag = "service",
    description = "Prometheus text, every series labelled `instance=\"<name>\"`.",
    responses(
        (status = 200, description = "The series", content_type = "text/plain; version=0.0.4", body = String),
    ))]
async fn metrics(State(jobs): State<Jobs>, Extension(requester): Extension<Requester>) -> Response {
    if let Err(refused) = requester.caller.must(Capability::Admin, &FsPath::root()) {
        return ApiError::from(refused).into_response();
    }
    let text = jobs.metrics().render(jobs.instance(), &jobs.counts());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
