//! Reading and writing documents: get, mget, create, index, delete, and bulk requests.
//!
//! Writes are sent again only when they certainly were not carried out ([`Retry::IfNotCarriedOut`]);
//! a write whose outcome is unknown comes back as transient, for the caller to resolve by
//! reading. A `200` answer to `_bulk` says nothing about its items: each is judged on its own.

use elasticsearch::http::headers::{HeaderName, HeaderValue};
use elasticsearch::http::request::JsonBody;
use elasticsearch::{BulkParts, CreateParts, DeleteParts, GetParts, IndexParts, MgetParts};
use serde_json::{json, Value};

use super::request::Retry;
use super::response::{doc_of, error_of, shorten, version_of};
use super::ElasticStore;
use crate::error::{Result, StoreError};
use crate::types::{BulkItemResult, BulkOp, StoredDoc, Version};

/// Makes a request builder (an index or a delete, whose builders share no trait) conditional
/// on the document's version: `if_seq_no` and `if_primary_term`.
macro_rules! if_version {
    ($request:expr, $if_version:expr) => {
        match $if_version {
            Some(v) => $request.if_seq_no(v.seq_no).if_primary_term(v.primary_term),
            None => $request,
        }
    };
}

/// The header Elasticsearch keeps with a request's tasks.
pub(super) const OPAQUE_ID: &str = "x-opaque-id";

/// The `X-Opaque-Id` of a write through the gate `gate` (`gates.rs` looks for it in the
/// tasks).
pub(super) fn gate_opaque_id(gate: &str) -> String {
    format!("fsrename-gate-{gate}")
}

/// What the client reads of a bulk item's answer (`filter_path`): its status, the version it
/// wrote, what it did (a scripted update's `noop`) and its error. The rest (index, type, id,
/// version, the shard copies' counts) is more than half of each item, and the client parsed
/// all of it into maps only to drop it: in a profile of `cp -r`, reading the answers of its
/// bulk requests took more of the client's time than making them.
const ITEM_FIELDS: &[&str] = &[
    "errors",
    "items.*.status",
    "items.*._seq_no",
    "items.*._primary_term",
    "items.*.result",
    "items.*.error",
];

/// How a bulk request is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bulk {
    /// As it is.
    Plain,
    /// Its items searchable when it answers (`refresh=true`).
    Refreshed,
    /// Through a write gate (`index` is the gate's name; see `gates.rs`).
    Gated,
}

impl ElasticStore {
    pub(super) async fn get_doc(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        let context = format!("getting `{index}/{id}`");
        let client = &self.inner.client;
        let (status, body) = self
            .send(&context, Retry::Always, || {
                client.get(GetParts::IndexId(index, id)).send()
            })
            .await?;
        match status {
            200 => doc_of(&context, &body).map(Some),
            404 if body["found"] == json!(false) => Ok(None),
            _ => Err(error_of(&context, index, id, status, &body)),
        }
    }

    pub(super) async fn mget_docs(
        &self,
        index: &str,
        ids: &[String],
    ) -> Result<Vec<Option<StoredDoc>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let context = format!("getting {} documents from `{index}`", ids.len());
        let client = &self.inner.client;
        let body = self
            .ok(&context, index, "", Retry::Always, || {
                client
                    .mget(MgetParts::Index(index))
                    .body(json!({ "ids": ids }))
                    .send()
            })
            .await?;
        let docs = body["docs"]
            .as_array()
            .filter(|d| d.len() == ids.len())
            .ok_or_else(|| StoreError::Backend {
                context: context.clone(),
                message: format!("expected {} docs in {}", ids.len(), shorten(&body)),
            })?;
        docs.iter()
            .zip(ids)
            .map(|(doc, id)| {
                if doc["found"] == json!(true) {
                    doc_of(&context, doc).map(Some)
                } else if doc.get("error").is_some() {
                    Err(error_of(&context, index, id, 404, doc))
                } else {
                    Ok(None)
                }
            })
            .collect()
    }

    /// Makes one write in a request of its own (`_create`, or `_doc` to index or delete),
    /// conditional on the document's version where `op` names one.
    pub(super) async fn write_doc(&self, index: &str, op: &BulkOp) -> Result<Version> {
        let id = op.id();
        let verb = match op {
            BulkOp::Create { .. } => "creating",
            BulkOp::Index { .. } => "writing",
            BulkOp::Delete { .. } => "deleting",
        };
        let context = format!("{verb} `{index}/{id}`");
        let client = &self.inner.client;
        let retry = Retry::IfNotCarriedOut;
        let body = match op {
            BulkOp::Create { source, .. } => {
                let create = || {
                    let request = client.create(CreateParts::IndexId(index, id));
                    request.body(source.clone()).send()
                };
                self.ok(&context, index, id, retry, create).await?
            }
            BulkOp::Index {
                source, if_version, ..
            } => {
                let write = || {
                    let request = client.index(IndexParts::IndexId(index, id));
                    if_version!(request, if_version).body(source.clone()).send()
                };
                self.ok(&context, index, id, retry, write).await?
            }
            BulkOp::Delete { if_version, .. } => {
                let delete = || {
                    let request = client.delete(DeleteParts::IndexId(index, id));
                    if_version!(request, if_version).send()
                };
                self.ok(&context, index, id, retry, delete).await?
            }
        };
        written_version(context, &body)
    }

    pub(super) async fn bulk_docs(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
    ) -> Result<Vec<BulkItemResult>> {
        self.bulk_docs_refreshed(index, ops, false).await
    }

    /// A bulk request; with `refresh`, the server makes its items searchable before it
    /// answers (`refresh=true`), which saves a refresh request after it.
    pub(super) async fn bulk_docs_refreshed(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
        refresh: bool,
    ) -> Result<Vec<BulkItemResult>> {
        let how = if refresh {
            Bulk::Refreshed
        } else {
            Bulk::Plain
        };
        self.bulk_docs_how(index, ops, how).await
    }

    /// A bulk request sent as `how` says.
    pub(super) async fn bulk_docs_how(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
        how: Bulk,
    ) -> Result<Vec<BulkItemResult>> {
        if ops.is_empty() {
            if how == Bulk::Refreshed {
                self.refresh_index(index).await?;
            }
            return Ok(Vec::new());
        }
        let context = match how {
            Bulk::Gated => format!(
                "bulk request of {} items through the gate `{index}`",
                ops.len()
            ),
            _ => format!("bulk request of {} items to `{index}`", ops.len()),
        };
        let expected = ops.len();
        let (lines, ids) = bulk_lines(ops);
        let answers = self
            .send_bulk_with(&context, index, lines, expected, how)
            .await?;
        Ok(answers
            .into_iter()
            .zip(&ids)
            .map(|((status, result), id)| {
                if (200..300).contains(&status) {
                    version_of(&result).ok_or_else(|| StoreError::Backend {
                        context: context.clone(),
                        message: format!("item without a version: {}", shorten(&result)),
                    })
                } else {
                    let context = format!("writing `{index}/{id}`");
                    Err(error_of(&context, index, id, status, &result))
                }
            })
            .collect())
    }

    /// Sends a `_bulk` request of `lines` (action and source lines) and returns each item's
    /// status and answer. A 200 answer says nothing about the items: callers judge each one.
    pub(super) async fn send_bulk(
        &self,
        context: &str,
        index: &str,
        lines: Vec<Value>,
        expected: usize,
    ) -> Result<Vec<(u16, Value)>> {
        self.send_bulk_with(context, index, lines, expected, Bulk::Plain)
            .await
    }

    /// Sends a `_bulk` request, and sends again on their own, with jittered backoff until the
    /// retry deadline, the items a busy node rejected with 429 (not carried out, so safe to
    /// resend). If a resend fails as a whole, its items are answered 504 (their outcome
    /// unknown), the others keep their answers.
    async fn send_bulk_with(
        &self,
        context: &str,
        index: &str,
        lines: Vec<Value>,
        expected: usize,
        how: Bulk,
    ) -> Result<Vec<(u16, Value)>> {
        let first = self
            .send_bulk_once(context, index, &lines, expected, how)
            .await?;
        if !first.iter().any(|(status, _)| *status == 429) {
            return Ok(first);
        }
        let spans = item_spans(&lines);
        if spans.len() != expected {
            // Lines this function did not build the usual way: answered as they came.
            return Ok(first);
        }
        let deadline = tokio::time::Instant::now() + self.inner.config.retry_deadline;
        let mut pause = super::request::FIRST_PAUSE;
        let mut answers = first;
        loop {
            let rejected: Vec<usize> = (0..answers.len())
                .filter(|&i| answers[i].0 == 429)
                .collect();
            if rejected.is_empty() || tokio::time::Instant::now() + pause > deadline {
                return Ok(answers);
            }
            tracing::debug!(%context, items = rejected.len(), "bulk items rejected (429); sending them again");
            self.inner
                .items_resent
                .fetch_add(rejected.len() as u64, std::sync::atomic::Ordering::Relaxed);
            pause = super::request::back_off(pause).await;
            let again: Vec<Value> = rejected
                .iter()
                .flat_map(|&i| lines[spans[i].clone()].iter().cloned())
                .collect();
            match self
                .send_bulk_once(context, index, &again, rejected.len(), how)
                .await
            {
                Ok(resent) => {
                    for (i, answer) in rejected.into_iter().zip(resent) {
                        answers[i] = answer;
                    }
                }
                Err(e) => {
                    let unknown = serde_json::json!({"error": {
                        "type": "transient_failure",
                        "reason": format!("sent again after a 429, then: {e}"),
                    }});
                    for i in rejected {
                        answers[i] = (504, unknown.clone());
                    }
                    return Ok(answers);
                }
            }
        }
    }

    async fn send_bulk_once(
        &self,
        context: &str,
        index: &str,
        lines: &[Value],
        expected: usize,
        how: Bulk,
    ) -> Result<Vec<(u16, Value)>> {
        let client = &self.inner.client;
        // Through a gate: refused if the gate (an alias) is gone, rather than creating an
        // index of its name; known to the tasks API by the gate's name.
        let opaque = match how {
            Bulk::Gated => Some(HeaderValue::from_str(&gate_opaque_id(index)).map_err(|e| {
                StoreError::rejected(context.to_owned(), format!("the gate's name: {e}"))
            })?),
            _ => None,
        };
        let body = self
            .ok(context, index, "", Retry::IfNotCarriedOut, || {
                // Serialized from where they are: a bulk of copies is mostly sources, and a
                // copy of each (a map of strings) cost the client as much again in `malloc`.
                let lines: Vec<JsonBody<&Value>> = lines.iter().map(JsonBody::new).collect();
                let request = client
                    .bulk(BulkParts::Index(index))
                    .filter_path(ITEM_FIELDS)
                    .body(lines);
                match (how, &opaque) {
                    (Bulk::Refreshed, _) => {
                        request.refresh(elasticsearch::params::Refresh::True).send()
                    }
                    (Bulk::Gated, Some(opaque)) => request
                        .require_alias(true)
                        .header(HeaderName::from_static(OPAQUE_ID), opaque.clone())
                        .send(),
                    _ => request.send(),
                }
            })
            .await?;
        if body["items"].as_array().map(Vec::len) != Some(expected) {
            return Err(StoreError::Backend {
                context: context.to_owned(),
                message: format!("expected {expected} items in {}", shorten(&body)),
            });
        }
        // Taken, not copied: each item's answer is moved into the result.
        let mut body = body;
        let items = match body.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        Ok(items
            .into_iter()
            .map(|item| {
                // Each item is `{"<action>": {...}}`.
                let result = match item {
                    Value::Object(o) => o.into_iter().next().map(|(_, v)| v),
                    _ => None,
                }
                .unwrap_or(Value::Null);
                (
                    result["status"]
                        .as_u64()
                        .and_then(|s| u16::try_from(s).ok())
                        .unwrap_or(0),
                    result,
                )
            })
            .collect())
    }
}

/// Returns the version a successful write answer reports.
fn written_version(context: String, body: &Value) -> Result<Version> {
    version_of(body).ok_or_else(|| StoreError::Backend {
        context,
        message: format!("the answer has no version: {}", shorten(body)),
    })
}

/// Returns the action and source lines of a bulk request, and the id of each item. The
/// sources are moved, not copied: a page of copies is mostly its sources.
fn bulk_lines(ops: Vec<BulkOp>) -> (Vec<Value>, Vec<String>) {
    let mut lines = Vec::with_capacity(ops.len() * 2);
    let mut ids = Vec::with_capacity(ops.len());
    for op in ops {
        let condition = |meta: &mut Value, if_version: &Option<Version>| {
            if let Some(v) = if_version {
                meta["if_seq_no"] = json!(v.seq_no);
                meta["if_primary_term"] = json!(v.primary_term);
            }
        };
        match op {
            BulkOp::Create { id, source } => {
                lines.push(json!({ "create": { "_id": id } }));
                lines.push(source);
                ids.push(id);
            }
            BulkOp::Index {
                id,
                source,
                if_version,
            } => {
                let mut meta = json!({ "_id": id });
                condition(&mut meta, &if_version);
                lines.push(json!({ "index": meta }));
                lines.push(source);
                ids.push(id);
            }
            BulkOp::Delete { id, if_version } => {
                let mut meta = json!({ "_id": id });
                condition(&mut meta, &if_version);
                lines.push(json!({ "delete": meta }));
                ids.push(id);
            }
        }
    }
    (lines, ids)
}

/// The lines of each item of a bulk body: its action line, and its source line unless it is a
/// delete.
fn item_spans(lines: &[Value]) -> Vec<std::ops::Range<usize>> {
    let mut spans = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let delete = lines[at]
            .as_object()
            .is_some_and(|action| action.contains_key("delete"));
        let len = if delete { 1 } else { 2 };
        spans.push(at..(at + len).min(lines.len()));
        at += len;
    }
    spans
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::item_spans;

    #[test]
    fn each_item_has_its_lines() {
        let lines = vec![
            json!({"index": {"_id": "a"}}),
            json!({"path": "/a"}),
            json!({"delete": {"_id": "b"}}),
            json!({"update": {"_id": "c"}}),
            json!({"script": {"id": "s"}}),
            json!({"delete": {"_id": "d"}}),
        ];
        assert_eq!(item_spans(&lines), [0..2, 2..3, 3..5, 5..6]);
    }
}
