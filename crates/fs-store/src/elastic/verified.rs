//! Reads through a node shown current (anomaly 12 of `docs/reliability.md`).
//!
//! A node cut off from its cluster does not know it for as long as its leader checks take to
//! fail (three checks of up to 10 s by default). Until then it keeps its last cluster state:
//! it routes reads to its own copies, which the master has meanwhile marked stale, and it
//! still carries out writes, which it forwards to the primaries over connections it opened
//! before the cut (a real three-node Elasticsearch 7.10 cluster did so for 3.1 s after a
//! partition of 32.7 s had healed, and a copy read half of a subtree through it). Neither
//! answer says anything is wrong.
//!
//! What does tell is the cluster state's version. The master's grows with every change it
//! publishes, and failing a node's copy is one; a node applies each version it is sent, and a
//! cut-off node is sent none. So, after a write of this process was carried out (a lock
//! taken, a rewrite made) and before the next read, the version the master has
//! (`GET _cluster/state/version`, which the node forwards to the master) is compared with the
//! one the node has applied (the same with `local=true`). A node whose version is at least
//! the master's had applied, when asked, every change the master made before: every copy it
//! routes to was current then, and copies only gain writes after, so it sees every write
//! acknowledged before the check began. That node takes the reads until the next write. A
//! node behind the master is skipped (marked down, as a node that refused), and the next is
//! tried. A healthy node may lag the master by a moment, so it is asked a few times first.
//!
//! Two small requests each time a read follows a write; none on a single node, and none where
//! the server will not say (a user without the `monitor` privilege, a server without the API):
//! reads then go to the last writer, as before, and that is said once.

use std::time::Duration;

use elasticsearch::http::headers::HeaderMap;
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::Method;
use serde_json::Value;

use super::nodes::NodePool;
use super::ElasticStore;

/// How many times a node behind the master is asked again before it is taken as cut off.
const ASKS: u32 = 4;

/// The pause between two asks: a healthy node applies a published state in milliseconds.
const BETWEEN_ASKS: Duration = Duration::from_millis(100);

/// How long the master is waited for through a node (a node with no master answers 503 then).
const MASTER_TIMEOUT: &str = "2s";

/// How long an answer is waited for: a node paused or cut off must not hold every read of the
/// process for the whole request timeout (30 s by default) while one check waits on it.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a node was not shown current.
enum NotShown {
    /// It is behind the master, did not answer, or answered that it cannot (no master):
    /// another is tried.
    Failed(String),
    /// The server will not say (401, 403, 404, 400, or an answer without a version): reads
    /// are not checked.
    Unsupported(String),
}

impl ElasticStore {
    /// Before a read: if a write was carried out since a node was last shown current, shows
    /// one current and sends the reads to it.
    ///
    /// # Errors
    /// A message if no node could be shown current (every one was behind the master or did
    /// not answer): the read is tried again as after a failed attempt.
    pub(super) async fn verify_reads(&self) -> std::result::Result<(), String> {
        let pool = &self.inner.nodes;
        if pool.verification_needed().is_none() {
            return Ok(());
        }
        let _turn = pool.one_check_at_a_time().await;
        let Some(writes) = pool.verification_needed() else {
            // Another read made the check while this one waited.
            return Ok(());
        };
        let mut failures = Vec::new();
        for node in pool.candidates() {
            match self.current(node).await {
                Ok(()) => {
                    pool.set_reader(node, writes);
                    return Ok(());
                }
                Err(NotShown::Unsupported(why)) => {
                    tracing::warn!(
                        node = pool.origin(node),
                        %why,
                        "reads cannot be checked for a current cluster state: they go to the node of the last write"
                    );
                    pool.stop_checking();
                    return Ok(());
                }
                Err(NotShown::Failed(why)) => {
                    failures.push(format!("{}: {why}", pool.origin(node)));
                    pool.mark_node_down(node);
                }
            }
        }
        Err(format!(
            "no node could be shown to have a current cluster state, so none can be read from safely: {}",
            failures.join("; ")
        ))
    }

    /// Whether node `node`'s cluster state is at least as new as its master's.
    async fn current(&self, node: usize) -> std::result::Result<(), NotShown> {
        let master = self.version_at(node, false).await?;
        let mut local = 0;
        for ask in 0..ASKS {
            if ask > 0 {
                tokio::time::sleep(BETWEEN_ASKS).await;
            }
            local = self.version_at(node, true).await?;
            if local >= master {
                return Ok(());
            }
        }
        let why = format!(
            "its cluster state is version {local}, the master's {master}: it is cut off from the cluster and its copies may be stale"
        );
        tracing::warn!(node = self.inner.nodes.origin(node), %why, "node skipped for reads");
        Err(NotShown::Failed(why))
    }

    /// The cluster state's version node `node` has applied (`local`), or its master has.
    async fn version_at(&self, node: usize, local: bool) -> std::result::Result<u64, NotShown> {
        let client = &self.inner.client;
        let query: [(&str, &str); 2] = if local {
            [("filter_path", "version"), ("local", "true")]
        } else {
            [
                ("filter_path", "version"),
                ("master_timeout", MASTER_TIMEOUT),
            ]
        };
        let sent = NodePool::pinned(
            node,
            client.transport().send(
                Method::Get,
                "/_cluster/state/version",
                HeaderMap::new(),
                Some(&query),
                None::<JsonBody<Value>>,
                Some(ANSWER_TIMEOUT),
            ),
        )
        .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return Err(NotShown::Failed(e.to_string())),
        };
        let status = response.status_code().as_u16();
        let body = response.json::<Value>().await.unwrap_or(Value::Null);
        match (status, body["version"].as_u64()) {
            (200, Some(version)) => Ok(version),
            (400 | 401 | 403 | 404 | 405, _) | (200, None) => Err(NotShown::Unsupported(format!(
                "`GET _cluster/state/version` answered {status}: {body}"
            ))),
            _ => Err(NotShown::Failed(format!("HTTP {status}: {body}"))),
        }
    }
}
