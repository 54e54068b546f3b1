//! Renames the server carries out: `_update_by_query` with fsrename's stored rename script; the
//! files of a subtree a delete removes: `_delete_by_query`; and the tasks API to follow, cancel
//! and find them. Both run the same way (below).
//!
//! The request waits for the task to end (its answer comes the moment the task has ended, a
//! rename's once it has refreshed the index): measured on Elasticsearch 7.10, starting it without waiting
//! (`wait_for_completion=false`) and reading its state until it ends costs 20 to 50 ms more a
//! rename of 20 000 documents, the time the server takes to store the result in `.tasks`, and
//! the end is seen only at the next reading. While it waits, the caller reads the task's
//! progress from the task list. The request carries the job's journal id as its `X-Opaque-Id`, which Elasticsearch keeps with
//! the task (and its slices) and shows in the task list: a recovery finds a dead job's task by
//! it, though the job died before it could write the task's id anywhere. Every write of the
//! task is conditional on the version its snapshot read (`conflicts=abort`: the first conflict
//! stops it). A rename's task refreshes the index when it ends (`refresh=true`); a delete's
//! does not, the job's own refresh after the directories does (`SubtreeDelete`).

use std::time::Duration;

use async_trait::async_trait;
use elasticsearch::http::headers::{HeaderMap, HeaderName, HeaderValue};
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::Method;
use elasticsearch::params::{Conflicts, Slices};
use elasticsearch::{DeleteByQueryParts, UpdateByQueryParts};
use fs_model::rename_script::RENAME_PREFIX;
use serde_json::{json, Value};

use super::request::Retry;
use super::response::{error_of, shorten};
use super::search::scope_query;
use super::ElasticStore;
use crate::error::{Result, StoreError};
use crate::scripted::ScriptedUpdates;
use crate::server_rename::{
    PrefixMove, ServerRename, SubtreeDelete, TaskFailure, TaskId, TaskState,
};
use crate::types::Scope;

/// Documents a task reads and writes a batch (`scroll_size`; Elasticsearch's default is
/// 1 000). Measured on Elasticsearch 7.10 (one node, 20 000 documents): batches of 5 000 take
/// 6 % less time than batches of 1 000. The task runs `slices=auto`, one slice per shard of
/// the tree index: on the default one shard that is one slice (more slices cost more than they
/// give on one shard: 2 slices +25 %, 4 slices +55 %); on a tree index created with several
/// (`--shards`), each shard's documents are rewritten by a slice of their own, in parallel.
const BATCH: i64 = 5_000;

/// The header Elasticsearch keeps with a task, for a client to recognise its own.
const OPAQUE_ID: &str = "x-opaque-id";

/// What an `X-Opaque-Id` of fsrename's says: the journal id of the job that started the task.
fn opaque_id(job: &str) -> String {
    format!("fsrename-job-{job}")
}

/// How long the request that runs a rename may take: as long as the rename. The caller watches
/// the task meanwhile (its progress, its lease) and cancels it where it must stop.
const RENAME_TIMEOUT: Duration = Duration::from_secs(24 * 3_600);

#[async_trait]
impl ServerRename for ElasticStore {
    async fn rename_on_server(&self, index: &str, job: &PrefixMove) -> Result<TaskState> {
        let context = format!("renaming `{}` on the server", job.from);
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
        let (status, answer) = self
            .send(&context, Retry::IfNotCarriedOut, || {
                client
                    .update_by_query(UpdateByQueryParts::Index(&indices))
                    .header(HeaderName::from_static(OPAQUE_ID), opaque.clone())
                    .conflicts(Conflicts::Abort)
                    .refresh(true)
                    .slices(Slices::Auto)
                    .scroll_size(BATCH)
                    .request_timeout(RENAME_TIMEOUT)
                    .body(body.clone())
                    .send()
            })
            .await?;
        task_answer(&context, index, status, &answer)
    }

    async fn delete_files_on_server(&self, index: &str, job: &SubtreeDelete) -> Result<TaskState> {
        let context = format!("deleting the files under `{}` on the server", job.path);
        let body = json!({ "query": files_query(&job.path) });
        let opaque = HeaderValue::from_str(&opaque_id(&job.job))
            .map_err(|e| StoreError::rejected(context.clone(), format!("the job id: {e}")))?;
        let client = &self.inner.client;
        let indices = [index];
        // As a rename's: not sent again when its outcome is unknown.
        let (status, answer) = self
            .send(&context, Retry::IfNotCarriedOut, || {
                client
                    .delete_by_query(DeleteByQueryParts::Index(&indices))
                    .header(HeaderName::from_static(OPAQUE_ID), opaque.clone())
                    .conflicts(Conflicts::Abort)
                    // One refresh, the job's after the directories, makes both searchable:
                    // one refresh fewer, 30-50 ms of a delete of 20 000 on one node.
                    .refresh(false)
                    .slices(Slices::Auto)
                    .scroll_size(BATCH)
                    .request_timeout(RENAME_TIMEOUT)
                    .body(body.clone())
                    .send()
            })
            .await?;
        task_answer(&context, index, status, &answer)
    }

    async fn running_renames(&self, job: &str) -> Result<Vec<(TaskId, TaskState)>> {
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
}

/// What a task's answer says: how it ended, or the error that kept it from running.
fn task_answer(context: &str, index: &str, status: u16, answer: &Value) -> Result<TaskState> {
    // A task that stopped short answers with its status (409 for a conflict) and the
    // failures, or with the error that stopped it (a script's exception).
    let counted = ["updated", "deleted", "failures"];
    if counted.iter().any(|field| answer.get(field).is_some()) {
        return Ok(ended(answer));
    }
    let kind = answer["error"]["type"].as_str().unwrap_or("");
    if kind.contains("script_exception") {
        return Ok(TaskState {
            done: true,
            failure: Some(cause_of(&answer["error"])),
            ..TaskState::default()
        });
    }
    Err(error_of(context, index, "", status, answer))
}

/// Every document at or under `path` but the directories: what a delete's task removes.
pub(crate) fn files_query(path: &fs_model::FsPath) -> Value {
    json!({ "bool": {
        "filter": [ scope_query(&Scope::Subtree(path.clone())) ],
        "must_not": [ { "term": { "kind": "dir" } } ]
    } })
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
fn tasks_of(answer: &Value, opaque: &str) -> Vec<(TaskId, TaskState)> {
    let mut found = Vec::new();
    let nodes = answer["nodes"].as_object().into_iter().flatten();
    for (_, node) in nodes {
        for (id, task) in node["tasks"].as_object().into_iter().flatten() {
            let headers = task["headers"].as_object().into_iter().flatten();
            let ours = headers
                .into_iter()
                .any(|(name, value)| name.eq_ignore_ascii_case(OPAQUE_ID) && value == opaque);
            if ours && task.get("parent_task_id").is_none() {
                let status = &task["status"];
                let number = |v: &Value| v.as_u64().unwrap_or(0);
                let state = TaskState {
                    done: false,
                    total: number(&status["total"]),
                    updated: number(&status["updated"]) + number(&status["deleted"]),
                    failure: None,
                    failed_id: None,
                };
                found.push((TaskId(id.clone()), state));
            }
        }
    }
    found.sort_by(|a, b| a.0 .0.cmp(&b.0 .0));
    found
}

/// What the answer of a rename that ran to its end (or stopped short) says of it.
fn ended(response: &Value) -> TaskState {
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    TaskState {
        done: true,
        total: number(&response["total"]),
        updated: number(&response["updated"]) + number(&response["deleted"]),
        failure: failure_of(response),
        failed_id: response["failures"][0]["id"].as_str().map(str::to_owned),
    }
}

/// Why an ended task stopped short, if it did: a failed document (a conflict or the script's
/// refusal), or a cancellation.
fn failure_of(response: &Value) -> Option<TaskFailure> {
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
            "n1:7": {"headers": {"X-Opaque-Id": "fsrename-job-j1"},
                     "status": {"total": 10, "updated": 4}},
            "n1:8": {"headers": {"X-Opaque-Id": "fsrename-job-j1"}, "parent_task_id": "n1:7"},
            "n1:9": {"headers": {"X-Opaque-Id": "fsrename-job-j2"}},
            "n1:10": {"headers": {}},
        }}}});
        let running = TaskState {
            total: 10,
            updated: 4,
            ..TaskState::default()
        };
        assert_eq!(
            tasks_of(&answer, "fsrename-job-j1"),
            vec![(TaskId("n1:7".into()), running)]
        );
        assert!(tasks_of(&json!({}), "fsrename-job-j1").is_empty());
    }

    #[test]
    fn an_ended_task_says_how_it_ended() {
        let done = json!({"total": 10, "updated": 10, "failures": []});
        assert_eq!(
            ended(&done),
            TaskState {
                done: true,
                total: 10,
                updated: 10,
                ..TaskState::default()
            }
        );
        let conflict = json!({"total": 10, "updated": 3, "failures": [{"id": "x",
            "cause": {"type": "version_conflict_engine_exception", "reason": "[x]: version conflict"}}]});
        assert_eq!(ended(&conflict).failed_id.as_deref(), Some("x"));
        assert!(matches!(
            ended(&conflict).failure,
            Some(TaskFailure::Conflict(_))
        ));
        let refused = json!({"type": "script_exception", "reason": "runtime error",
            "caused_by": {"type": "illegal_argument_exception",
            "reason": "fsrename: [/b] is not under [/a]"}});
        assert_eq!(
            cause_of(&refused),
            TaskFailure::Refused("fsrename: [/b] is not under [/a]".into())
        );
        let cancelled =
            json!({"total": 10, "updated": 2, "failures": [], "canceled": "by user request"});
        assert_eq!(
            ended(&cancelled).failure,
            Some(TaskFailure::Cancelled("by user request".into()))
        );
    }
}
