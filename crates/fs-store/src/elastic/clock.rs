//! The server's clock: what time a node of the cluster says it is, for leases that every
//! client judges by one clock, whatever its own machine's says (`fs_locks::LeaseClock`).
//!
//! Read from the node statistics' `timestamp` (epoch milliseconds, the node's wall clock):
//! one small read, no write, on Elasticsearch 7.x and 8.x and OpenSearch alike. The elected
//! master answers when there is one (`_nodes/_master`), so that clients reaching different
//! nodes still read one clock; else the node the request reached (`_nodes/_local`). Scripts
//! see the server's time too (`ctx._now` in an update), but only in a write.

use elasticsearch::http::headers::HeaderMap;
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::Method;
use serde_json::Value;

use super::request::Retry;
use super::response::error_of;
use super::ElasticStore;
use crate::error::Result;

impl ElasticStore {
    /// The server's time in epoch milliseconds, or `None` if no node will say (the
    /// statistics API refused for want of the `monitor` privilege, or missing).
    pub(super) async fn read_server_time(&self) -> Result<Option<i64>> {
        for nodes in ["_master", "_local"] {
            let context = format!("reading the server's clock (`GET _nodes/{nodes}/stats/jvm`)");
            let path = format!("/_nodes/{nodes}/stats/jvm");
            let client = &self.inner.client;
            let query = [("filter_path", "nodes.*.timestamp")];
            let (status, answer) = self
                .send(&context, Retry::Always, || {
                    client.transport().send(
                        Method::Get,
                        &path,
                        HeaderMap::new(),
                        Some(&query),
                        None::<JsonBody<Value>>,
                        None,
                    )
                })
                .await?;
            match status {
                200..=299 => {
                    if let Some(at) = timestamp_of(&answer) {
                        return Ok(Some(at));
                    }
                    // No master elected (an empty `nodes`): ask the node itself.
                }
                400 | 401 | 403 | 404 | 405 => return Ok(None),
                _ => return Err(error_of(&context, "", "", status, &answer)),
            }
        }
        Ok(None)
    }
}

/// The first node's `timestamp` in a node statistics answer.
fn timestamp_of(answer: &Value) -> Option<i64> {
    answer["nodes"]
        .as_object()?
        .values()
        .find_map(|node| node["timestamp"].as_i64())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::timestamp_of;

    #[test]
    fn the_timestamp_is_read_from_the_node_statistics() {
        let answer = json!({"nodes": {"x1": {"timestamp": 1_796_530_576_498_i64}}});
        assert_eq!(timestamp_of(&answer), Some(1_796_530_576_498));
        assert_eq!(timestamp_of(&json!({})), None, "no master elected");
        assert_eq!(timestamp_of(&json!({"nodes": {"x1": {}}})), None);
    }
}
