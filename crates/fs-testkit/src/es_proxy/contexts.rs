//! Scroll contexts and points in time: counted, expired with their keep-alive, capped.
//!
//! Elasticsearch keeps a search context open for every scroll and point in time until it is
//! cleared or its keep-alive runs out, and refuses to open more than
//! `search.max_open_scroll_context` (500) scrolls: every search that would open one then fails
//! with HTTP 500 "all shards failed". osmem has no such limit, so a client that never closes
//! what it opens passes there; here it fails, and tests can ask what is still open.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::{answer, decode, nrt, Counters, Proxy, Request};

/// What kind of context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextKind {
    /// A scroll (`?scroll=`).
    Scroll,
    /// A point in time.
    PointInTime,
}

/// A context open now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenContext {
    /// Scroll or point in time.
    pub kind: ContextKind,
    /// The index it was opened on.
    pub index: String,
    /// How long it has been open.
    pub age: Duration,
}

struct Context {
    kind: ContextKind,
    index: String,
    opened: Instant,
    expires: Instant,
}

/// The open contexts, by id.
#[derive(Default)]
pub(crate) struct Contexts {
    open: Mutex<HashMap<String, Context>>,
}

impl Contexts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Context>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the contexts whose keep-alive has run out; returns how many.
    pub(crate) fn expire(&self) -> usize {
        let now = Instant::now();
        let mut open = self.lock();
        let before = open.len();
        open.retain(|_, c| c.expires > now);
        before - open.len()
    }

    pub(crate) fn open(&self) -> Vec<OpenContext> {
        self.lock()
            .values()
            .map(|c| OpenContext {
                kind: c.kind,
                index: c.index.clone(),
                age: c.opened.elapsed(),
            })
            .collect()
    }

    fn count(&self) -> usize {
        self.lock().len()
    }

    fn add(&self, id: &str, kind: ContextKind, index: &str, keep_alive: Duration) {
        let now = Instant::now();
        self.lock().insert(
            id.to_owned(),
            Context {
                kind,
                index: index.to_owned(),
                opened: now,
                expires: now + keep_alive,
            },
        );
    }

    /// Moves a context to the id the server answered with and extends its keep-alive.
    fn touch(&self, old: &str, new: &str, keep_alive: Option<Duration>) -> bool {
        let mut open = self.lock();
        let Some(mut context) = open.remove(old) else {
            return false;
        };
        if let Some(keep_alive) = keep_alive {
            context.expires = Instant::now() + keep_alive;
        }
        open.insert(new.to_owned(), context);
        true
    }

    fn knows(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    fn remove(&self, ids: &[String]) -> usize {
        let mut open = self.lock();
        ids.iter()
            .filter(|id| open.remove(id.as_str()).is_some())
            .count()
    }

    fn clear(&self, kind: ContextKind) -> usize {
        let mut open = self.lock();
        let before = open.len();
        open.retain(|_, c| c.kind != kind);
        before - open.len()
    }
}

/// Handles the requests that open, use or close a context; `None` for any other.
pub(crate) async fn route(
    proxy: &Proxy,
    r: &Request,
    seg: &[&str],
) -> Result<Option<Response>, String> {
    let m = &r.method;
    let response = match seg {
        [index, "_search"] if r.param("scroll").is_some() => {
            let index = decode(index);
            if let Some(refused) = refuse_if_full(proxy, &index) {
                return Ok(Some(refused));
            }
            let keep_alive = r.param("scroll").as_deref().and_then(parse_keep_alive);
            let (status, body) = nrt::search(proxy, r, &index, "_search").await?;
            if let (200, Some(id)) = (status, body["_scroll_id"].as_str()) {
                opened(proxy, id, ContextKind::Scroll, &index, keep_alive);
            }
            answer(code(status), body)
        }
        ["_search", "scroll", ..] if m == Method::DELETE => {
            let ids = ids_to_close(r, seg.get(2).copied(), "scroll_id");
            match ids {
                None => proxy.contexts.clear(ContextKind::Scroll),
                Some(ids) => proxy.contexts.remove(&ids),
            };
            let (status, body) = nrt::forward_json(proxy, r).await?;
            answer(code(status), body)
        }
        ["_search", "scroll", ..] => {
            let body = r.json_body();
            let id = seg
                .get(2)
                .map(|s| decode(s))
                .or_else(|| body["scroll_id"].as_str().map(str::to_owned))
                .or_else(|| r.param("scroll_id"))
                .unwrap_or_default();
            if !proxy.contexts.knows(&id) || lost(proxy, &id) {
                return Ok(Some(missing_context(&id)));
            }
            let keep_alive = body["scroll"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| r.param("scroll"))
                .as_deref()
                .and_then(parse_keep_alive);
            let (status, answer_body) = nrt::forward_json(proxy, r).await?;
            let next = answer_body["_scroll_id"].as_str().unwrap_or(&id).to_owned();
            proxy.contexts.touch(&id, &next, keep_alive);
            answer(code(status), answer_body)
        }
        [index, "_search", "point_in_time"] | [index, "_pit"] if m == Method::POST => {
            let index = decode(index);
            if let Some(refused) = refuse_if_full(proxy, &index) {
                return Ok(Some(refused));
            }
            let keep_alive = r.param("keep_alive").as_deref().and_then(parse_keep_alive);
            let rest = &seg[1..].join("/");
            let (status, body) = nrt::search(proxy, r, &index, rest).await?;
            let id = body["pit_id"].as_str().or(body["id"].as_str());
            if let (200, Some(id)) = (status, id) {
                opened(proxy, id, ContextKind::PointInTime, &index, keep_alive);
            }
            answer(code(status), body)
        }
        ["_search", "point_in_time", ..] | ["_pit"] if m == Method::DELETE => {
            let field = if seg[0] == "_pit" { "id" } else { "pit_id" };
            match ids_to_close(r, seg.get(2).copied(), field) {
                None => proxy.contexts.clear(ContextKind::PointInTime),
                Some(ids) => proxy.contexts.remove(&ids),
            };
            let (status, body) = nrt::forward_json(proxy, r).await?;
            answer(code(status), body)
        }
        ["_search"] if r.json_body()["pit"].is_object() => {
            let body = r.json_body();
            let id = body["pit"]["id"].as_str().unwrap_or_default().to_owned();
            if !proxy.contexts.knows(&id) || lost(proxy, &id) {
                return Ok(Some(missing_context(&id)));
            }
            let keep_alive = body["pit"]["keep_alive"]
                .as_str()
                .and_then(parse_keep_alive);
            let (status, answer_body) = nrt::forward_json(proxy, r).await?;
            let next = answer_body["pit_id"].as_str().unwrap_or(&id).to_owned();
            proxy.contexts.touch(&id, &next, keep_alive);
            answer(code(status), answer_body)
        }
        _ => return Ok(None),
    };
    Ok(Some(response))
}

/// `GET _nodes/stats`: the proxy's counts, where Elasticsearch keeps them.
pub(crate) fn node_stats(proxy: &Proxy) -> Response {
    let open = proxy.contexts.open();
    let scrolls = open
        .iter()
        .filter(|c| c.kind == ContextKind::Scroll)
        .count();
    answer(
        StatusCode::OK,
        json!({"_nodes": {"total": 1, "successful": 1, "failed": 0}, "cluster_name": "es-proxy",
               "nodes": {"es-proxy": {"name": "es-proxy", "timestamp": proxy.server_time_ms(),
                   "indices": {"search": {
                   "scroll_current": scrolls,
                   "point_in_time_current": open.len() - scrolls,
                   "scroll_total": proxy.stats().contexts_opened}}}}}),
    )
}

fn opened(proxy: &Proxy, id: &str, kind: ContextKind, index: &str, keep_alive: Option<Duration>) {
    // Elasticsearch's default keep-alive is 5 minutes; every client of ours sends one.
    let keep_alive = keep_alive.unwrap_or(Duration::from_secs(300));
    proxy.contexts.add(id, kind, index, keep_alive);
    Counters::add(&proxy.counters.contexts_opened, 1);
}

fn refuse_if_full(proxy: &Proxy, index: &str) -> Option<Response> {
    let limit = proxy.options.max_open_contexts;
    if proxy.contexts.count() < limit {
        return None;
    }
    Counters::add(&proxy.counters.contexts_refused, 1);
    let reason = format!(
        "Trying to create too many scroll contexts. Must be less than or equal to: [{limit}]. \
         This limit can be set by changing the [search.max_open_scroll_context] setting."
    );
    Some(answer(
        StatusCode::INTERNAL_SERVER_ERROR,
        json!({"error": {"root_cause": [{"type": "exception", "reason": reason}],
            "type": "search_phase_execution_exception", "reason": "all shards failed",
            "phase": "query", "grouped": true,
            "failed_shards": [{"shard": 0, "index": index, "node": "es-proxy",
                "reason": {"type": "exception", "reason": reason}}]},
            "status": 500}),
    ))
}

/// Whether the fault schedule makes context `id` die now, with the node that held it; if it
/// does, it is forgotten (the server behind keeps it until its keep-alive runs out, as the
/// proxy's count does not).
fn lost(proxy: &Proxy, id: &str) -> bool {
    if !proxy.faults.lose_context() {
        return false;
    }
    proxy.contexts.remove(&[id.to_owned()]);
    Counters::add(&proxy.counters.contexts_lost, 1);
    true
}

fn missing_context(id: &str) -> Response {
    let reason = format!("No search context found for id [{id}]");
    answer(
        StatusCode::NOT_FOUND,
        json!({"error": {"root_cause": [{"type": "search_context_missing_exception", "reason": reason}],
            "type": "search_phase_execution_exception", "reason": "all shards failed",
            "phase": "query", "grouped": true,
            "caused_by": {"type": "search_context_missing_exception", "reason": reason}},
            "status": 404}),
    )
}

/// The ids a close request names; `None` for "all" (`_all`).
fn ids_to_close(r: &Request, in_path: Option<&str>, field: &str) -> Option<Vec<String>> {
    if let Some(path_ids) = in_path {
        let ids: Vec<String> = decode(path_ids).split(',').map(str::to_owned).collect();
        return (ids != ["_all"]).then_some(ids);
    }
    let body = r.json_body();
    let ids = match &body[field] {
        Value::String(id) => vec![id.clone()],
        Value::Array(ids) => ids
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => r.param(field).map(|v| vec![v]).unwrap_or_default(),
    };
    (ids != ["_all"]).then_some(ids)
}

fn code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY)
}

/// Parses Elasticsearch's time units: `500ms`, `30s`, `2m`, `1h`, `1d`.
pub(crate) fn parse_keep_alive(text: &str) -> Option<Duration> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        "d" => Duration::from_secs(n * 86_400),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alives_parse() {
        assert_eq!(parse_keep_alive("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_keep_alive("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_keep_alive("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_keep_alive("x"), None);
    }
}
