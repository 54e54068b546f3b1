//! [`WriteGates`] on Elasticsearch: a gate is an alias of the tree index (see
//! `crate::write_gate`). Opened by adding the alias; written through with
//! `require_alias=true` and the gate's name as `X-Opaque-Id`; shut by removing the alias, then
//! waiting until the tasks API lists no bulk request carrying the name of a gate shut.
//!
//! Why that is a fence: a bulk request is registered as a task before it resolves the names
//! it writes to, and stays listed (itself, or its shard-level parts, which carry its headers)
//! until every item is written. So once the alias is gone (the removal acknowledged, every node
//! applying it), a request that resolves the gate is refused, and one that resolved it before
//! is listed until it is done.

use std::time::Duration;

use async_trait::async_trait;
use elasticsearch::http::headers::HeaderMap;
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::Method;
use serde_json::{json, Value};

use super::documents::{gate_opaque_id as opaque_id, Bulk, OPAQUE_ID};
use super::request::Retry;
use super::response::error_of;
use super::ElasticStore;
use crate::error::{Result, StoreError};
use crate::types::{BulkItemResult, BulkOp};
use crate::write_gate::WriteGates;

/// How long a shut waits for the writes through the gate still running: far longer than a
/// bulk request of a page takes, which the server carries out in seconds.
const DRAIN_LIMIT: Duration = Duration::from_secs(600);

/// The pause between two looks at the tasks.
const DRAIN_PAUSE: Duration = Duration::from_millis(50);

#[async_trait]
impl WriteGates for ElasticStore {
    async fn open_gate(&self, index: &str, gate: &str) -> Result<bool> {
        // `require_alias` came with Elasticsearch 7.10; OpenSearch has it from its fork.
        let server = self.server().await?;
        if !server.opensearch && server.version < (7, 10) {
            return Ok(false);
        }
        let context = format!("opening the write gate `{gate}` onto `{index}`");
        let body = json!({ "actions": [ { "add": { "index": index, "alias": gate } } ] });
        // Adding an alias twice is adding it once: sent again freely.
        let (status, answer) = self
            .admin(&context, (Method::Post, "/_aliases"), &[], Some(body))
            .await?;
        if (200..300).contains(&status) {
            return Ok(true);
        }
        // A role without `manage` on the index may not add an alias: no gate, and the copy
        // fences its writes with claims instead.
        if status == 403 {
            tracing::info!(%index, "no write gate: this role may not manage aliases; copies claim their ids");
            return Ok(false);
        }
        Err(error_of(&context, index, "", status, &answer))
    }

    async fn bulk_through_gate(&self, gate: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.bulk_docs_how(gate, ops, Bulk::Gated).await
    }

    async fn shut_gates(&self, index: &str, prefix: &str) -> Result<()> {
        let context = format!("shutting the write gates `{prefix}*` onto `{index}`");
        let path = format!("/{index}/_alias/{prefix}*");
        let (status, answer) = self
            .admin(&context, (Method::Delete, &path), &[], None)
            .await?;
        // No such gate (404) is a gate shut. A role that may not manage aliases (403) opens
        // no gate either: only a gate there, opened by another role, is then a failure.
        let shut = match status {
            200..=299 | 404 => true,
            403 => !self.gates_stand(&context, index, prefix).await?,
            _ => false,
        };
        if !shut {
            return Err(error_of(&context, index, "", status, &answer));
        }
        let started = tokio::time::Instant::now();
        loop {
            let running = self.writes_through(&context, prefix).await?;
            if running == 0 {
                return Ok(());
            }
            if started.elapsed() > DRAIN_LIMIT {
                return Err(StoreError::Backend {
                    context,
                    message: format!(
                        "{running} bulk requests through the gates still running after {} s",
                        DRAIN_LIMIT.as_secs()
                    ),
                });
            }
            tokio::time::sleep(DRAIN_PAUSE).await;
        }
    }
}

impl ElasticStore {
    /// One request of the gates' (each safe to send again: adding an alias that is there,
    /// removing one that is gone, reading), with its status and answer.
    async fn admin(
        &self,
        context: &str,
        (method, path): (Method, &str),
        query: &[(&str, &str)],
        body: Option<Value>,
    ) -> Result<(u16, Value)> {
        let client = &self.inner.client;
        let query = (!query.is_empty()).then_some(query);
        self.send(context, Retry::Always, || {
            client.transport().send(
                method,
                path,
                HeaderMap::new(),
                query,
                body.clone().map(JsonBody::new),
                None,
            )
        })
        .await
    }

    /// Whether a gate onto `index` whose name starts with `prefix` stands (reading aliases
    /// takes only `view_index_metadata`).
    async fn gates_stand(&self, context: &str, index: &str, prefix: &str) -> Result<bool> {
        let path = format!("/{index}/_alias/{prefix}*");
        let (status, answer) = self.admin(context, (Method::Get, &path), &[], None).await?;
        match status {
            404 => Ok(false),
            200..=299 => Ok(answer[index]["aliases"]
                .as_object()
                .is_some_and(|aliases| !aliases.is_empty())),
            _ => Err(error_of(context, index, "", status, &answer)),
        }
    }

    /// How many bulk tasks (whole requests and their shard-level parts) the server is running
    /// for writes through gates whose names start with `prefix`.
    async fn writes_through(&self, context: &str, prefix: &str) -> Result<usize> {
        let client = &self.inner.client;
        let query = [
            ("actions", "indices:data/write/bulk*"),
            ("detailed", "true"),
        ];
        let (status, answer) = self
            .send(context, Retry::Always, || {
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
        // A server without a tasks API (osmem) answers each request before the next: nothing
        // of a shut gate is left running there.
        if matches!(status, 400 | 404 | 405) {
            return Ok(0);
        }
        if !(200..300).contains(&status) {
            return Err(error_of(context, ".tasks", "", status, &answer));
        }
        Ok(gated_tasks(&answer, &opaque_id(prefix)))
    }
}

/// The tasks of a `_tasks` answer whose `X-Opaque-Id` starts with `opaque`.
fn gated_tasks(answer: &Value, opaque: &str) -> usize {
    answer["nodes"]
        .as_object()
        .into_iter()
        .flat_map(|nodes| nodes.values())
        .filter_map(|node| node["tasks"].as_object())
        .flat_map(|tasks| tasks.values())
        .filter(|task| {
            task["headers"]
                .as_object()
                .into_iter()
                .flat_map(|headers| headers.iter())
                .any(|(name, value)| {
                    name.eq_ignore_ascii_case(OPAQUE_ID)
                        && value.as_str().is_some_and(|v| v.starts_with(opaque))
                })
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writes_of_a_gate_are_told_by_their_opaque_id() {
        let answer = json!({ "nodes": {
            "n1": { "tasks": {
                "n1:1": { "action": "indices:data/write/bulk",
                          "headers": { "X-Opaque-Id": "fsrename-gate-fs-gate-j1-a" } },
                "n1:2": { "action": "indices:data/write/bulk[s]",
                          "headers": { "X-Opaque-Id": "fsrename-gate-fs-gate-j1-b" } },
                "n1:3": { "action": "indices:data/write/bulk",
                          "headers": { "X-Opaque-Id": "fsrename-gate-fs-gate-j2-a" } },
                "n1:4": { "action": "indices:data/write/bulk", "headers": {} }
            } },
            "n2": { "tasks": {
                "n2:1": { "action": "indices:data/write/bulk[s][p]",
                          "headers": { "x-opaque-id": "fsrename-gate-fs-gate-j1-a" } }
            } }
        } });
        assert_eq!(gated_tasks(&answer, &opaque_id("fs-gate-j1-")), 3);
        assert_eq!(gated_tasks(&answer, &opaque_id("fs-gate-j3-")), 0);
        assert_eq!(gated_tasks(&json!({}), "x"), 0);
    }
}
