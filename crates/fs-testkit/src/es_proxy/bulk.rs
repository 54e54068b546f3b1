//! `_bulk`: update items run here (scripted; a run of them together, as a shard runs them:
//! `update_run`), every other item goes to the server behind, in the order sent; every write that lands is noted for near-real-time search.

use std::collections::BTreeSet;
use std::time::Instant;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::update_run::{self, UpdateItem};
use super::{answer, Counters, Proxy, Request};

/// One action of a bulk request, with its source line if it has one.
struct Item {
    action: String,
    meta: Value,
    body: Option<Value>,
}

pub(crate) async fn bulk(
    proxy: &Proxy,
    index: Option<&str>,
    r: &Request,
) -> Result<Response, String> {
    let started = Instant::now();
    let items = match parse(&r.body) {
        Ok(items) => items,
        Err(reason) => {
            return Ok(answer(
                StatusCode::BAD_REQUEST,
                json!({"error": {"type": "illegal_argument_exception", "reason": reason}, "status": 400}),
            ))
        }
    };
    let index_of = |item: &Item| -> Option<String> {
        item.meta["_index"]
            .as_str()
            .map(str::to_owned)
            .or(index.map(str::to_owned))
    };
    // Items the fault schedule rejects (a busy node's full write queue) are answered 429 and
    // not carried out; the others go on as usual.
    let rejected: Vec<bool> = items.iter().map(|_| proxy.faults.reject_item()).collect();
    let kept: Vec<&Item> = items
        .iter()
        .zip(&rejected)
        .filter(|(_, rejected)| !**rejected)
        .map(|(item, _)| item)
        .collect();
    // Noted as under way first: if this node is killed in the middle, what the server behind
    // applied is still made searchable by the next refresh.
    let writing = proxy.nrt.begin(kept.iter().filter_map(|item| {
        let id = item.meta["_id"].as_str()?;
        Some((index_of(item)?, id.to_owned()))
    }));
    let mut answers: Vec<Value> = Vec::with_capacity(items.len());
    let mut touched = BTreeSet::new();
    let mut run: Vec<&Item> = Vec::new();
    let mut updates: Vec<UpdateItem> = Vec::new();
    let require_alias = r.param("require_alias").as_deref() == Some("true");
    for &item in &kept {
        if item.action != "update" {
            run_updates(proxy, &mut updates, &mut answers).await?;
            run.push(item);
            continue;
        }
        flush(proxy, (index, require_alias), &mut run, &mut answers).await?;
        let Some(item_index) = index_of(item) else {
            return Err("an update item without an index".into());
        };
        let retry_on_conflict = item.meta["retry_on_conflict"]
            .as_u64()
            .or(item.meta["_retry_on_conflict"].as_u64())
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        updates.push(UpdateItem {
            index: item_index,
            id: item.meta["_id"].as_str().unwrap_or_default().to_owned(),
            body: item.body.clone().unwrap_or(Value::Null),
            retry_on_conflict,
        });
    }
    run_updates(proxy, &mut updates, &mut answers).await?;
    flush(proxy, (index, require_alias), &mut run, &mut answers).await?;
    let mut errors = false;
    for (item, answered) in kept.iter().zip(&answers) {
        let result = answered
            .as_object()
            .and_then(|o| o.values().next())
            .cloned()
            .unwrap_or(Value::Null);
        let status = result["status"].as_u64().unwrap_or(500);
        errors |= !(200..300).contains(&status);
        let written = (200..300).contains(&status) && result["result"] != "noop";
        // Noted under the index the server wrote (an alias's is behind it).
        let written_to = result["_index"].as_str().map(str::to_owned);
        if let (true, Some(item_index), Some(id)) = (
            written,
            written_to.or_else(|| index_of(item)),
            result["_id"].as_str(),
        ) {
            proxy.nrt.written(&item_index, id);
            touched.insert(item_index);
        }
    }
    writing.done();
    if matches!(
        r.param("refresh").as_deref(),
        Some("" | "true" | "wait_for")
    ) {
        for index in &touched {
            proxy.refresh(index).await?;
        }
    }
    let mut carried_out = answers.into_iter();
    let mut all = Vec::with_capacity(items.len());
    for (item, rejected) in items.iter().zip(rejected) {
        if rejected {
            Counters::add(&proxy.counters.items_too_many, 1);
            errors = true;
            all.push(json!({ item.action.as_str(): {
                "_index": index_of(item),
                "_id": item.meta["_id"],
                "status": 429,
                "error": {
                    "type": "es_rejected_execution_exception",
                    "reason": "rejected execution of the item (the proxy's fault schedule)"
                }
            }}));
        } else {
            all.push(carried_out.next().unwrap_or(Value::Null));
        }
    }
    let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(answer(
        StatusCode::OK,
        json!({"took": took, "errors": errors, "items": all}),
    ))
}

/// Runs the pending run of update items together, as a shard runs them.
async fn run_updates(
    proxy: &Proxy,
    updates: &mut Vec<UpdateItem>,
    answers: &mut Vec<Value>,
) -> Result<(), String> {
    if updates.is_empty() {
        return Ok(());
    }
    let outcomes = update_run::run_updates(proxy, updates).await?;
    answers.extend(outcomes.into_iter().map(|o| json!({"update": o.item})));
    updates.clear();
    Ok(())
}

/// Sends the pending run of non-update items to the server behind, in one request.
async fn flush(
    proxy: &Proxy,
    (index, require_alias): (Option<&str>, bool),
    run: &mut Vec<&Item>,
    answers: &mut Vec<Value>,
) -> Result<(), String> {
    if run.is_empty() {
        return Ok(());
    }
    let mut lines = Vec::with_capacity(run.len() * 2);
    for item in run.iter() {
        lines.push(json!({ item.action.as_str(): item.meta }));
        if let Some(body) = &item.body {
            lines.push(body.clone());
        }
    }
    let (status, answer) = proxy.upstream.bulk(index, &lines, require_alias).await?;
    let items = answer["items"].as_array().filter(|a| a.len() == run.len());
    match items {
        Some(items) if (200..300).contains(&status) => answers.extend(items.iter().cloned()),
        _ => {
            // The whole request failed: every item of the run carries that failure.
            for item in run.iter() {
                let error = answer
                    .get("error")
                    .cloned()
                    .unwrap_or_else(|| answer.clone());
                answers.push(json!({ item.action.as_str(): {"_id": item.meta["_id"], "status": status, "error": error} }));
            }
        }
    }
    run.clear();
    Ok(())
}

fn parse(body: &[u8]) -> Result<Vec<Item>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("the bulk body is not UTF-8: {e}"))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let mut items = Vec::new();
    while let Some(line) = lines.next() {
        let action: Value = serde_json::from_str(line)
            .map_err(|e| format!("malformed action line `{line}`: {e}"))?;
        let Some((name, meta)) = action.as_object().and_then(|o| o.iter().next()) else {
            return Err(format!("malformed action line `{line}`"));
        };
        let body = if name == "delete" {
            None
        } else {
            let source = lines
                .next()
                .ok_or_else(|| format!("`{name}` without a source line"))?;
            Some(serde_json::from_str(source).map_err(|e| format!("malformed source line: {e}"))?)
        };
        items.push(Item {
            action: name.clone(),
            meta: meta.clone(),
            body,
        });
    }
    Ok(items)
}
