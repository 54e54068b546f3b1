//! A node cut off from its cluster and not yet aware of it, as a real three-node
//! Elasticsearch 7.10 cluster showed it (anomaly 11 of `docs/reliability.md`): for the seconds
//! until its leader check fails, the node keeps its last cluster state. Writes through it are
//! refused (`cluster.no_master_block: write`, the default: 503 `cluster_block_exception`,
//! "no master"), and so is a question to the master, but reads are served from its own
//! copies, which the master has meanwhile marked stale: they miss every write made through the
//! other nodes since the cut.
//!
//! Modelled here for the documents written since (created or rewritten): a search, an `_mget`
//! or a `GET` through the cut-off node leaves them out, as absent. (A document the stale copy
//! has in an older version is left out too, rather than shown as it was; a deleted one is
//! shown as the store has it now, that is not at all. Both are what a check for a destination
//! made meanwhile misses, which is what is taught.)

use std::collections::HashSet;
use std::sync::Mutex;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::answer;

/// Which node of the proxy a request came to: the port it listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Node(pub(crate) u16);

/// A cut: the node cut off, and the documents (index, id) written through the others since.
type Cut = (Node, HashSet<(String, String)>);

/// The cut, if one is in effect.
#[derive(Default)]
pub(crate) struct CutOff {
    cut: Mutex<Option<Cut>>,
}

/// What a request is to a node with no master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Served from the node's own copies.
    Read,
    /// A question only the elected master answers (`_nodes/_master/...`).
    Master,
    /// Refused: a write, or anything else that needs the master.
    Write,
}

impl Kind {
    /// Sorts a request by its method and path segments (still percent-encoded).
    pub(crate) fn of(method: &Method, segments: &[String]) -> Kind {
        let last = segments.last().map(String::as_str).unwrap_or_default();
        let has = |s: &str| segments.iter().any(|x| x == s);
        if segments.first().map(String::as_str) == Some("_nodes") && has("_master") {
            return Kind::Master;
        }
        if method == Method::GET || method == Method::HEAD {
            return Kind::Read;
        }
        let reading = matches!(
            last,
            "_search" | "_msearch" | "_count" | "_mget" | "scroll" | "point_in_time" | "_pit"
        ) || has("_search")
            || has("_pit");
        if reading {
            Kind::Read
        } else {
            Kind::Write
        }
    }
}

impl CutOff {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Cut>> {
        self.cut.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts `node` off from now on (a cut in effect moves to it, forgetting what it hid).
    pub(crate) fn cut(&self, node: Node) {
        *self.lock() = Some((node, HashSet::new()));
    }

    /// Ends the cut: the node has rejoined, and reads through it see everything again.
    pub(crate) fn heal(&self) {
        *self.lock() = None;
    }

    /// Whether `node` is the one cut off.
    pub(crate) fn is_cut(&self, node: Node) -> bool {
        self.lock().as_ref().is_some_and(|(cut, _)| *cut == node)
    }

    /// Whether any cut is in effect.
    fn in_effect(&self) -> bool {
        self.lock().is_some()
    }

    /// The answer of the cut-off `node` to a request of `kind` that it cannot serve.
    pub(crate) fn refusal(&self, node: Node, kind: Kind) -> Option<Response> {
        if !self.is_cut(node) {
            return None;
        }
        match kind {
            Kind::Read => None,
            // `_master` names no node in its cluster state any more: an empty selection.
            Kind::Master => Some(answer(
                StatusCode::OK,
                json!({"_nodes": {"total": 0, "successful": 0, "failed": 0}, "cluster_name": "fsrename-proxy", "nodes": {}}),
            )),
            Kind::Write => Some(answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "error": {
                        "root_cause": [{"type": "cluster_block_exception", "reason": "blocked by: [SERVICE_UNAVAILABLE/2/no master];"}],
                        "type": "cluster_block_exception",
                        "reason": "blocked by: [SERVICE_UNAVAILABLE/2/no master];"
                    },
                    "status": 503
                }),
            )),
        }
    }

    /// Passes on `response`, answered by `node` to a request of `kind`, once a cut is in
    /// effect: a write through another node notes what it wrote; a read through the cut-off
    /// node loses what was written since.
    pub(crate) async fn passed(&self, node: Node, kind: Kind, response: Response) -> Response {
        if !self.in_effect() || kind == Kind::Master {
            return response;
        }
        let cut_here = self.is_cut(node);
        if kind == Kind::Write && cut_here {
            return response;
        }
        if kind == Kind::Read && !cut_here {
            return response;
        }
        let (parts, body) = response.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            return answer(
                StatusCode::BAD_GATEWAY,
                json!({"error": {"type": "proxy_exception", "reason": "reading an answer to pass on"}, "status": 502}),
            );
        };
        let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
            return Response::from_parts(parts, axum::body::Body::from(bytes));
        };
        match kind {
            Kind::Write => {
                self.note_written(&value);
                Response::from_parts(parts, axum::body::Body::from(bytes))
            }
            _ => {
                let status = self.hide(&mut value, parts.status);
                let mut parts = parts;
                parts.status = status;
                parts.headers.remove(axum::http::header::CONTENT_LENGTH);
                Response::from_parts(parts, axum::body::Body::from(value.to_string()))
            }
        }
    }

    /// Notes the documents a write's answer says it wrote.
    fn note_written(&self, answer: &Value) {
        let mut written = Vec::new();
        let mut note = |item: &Value| {
            let status = item["status"].as_u64().unwrap_or(200);
            let result = item["result"].as_str().unwrap_or_default();
            if (200..300).contains(&status) && result != "noop" && result != "not_found" {
                if let (Some(index), Some(id)) = (item["_index"].as_str(), item["_id"].as_str()) {
                    written.push((index.to_owned(), id.to_owned()));
                }
            }
        };
        match answer["items"].as_array() {
            Some(items) => items
                .iter()
                .filter_map(|item| item.as_object()?.values().next())
                .for_each(&mut note),
            None => note(answer),
        }
        if let Some((_, hidden)) = self.lock().as_mut() {
            hidden.extend(written);
        }
    }

    /// Leaves out of a read's answer what the cut-off node's copies miss; returns the status
    /// to answer with (a `GET` of a missed document: 404).
    fn hide(&self, answer: &mut Value, status: StatusCode) -> StatusCode {
        let guard = self.lock();
        let Some((_, hidden)) = guard.as_ref() else {
            return status;
        };
        let missed = |doc: &Value| {
            let key = (
                doc["_index"].as_str().unwrap_or_default().to_owned(),
                doc["_id"].as_str().unwrap_or_default().to_owned(),
            );
            hidden.contains(&key)
        };
        if let Some(hits) = answer["hits"]["hits"].as_array_mut() {
            let before = hits.len();
            hits.retain(|hit| !missed(hit));
            let gone = (before - hits.len()) as u64;
            if let Some(total) = answer["hits"]["total"]["value"].as_u64() {
                answer["hits"]["total"]["value"] = json!(total.saturating_sub(gone));
            }
            return status;
        }
        if let Some(docs) = answer["docs"].as_array_mut() {
            for doc in docs.iter_mut().filter(|d| missed(d)) {
                *doc = json!({"_index": doc["_index"], "_id": doc["_id"], "found": false});
            }
            return status;
        }
        if answer.get("found").is_some() && missed(answer) {
            *answer = json!({"_index": answer["_index"], "_id": answer["_id"], "found": false});
            return StatusCode::NOT_FOUND;
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(path: &str) -> Vec<String> {
        path.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn requests_are_sorted_as_a_node_without_a_master_serves_them() {
        let kind = |m: Method, p: &str| Kind::of(&m, &segments(p));
        assert_eq!(kind(Method::POST, "/fs/_search"), Kind::Read);
        assert_eq!(kind(Method::POST, "/fs-lock/_mget"), Kind::Read);
        assert_eq!(kind(Method::HEAD, "/fs,fs-lock"), Kind::Read);
        assert_eq!(kind(Method::POST, "/_search/scroll"), Kind::Read);
        assert_eq!(kind(Method::DELETE, "/_pit"), Kind::Read);
        assert_eq!(kind(Method::GET, "/_nodes/_master/stats/jvm"), Kind::Master);
        assert_eq!(kind(Method::POST, "/fs-lock/_bulk"), Kind::Write);
        assert_eq!(kind(Method::PUT, "/fs-journal/_create/x"), Kind::Write);
        assert_eq!(kind(Method::DELETE, "/fs/_doc/x"), Kind::Write);
        assert_eq!(kind(Method::POST, "/fs/_refresh"), Kind::Write);
    }

    #[test]
    fn a_cut_off_node_misses_what_was_written_since_and_nothing_else() {
        let cut = CutOff::default();
        let (a, b) = (Node(1), Node(2));
        cut.cut(a);
        cut.note_written(&json!({"items": [
            {"create": {"_index": "fs", "_id": "new", "status": 201, "result": "created"}},
            {"create": {"_index": "fs", "_id": "old", "status": 409}},
        ]}));
        let mut page = json!({"hits": {"total": {"value": 2}, "hits": [
            {"_index": "fs", "_id": "new"}, {"_index": "fs", "_id": "old"}
        ]}});
        assert_eq!(cut.hide(&mut page, StatusCode::OK), StatusCode::OK);
        assert_eq!(
            page["hits"]["hits"],
            json!([{"_index": "fs", "_id": "old"}])
        );
        assert_eq!(page["hits"]["total"]["value"], 1);
        let mut got = json!({"_index": "fs", "_id": "new", "found": true, "_source": {}});
        assert_eq!(cut.hide(&mut got, StatusCode::OK), StatusCode::NOT_FOUND);
        assert!(cut.refusal(a, Kind::Write).is_some());
        assert!(cut.refusal(a, Kind::Read).is_none());
        assert!(cut.refusal(b, Kind::Write).is_none());
        cut.heal();
        assert!(cut.refusal(a, Kind::Write).is_none());
    }
}
