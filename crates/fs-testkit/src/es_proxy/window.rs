//! The result window: Elasticsearch refuses a search whose `from + size` is above
//! `index.max_result_window` (10 000 by default), with 400 "Result window is too large";
//! osmem answers it. A real server taught this: `find --limit 10000` asks one hit more than
//! its limit, to tell whether there are more, and failed there.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::{answer, Request};

/// `index.max_result_window`'s default.
pub(crate) const MAX_RESULT_WINDOW: u64 = 10_000;

/// The refusal of a plain search (not a scroll: a scroll's pages are not a window) asking
/// past the window, as Elasticsearch 7.10 answers it; `None` for any other request.
pub(crate) fn refuse(r: &Request, seg: &[&str]) -> Option<Response> {
    let searching = matches!(seg, ["_search"] | [_, "_search"]);
    if !searching || r.param("scroll").is_some() {
        return None;
    }
    let body = r.json_body();
    let number = |name: &str, default: u64| {
        r.param(name)
            .and_then(|v| v.parse().ok())
            .or_else(|| body.get(name).and_then(Value::as_u64))
            .unwrap_or(default)
    };
    let asked = number("from", 0) + number("size", 10);
    (asked > MAX_RESULT_WINDOW).then(|| answer(StatusCode::BAD_REQUEST, too_large(asked)))
}

fn too_large(asked: u64) -> Value {
    let reason = format!(
        "Result window is too large, from + size must be less than or equal to: \
         [{MAX_RESULT_WINDOW}] but was [{asked}]. See the scroll api for a more efficient way \
         to request large data sets. This limit can be set by changing the \
         [index.max_result_window] index level setting."
    );
    json!({
        "error": {
            "root_cause": [{ "type": "illegal_argument_exception", "reason": reason }],
            "type": "search_phase_execution_exception",
            "reason": "all shards failed",
            "phase": "query",
            "grouped": true,
            "caused_by": { "type": "illegal_argument_exception", "reason": reason }
        },
        "status": 400
    })
}
