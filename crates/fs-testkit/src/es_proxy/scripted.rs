//! Scripted updates with Elasticsearch's semantics.
//!
//! Elasticsearch's update reads the document, runs the script and writes the result
//! conditionally on the version it read. Two updates of one document at once make one of the
//! writes fail; the update is run again up to `retry_on_conflict` times and then answered 409
//! `version_conflict_engine_exception`. An upsert that finds the document missing creates it
//! with `_create`, so two upserts at once race the same way. A script's `Debug.explain` fails
//! the update with 400 and a `painless_explain_error` cause. The script logic itself is the
//! Rust twin of each stored painless script, in [`fs_model::lock_scripts`].

use axum::http::StatusCode;
use axum::response::Response;
use fs_model::lock_scripts::{self, LockScript, ScriptError};
use fs_store::{ScriptedUpdate, StoreError, UpdateItemResult, UpdateOutcome, UpdateResult};
use rand::Rng;
use serde_json::{json, Value};

use super::{answer, Counters, Proxy, Request};
use crate::scripting::scripted_update;

/// `PUT _scripts/{id}`: stores a lock script the proxy can run; refuses any other.
pub(crate) fn put_script(proxy: &Proxy, id: &str, body: &Value) -> Response {
    let source = body["script"]["source"].as_str().unwrap_or("");
    // The rename script is stored too (it runs where `_update_by_query` does, `by_query`).
    let rename = source == fs_model::rename_script::RENAME_PREFIX.painless;
    match proxy.options.scripts && (rename || proxy.scripts.store(id, source)) {
        true => answer(StatusCode::OK, json!({"acknowledged": true})),
        false => answer(
            StatusCode::BAD_REQUEST,
            json!({"error": {"type": "illegal_argument_exception",
                "reason": format!("the Elasticsearch-behaviour proxy cannot run script [{id}]: it runs only fsrename's lock and rename scripts, and only with scripts on")},
                "status": 400}),
        ),
    }
}

/// `GET _scripts/{id}`: the stored script, as Elasticsearch answers it.
pub(crate) fn get_script(proxy: &Proxy, id: &str) -> Response {
    match proxy.scripts.get(id) {
        Some(script) => answer(
            StatusCode::OK,
            json!({"_id": id, "found": true, "script": {"lang": "painless", "source": script.painless}}),
        ),
        None => answer(StatusCode::NOT_FOUND, json!({"_id": id, "found": false})),
    }
}

/// `POST {index}/_update/{id}`: one update, answered as Elasticsearch answers it.
pub(crate) async fn update_one(
    proxy: &Proxy,
    index: &str,
    id: &str,
    r: &Request,
) -> Result<Response, String> {
    let retries = r
        .param("retry_on_conflict")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let writing = proxy.nrt.begin([(index.to_owned(), id.to_owned())]);
    let outcome = update(proxy, index, id, &r.json_body(), retries).await?;
    if outcome.written {
        proxy.nrt.written(index, id);
    }
    writing.done();
    let status = StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::BAD_GATEWAY);
    if (200..300).contains(&outcome.status) {
        Ok(answer(status, outcome.item))
    } else {
        let error = outcome.item["error"].clone();
        Ok(answer(
            status,
            json!({"error": error, "status": outcome.status}),
        ))
    }
}

/// What one update did: the bulk item's status and body, and whether it wrote.
pub(crate) struct Outcome {
    pub(crate) status: u16,
    pub(crate) item: Value,
    pub(crate) written: bool,
}

/// Runs one update of `index/id` with `body` (`script`, `upsert`, or a partial `doc`): the
/// scripted ones through [`scripted_update`], the implementation every scripted test shares.
pub(crate) async fn update(
    proxy: &Proxy,
    index: &str,
    id: &str,
    body: &Value,
    retry_on_conflict: u32,
) -> Result<Outcome, String> {
    Counters::add(&proxy.counters.updates, 1);
    let script = match script_of(proxy, body) {
        Ok(Some(script)) => script,
        Ok(None) => return partial_doc(proxy, index, id, body).await,
        Err(error) => return Ok(failed(index, id, 400, error)),
    };
    let update = ScriptedUpdate {
        id: id.to_owned(),
        script: script.id.to_owned(),
        params: body["script"]["params"].clone(),
        upsert: body.get("upsert").cloned(),
    };
    let (result, races) = scripted_update(
        &proxy.docs,
        index,
        script,
        &update,
        retry_on_conflict,
        race_window(proxy),
    )
    .await;
    Counters::add(&proxy.counters.races, races.lost);
    Counters::add(&proxy.counters.races_retried, races.retried);
    answer_of(proxy, index, id, script, result)
}

/// The bulk item Elasticsearch answers for a scripted update that ended in `result`.
pub(crate) fn answer_of(
    proxy: &Proxy,
    index: &str,
    id: &str,
    script: &LockScript,
    result: UpdateItemResult,
) -> Result<Outcome, String> {
    let (seq_no, term) = match &result {
        Ok(UpdateOutcome {
            version: Some(v), ..
        }) => (v.seq_no, v.primary_term),
        _ => (-1, -1),
    };
    match result {
        Ok(outcome) => {
            let (status, name, written) = match outcome.result {
                UpdateResult::Created => (201, "created", true),
                UpdateResult::Updated => (200, "updated", true),
                UpdateResult::Deleted => (200, "deleted", true),
                UpdateResult::Noop => (200, "noop", false),
            };
            Ok(done(index, id, status, name, seq_no, term, written))
        }
        Err(StoreError::Conflict {
            exists, current, ..
        }) => {
            Counters::add(&proxy.counters.conflicts_returned, 1);
            let reason = match (exists, current) {
                (_, Some(v)) => format!(
                    "[{id}]: version conflict, current document has seqNo [{}] and primary term [{}]",
                    v.seq_no, v.primary_term
                ),
                (true, None) => format!("[{id}]: version conflict, document already exists (current version [1])"),
                (false, None) => format!("[{id}]: version conflict, but no document was found"),
            };
            Ok(failed(
                index,
                id,
                409,
                error_body("version_conflict_engine_exception", &reason, index),
            ))
        }
        Err(StoreError::Refused { reason, .. }) => {
            Counters::add(&proxy.counters.refusals, 1);
            Ok(failed(
                index,
                id,
                400,
                script_failure(script, &ScriptError::Refused(reason)),
            ))
        }
        Err(StoreError::Rejected { message, .. }) => Ok(failed(
            index,
            id,
            400,
            script_failure(script, &ScriptError::Failed(message)),
        )),
        Err(StoreError::NotFound { .. }) => {
            let reason = format!("[_doc][{id}]: document missing");
            Ok(failed(
                index,
                id,
                404,
                error_body("document_missing_exception", &reason, index),
            ))
        }
        Err(StoreError::IndexNotFound { .. }) => {
            let reason = format!("no such index [{index}]");
            Ok(failed(
                index,
                id,
                404,
                error_body("index_not_found_exception", &reason, index),
            ))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Returns the lock script the update names, if it names one the proxy runs.
pub(crate) fn lock_script_of(proxy: &Proxy, body: &Value) -> Option<&'static LockScript> {
    script_of(proxy, body).ok().flatten()
}

/// Waits between the read and the write of updates, up to the configured window, so that
/// concurrent requests interleave there as they do on a server.
pub(crate) async fn race_pause(proxy: &Proxy) {
    crate::scripting::between(race_window(proxy)).await;
}

/// Returns the lock script the update names (stored or inline), `None` for a partial-document
/// update, or the error Elasticsearch would give.
fn script_of(proxy: &Proxy, body: &Value) -> Result<Option<&'static LockScript>, Value> {
    let script = &body["script"];
    if script.is_null() {
        return Ok(None);
    }
    if let Some(id) = script["id"].as_str() {
        let stored = proxy.scripts.get(id);
        return stored.map(Some).ok_or_else(|| {
            json!({"type": "resource_not_found_exception",
                   "reason": format!("unable to find script [{id}] in cluster state")})
        });
    }
    let source = script["source"].as_str().or(script.as_str()).unwrap_or("");
    match lock_scripts::lock_script_by_source(source) {
        Some(s) if proxy.options.scripts => Ok(Some(s)),
        _ => Err(json!({"type": "illegal_argument_exception",
            "reason": "the Elasticsearch-behaviour proxy runs only fsrename's lock scripts"})),
    }
}

/// A partial-document update (`doc`), which needs no script: the server behind does it.
async fn partial_doc(
    proxy: &Proxy,
    index: &str,
    id: &str,
    body: &Value,
) -> Result<Outcome, String> {
    let lines = [json!({"update": {"_id": id}}), body.clone()];
    let (status, answer) = proxy.upstream.bulk(Some(index), &lines, false).await?;
    if !(200..300).contains(&status) {
        return Ok(failed(index, id, status, answer["error"].clone()));
    }
    let item = answer["items"][0]["update"].clone();
    let item_status = item["status"]
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .unwrap_or(500);
    Ok(Outcome {
        status: item_status,
        written: (200..300).contains(&item_status),
        item,
    })
}

/// A pause between the read and the write of an update, up to the configured window.
fn race_window(proxy: &Proxy) -> std::time::Duration {
    let window = proxy.options.race_window;
    let micros = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
    std::time::Duration::from_micros(rand::rng().random_range(0..=micros))
}

fn done(
    index: &str,
    id: &str,
    status: u16,
    result: &str,
    seq_no: i64,
    term: i64,
    written: bool,
) -> Outcome {
    let shards = if result == "noop" { 0 } else { 1 };
    Outcome {
        status,
        written,
        item: json!({"_index": index, "_type": "_doc", "_id": id, "result": result,
            "_shards": {"total": shards, "successful": shards, "failed": 0},
            "_seq_no": seq_no, "_primary_term": term, "status": status}),
    }
}

fn failed(index: &str, id: &str, status: u16, error: Value) -> Outcome {
    Outcome {
        status,
        written: false,
        item: json!({"_index": index, "_type": "_doc", "_id": id, "status": status, "error": error}),
    }
}

fn error_body(kind: &str, reason: &str, index: &str) -> Value {
    json!({"type": kind, "reason": reason, "index_uuid": "_na_", "shard": "0", "index": index})
}

/// The error Elasticsearch 7 gives for a script that explained (refused) or threw.
fn script_failure(script: &LockScript, error: &ScriptError) -> Value {
    match error {
        ScriptError::Refused(said) => json!({
            "type": "illegal_argument_exception", "reason": "failed to execute script",
            "caused_by": {"type": "script_exception", "reason": "runtime error",
                "painless_class": "java.lang.String", "to_string": said,
                "java_class": "java.lang.String",
                "script_stack": [format!("Debug.explain('{said}');"), "^---- HERE"],
                "script": script.id, "lang": "painless",
                "caused_by": {"type": "painless_explain_error", "reason": null}}}),
        ScriptError::Failed(what) => json!({
            "type": "illegal_argument_exception", "reason": "failed to execute script",
            "caused_by": {"type": "script_exception", "reason": "runtime error",
                "script": script.id, "lang": "painless",
                "caused_by": {"type": "class_cast_exception", "reason": what}}}),
    }
}
