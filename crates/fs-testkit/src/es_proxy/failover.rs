//! A node's failover as a client that kept its connection sees it, taught by a real
//! three-node Elasticsearch 7.10 cluster (`docs/elasticsearch.md`, "Running on a cluster"):
//!
//! - **A bulk request carried out twice.** The primary applies a shard's items, replicates
//!   them, and dies before it answers; the coordinating node sends the items again to the
//!   promoted replica. Every conditional item the first run applied then comes back 409 (since
//!   Elasticsearch 7.0), on a connection that never broke: the client's own write, answered
//!   as someone else's.
//! - **A lagging copy.** A realtime read by id is served by any copy of the shard, and a copy
//!   may not have applied a write yet: the documents of a replayed request are read, a few
//!   times each, as they were before it.
//!
//! The third lesson, a search context that dies with its node, is in `contexts.rs`.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::{answer, decode, encode, nrt, Counters, Proxy, Request};

/// Documents as a lagging copy still has them: by index and id, the document as an `_mget`
/// answered it before the replayed request, and how many more reads get it.
#[derive(Default)]
pub(crate) struct Lagging {
    docs: Mutex<HashMap<(String, String), (Value, u32)>>,
}

impl Lagging {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (Value, u32)>> {
        self.docs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remember(&self, index: &str, id: &str, before: Value, reads: u32) {
        self.lock()
            .insert((index.to_owned(), id.to_owned()), (before, reads));
    }

    /// The document as the lagging copy has it, for one read, if it lags there.
    fn take(&self, index: &str, id: &str) -> Option<Value> {
        let mut docs = self.lock();
        let key = (index.to_owned(), id.to_owned());
        let (doc, left) = docs.get_mut(&key)?;
        let doc = doc.clone();
        *left = left.saturating_sub(1);
        if *left == 0 {
            docs.remove(&key);
        }
        Some(doc)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Carries out a bulk request twice and answers the second run: the failover of the node that
/// held the primary, seen from a client whose connection did not break. With `reads`, each of
/// its documents is first noted as it was, for that many lagging reads.
pub(crate) async fn replay(
    proxy: &std::sync::Arc<Proxy>,
    r: &Request,
    seg: &[&str],
    reads: u32,
) -> Result<Response, String> {
    let index = match seg {
        [index, "_bulk"] => Some(decode(index)),
        _ => None,
    };
    if reads > 0 {
        for (index, ids) in bulk_ids(&r.body, index.as_deref()) {
            let path = format!("/{}/_mget", encode(&index));
            let (status, before) = proxy
                .upstream
                .json(Method::POST, &path, Some(&json!({ "ids": ids })))
                .await?;
            if status != 200 {
                continue;
            }
            for doc in before["docs"].as_array().into_iter().flatten() {
                if let Some(id) = doc["_id"].as_str() {
                    proxy.lagging.remember(&index, id, doc.clone(), reads);
                }
            }
        }
    }
    // The first run's answer is lost with the node that carried it out.
    let _lost = super::route(proxy, r).await?;
    Counters::add(&proxy.counters.replayed, 1);
    super::route(proxy, r).await
}

/// A read by id (`GET /{index}/_doc/{id}` or `/{index}/_mget`) while some documents lag: the
/// upstream answer, with the lagging documents as the lagging copy has them.
pub(crate) async fn read(proxy: &Proxy, r: &Request, seg: &[&str]) -> Result<Response, String> {
    let (status, mut body) = nrt::forward_json(proxy, r).await?;
    match seg {
        [index, "_doc", id] => {
            let Some(before) = proxy.lagging.take(&decode(index), &decode(id)) else {
                return Ok(answer(code(status), body));
            };
            Counters::add(&proxy.counters.lagging_reads, 1);
            let found = before["found"].as_bool().unwrap_or(false);
            let status = if found {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            };
            Ok(answer(status, before))
        }
        [index, "_mget"] => {
            let index = decode(index);
            if let Some(docs) = body["docs"].as_array_mut() {
                for doc in docs {
                    let Some(id) = doc["_id"].as_str().map(str::to_owned) else {
                        continue;
                    };
                    if let Some(before) = proxy.lagging.take(&index, &id) {
                        Counters::add(&proxy.counters.lagging_reads, 1);
                        *doc = before;
                    }
                }
            }
            Ok(answer(code(status), body))
        }
        _ => Ok(answer(code(status), body)),
    }
}

/// The ids each index's items of a bulk body name (`index` for items that name none).
fn bulk_ids(body: &[u8], index: Option<&str>) -> Vec<(String, Vec<String>)> {
    let mut by_index: Vec<(String, Vec<String>)> = Vec::new();
    let mut lines = body
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace));
    while let Some(line) = lines.next() {
        let Ok(action) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let Some((verb, meta)) = action.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        if verb != "delete" {
            lines.next();
        }
        let item_index = meta["_index"].as_str().or(index);
        let (Some(item_index), Some(id)) = (item_index, meta["_id"].as_str()) else {
            continue;
        };
        match by_index.iter_mut().find(|(i, _)| i == item_index) {
            Some((_, ids)) => ids.push(id.to_owned()),
            None => by_index.push((item_index.to_owned(), vec![id.to_owned()])),
        }
    }
    by_index
}

fn code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bulk_body_names_its_ids_by_index() {
        let body = concat!(
            "{\"index\":{\"_id\":\"a\",\"if_seq_no\":1,\"if_primary_term\":1}}\n",
            "{\"path\":\"/x\"}\n",
            "{\"delete\":{\"_id\":\"b\"}}\n",
            "{\"create\":{\"_index\":\"other\",\"_id\":\"c\"}}\n",
            "{\"path\":\"/y\"}\n",
            "{\"update\":{\"_id\":\"d\"}}\n",
            "{\"script\":{}}\n",
        );
        assert_eq!(
            bulk_ids(body.as_bytes(), Some("fs")),
            vec![
                (
                    "fs".to_owned(),
                    vec!["a".to_owned(), "b".to_owned(), "d".to_owned()]
                ),
                ("other".to_owned(), vec!["c".to_owned()]),
            ]
        );
    }

    #[test]
    fn a_lagging_document_is_read_stale_as_often_as_asked() {
        let lagging = Lagging::default();
        lagging.remember("fs", "a", json!({"_id": "a", "found": false}), 2);
        assert!(lagging.take("fs", "a").is_some());
        assert!(lagging.take("fs", "a").is_some());
        assert!(lagging.take("fs", "a").is_none());
        assert!(lagging.is_empty());
    }
}
