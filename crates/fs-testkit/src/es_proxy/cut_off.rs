//! A node cut off from its cluster and not yet aware of it, as a real three-node
//! Elasticsearch 7.10 cluster showed it (anomaly 11 of `docs/reliability.md`): for the seconds
//! until its leader check fails, the node keeps its last cluster state. Writes through it are
//! refused (`cluster.no_master_block: write`, the default: 503 `cluster_block_exception`,
//! "no master"), and so is a question to the master, but reads are served from its own
//! copies, which the master has meanwhile marked stale: they miss every write made through the
//! other nodes since the cut.
//!
//! Before the node learns it (anomaly 12: 3.1 s after a partition of 32.7 s had healed, on
//! the real cluster), it still carries out writes, which it forwards to the primaries over
//! connections it opened before the cut: [`CutOff::cut`] with `aware` false. Its copies miss
//! those writes too, since the primaries cannot replicate to it.
//!
//! OpenSearch refuses less even once the node knows: its default `cluster.no_master_block` is
//! `metadata_write` (Elasticsearch's is `write`), so a node with no master still carries out
//! document writes ([`CutOff::cut`] with `aware` and `writes`).
//!
//! The cluster state's version tells it (`GET _cluster/state/version`, answered here rather
//! than by the store behind): the master's grows with the cut (it fails the node's copies)
//! and with the rejoin; the cut-off node's own (`local=true`) stays where it was. Asked for
//! the master's, a node that knows it has no master answers 503; one that does not yet know
//! forwards the question to the master it still believes in, which answers.
//!
//! Modelled here for the documents written since (created or rewritten): a search, an `_mget`
//! or a `GET` through the cut-off node leaves them out, as absent. (A document the stale copy
//! has in an older version is left out too, rather than shown as it was; a deleted one is
//! shown as the store has it now, that is not at all. Both are what a check for a destination
//! made meanwhile misses, which is what is taught.)

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::answer;

/// Which node of the proxy a request came to: the port it listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Node(pub(crate) u16);

/// A cut in effect.
struct Cut {
    /// The node cut off.
    node: Node,
    /// Whether it knows it has no master (questions for the master refused) or not yet.
    aware: bool,
    /// Whether it carries out writes: not yet aware, or aware on OpenSearch.
    writes: bool,
    /// The cluster state's version it has applied: the one before the cut.
    seen: u64,
    /// The documents (index, id) its copies miss: those written since.
    hidden: HashSet<(String, String)>,
}

/// The cut, if one is in effect, and the cluster state's version.
pub(crate) struct CutOff {
    cut: Mutex<Option<Cut>>,
    version: AtomicU64,
}

impl Default for CutOff {
    fn default() -> CutOff {
        CutOff {
            cut: Mutex::new(None),
            version: AtomicU64::new(1),
        }
    }
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

    /// Cuts `node` off from now on (a cut in effect moves to it, forgetting what it hid):
    /// `aware`, it knows it has no master, else not yet; `writes`, it carries out writes.
    pub(crate) fn cut(&self, node: Node, aware: bool, writes: bool) {
        let seen = self.version.fetch_add(1, Ordering::SeqCst);
        *self.lock() = Some(Cut {
            node,
            aware,
            writes,
            seen,
            hidden: HashSet::new(),
        });
    }

    /// Ends the cut: the node has rejoined, and reads through it see everything again.
    pub(crate) fn heal(&self) {
        self.version.fetch_add(1, Ordering::SeqCst);
        *self.lock() = None;
    }

    /// Whether `node` is the one cut off.
    pub(crate) fn is_cut(&self, node: Node) -> bool {
        self.lock().as_ref().is_some_and(|cut| cut.node == node)
    }

    /// If `node` is cut off and knows it: whether it still carries out writes.
    fn cut_and_aware(&self, node: Node) -> Option<bool> {
        self.lock()
            .as_ref()
            .filter(|cut| cut.node == node && cut.aware)
            .map(|cut| cut.writes)
    }

    /// The answer of `node` to `GET _cluster/state/...`: the version it has applied
    /// (`local`), or its master's.
    pub(crate) fn state_version(&self, node: Node, local: bool) -> Response {
        let now = self.version.load(Ordering::SeqCst);
        let (version, aware) = match self.lock().as_ref() {
            Some(cut) if cut.node == node => (if local { cut.seen } else { now }, cut.aware),
            _ => (now, false),
        };
        if aware && !local {
            return answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "error": {
                        "root_cause": [{"type": "master_not_discovered_exception", "reason": null}],
                        "type": "master_not_discovered_exception",
                        "reason": null
                    },
                    "status": 503
                }),
            );
        }
        answer(
            StatusCode::OK,
            json!({"cluster_name": "fsrename-proxy", "version": version}),
        )
    }

    /// Whether any cut is in effect.
    fn in_effect(&self) -> bool {
        self.lock().is_some()
    }

    /// The answer of the cut-off `node` to a request of `kind` that it cannot serve.
    pub(crate) fn refusal(&self, node: Node, kind: Kind) -> Option<Response> {
        let writes = self.cut_and_aware(node)?;
        match kind {
            Kind::Read => None,
            Kind::Write if writes => None,
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
    /// effect: a write notes what it wrote (one through the cut-off node too: the primaries
    /// cannot replicate to it); a read through the cut-off node loses what was written since.
    pub(crate) async fn passed(&self, node: Node, kind: Kind, response: Response) -> Response {
        if !self.in_effect() || kind == Kind::Master {
            return response;
        }
        let cut_here = self.is_cut(node);
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
        if let Some(cut) = self.lock().as_mut() {
            cut.hidden.extend(written);
        }
    }

    /// Leaves out of a read's answer what the cut-off node's copies miss; returns the status
    /// to answer with (a `GET` of a missed document: 404).
    fn hide(&self, answer: &mut Value, status: StatusCode) -> StatusCode {
        let guard = self.lock();
        let Some(Cut { hidden, .. }) = guard.as_ref() else {
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
        cut.cut(a, true, false);
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

    async fn version_of(response: Response) -> (StatusCode, Value) {
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body");
        (status, serde_json::from_slice(&bytes).expect("JSON"))
    }

    #[tokio::test]
    async fn a_node_cut_off_and_not_yet_aware_writes_but_its_cluster_state_stays_behind() {
        let cut = CutOff::default();
        let (a, b) = (Node(1), Node(2));
        let (_, before) = version_of(cut.state_version(a, true)).await;
        cut.cut(a, false, true);
        // It still carries out writes and forwards questions to the master.
        assert!(cut.refusal(a, Kind::Write).is_none());
        assert!(cut.refusal(a, Kind::Master).is_none());
        let (status, master) = version_of(cut.state_version(a, false)).await;
        assert_eq!(status, StatusCode::OK);
        let (_, local) = version_of(cut.state_version(a, true)).await;
        assert_eq!(local["version"], before["version"]);
        assert!(master["version"].as_u64() > local["version"].as_u64());
        let (_, other) = version_of(cut.state_version(b, true)).await;
        assert_eq!(other["version"], master["version"]);
        // Aware, it has no master to ask; on OpenSearch it still carries out writes.
        cut.cut(a, true, true);
        let (status, _) = version_of(cut.state_version(a, false)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(cut.refusal(a, Kind::Write).is_none());
        assert!(cut.refusal(a, Kind::Master).is_some());
        cut.heal();
        let (_, local) = version_of(cut.state_version(a, true)).await;
        let (_, master) = version_of(cut.state_version(b, false)).await;
        assert_eq!(local["version"], master["version"]);
    }
}
