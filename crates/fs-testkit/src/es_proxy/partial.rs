//! Partial answers: a search or a count that one shard of several did not answer. A real
//! cluster gives them with HTTP 200 when the node holding a shard's only live copy dies or is
//! cut off between the query and the answer (`allow_partial_search_results` is true by
//! default): `_shards.failed` is 1, `_shards.failures` says why, and the hits (or the count)
//! are those of the other shards. A client that takes such a page as the page skips
//! documents: a scan would miss them, a rename would leave them behind. osmem never fails a
//! shard, so the proxy does, at [`NetFaults::partial_shards`](super::NetFaults).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::{answer, Counters, Proxy, Request};

/// Whether `r` is a search or a count, whose answer a failed shard leaves partial.
pub(crate) fn is_search(r: &Request) -> bool {
    let seg: Vec<&str> = r.segments.iter().map(String::as_str).collect();
    match seg.as_slice() {
        ["_search", "scroll", ..] => r.method != Method::DELETE,
        ["_search", "point_in_time", ..] | [_, "_search", "point_in_time"] | [_, "_pit"] => false,
        [.., "_search"] | [.., "_count"] => r.method == Method::GET || r.method == Method::POST,
        _ => false,
    }
}

/// `response` as a shard of its index had failed, if the schedule says so and the index has
/// more than one shard (with one, the answer would be a failure of all shards, not a partial
/// one); else `response` as it is.
pub(crate) async fn strike(proxy: &Proxy, response: Response) -> Response {
    if response.status() != StatusCode::OK {
        return response;
    }
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let Ok(mut body) = serde_json::from_slice::<Value>(&bytes) else {
        return super::passed_on(200, bytes);
    };
    let total = body["_shards"]["total"].as_u64().unwrap_or(0);
    if total < 2 || !proxy.faults.fail_shard() {
        return super::passed_on(200, bytes);
    }
    Counters::add(&proxy.counters.partial_answers, 1);
    leave_out_a_shard(&mut body, total);
    answer(StatusCode::OK, body)
}

/// Makes `body` (an answer from `total` shards) the answer of all but one: every other hit
/// left out (or half the count), the failure said in `_shards`.
fn leave_out_a_shard(body: &mut Value, total: u64) {
    let index = body["hits"]["hits"][0]["_index"]
        .as_str()
        .unwrap_or("fs")
        .to_owned();
    if let Some(hits) = body["hits"]["hits"].as_array_mut() {
        let kept: Vec<Value> = hits.iter().step_by(2).cloned().collect();
        *hits = kept;
    }
    if let Some(count) = body["count"].as_u64() {
        body["count"] = json!(count - count / 2);
    }
    body["_shards"] = json!({
        "total": total, "successful": total - 1, "skipped": 0, "failed": 1,
        "failures": [{
            "shard": 1, "index": index, "node": "es-proxy-gone",
            "reason": {"type": "node_disconnected_exception",
                       "reason": "[es-proxy-gone][127.0.0.1:9301][indices:data/read/search[phase/query]] disconnected"}
        }]
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_answer_has_some_of_the_hits_and_says_which_shard_failed() {
        let mut body = json!({"_shards": {"total": 3, "successful": 3, "skipped": 0, "failed": 0},
            "hits": {"hits": [{"_index": "fs", "_id": "a"}, {"_index": "fs", "_id": "b"},
                              {"_index": "fs", "_id": "c"}]}});
        leave_out_a_shard(&mut body, 3);
        let ids: Vec<&str> = body["hits"]["hits"]
            .as_array()
            .map(|h| h.iter().filter_map(|h| h["_id"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(body["_shards"]["failed"], 1);
        assert_eq!(body["_shards"]["successful"], 2);
        assert_eq!(body["_shards"]["failures"][0]["index"], "fs");
        let mut count = json!({"count": 9, "_shards": {"total": 3, "failed": 0}});
        leave_out_a_shard(&mut count, 3);
        assert_eq!(
            (count["count"].as_u64(), count["_shards"]["failed"].as_u64()),
            (Some(5), Some(1))
        );
    }
}
