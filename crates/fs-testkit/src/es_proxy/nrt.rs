//! Near-real-time search: a write is visible to search and count only after a refresh.
//!
//! Each index `X` has a searchable copy, `X.nrt-copy`, that only a refresh changes: the proxy notes
//! every document id written to `X` and, on `POST X/_refresh`, copies those documents as they
//! are now (or their absence) into `X.nrt-copy`. Searches, counts, scrolls and points in time of
//! `X` run on `X.nrt-copy`; their hits are given back `X`'s name and the version each document had
//! when it was refreshed (kept in two extra fields of the copy). Reads by id stay on `X`, so
//! they are realtime, as on Elasticsearch. A write is noted after the server behind
//! acknowledged it and before the client hears of it, so a refresh the client starts after
//! that answer always carries it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::http::Method;
use axum::response::Response;
use serde_json::{json, Value};

use super::{decode, encode, passed_on, Counters, Proxy, Request};

/// The suffix of an index's searchable copy.
const COPY: &str = ".nrt-copy";
/// The fields of the copy that keep the version each document had when it was refreshed.
const SEQ_NO: &str = "nrt_seq_no";
const TERM: &str = "nrt_primary_term";
/// How many documents one refresh reads and copies per request.
const CHUNK: usize = 1_000;

/// The writes not yet refreshed, by index, and the copies that exist.
#[derive(Default)]
pub(crate) struct Nrt {
    pending: Mutex<HashMap<String, HashSet<String>>>,
    /// Documents whose write is under way, by index, with how many writes of each: a refresh
    /// copies them too (as they are then), and keeps them for the next one.
    writing: Mutex<HashMap<String, HashMap<String, usize>>>,
    /// Documents whose write was cut off in the middle (its node killed): the server behind
    /// may or may not have applied it, and no one will note it, so every refresh copies them
    /// again. On a real cluster, the node that holds the shard applies a write whatever
    /// happens to the node that took the request.
    stray: Mutex<HashMap<String, HashSet<String>>>,
    copies: Mutex<HashSet<String>>,
    /// One refresh at a time per index, so that an older read never overwrites a newer one
    /// in the copy.
    refreshing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Nrt {
    /// Notes that `index/id` was written.
    pub(crate) fn written(&self, index: &str, id: &str) {
        locked(&self.pending)
            .entry(index.to_owned())
            .or_default()
            .insert(id.to_owned());
    }

    /// Notes that `ids` (index, id) are about to be written, until [`Writing::done`]: a write
    /// the proxy is killed in the middle of stays noted for good.
    pub(crate) fn begin(
        self: &Arc<Self>,
        ids: impl IntoIterator<Item = (String, String)>,
    ) -> Writing {
        let ids: Vec<(String, String)> = ids.into_iter().collect();
        let mut writing = locked(&self.writing);
        for (index, id) in &ids {
            *writing
                .entry(index.clone())
                .or_default()
                .entry(id.clone())
                .or_default() += 1;
        }
        Writing {
            nrt: Arc::clone(self),
            ids,
            done: false,
        }
    }

    /// The ids a refresh of `index` copies: the writes noted (forgotten here), those under way
    /// and the stray ones (kept).
    fn take(&self, index: &str) -> Vec<String> {
        let mut ids: HashSet<String> = locked(&self.pending).remove(index).unwrap_or_default();
        if let Some(writing) = locked(&self.writing).get(index) {
            ids.extend(writing.keys().cloned());
        }
        if let Some(stray) = locked(&self.stray).get(index) {
            ids.extend(stray.iter().cloned());
        }
        ids.into_iter().collect()
    }

    fn pending_indices(&self) -> Vec<String> {
        let mut indices: HashSet<String> = locked(&self.pending).keys().cloned().collect();
        indices.extend(locked(&self.stray).keys().cloned());
        indices.extend(locked(&self.writing).keys().cloned());
        indices.into_iter().collect()
    }

    fn has_copy(&self, index: &str) -> bool {
        locked(&self.copies).contains(index)
    }

    fn forget(&self, index: &str) {
        locked(&self.copies).remove(index);
        locked(&self.pending).remove(index);
    }

    fn refresh_lock(&self, index: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = locked(&self.refreshing);
        Arc::clone(locks.entry(index.to_owned()).or_default())
    }
}

/// Writes under way (from [`Nrt::begin`]).
pub(crate) struct Writing {
    nrt: Arc<Nrt>,
    ids: Vec<(String, String)>,
    done: bool,
}

impl Writing {
    /// The writes ended (noted with [`Nrt::written`] where they landed).
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

/// Locks `mutex`, poisoned or not: each critical section here leaves its map whole (one
/// insert or removal at a time), so what a panicking holder left is still sound to use.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Writing {
    fn drop(&mut self) {
        let mut writing = locked(&self.nrt.writing);
        for (index, id) in &self.ids {
            if let Some(ids) = writing.get_mut(index) {
                if let Some(n) = ids.get_mut(id) {
                    *n -= 1;
                    if *n == 0 {
                        ids.remove(id);
                    }
                }
                if ids.is_empty() {
                    writing.remove(index);
                }
            }
        }
        drop(writing);
        if !self.done {
            let mut stray = locked(&self.nrt.stray);
            for (index, id) in self.ids.drain(..) {
                stray.entry(index).or_default().insert(id);
            }
        }
    }
}

impl Proxy {
    /// Makes every write noted for `index` searchable: copies the documents as they are now.
    pub(crate) async fn refresh(&self, index: &str) -> Result<(), String> {
        if !self.options.near_real_time {
            return Ok(());
        }
        let lock = self.nrt.refresh_lock(index);
        let _one_at_a_time = lock.lock().await;
        let ids = self.nrt.take(index);
        if ids.is_empty() {
            return Ok(());
        }
        self.ensure_copy(index, None).await?;
        for chunk in ids.chunks(CHUNK) {
            let path = format!("/{}/_mget", encode(index));
            let (status, found) = self
                .upstream
                .json(Method::POST, &path, Some(&json!({ "ids": chunk })))
                .await?;
            if status == 404 {
                // The index is gone: so is everything it held.
                return Ok(());
            }
            let docs = found["docs"].as_array().cloned().unwrap_or_default();
            let mut lines = Vec::with_capacity(chunk.len() * 2);
            for doc in docs {
                let Some(id) = doc["_id"].as_str() else {
                    continue;
                };
                if doc["found"] == json!(true) {
                    let mut source = doc["_source"].clone();
                    source[SEQ_NO] = doc["_seq_no"].clone();
                    source[TERM] = doc["_primary_term"].clone();
                    lines.push(json!({"index": {"_id": id}}));
                    lines.push(source);
                } else {
                    lines.push(json!({"delete": {"_id": id}}));
                }
            }
            let copy = format!("{index}{COPY}");
            let (status, answer) = self.upstream.bulk(Some(&copy), &lines, false).await?;
            if !(200..300).contains(&status) {
                return Err(format!("refreshing {index}: HTTP {status} {answer}"));
            }
        }
        Counters::add(&self.counters.refreshes, 1);
        Ok(())
    }

    /// Creates the searchable copy of `index` if the proxy has not yet, with `body`'s mappings
    /// (those `index` was created with) and the two version fields.
    async fn ensure_copy(&self, index: &str, body: Option<&Value>) -> Result<(), String> {
        if self.nrt.has_copy(index) {
            return Ok(());
        }
        let mut body = body.cloned().unwrap_or_else(|| json!({}));
        if !body.is_object() {
            body = json!({});
        }
        let properties = &mut body["mappings"]["properties"];
        if !properties.is_object() {
            *properties = json!({});
        }
        properties[SEQ_NO] = json!({"type": "long"});
        properties[TERM] = json!({"type": "long"});
        let path = format!("/{}", encode(&format!("{index}{COPY}")));
        let (status, answer) = self.upstream.json(Method::PUT, &path, Some(&body)).await?;
        let exists = answer["error"]["type"] == "resource_already_exists_exception";
        if !(200..300).contains(&status) && !exists {
            return Err(format!(
                "creating the searchable copy of {index}: HTTP {status} {answer}"
            ));
        }
        locked(&self.nrt.copies).insert(index.to_owned());
        Ok(())
    }
}

/// Runs a search-like request of `index` (`rest` is what follows the index in the path) on its
/// searchable copy; returns the status and the answer as `index` would give it.
pub(crate) async fn search(
    proxy: &Proxy,
    r: &Request,
    index: &str,
    rest: &str,
) -> Result<(u16, Value), String> {
    if !proxy.options.near_real_time || !proxy.nrt.has_copy(index) {
        if proxy.options.near_real_time && index_exists(proxy, index).await? {
            proxy.ensure_copy(index, None).await?;
        } else {
            return forward_json(proxy, r).await;
        }
    }
    let mut path = format!("/{}/{rest}", encode(&format!("{index}{COPY}")));
    if let Some(query) = &r.query {
        path = format!("{path}?{query}");
    }
    let (status, body) = proxy
        .upstream
        .send(r.method.clone(), &path, content_type(r), r.body.clone())
        .await?;
    Ok((status, rewritten(&body)))
}

/// Forwards a request as it came, giving hits of a copy back their index's name and version.
pub(crate) async fn forward_json(proxy: &Proxy, r: &Request) -> Result<(u16, Value), String> {
    let (status, body) = proxy
        .upstream
        .send(
            r.method.clone(),
            &r.path_and_query(),
            content_type(r),
            r.body.clone(),
        )
        .await?;
    Ok((status, rewritten(&body)))
}

/// Everything that is neither scripted nor about contexts: index creation and deletion,
/// refreshes, searches and counts, writes by id, and the rest as it is.
pub(crate) async fn route(proxy: &Proxy, r: &Request, seg: &[&str]) -> Result<Response, String> {
    let m = &r.method;
    match seg {
        [index] if m == Method::PUT && !index.starts_with('_') => {
            let index = decode(index);
            let (status, body) = forward(proxy, r).await?;
            let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let exists = answer["error"]["type"] == "resource_already_exists_exception";
            if proxy.options.near_real_time && ((200..300).contains(&status) || exists) {
                proxy.ensure_copy(&index, Some(&r.json_body())).await?;
            }
            Ok(passed_on(status, body))
        }
        [index] if m == Method::DELETE && !index.starts_with('_') => {
            let index = decode(index);
            let (status, body) = forward(proxy, r).await?;
            let copy = format!("/{}", encode(&format!("{index}{COPY}")));
            proxy.upstream.json(Method::DELETE, &copy, None).await?;
            proxy.nrt.forget(&index);
            Ok(passed_on(status, body))
        }
        [index, "_refresh"] => {
            proxy.refresh(&decode(index)).await?;
            let (status, body) = forward(proxy, r).await?;
            Ok(passed_on(status, body))
        }
        ["_refresh"] => {
            for index in proxy.nrt.pending_indices() {
                proxy.refresh(&index).await?;
            }
            let (status, body) = forward(proxy, r).await?;
            Ok(passed_on(status, body))
        }
        [index, "_mapping"] if m == Method::PUT && proxy.nrt.has_copy(&decode(index)) => {
            // The copy takes the new fields too, or a strict one refuses documents that carry
            // them at the next refresh.
            let index = decode(index);
            let (status, body) = forward(proxy, r).await?;
            if (200..300).contains(&status) {
                let copy = format!("/{}/_mapping", encode(&format!("{index}{COPY}")));
                let (copy_status, answer) = proxy
                    .upstream
                    .json(Method::PUT, &copy, Some(&r.json_body()))
                    .await?;
                if !(200..300).contains(&copy_status) {
                    return Err(format!(
                        "extending the mapping of the searchable copy of {index}: HTTP \
                         {copy_status} {answer}"
                    ));
                }
            }
            Ok(passed_on(status, body))
        }
        [index, "_delete_by_query" | "_update_by_query"]
            if m == Method::POST && proxy.options.near_real_time =>
        {
            // The server behind writes whatever the query finds: the proxy notes those ids, as
            // it notes a write by id, so that the next refresh shows what became of them.
            let index = decode(index);
            let ids = matching_ids(proxy, &index, &r.json_body()["query"]).await?;
            let writing = proxy
                .nrt
                .begin(ids.iter().map(|id| (index.clone(), id.clone())));
            let (status, body) = forward(proxy, r).await?;
            for id in &ids {
                proxy.nrt.written(&index, id);
            }
            writing.done();
            if (200..300).contains(&status) {
                refresh_if_asked(proxy, r, &index).await?;
            }
            Ok(passed_on(status, body))
        }
        [index, verb @ ("_search" | "_count")] => {
            let (status, body) = search(proxy, r, &decode(index), verb).await?;
            Ok(super::answer(code(status), body))
        }
        [index, "_doc" | "_create", id] if m != Method::GET && m != Method::HEAD => {
            let (index, id) = (decode(index), decode(id));
            let writing = proxy.nrt.begin([(index.clone(), id.clone())]);
            let (status, body) = forward(proxy, r).await?;
            if (200..300).contains(&status) {
                proxy.nrt.written(&index, &id);
            }
            writing.done();
            if (200..300).contains(&status) {
                refresh_if_asked(proxy, r, &index).await?;
            }
            Ok(passed_on(status, body))
        }
        [index, "_doc"] if m == Method::POST => {
            let index = decode(index);
            let (status, body) = forward(proxy, r).await?;
            let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if let (true, Some(id)) = ((200..300).contains(&status), answer["_id"].as_str()) {
                proxy.nrt.written(&index, id);
                refresh_if_asked(proxy, r, &index).await?;
            }
            Ok(passed_on(status, body))
        }
        _ => {
            let (status, body) = forward(proxy, r).await?;
            Ok(passed_on(status, body))
        }
    }
}

/// The most documents a by-query request the server behind carries out may touch here: the
/// proxy reads their ids in one search first.
const MOST_BY_QUERY: usize = 10_000;

/// The ids of the documents of `index` that `query` finds now (the index itself, not its
/// searchable copy: what the server behind will write).
async fn matching_ids(proxy: &Proxy, index: &str, query: &Value) -> Result<Vec<String>, String> {
    let query = if query.is_null() {
        json!({"match_all": {}})
    } else {
        query.clone()
    };
    let body = json!({"query": query, "size": MOST_BY_QUERY, "_source": false,
                      "track_total_hits": true});
    let path = format!("/{}/_search", encode(index));
    let (status, answer) = proxy
        .upstream
        .json(Method::POST, &path, Some(&body))
        .await?;
    if status == 404 {
        return Ok(Vec::new());
    }
    if !(200..300).contains(&status) {
        return Err(format!(
            "reading what a by-query request of {index} finds: HTTP {status} {answer}"
        ));
    }
    let total = answer["hits"]["total"]["value"].as_u64().unwrap_or(0);
    if total > MOST_BY_QUERY as u64 {
        return Err(format!(
            "a by-query request of {index} finds {total} documents: the proxy notes at most {MOST_BY_QUERY}"
        ));
    }
    let hits = answer["hits"]["hits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(hits
        .iter()
        .filter_map(|hit| hit["_id"].as_str().map(str::to_owned))
        .collect())
}

async fn refresh_if_asked(proxy: &Proxy, r: &Request, index: &str) -> Result<(), String> {
    if matches!(
        r.param("refresh").as_deref(),
        Some("" | "true" | "wait_for")
    ) {
        proxy.refresh(index).await?;
    }
    Ok(())
}

async fn index_exists(proxy: &Proxy, index: &str) -> Result<bool, String> {
    let (status, _) = proxy
        .upstream
        .send(
            Method::HEAD,
            &format!("/{}", encode(index)),
            None,
            Bytes::new(),
        )
        .await?;
    Ok(status == 200)
}

pub(crate) async fn forward(proxy: &Proxy, r: &Request) -> Result<(u16, Bytes), String> {
    proxy
        .upstream
        .send(
            r.method.clone(),
            &r.path_and_query(),
            content_type(r),
            r.body.clone(),
        )
        .await
}

fn content_type(r: &Request) -> Option<&str> {
    r.headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

fn code(status: u16) -> axum::http::StatusCode {
    axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_GATEWAY)
}

/// Gives an answer of a copy its index's name back, and each hit the version it had when it
/// was refreshed.
fn rewritten(body: &[u8]) -> Value {
    let text = String::from_utf8_lossy(body)
        .replace(&format!("{COPY}\""), "\"")
        .replace(&format!("{COPY}]"), "]");
    let mut value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if let Some(hits) = value["hits"]["hits"].as_array_mut() {
        for hit in hits {
            let Some(source) = hit.get_mut("_source").and_then(Value::as_object_mut) else {
                continue;
            };
            let (seq_no, term) = (source.remove(SEQ_NO), source.remove(TERM));
            if hit.get("_seq_no").is_some() {
                if let (Some(seq_no), Some(term)) = (seq_no, term) {
                    hit["_seq_no"] = seq_no;
                    hit["_primary_term"] = term;
                }
            }
        }
    }
    value
}
