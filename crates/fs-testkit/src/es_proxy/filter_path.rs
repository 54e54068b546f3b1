//! `filter_path` on the answers the proxy makes itself (a bulk request's): Elasticsearch
//! leaves out of an answer every field no filter names, and fsrename asks it to (a page of
//! copies' answer is mostly fields nobody reads). The proxy answers a bulk request from its own
//! bookkeeping, which needs the whole answer of the server behind (the ids it wrote, for
//! near-real-time search), so it filters at the end, as the server would have.
//!
//! The filters supported are those of include paths: comma-separated, dotted, a segment `*`
//! matching any field (or a segment with `*` in it, matching as a glob); arrays are crossed
//! as if each element stood where the array is. A field kept is kept whole.

use axum::http::header::CONTENT_LENGTH;
use axum::response::Response;
use serde_json::{Map, Value};

/// Filters a JSON answer by `filter`, as Elasticsearch does: a successful one only (an error
/// is answered whole, as Elasticsearch builds errors unfiltered); an answer that is not JSON
/// passes as it is.
pub(crate) async fn answer(response: Response, filter: &str) -> Response {
    if !response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    let filtered = apply(value, filter);
    Response::from_parts(parts, axum::body::Body::from(filtered.to_string()))
}

/// `value` with only what `filter` names; `{}` where it names nothing there.
pub(crate) fn apply(value: Value, filter: &str) -> Value {
    let paths: Vec<Vec<&str>> = filter
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.split('.').collect())
        .collect();
    let paths: Vec<&[&str]> = paths.iter().map(Vec::as_slice).collect();
    keep(value, &paths).unwrap_or_else(|| Value::Object(Map::new()))
}

/// What of `value` the rest of the paths `paths` name, if anything.
fn keep(value: Value, paths: &[&[&str]]) -> Option<Value> {
    if paths.iter().any(|p| p.is_empty()) {
        return Some(value);
    }
    match value {
        Value::Object(fields) => {
            let mut kept = Map::new();
            for (name, field) in fields {
                let rest: Vec<&[&str]> = paths
                    .iter()
                    .filter(|p| matches(p[0], &name))
                    .map(|p| &p[1..])
                    .collect();
                if rest.is_empty() {
                    continue;
                }
                if let Some(field) = keep(field, &rest) {
                    kept.insert(name, field);
                }
            }
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(elements) => {
            let kept: Vec<Value> = elements
                .into_iter()
                .filter_map(|e| keep(e, paths))
                .collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        // A path that goes on below a plain value names nothing.
        _ => None,
    }
}

/// Whether the filter segment `pattern` (where `*` is any run of characters) matches `name`.
fn matches(pattern: &str, name: &str) -> bool {
    let Some((first, rest)) = pattern.split_once('*') else {
        return pattern == name;
    };
    let Some(mut left) = name.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = rest.split('*').collect();
    let last = parts.pop().unwrap_or("");
    for part in parts {
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    left.len() >= last.len() && left.ends_with(last)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::apply;

    #[test]
    fn keeps_what_the_filters_name_of_each_bulk_item() {
        let answer = json!({"took": 3, "errors": true, "items": [
            {"create": {"_index": "fs", "_id": "a", "_version": 1, "result": "created",
                "_shards": {"total": 1, "successful": 1, "failed": 0},
                "_seq_no": 4, "_primary_term": 1, "status": 201}},
            {"index": {"_index": "fs", "_id": "b", "status": 409,
                "error": {"type": "version_conflict_engine_exception", "reason": "r"}}}
        ]});
        let filtered = apply(
            answer,
            "errors,items.*.status,items.*._seq_no,items.*._primary_term,items.*.error",
        );
        assert_eq!(
            filtered,
            json!({"errors": true, "items": [
                {"create": {"_seq_no": 4, "_primary_term": 1, "status": 201}},
                {"index": {"status": 409,
                    "error": {"type": "version_conflict_engine_exception", "reason": "r"}}}
            ]})
        );
    }

    #[test]
    fn globs_match_within_a_name_and_nothing_named_is_an_empty_object() {
        assert_eq!(
            apply(
                json!({"nodes": {"x1": {"timestamp": 5, "name": "n"}}}),
                "nodes.*.time*"
            ),
            json!({"nodes": {"x1": {"timestamp": 5}}})
        );
        assert_eq!(apply(json!({"a": 1}), "b"), json!({}));
        assert_eq!(apply(json!({"a": 1}), "a.b"), json!({}));
        assert_eq!(
            apply(json!({"ab": {"c": 1}}), "a*b"),
            json!({"ab": {"c": 1}})
        );
        assert_eq!(apply(json!({"ab": 1}), "a*bb"), json!({}));
    }
}
