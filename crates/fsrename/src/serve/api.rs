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
use fs_rename::{FsTree, Strategy};
use fs_store::Scope;
use serde_json::{json, Value};

use super::jobs::{Jobs, Refusal};

/// The most entries `GET /tree` returns.
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

pub fn routes(jobs: Jobs) -> Router {
    Router::new()
        .route("/renames", get(list_renames).post(submit))
        .route("/renames/{id}", get(get_rename))
        .route("/locks", get(locks))
        .route("/tree", get(tree))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(jobs)
}

/// `POST /renames {"from", "to", "strategy"?}`.
async fn submit(
    State(jobs): State<Jobs>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
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
            "expected a JSON object with `from` and `to`",
        ));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !["from", "to", "strategy"].contains(&k.as_str()))
    {
        let message =
            format!("unknown field `{unknown}`: expected `from`, `to` and optionally `strategy`");
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message,
            field: Some("body"),
        });
    }
    let path = |name: &'static str| -> Result<FsPath, ApiError> {
        let text = fields
            .get(name)
            .ok_or_else(|| ApiError::bad(name, format!("`{name}` is missing")))?
            .as_str()
            .ok_or_else(|| ApiError::bad(name, format!("`{name}` must be a string")))?;
        FsPath::parse(text).map_err(|e| ApiError::bad(name, e.to_string()))
    };
    let (from, to) = (path("from")?, path("to")?);
    let strategy = match fields.get("strategy") {
        None | Some(Value::Null) => jobs.config().strategy,
        Some(Value::String(s)) => match s.parse::<Strategy>() {
            Ok(Strategy::None) => {
                return Err(ApiError::bad(
                    "strategy",
                    "`none` exists only for the demonstration",
                ))
            }
            Ok(strategy) => strategy,
            Err(e) => return Err(ApiError::bad("strategy", e)),
        },
        Some(_) => return Err(ApiError::bad("strategy", "`strategy` must be a string")),
    };
    if from.is_root() {
        return Err(ApiError::bad("from", "the root `/` cannot be moved"));
    }
    if to.is_inside(&from) {
        return Err(ApiError::bad(
            "to",
            format!("cannot move `{from}` into itself (`{to}`)"),
        ));
    }
    match jobs.submit(from, to, strategy) {
        Ok(job) => {
            let location = format!("/renames/{}", job.id);
            let body = Json(json!({ "id": job.id, "state": job.state, "location": location }));
            Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)], body).into_response())
        }
        Err(Refusal::Full { limit }) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("the queue is full ({limit} unfinished jobs): try again later"),
        )),
    }
}

async fn get_rename(
    State(jobs): State<Jobs>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match jobs.get(&id) {
        Some(job) => Ok(Json(job).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no rename job `{id}` (finished jobs are forgotten after a while)"),
        )),
    }
}

async fn list_renames(
    State(jobs): State<Jobs>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let limit = match query.get("limit") {
        Some(n) => n
            .parse()
            .map_err(|_| ApiError::bad("limit", format!("`{n}` is not a number")))?,
        None => 100,
    };
    Ok(Json(json!({ "renames": jobs.recent(limit) })).into_response())
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

/// `GET /tree?path=/x&depth=2`: the entries under `path`, `depth` levels down (default 1).
async fn tree(
    State(jobs): State<Jobs>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let path = match query.get("path") {
        Some(p) => FsPath::parse(p).map_err(|e| ApiError::bad("path", e.to_string()))?,
        None => FsPath::root(),
    };
    let depth: usize = match query.get("depth") {
        Some(d) => d
            .parse()
            .map_err(|_| ApiError::bad("depth", format!("`{d}` is not a number")))?,
        None => 1,
    };
    let tree = FsTree::new(Arc::clone(jobs.store()), jobs.config().index.clone());
    let unavailable =
        |e: fs_rename::RenameError| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    tree.refresh().await.map_err(unavailable)?;
    let max_depth = path.depth() + depth;
    let mut entries = Vec::new();
    let mut truncated = false;
    fs_rename::list(tree.store(), tree.index(), &path, depth > 1, |e| {
        if e.doc.depth <= max_depth {
            if entries.len() >= TREE_LIMIT {
                truncated = true;
            } else {
                entries.push(json!({ "id": e.id, "doc": e.doc }));
            }
        }
        Ok(())
    })
    .await
    .map_err(unavailable)?;
    Ok(
        Json(json!({ "path": path, "depth": depth, "entries": entries, "truncated": truncated }))
            .into_response(),
    )
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
    let text = jobs.metrics().render(&jobs.counts());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
