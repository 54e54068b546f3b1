//! Reading the server's answers: errors, documents, bulk items.

use serde_json::Value;

use crate::error::StoreError;
use crate::types::{StoredDoc, Version};

/// Returns the error an unsuccessful answer stands for.
///
/// Conflicts carry the current version when the server's reason gives it ("current document
/// has seqNo [5] and primary term [1]") and say whether the document exists ("but no document
/// was found"); the reason is read for those details only, never to decide what kind of error
/// it is: that comes from the status and the error type.
pub(crate) fn error_of(
    context: &str,
    index: &str,
    id: &str,
    status: u16,
    body: &Value,
) -> StoreError {
    let error = if body["error"].is_object() {
        &body["error"]
    } else {
        body
    };
    let kind = error["type"].as_str().unwrap_or("");
    let mut reason = error["reason"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| body["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.to_string());
    // "all shards failed" says nothing by itself: the first root cause says why.
    if let Some(root) = error["root_cause"][0]["reason"].as_str() {
        if root != reason {
            reason = format!("{reason}: {root}");
        }
    }
    if let Some(explained) = refused_by_script(error) {
        // The book's `assert false` (painless: `Debug.explain`): the document's state refused
        // the update. A 409 is something else: a race between two updates of one document.
        return StoreError::Refused {
            index: index.to_owned(),
            id: id.to_owned(),
            reason: explained,
        };
    }
    match (status, kind) {
        (409, _) | (_, "version_conflict_engine_exception") => StoreError::Conflict {
            index: index.to_owned(),
            id: id.to_owned(),
            exists: !reason.contains("no document was found")
                && !reason.contains("document missing"),
            current: current_version(&reason),
        },
        (_, "index_not_found_exception") => StoreError::IndexNotFound {
            index: index.to_owned(),
        },
        (404, _) => StoreError::NotFound {
            index: index.to_owned(),
            id: id.to_owned(),
        },
        (429 | 502 | 503 | 504, _) | (_, "es_rejected_execution_exception") => {
            StoreError::Transient {
                context: context.to_owned(),
                message: format!("HTTP {status}: {reason}"),
            }
        }
        (400..=499, _) => StoreError::Rejected {
            context: context.to_owned(),
            status: Some(status),
            message: if kind.is_empty() {
                reason
            } else {
                format!("{kind}: {reason}")
            },
        },
        _ => StoreError::Backend {
            context: context.to_owned(),
            message: format!("HTTP {status}: {kind} {reason}"),
        },
    }
}

/// Returns what the script said if the error, or one of its causes, is a script's deliberate
/// refusal.
fn refused_by_script(error: &Value) -> Option<String> {
    let mut cause = Some(error);
    let mut said = None;
    while let Some(e) = cause {
        if e["type"] == "script_exception" {
            // Elasticsearch puts the explained value in the script exception's `to_string`;
            // the explain error's own reason is null.
            said = e["to_string"].as_str().map(str::to_owned);
        }
        if e["type"] == "painless_explain_error" {
            return Some(
                said.or_else(|| e["reason"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "refused".to_owned()),
            );
        }
        cause = e.get("caused_by");
    }
    None
}

/// Finds "current document has seqNo [S] and primary term [T]" in a conflict reason.
fn current_version(reason: &str) -> Option<Version> {
    let rest = reason.split("current document has seqNo [").nth(1)?;
    let (seq_no, rest) = rest.split_once(']')?;
    let rest = rest.split("primary term [").nth(1)?;
    let (term, _) = rest.split_once(']')?;
    Some(Version {
        seq_no: seq_no.parse().ok()?,
        primary_term: term.parse().ok()?,
    })
}

/// Reads `_seq_no` and `_primary_term` from a hit, a get or a write answer.
pub(crate) fn version_of(value: &Value) -> Option<Version> {
    Some(Version {
        seq_no: value["_seq_no"].as_i64()?,
        primary_term: value["_primary_term"].as_i64()?,
    })
}

/// Reads a found document (a get answer, an mget entry or a search hit).
pub(crate) fn doc_of(context: &str, value: &Value) -> Result<StoredDoc, StoreError> {
    let unreadable = |what: &str| StoreError::Backend {
        context: context.to_owned(),
        message: format!("the answer has no {what}: {}", shorten(value)),
    };
    let id = value["_id"].as_str().ok_or_else(|| unreadable("_id"))?;
    let version = version_of(value).ok_or_else(|| unreadable("_seq_no/_primary_term"))?;
    let source = value
        .get("_source")
        .filter(|s| s.is_object())
        .ok_or_else(|| unreadable("_source"))?;
    Ok(StoredDoc {
        id: id.to_owned(),
        version,
        source: source.clone(),
    })
}

/// Reads a search hit as [`doc_of`] does, moving its `_source` out rather than copying it.
pub(crate) fn doc_from(context: &str, mut value: Value) -> Result<StoredDoc, StoreError> {
    let source = match value.get_mut("_source") {
        Some(slot) if slot.is_object() => {
            std::mem::replace(slot, Value::Object(serde_json::Map::new()))
        }
        _ => return doc_of(context, &value),
    };
    // The rest is checked with an empty `_source` in its place; an answer that fails is read
    // again whole, for the error to show it.
    match doc_of(context, &value) {
        Ok(doc) => Ok(StoredDoc { source, ..doc }),
        Err(_) => {
            value["_source"] = source;
            doc_of(context, &value)
        }
    }
}

/// Returns a JSON value as text, cut to a readable length.
pub(crate) fn shorten(value: &Value) -> String {
    let mut text = value.to_string();
    if text.len() > 300 {
        let mut cut = 300;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conflict(reason: &str) -> StoreError {
        let body = json!({"error": {"type": "version_conflict_engine_exception", "reason": reason}, "status": 409});
        error_of("test", "i", "d", 409, &body)
    }

    #[test]
    fn a_hit_read_by_moving_its_source_reads_as_one_read_by_copying() {
        let hit = json!({"_id": "a", "_seq_no": 3, "_primary_term": 1, "_source": {"path": "/a"}});
        assert_eq!(
            doc_from("t", hit.clone()).expect("a document"),
            doc_of("t", &hit).expect("a document")
        );
        for bad in [
            json!({"_id": "a", "_seq_no": 3, "_primary_term": 1}),
            json!({"_id": "a", "_seq_no": 3, "_primary_term": 1, "_source": 7}),
            json!({"_seq_no": 3, "_primary_term": 1, "_source": {"path": "/a"}}),
        ] {
            assert_eq!(
                doc_from("t", bad.clone()).map_err(|e| e.to_string()),
                doc_of("t", &bad).map_err(|e| e.to_string()),
                "{bad}"
            );
        }
    }

    #[test]
    fn conflicts_say_what_they_know() {
        let stale = conflict("[d]: version conflict, required seqNo [0], primary term [1]. current document has seqNo [7] and primary term [2]");
        assert_eq!(
            stale,
            StoreError::Conflict {
                index: "i".into(),
                id: "d".into(),
                exists: true,
                current: Some(Version {
                    seq_no: 7,
                    primary_term: 2
                })
            }
        );
        let missing = conflict("[d]: version conflict, required seqNo [3], primary term [1]. but no document was found");
        assert!(missing.is_conflict_on_missing());
        let created =
            conflict("[d]: version conflict, document already exists (current version [1])");
        assert!(matches!(
            created,
            StoreError::Conflict {
                exists: true,
                current: None,
                ..
            }
        ));
    }

    #[test]
    fn a_scripts_refusal_is_not_a_race() {
        // The answer the source texts show for a refused document lock.
        let body = json!({"error": {"root_cause": [{"type": "remote_transport_exception"}],
            "type": "illegal_argument_exception", "reason": "failed to execute script",
            "caused_by": {"type": "script_exception", "reason": "runtime error",
                "caused_by": {"type": "painless_explain_error", "reason": null}}}, "status": 400});
        let refused = error_of("c", "i", "d", 400, &body);
        assert!(
            refused.is_refusal() && !refused.is_conflict(),
            "{refused:?}"
        );
        let race = json!({"error": {"type": "version_conflict_engine_exception",
            "reason": "[d]: version conflict, required seqNo [4], primary term [1]. current document has seqNo [5] and primary term [1]"},
            "status": 409});
        let race = error_of("c", "i", "d", 409, &race);
        assert!(race.is_conflict() && !race.is_refusal(), "{race:?}");
    }

    #[test]
    fn statuses_map_to_kinds() {
        let missing_index = json!({"error": {"type": "index_not_found_exception", "reason": "no such index [x]"}, "status": 404});
        assert_eq!(
            error_of("c", "x", "", 404, &missing_index),
            StoreError::IndexNotFound { index: "x".into() }
        );
        for status in [429, 502, 503, 504] {
            assert!(
                error_of("c", "i", "d", status, &json!({})).is_retryable(),
                "{status}"
            );
        }
        let bad = error_of(
            "c",
            "i",
            "d",
            400,
            &json!({"error": {"type": "parsing_exception", "reason": "bad"}}),
        );
        assert!(matches!(
            bad,
            StoreError::Rejected {
                status: Some(400),
                ..
            }
        ));
        let plain = error_of(
            "c",
            "i",
            "d",
            400,
            &json!({"error": "no handler found for uri"}),
        );
        assert!(plain.to_string().contains("no handler found"), "{plain}");
    }
}
