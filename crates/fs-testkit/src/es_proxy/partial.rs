//! Partial answers: a search or a count that one shard of several did not answer. A real
//! cluster gives them with HTTP 200 when the node holding a shard's only live copy dies or is
//! cut off between the query and the answer (`allow_partial_search_results` is true by
//! default): `_shards.failed` is 1, `_shards.failures` says why, and the hits (or the count)
//! are those of the other shards. A client that takes such a page as the page skips
//! documents: a scan would miss them, a rename would leave them behind, a check would miss a
//! destination. A shard with no active copy at all (its only one on a node that died) is left
//! out the same way, but Elasticsearch does not count it as failed: `_shards.failed` stays 0,
//! only `successful` is one short. osmem never fails a shard, so the proxy does, at
//! [`NetFaults::partial_shards`](super::NetFaults) and
//! [`NetFaults::unassigned_shards`](super::NetFaults).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use std::sync::atomic::Ordering;

use super::{answer, Proxy, Request};

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

/// How a shard is missing from an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// It failed: counted in `_shards.failed`, said in `_shards.failures`.
    Failed,
    /// It had no active copy: left out of `_shards.successful` only.
    NoCopy,
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
    let missing = match (total >= 2).then(|| proxy.faults.fail_shard()) {
        Some(Some(missing)) => missing,
        _ => return super::passed_on(200, bytes),
    };
    let struck = proxy
        .counters
        .partial_answers
        .fetch_add(1, Ordering::Relaxed);
    leave_out_a_shard(&mut body, total, missing, struck % total);
    answer(StatusCode::OK, body)
}

/// Makes `body` (an answer from `total` shards) the answer of all but one, `_shards` saying it
/// as Elasticsearch does for `missing`. A failed shard leaves out every other hit; a shard
/// with no copy, the hits whose ids fall in shard `gone` (by a hash of the id, as a cluster
/// routes them), whatever their place in the page: the first hit too, which is where a
/// rename's check reads its destination. Half the count either way.
fn leave_out_a_shard(body: &mut Value, total: u64, missing: Missing, gone: u64) {
    let index = body["hits"]["hits"][0]["_index"]
        .as_str()
        .unwrap_or("fs")
        .to_owned();
    if let Some(hits) = body["hits"]["hits"].as_array_mut() {
        let kept: Vec<Value> = match missing {
            Missing::Failed => hits.iter().step_by(2).cloned().collect(),
            Missing::NoCopy => hits
                .iter()
                .filter(|hit| shard_of(hit["_id"].as_str().unwrap_or(""), total) != gone)
                .cloned()
                .collect(),
        };
        *hits = kept;
    }
    if let Some(count) = body["count"].as_u64() {
        body["count"] = json!(count - count / 2);
    }
    if missing == Missing::NoCopy {
        body["_shards"] =
            json!({"total": total, "successful": total - 1, "skipped": 0, "failed": 0});
        return;
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

/// The shard of `total` that the proxy takes document `id` to live on: FNV-1a of the id, a
/// fixed function so that a seed replays the same answers.
fn shard_of(id: &str, total: u64) -> u64 {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    hash % total.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_answer_has_some_of_the_hits_and_says_which_shard_failed() {
        let mut body = json!({"_shards": {"total": 3, "successful": 3, "skipped": 0, "failed": 0},
            "hits": {"hits": [{"_index": "fs", "_id": "a"}, {"_index": "fs", "_id": "b"},
                              {"_index": "fs", "_id": "c"}]}});
        leave_out_a_shard(&mut body, 3, Missing::Failed, 1);
        let ids: Vec<&str> = body["hits"]["hits"]
            .as_array()
            .map(|h| h.iter().filter_map(|h| h["_id"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(body["_shards"]["failed"], 1);
        assert_eq!(body["_shards"]["successful"], 2);
        assert_eq!(body["_shards"]["failures"][0]["index"], "fs");
        let mut count = json!({"count": 9, "_shards": {"total": 3, "failed": 0}});
        leave_out_a_shard(&mut count, 3, Missing::Failed, 1);
        assert_eq!(
            (count["count"].as_u64(), count["_shards"]["failed"].as_u64()),
            (Some(5), Some(1))
        );
    }

    #[test]
    fn a_shard_with_no_copy_is_left_out_without_a_failure() {
        let ids: Vec<String> = (0..30).map(|i| format!("id{i}")).collect();
        let hits: Vec<Value> = ids
            .iter()
            .map(|id| json!({"_index": "fs", "_id": id}))
            .collect();
        let mut body = json!({"_shards": {"total": 3, "successful": 3, "skipped": 0, "failed": 0},
            "hits": {"hits": hits}});
        let gone = shard_of("id0", 3);
        leave_out_a_shard(&mut body, 3, Missing::NoCopy, gone);
        let kept: Vec<&str> = body["hits"]["hits"]
            .as_array()
            .map(|h| h.iter().filter_map(|h| h["_id"].as_str()).collect())
            .unwrap_or_default();
        // The first hit is gone with its shard, and only the hits of that shard.
        assert!(!kept.contains(&"id0"), "{kept:?}");
        let want: Vec<&str> = ids
            .iter()
            .map(String::as_str)
            .filter(|id| shard_of(id, 3) != gone)
            .collect();
        assert_eq!(kept, want);
        assert!(!kept.is_empty() && kept.len() < 29, "{kept:?}");
        assert_eq!(
            body["_shards"],
            json!({"total": 3, "successful": 2, "skipped": 0, "failed": 0})
        );
    }
}
