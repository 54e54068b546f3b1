//! The HTTP API: routes, request validation, JSON answers.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fs_locks::{LeaseClock, LockClient};
use fs_model::FsPath;
use fs_rename::{FsTree, JobKind, Strategy};
use fs_store::Scope;
use serde_json::{json, Map, Value};

use super::events::Feed;
use super::job::Work;
use super::jobs::{Jobs, Refusal};

/// The most entries `GET /tree` returns in one answer.
const TREE_LIMIT: usize = 10_000;

/// An error answer: `{"error": "...", "field": "..."}`.
pub struct ApiError {
    status: StatusCode,
    message: String,
    field: Option<&'static str>,
}

impl ApiError {
    fn bad(field: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            field: Some(field),
        }
    }

    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            field: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.message });
        if let Some(field) = self.field {
            body["field"] = json!(field);
        }
        (self.status, Json(body)).into_response()
    }
}

pub fn routes(jobs: Jobs, feed: Feed) -> Router {
    Router::new()
        .route("/events", get(Feed::route).with_state(feed))
        .route("/renames", get(list_renames).post(submit_rename))
        .route("/renames/{id}", get(get_rename))
        .route("/copies", get(list_copies).post(submit_copy))
        .route("/copies/{id}", get(get_copy))
        .route("/deletes", get(list_deletes).post(submit_delete))
        .route("/deletes/{id}", get(get_delete))
        .route("/jobs", get(list_jobs))
        .route("/jobs/{id}", get(get_job))
        .route("/locks", get(locks))
        .route("/tree", get(tree))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(jobs)
        .merge(super::page::routes())
}

/// Reads a request body as a JSON object whose fields are all among `allowed`; `wanted`
/// says what is expected, for the error message.
fn object(
    body: Result<Bytes, BytesRejection>,
    allowed: &[&str],
    wanted: &str,
) -> Result<Map<String, Value>, ApiError> {
    let body = body.map_err(|e| {
        ApiError::new(
            e.status(),
            format!("cannot read the request body: {}", e.body_text()),
        )
    })?;
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
    FsPath::parse(text).map_err(|e| ApiError::bad(name, e.to_string()))
}

/// The strategy in the field `strategy`, or the service's default.
fn strategy_field(jobs: &Jobs, fields: &Map<String, Value>) -> Result<Strategy, ApiError> {
    match fields.get("strategy") {
        None | Some(Value::Null) => Ok(jobs.config().strategy),
        Some(Value::String(s)) => match s.parse::<Strategy>() {
            Ok(Strategy::None) => Err(ApiError::bad(
                "strategy",
                "`none` exists only for the demonstration",
            )),
            Ok(strategy) => Ok(strategy),
            Err(e) => Err(ApiError::bad("strategy", e)),
        },
        Some(_) => Err(ApiError::bad("strategy", "`strategy` must be a string")),
    }
}

/// `POST /renames {"from", "to", "strategy"?}`.
async fn submit_rename(
    State(jobs): State<Jobs>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (from, to, strategy) = from_to(&jobs, body, "move")?;
    accept(&jobs, Work::Rename { from, to }, strategy).await
}

/// `POST /copies {"from", "to", "strategy"?}`: `cp -r`.
async fn submit_copy(
    State(jobs): State<Jobs>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (from, to, strategy) = from_to(&jobs, body, "copy")?;
    accept(&jobs, Work::Copy { from, to }, strategy).await
}

/// Reads the body of a rename or a copy (`verb`: `move` or `copy`, for messages): `from`, `to`
/// and the strategy. Refuses to move the root, and a `to` inside `from`.
fn from_to(
    jobs: &Jobs,
    body: Result<Bytes, BytesRejection>,
    verb: &str,
) -> Result<(FsPath, FsPath, Strategy), ApiError> {
    let fields = object(
        body,
        &["from", "to", "strategy"],
        "`from`, `to` and optionally `strategy`",
    )?;
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
async fn submit_delete(
    State(jobs): State<Jobs>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let fields = object(
        body,
        &["path", "recursive", "strategy"],
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
    let strategy = strategy_field(&jobs, &fields)?;
    if path.is_root() {
        return Err(ApiError::bad("path", "the root `/` cannot be removed"));
    }
    accept(&jobs, Work::Delete { path, recursive }, strategy).await
}

/// Submits `work`: 202 with the job's id, state and location, 429 if the queue is full, 503
/// if the job cannot be stored.
async fn accept(jobs: &Jobs, work: Work, strategy: Strategy) -> Result<Response, ApiError> {
    let collection = collection(work.kind());
    match jobs.submit(work, strategy).await {
        Ok(job) => {
            let location = format!("/{collection}/{}", job.id);
            let body = Json(json!({
                "id": job.id, "kind": job.work.kind(), "state": job.state, "location": location
            }));
            Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)], body).into_response())
        }
        Err(Refusal::Full { limit }) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("the queue is full ({limit} unfinished jobs): try again later"),
        )),
        Err(Refusal::Store(e)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the job was not accepted: {e}"),
        )),
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
async fn find(jobs: &Jobs, id: &str, kind: Option<JobKind>) -> Result<Response, ApiError> {
    let found = jobs.find(id).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot read job `{id}`: {e}"),
        )
    })?;
    match found {
        Some(job) if kind.is_none_or(|k| job.work.kind() == k) => Ok(Json(job).into_response()),
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

async fn get_rename(
    State(jobs): State<Jobs>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    find(&jobs, &id, Some(JobKind::Rename)).await
}

async fn get_copy(State(jobs): State<Jobs>, Path(id): Path<String>) -> Result<Response, ApiError> {
    find(&jobs, &id, Some(JobKind::Copy)).await
}

async fn get_delete(
    State(jobs): State<Jobs>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    find(&jobs, &id, Some(JobKind::Delete)).await
}

async fn get_job(State(jobs): State<Jobs>, Path(id): Path<String>) -> Result<Response, ApiError> {
    find(&jobs, &id, None).await
}

/// The most recent jobs of `kind` (all for `None`) under the key `key`; `?limit=` (100).
fn recent(
    jobs: &Jobs,
    query: &HashMap<String, String>,
    kind: Option<JobKind>,
    key: &str,
) -> Result<Response, ApiError> {
    let limit = match query.get("limit") {
        Some(n) => n
            .parse()
            .map_err(|_| ApiError::bad("limit", format!("`{n}` is not a number")))?,
        None => 100,
    };
    Ok(Json(json!({ key: jobs.recent(kind, limit) })).into_response())
}

async fn list_renames(
    State(jobs): State<Jobs>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    recent(&jobs, &query, Some(JobKind::Rename), "renames")
}

async fn list_copies(
    State(jobs): State<Jobs>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    recent(&jobs, &query, Some(JobKind::Copy), "copies")
}

async fn list_deletes(
    State(jobs): State<Jobs>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    recent(&jobs, &query, Some(JobKind::Delete), "deletes")
}

async fn list_jobs(
    State(jobs): State<Jobs>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    recent(&jobs, &query, None, "jobs")
}

async fn locks(State(jobs): State<Jobs>) -> Result<Response, ApiError> {
    let lock_index = fs_model::lock_index_name(&jobs.config().index);
    let client = LockClient::builder(Arc::clone(jobs.store()), lock_index).build();
    let locks = client
        .list_locks()
        .await
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let now = LeaseClock::new().now_ms();
    let locks: Vec<Value> = locks.iter().map(|l| l.to_json(now)).collect();
    Ok(Json(json!({ "locks": locks })).into_response())
}

/// `GET /tree?path=/x&depth=2&limit=200&after=/x/m`: the entries under `path`, `depth` levels
/// down (default 1), in path order, at most `limit` of them (default and most
/// [`TREE_LIMIT`]), from just after `after` on. `next` is the path to pass as `after` for the
/// next page, or `null` at the end (`truncated` says the same, as before paging).
async fn tree(
    State(jobs): State<Jobs>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let path = match query.get("path") {
        Some(p) => FsPath::parse(p).map_err(|e| ApiError::bad("path", e.to_string()))?,
        None => FsPath::root(),
    };
    let depth: usize = match query.get("depth") {
        Some(d) => match d.parse() {
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
    tree.refresh().await.map_err(unavailable)?;
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
    let entries: Vec<Value> = listed
        .entries
        .iter()
        .map(|e| json!({ "id": e.id, "doc": e.doc }))
        .collect();
    Ok(Json(json!({
        "path": path,
        "depth": depth,
        "entries": entries,
        "truncated": listed.more,
        "next": next,
    }))
    .into_response())
}

async fn healthz(State(jobs): State<Jobs>) -> Response {
    let index = &jobs.config().index;
    match jobs
        .store()
        .count(index, &Scope::Exact(FsPath::root()))
        .await
    {
        Ok(_) => Json(json!({ "status": "ok", "store": jobs.store().describe() })).into_response(),
        Err(e) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unreachable: {e}"),
        )
        .into_response(),
    }
}

async fn metrics(State(jobs): State<Jobs>) -> Response {
    let text = jobs.metrics().render(jobs.instance(), &jobs.counts());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
