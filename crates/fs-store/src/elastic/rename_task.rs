//! Renames the server carries out: `_update_by_query` with fsrename's stored rename script,
//! started without waiting (`wait_for_completion=false`), and the tasks API to follow, cancel
//! and find them.
//!
//! The request carries the job's journal id as its `X-Opaque-Id`, which Elasticsearch keeps with
//! the task (and its slices) and shows in the task list: a recovery finds a dead job's task by
//! it, though the job died before it could write the task's id anywhere. Every write of the
//! task is conditional on the version its snapshot read (`conflicts=abort`: the first conflict
//! stops it), and the index is refreshed when it ends (`refresh=true`).

use async_trait::async_trait;
use elasticsearch::http::headers::{HeaderMap, HeaderName, HeaderValue};
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::Method;
use elasticsearch::params::{Conflicts, Slices};
use elasticsearch::UpdateByQueryParts;
use fs_model::rename_script::RENAME_PREFIX;
use serde_json::{json, Value};

use super::request::Retry;
use super::response::{error_of, shorten};
use super::search::scope_query;
use super::ElasticStore;
use crate::error::{Result, StoreError};
use crate::scripted::ScriptedUpdates;
use crate::server_rename::{PrefixMove, ServerRename, TaskFailure, TaskId, TaskState};
use crate::types::Scope;

/// The header Elasticsearch keeps with a task, for a client to recognise its own.
const OPAQUE_ID: &str = "x-opaque-id";

/// What an `X-Opaque-Id` of fsrename's says: the journal id of the job that started the task.
fn opaque_id(job: &str) -> String {
    format!("fsrename-job-{job}")
}

#[async_trait]
impl ServerRename for ElasticStore {
    async fn start_rename(&self, index: &str, job: &PrefixMove) -> Result<TaskId> {
        let context = format!("starting the rename of `{}` on the server", job.from);
        let script = RENAME_PREFIX;
        if !self.put_script(script.id, script.painless).await? {
            return Err(StoreError::rejected(
                context,
                "the server runs no painless: it refused to store fsrename's rename script",
            ));
        }
        let body = json!({
            "query": scope_query(&Scope::Subtree(job.from.clone())),
            "script": { "id": script.id, "params": script.params(&job.from, &job.to) },
        });
        let opaque = HeaderValue::from_str(&opaque_id(&job.job))
            .map_err(|e| StoreError::rejected(context.clone(), format!("the job id: {e}")))?;
        let client = &self.inner.client;
        let indices = [index];
        // Not sent again when its outcome is unknown: a second task would race the first (each
        // write conditional, so no harm to the tree, but the loser stops on a conflict).
        let answer = self
            .ok(&context, index, "", Retry::IfNotCarriedOut, || {
                client
                    .update_by_query(UpdateByQueryParts::Index(&indices))
                    .header(HeaderName::from_static(OPAQUE_ID), opaque.clone())
                    .wait_for_completion(false)
                    .conflicts(Conflicts::Abort)
                    .refresh(true)
                    .slices(Slices::Auto)
                    .body(body.clone())
                    .send()
            })
            .await?;
        match answer["task"].as_str() {
            Some(task) => Ok(TaskId(task.to_owned())),
            None => Err(StoreError::Backend {
                context,
                message: format!("the answer names no task: {}", shorten(&answer)),
            }),
        }
    }

    async fn task_state(&self, task: &TaskId) -> Result<TaskState> {
        let context = format!("reading the state of task `{task}`");
        let client = &self.inner.client;
        let path = format!("/_tasks/{}", encoded(&task.0));
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                client.transport().send(
                    Method::Get,
                    &path,
                    HeaderMap::new(),
                    None::<&()>,
                    None::<JsonBody<Value>>,
                    None,
                )
            })
            .await?;
        if status == 404 {
            return Err(StoreError::NotFound {
                index: ".tasks".to_owned(),
                id: task.0.clone(),
            });
        }
        if !(200..300).contains(&status) {
            return Err(error_of(&context, ".tasks", &task.0, status, &answer));
        }
        Ok(state_of(&answer))
    }

    async fn cancel_task(&self, task: &TaskId) -> Result<()> {
        let context = format!("cancelling task `{task}`");
        let client = &self.inner.client;
        let path = format!("/_tasks/{}/_cancel", encoded(&task.0));
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                client.transport().send(
                    Method::Post,
                    &path,
                    HeaderMap::new(),
                    None::<&()>,
                    None::<JsonBody<Value>>,
                    None,
                )
            })
            .await?;
        // A task that has ended is no longer running, which is what was asked.
        if (200..300).contains(&status) || status == 404 {
            return Ok(());
        }
        Err(error_of(&context, ".tasks", &task.0, status, &answer))
    }

    async fn running_renames(&self, job: &str) -> Result<Vec<TaskId>> {
        let context = format!("listing the server's renames of job {job}");
        let client = &self.inner.client;
        let query = [("actions", "*byquery"), ("detailed", "true")];
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                client.transport().send(
                    Method::Get,
                    "/_tasks",
                    HeaderMap::new(),
                    Some(&query),
                    None::<JsonBody<Value>>,
                    None,
                )
            })
            .await?;
        // A server without a tasks API runs no task of anyone's.
        if matches!(status, 400 | 404 | 405) {
            return Ok(Vec::new());
        }
        if !(200..300).contains(&status) {
            return Err(error_of(&context, ".tasks", "", status, &answer));
        }
        Ok(tasks_of(&answer, &opaque_id(job)))
    }
}

/// A task id (`node:number`, the node's id being random letters) as a path segment: every
/// byte but lower-case letters and digits percent-encoded. The server decodes it; an HTTP layer
/// strict about characters in a path passes it (Debian's netty 4.1.48, for one, refuses
/// URIs with `J` or `M` in them).
fn encoded(task: &str) -> String {
    task.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'0'..=b'9' => char::from(b).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// The tasks in a task list (`GET _tasks`, grouped by node) that carry `opaque` and are not a
/// slice of another (cancelling the parent cancels its slices).
fn tasks_of(answer: &Value, opaque: &str) -> Vec<TaskId> {
    let mut found = Vec::new();
    let nodes = answer["nodes"].as_object().into_iter().flatten();
    for (_, node) in nodes {
        for (id, task) in node["tasks"].as_object().into_iter().flatten() {
            let headers = task["headers"].as_object().into_iter().flatten();
            let ours = headers
                .into_iter()
                .any(|(name, value)| name.eq_ignore_ascii_case(OPAQUE_ID) && value == opaque);
            if ours && task.get("parent_task_id").is_none() {
                found.push(TaskId(id.clone()));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// What a task's answer (`GET _tasks/{id}`) says of it.
fn state_of(answer: &Value) -> TaskState {
    let status = &answer["task"]["status"];
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    let done = answer["completed"].as_bool().unwrap_or(false);
    TaskState {
        done,
        total: number(&status["total"]),
        updated: number(&status["updated"]),
        failure: done.then(|| failure_of(answer)).flatten(),
    }
}

/// Why an ended task stopped short, if it did: an error (the task failed as a whole), a
/// failed document (a conflict or the script's refusal), or a cancellation.
fn failure_of(answer: &Value) -> Option<TaskFailure> {
    if answer["error"].is_object() {
        return Some(cause_of(&answer["error"]));
    }
    let response = &answer["response"];
    if let Some(failure) = response["failures"].as_array().and_then(|f| f.first()) {
        let cause = if failure["cause"].is_object() {
            &failure["cause"]
        } else {
            failure
        };
        return Some(cause_of(cause));
    }
    if let Some(reason) = response["canceled"].as_str() {
        return Some(TaskFailure::Cancelled(reason.to_owned()));
    }
    let conflicts = response["version_conflicts"].as_u64().unwrap_or(0);
    (conflicts > 0).then(|| TaskFailure::Conflict(format!("{conflicts} version conflicts")))
}

/// The failure an error object (`type`, `reason`, `caused_by`) describes.
fn cause_of(error: &Value) -> TaskFailure {
    let kind = error["type"].as_str().unwrap_or("");
    let mut reason = error["reason"].as_str().unwrap_or(kind).to_owned();
    // A script's own words are in its cause (`script_exception` → the exception it threw).
    let mut cause = &error["caused_by"];
    while let Some(deeper) = cause["reason"].as_str() {
        reason = deeper.to_owned();
        cause = &cause["caused_by"];
    }
    if kind.contains("version_conflict") {
        TaskFailure::Conflict(reason)
    } else if kind.contains("script_exception") || reason.starts_with("fsrename:") {
        TaskFailure::Refused(reason)
    } else if kind.contains("task_cancelled") {
        TaskFailure::Cancelled(reason)
    } else if reason.is_empty() {
        TaskFailure::Failed(shorten(error))
    } else {
        TaskFailure::Failed(format!("{kind}: {reason}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_list_is_read_for_the_job_s_own_parent_tasks() {
        let answer = json!({"nodes": {"n1": {"tasks": {
            "n1:7": {"headers": {"X-Opaque-Id": "fsrename-job-j1"}},
            "n1:8": {"headers": {"X-Opaque-Id": "fsrename-job-j1"}, "parent_task_id": "n1:7"},
            "n1:9": {"headers": {"X-Opaque-Id": "fsrename-job-j2"}},
            "n1:10": {"headers": {}},
        }}}});
        assert_eq!(
            tasks_of(&answer, "fsrename-job-j1"),
            vec![TaskId("n1:7".into())]
        );
        assert!(tasks_of(&json!({}), "fsrename-job-j1").is_empty());
    }

    #[test]
    fn an_ended_task_says_how_it_ended() {
        let running = json!({"completed": false, "task": {"status": {"total": 10, "updated": 4}}});
        assert_eq!(
            state_of(&running),
            TaskState {
                done: false,
                total: 10,
                updated: 4,
                failure: None
            }
        );
        let done = json!({"completed": true, "task": {"status": {"total": 10, "updated": 10}},
            "response": {"failures": []}});
        assert_eq!(state_of(&done).failure, None);
        let conflict = json!({"completed": true, "response": {"failures": [
            {"cause": {"type": "version_conflict_engine_exception", "reason": "[x]: version conflict"}}]}});
        assert!(matches!(
            state_of(&conflict).failure,
            Some(TaskFailure::Conflict(_))
        ));
        let refused = json!({"completed": true, "error": {"type": "script_exception",
            "reason": "runtime error", "caused_by": {"type": "illegal_argument_exception",
            "reason": "fsrename: [/b] is not under [/a]"}}});
        assert_eq!(
            state_of(&refused).failure,
            Some(TaskFailure::Refused(
                "fsrename: [/b] is not under [/a]".into()
            ))
        );
        let cancelled =
            json!({"completed": true, "response": {"failures": [], "canceled": "by user request"}});
        assert_eq!(
            state_of(&cancelled).failure,
            Some(TaskFailure::Cancelled("by user request".into()))
        );
    }
}
