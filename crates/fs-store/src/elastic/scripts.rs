//! Stored scripts and scripted bulk updates, for the lock protocol on servers that run
//! painless.

use async_trait::async_trait;
use elasticsearch::{GetScriptParts, PutScriptParts};
use serde_json::json;

use super::combine::{self, SendUpdates};
use super::request::Retry;
use super::response::{error_of, shorten, version_of};
use super::ElasticStore;
use crate::error::Result;
use crate::scripted::{
    ScriptedUpdate, ScriptedUpdates, UpdateItemResult, UpdateOutcome, UpdateResult,
};

/// How often the server itself re-runs a scripted update that lost a race (`retry_on_conflict`).
const RETRY_ON_CONFLICT: u32 = 3;

#[async_trait]
impl ScriptedUpdates for ElasticStore {
    async fn put_script(&self, id: &str, source: &str) -> Result<bool> {
        let stored = |scripts: &std::collections::HashMap<String, String>| {
            scripts.get(id).is_some_and(|s| s == source)
        };
        if stored(&self.inner.scripts.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(true);
        }
        if self
            .inner
            .scripts_refused
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(false);
        }
        let context = format!("storing script `{id}`");
        let client = &self.inner.client;
        let body = json!({ "script": { "lang": "painless", "source": source } });
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                client
                    .put_script(PutScriptParts::Id(id))
                    .body(body.clone())
                    .send()
            })
            .await?;
        if (200..300).contains(&status) {
            let mut scripts = self.inner.scripts.lock().unwrap_or_else(|p| p.into_inner());
            scripts.insert(id.to_owned(), source.to_owned());
            return Ok(true);
        }
        tracing::debug!(%status, answer = %shorten(&answer), "the server refused to store a script");
        self.inner
            .scripts_refused
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(false)
    }

    async fn stored_script(&self, id: &str) -> Result<Option<String>> {
        let context = format!("reading stored script `{id}`");
        let client = &self.inner.client;
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                client.get_script(GetScriptParts::Id(id)).send()
            })
            .await?;
        // A server that does not store scripts answers 400 or 404 here: there is none.
        let source = answer["script"]["source"].as_str().map(str::to_owned);
        if (200..300).contains(&status) {
            if let Some(source) = &source {
                self.inner
                    .scripts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.to_owned(), source.clone());
            }
            return Ok(source);
        }
        Ok(None)
    }

    /// Goes out together with the scripted updates of `index` that concurrent callers of this
    /// handle send meanwhile (see `combine`).
    async fn bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        combine::bulk_update(&self.inner.lanes, self, index, items).await
    }
}

impl SendUpdates for ElasticStore {
    /// One bulk request of scripted updates.
    async fn send(
        &self,
        index: String,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        let index = index.as_str();
        let context = format!("scripted bulk update of {} items in `{index}`", items.len());
        let mut lines = Vec::with_capacity(items.len() * 2);
        for item in &items {
            // The server retries a script that lost a race with another update of the same
            // document; a 409 that still comes back is a race, never a refusal.
            lines.push(
                json!({ "update": { "_id": item.id, "retry_on_conflict": RETRY_ON_CONFLICT } }),
            );
            let mut body = json!({ "script": { "id": item.script, "params": item.params } });
            if let Some(upsert) = &item.upsert {
                body["upsert"] = upsert.clone();
            }
            lines.push(body);
        }
        let answers = self.send_bulk(&context, index, lines, items.len()).await?;
        Ok(answers
            .into_iter()
            .zip(&items)
            .map(|((status, result), item)| {
                if !(200..300).contains(&status) {
                    let context = format!("updating `{index}/{}`", item.id);
                    return Err(error_of(&context, index, &item.id, status, &result));
                }
                let kind = match result["result"].as_str() {
                    Some("created") => UpdateResult::Created,
                    Some("noop") => UpdateResult::Noop,
                    Some("deleted") => UpdateResult::Deleted,
                    _ => UpdateResult::Updated,
                };
                Ok(UpdateOutcome {
                    result: kind,
                    version: version_of(&result),
                })
            })
            .collect())
    }
}
