//! `_update_by_query` with fsrename's rename script, as a task, and the tasks API that follows,
//! cancels and lists it ([`EsProxyOptions::update_by_query`](super::EsProxyOptions), off unless
//! asked for): what osmem does not do and Elasticsearch does.
//!
//! As on Elasticsearch, the task runs on the server, whatever becomes of the client that
//! started it (a killed `fsrename mv` leaves it running). It reads its snapshot first (every
//! document under the rename's source, with its version), then rewrites it a batch at a time
//! (`scroll_size`, default 1 000; fsrename asks for 5 000) with the Rust twin of the painless script
//! ([`fs_model::rename_script`]), each write conditional on the version the snapshot read. The
//! first conflict stops it (`conflicts=abort`), with a `failures` entry; a script error stops it
//! with an `error`; a cancellation stops it before its next batch, with `canceled`. With
//! `refresh=true` it refreshes the index when it ends. The request's `X-Opaque-Id` is kept with
//! the task and shown by `GET _tasks?detailed`. A pause before each part of a batch the proxy writes (500 documents;
//! [`EsProxyOptions::update_by_query_pause`](super::EsProxyOptions)) stretches a task out, so
//! that a test can kill its client in the middle.
//!
//! `_delete_by_query` of the files of a subtree (the query fsrename's delete sends: a subtree
//! but its directories) runs here the same way, each delete conditional on the version its
//! snapshot read.
//!
//! Only the rename script runs here; any other `_update_by_query` (or `_delete_by_query`) goes to
//! osmem, which refuses scripts. The snapshot is read from the server behind directly: what a search would see
//! under the rename's locks, whose holders refresh before they release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::Response;
use fs_model::rename_script::RENAME_PREFIX;
use fs_model::FsPath;
use fs_store::{BulkOp, Scan, Scope, SharedStore, StoreError, StoredDoc};
use serde_json::{json, Map, Value};

use super::{answer, Proxy, Request};

/// The action name Elasticsearch gives an update by query.
const ACTION: &str = "indices:data/write/update/byquery";

/// The action name Elasticsearch gives a delete by query.
const DELETE_ACTION: &str = "indices:data/write/delete/byquery";

/// The most documents the proxy reads or writes in one request to osmem for a task.
const UPSTREAM_PART: usize = 500;

/// The proxy's node, as task ids name it.
const NODE: &str = "proxy";

/// The tasks the proxy has run, by number.
#[derive(Default)]
pub(crate) struct Tasks {
    next: AtomicU64,
    tasks: Mutex<HashMap<u64, Arc<Task>>>,
}

/// One update (or delete) by query.
struct Task {
    description: String,
    action: &'static str,
    opaque: Option<String>,
    cancel: AtomicBool,
    state: Mutex<TaskState>,
}

#[derive(Default)]
struct TaskState {
    total: u64,
    updated: u64,
    deleted: u64,
    batches: u64,
    /// The answer once it ended: `Ok(response)` or `Err(error)`.
    ended: Option<Result<Value, Value>>,
}

impl Task {
    fn state(&self) -> std::sync::MutexGuard<'_, TaskState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn status(&self) -> Value {
        let s = self.state();
        json!({"total": s.total, "updated": s.updated, "created": 0, "deleted": s.deleted,
               "batches": s.batches, "version_conflicts": 0, "noops": 0,
               "retries": {"bulk": 0, "search": 0}, "throttled_millis": 0,
               "requests_per_second": -1.0, "throttled_until_millis": 0})
    }

    fn info(&self, number: u64) -> Value {
        let mut info = json!({"node": NODE, "id": number, "type": "transport", "action": self.action,
            "description": self.description, "status": self.status(),
            "cancellable": true, "cancelled": self.cancel.load(Ordering::Relaxed)});
        if let Some(opaque) = &self.opaque {
            info["headers"] = json!({ "X-Opaque-Id": opaque });
        }
        info
    }
}

impl Tasks {
    /// How many tasks have not ended.
    pub(crate) fn running(&self) -> usize {
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.values().filter(|t| t.state().ended.is_none()).count()
    }

    pub(crate) fn running_updated(&self) -> u64 {
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks
            .values()
            .map(|t| t.state())
            .filter(|state| state.ended.is_none())
            .map(|state| state.updated + state.deleted)
            .sum()
    }

    fn get(&self, id: &str) -> Option<(u64, Arc<Task>)> {
        let number = id.strip_prefix(NODE)?.strip_prefix(':')?.parse().ok()?;
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.get(&number).map(|t| (number, Arc::clone(t)))
    }
}

/// `POST {index}/_update_by_query` with the rename script: starts the task, answers its id (or,
/// with `wait_for_completion=true`, its response). `None` for any other update by query.
pub(crate) async fn start(
    proxy: &Arc<Proxy>,
    index: &str,
    r: &Request,
) -> Option<Result<Response, String>> {
    let body = r.json_body();
    if body["script"]["id"].as_str() != Some(RENAME_PREFIX.id) {
        return None;
    }
    let params = body["script"]["params"].clone();
    let Some(from) = params["from"].as_str().and_then(|f| FsPath::parse(f).ok()) else {
        return Some(Ok(bad_request(
            "the rename script's params have no valid `from`",
        )));
    };
    let task = (format!("update-by-query [{index}]"), ACTION);
    Some(Ok(launch(
        proxy,
        index,
        r,
        task,
        (from, Op::Rename(params)),
    )
    .await))
}

/// `POST {index}/_delete_by_query` of the files of a subtree (fsrename's delete): as
/// [`start`]. `None` for any other delete by query.
pub(crate) async fn start_delete(
    proxy: &Arc<Proxy>,
    index: &str,
    r: &Request,
) -> Option<Result<Response, String>> {
    let path = files_of(&r.json_body()["query"])?;
    let task = (format!("delete-by-query [{index}]"), DELETE_ACTION);
    Some(Ok(
        launch(proxy, index, r, task, (path, Op::DeleteFiles)).await
    ))
}

/// The subtree whose files `query` asks for, if it is the query fsrename's delete sends
/// (`fs_store`'s `files_query`): a subtree filtered, directories excluded.
fn files_of(query: &Value) -> Option<FsPath> {
    let bool_query = &query["bool"];
    let excluded = bool_query["must_not"][0]["term"]["kind"].as_str() == Some("dir");
    let scope = &bool_query["filter"][0];
    let root = if scope["prefix"]["path"].as_str() == Some("/") {
        Some("/")
    } else {
        scope["bool"]["should"][0]["term"]["path"].as_str()
    };
    let path = FsPath::parse(root?).ok()?;
    excluded.then_some(path)
}

/// Starts a task doing `op` on the documents at or under `from`, and answers as
/// Elasticsearch does.
async fn launch(
    proxy: &Arc<Proxy>,
    index: &str,
    r: &Request,
    (description, action): (String, &'static str),
    (from, op): (FsPath, Op),
) -> Response {
    let task = Arc::new(Task {
        description,
        action,
        opaque: r
            .headers
            .get("x-opaque-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        cancel: AtomicBool::new(false),
        state: Mutex::default(),
    });
    let number = proxy.tasks.next.fetch_add(1, Ordering::Relaxed) + 1;
    proxy
        .tasks
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(number, Arc::clone(&task));
    let run = Run {
        index: index.to_owned(),
        from,
        op,
        batch: r
            .param("scroll_size")
            .and_then(|s| s.parse().ok())
            .unwrap_or(1_000)
            .max(1),
        refresh: r
            .param("refresh")
            .is_some_and(|v| v.is_empty() || v == "true"),
    };
    let running = tokio::spawn(run.run(Arc::clone(proxy), Arc::clone(&task)));
    if r.param("wait_for_completion").as_deref() == Some("false") {
        return answer(
            StatusCode::OK,
            json!({ "task": format!("{NODE}:{number}") }),
        );
    }
    let _ = running.await;
    let ended = task.state().ended.clone();
    // As Elasticsearch answers: the response with the status of its worst failure (409 for a
    // conflict), or the error that stopped the task with its own (400 for a script's).
    match ended {
        Some(Ok(response)) => {
            let failed = response["failures"]
                .as_array()
                .is_some_and(|f| !f.is_empty());
            let status = if failed {
                StatusCode::CONFLICT
            } else {
                StatusCode::OK
            };
            answer(status, response)
        }
        Some(Err(error)) => {
            let status = if error["type"] == json!("script_exception") {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            answer(status, json!({"error": error, "status": status.as_u16()}))
        }
        None => answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": "the task did not end", "status": 500}),
        ),
    }
}

/// `GET _tasks/{id}`.
pub(crate) fn get(proxy: &Proxy, id: &str) -> Response {
    let Some((number, task)) = proxy.tasks.get(id) else {
        return not_found(id);
    };
    let info = task.info(number);
    let ended = task.state().ended.clone();
    match ended {
        None => answer(StatusCode::OK, json!({"completed": false, "task": info})),
        Some(Ok(response)) => answer(
            StatusCode::OK,
            json!({"completed": true, "task": info, "response": response}),
        ),
        Some(Err(error)) => answer(
            StatusCode::OK,
            json!({"completed": true, "task": info, "error": error}),
        ),
    }
}

/// `POST _tasks/{id}/_cancel`: the task stops before its next batch.
pub(crate) fn cancel(proxy: &Proxy, id: &str) -> Response {
    match proxy.tasks.get(id) {
        Some((number, task)) if task.state().ended.is_none() => {
            task.cancel.store(true, Ordering::Relaxed);
            answer(
                StatusCode::OK,
                json!({"nodes": {NODE: {"tasks": {format!("{NODE}:{number}"): task.info(number)}}}}),
            )
        }
        _ => not_found(id),
    }
}

/// `GET _tasks`: the update-by-query and delete-by-query tasks still running.
pub(crate) fn list(proxy: &Proxy) -> Response {
    let tasks = proxy.tasks.tasks.lock().unwrap_or_else(|p| p.into_inner());
    let running: Map<String, Value> = tasks
        .iter()
        .filter(|(_, t)| t.state().ended.is_none())
        .map(|(number, t)| (format!("{NODE}:{number}"), t.info(*number)))
        .collect();
    answer(
        StatusCode::OK,
        json!({"nodes": {NODE: {"name": NODE, "tasks": running}}}),
    )
}

fn not_found(id: &str) -> Response {
    answer(
        StatusCode::NOT_FOUND,
        json!({"error": {"type": "resource_not_found_exception",
            "reason": format!("task [{id}] isn't running and hasn't stored its results")}, "status": 404}),
    )
}

fn bad_request(reason: &str) -> Response {
    answer(
        StatusCode::BAD_REQUEST,
        json!({"error": {"type": "illegal_argument_exception", "reason": reason}, "status": 400}),
    )
}

/// Ends a task that did not end by itself: its runtime stopped under it, as a node dies.
struct Ended(Arc<Task>);

impl Drop for Ended {
    fn drop(&mut self) {
        let mut state = self.0.state();
        if state.ended.is_none() {
            state.ended = Some(Err(json!({"type": "node_closed_exception",
                "reason": "the node running the task died"})));
        }
    }
}

/// What a task does to each document of its snapshot.
enum Op {
    /// Rewrites it with the rename script, these its params.
    Rename(Value),
    /// Deletes it (the snapshot holds only the subtree's files).
    DeleteFiles,
}

/// What one task does.
struct Run {
    index: String,
    from: FsPath,
    op: Op,
    batch: usize,
    refresh: bool,
}

impl Run {
    async fn run(self, proxy: Arc<Proxy>, task: Arc<Task>) {
        // A task whose node is killed (the proxy's runtime ends under it) ends with it.
        let guard = Ended(Arc::clone(&task));
        let ended = self.rewrite(&proxy, &task).await;
        let ended = match ended {
            Ok(response) if self.refresh => match proxy.refresh(&self.index).await {
                Ok(()) => Ok(response),
                Err(e) => Err(json!({"type": "proxy_exception", "reason": e})),
            },
            other => other,
        };
        task.state().ended = Some(ended);
        drop(guard);
    }

    /// The snapshot, then the batches; the response, or the error that stopped the task.
    async fn rewrite(&self, proxy: &Arc<Proxy>, task: &Task) -> Result<Value, Value> {
        let store: SharedStore = Arc::new(proxy.docs.clone());
        let snapshot = self.snapshot(&store).await.map_err(store_error)?;
        task.state().total = snapshot.len() as u64;
        for batch in snapshot.chunks(self.batch) {
            if task.cancel.load(Ordering::Relaxed) {
                return Ok(self.response(task, Vec::new(), Some("by user request")));
            }
            let mut ops = Vec::with_capacity(batch.len());
            for doc in batch {
                ops.push(self.op_on(doc)?);
            }
            let ids = batch.iter().map(|d| (self.index.clone(), d.id.clone()));
            let writing = proxy.nrt.begin(ids);
            let mut failures = Vec::new();
            // Sent in parts, each its own turn on the proxy's two threads: a batch of 5 000
            // parsed and sent at once holds every other request to the proxy (the job's own
            // lease renewals among them) back for a second or more, which a server with cores
            // of its own for its tasks does not.
            let mut ops = ops.into_iter();
            for part in batch.chunks(UPSTREAM_PART) {
                let written = {
                    let state = task.state();
                    (state.updated + state.deleted) as usize / UPSTREAM_PART
                };
                if proxy.options.update_by_query_fails_after == Some(written) {
                    return Err(json!({"type": "search_phase_execution_exception",
                        "reason": "all shards failed (the proxy's fault)"}));
                }
                let pause = proxy.options.update_by_query_pause;
                if pause.is_zero() {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(pause).await;
                }
                let sent: Vec<BulkOp> = ops.by_ref().take(part.len()).collect();
                let results = store.bulk(&self.index, sent).await.map_err(store_error)?;
                for (doc, result) in part.iter().zip(results) {
                    match result {
                        Ok(_) => {
                            proxy.nrt.written(&self.index, &doc.id);
                            match self.op {
                                Op::Rename(_) => task.state().updated += 1,
                                Op::DeleteFiles => task.state().deleted += 1,
                            }
                        }
                        Err(e) => failures.push(failure(&self.index, &doc.id, &e)),
                    }
                }
            }
            writing.done();
            task.state().batches += 1;
            if !failures.is_empty() {
                return Ok(self.response(task, failures, None));
            }
        }
        Ok(self.response(task, Vec::new(), None))
    }

    /// The write the task makes of `doc`, conditional on the version its snapshot read; the
    /// error of a script that refused it.
    fn op_on(&self, doc: &StoredDoc) -> Result<BulkOp, Value> {
        let Op::Rename(params) = &self.op else {
            return Ok(BulkOp::Delete {
                id: doc.id.clone(),
                if_version: Some(doc.version),
            });
        };
        let Value::Object(mut source) = doc.source.clone() else {
            return Err(script_error(&doc.id, "the document is not an object"));
        };
        if let Err(e) = RENAME_PREFIX.run(&mut source, params) {
            return Err(script_error(&doc.id, &e.to_string()));
        }
        Ok(BulkOp::Index {
            id: doc.id.clone(),
            source: Value::Object(source),
            if_version: Some(doc.version),
        })
    }

    /// Every document under the source, with its version, read before the first write (a
    /// delete's: only those that are not directories).
    async fn snapshot(&self, store: &SharedStore) -> fs_store::Result<Vec<StoredDoc>> {
        store.refresh(&self.index).await?;
        let scope = Scope::Subtree(self.from.clone());
        let page = self.batch.min(UPSTREAM_PART);
        let mut scan = Scan::new(Arc::clone(store), &self.index, scope, page);
        let mut docs = Vec::new();
        let deletes = matches!(self.op, Op::DeleteFiles);
        while let Some(page) = scan.next_page().await? {
            docs.extend(
                page.into_iter()
                    .filter(|d| !deletes || d.source.get("kind") != Some(&json!("dir"))),
            );
            tokio::task::yield_now().await;
        }
        Ok(docs)
    }

    fn response(&self, task: &Task, failures: Vec<Value>, canceled: Option<&str>) -> Value {
        let s = task.state();
        let conflicts = failures.len();
        let mut response = json!({"took": 0, "timed_out": false, "total": s.total,
            "updated": s.updated, "created": 0, "deleted": s.deleted, "batches": s.batches,
            "version_conflicts": conflicts, "noops": 0,
            "retries": {"bulk": 0, "search": 0}, "throttled_millis": 0,
            "requests_per_second": -1.0, "throttled_until_millis": 0, "failures": failures});
        if let Some(reason) = canceled {
            response["canceled"] = json!(reason);
        }
        response
    }
}

/// A failed write, as a `failures` entry of the response.
fn failure(index: &str, id: &str, e: &StoreError) -> Value {
    let (kind, status) = if e.is_conflict() {
        ("version_conflict_engine_exception", 409)
    } else {
        ("proxy_exception", 500)
    };
    json!({"index": index, "id": id, "status": status,
           "cause": {"type": kind, "reason": format!("[{id}]: {e}")}})
}

/// The error of a task the script stopped, as Elasticsearch reports a script's exception.
fn script_error(id: &str, reason: &str) -> Value {
    let reason = reason.strip_prefix("script error: ").unwrap_or(reason);
    json!({"type": "script_exception", "reason": "runtime error",
           "caused_by": {"type": "illegal_argument_exception", "reason": reason},
           "id": id})
}

fn store_error(e: StoreError) -> Value {
    json!({"type": "proxy_exception", "reason": e.to_string()})
}
