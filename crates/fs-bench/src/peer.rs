//! The server-side peers of fsrename's bulk verbs, what an Elasticsearch user would run
//! instead: no lock, no check, no journal, no version condition. A rename as one
//! `_update_by_query` that rewrites the path prefix of every document under the source (on a
//! server that runs painless); a delete as one `_delete_by_query`; a copy as a raw `_bulk` of
//! the copies.

use anyhow::Context as _;
use fs_model::FsPath;
use serde_json::{json, Value};

/// The prefix rewrite: `path`, `parent`, `name` and `depth`, as `FsDoc::renamed` computes them.
const PREFIX_REWRITE: &str = "\
String p = ctx._source.path; \
ctx._source.path = params.to + p.substring(params.from.length()); \
if (p.length() == params.from.length()) { \
  ctx._source.parent = params.to_parent; ctx._source.name = params.to_name; \
} else { \
  ctx._source.parent = params.to + ctx._source.parent.substring(params.from.length()); \
} \
ctx._source.depth = ctx._source.depth + params.depth_delta;";

/// A server at a URL, asked over HTTP.
pub struct Peer {
    url: String,
    http: reqwest::Client,
}

impl Peer {
    pub fn new(url: &str) -> Peer {
        Peer {
            url: url.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// Whether the server runs painless: an `_update_by_query` with a trivial script on an
    /// index that is not there answers "no such index", not "no scripts".
    pub async fn runs_scripts(&self, index: &str) -> bool {
        let answer = self
            .http
            .post(format!("{}/{index}/_update_by_query", self.url))
            .json(&json!({"query": {"match_none": {}}, "script": {"lang": "painless", "source": "ctx._source.x = 1"}}))
            .send()
            .await;
        match answer {
            Ok(a) => a.status().is_success(),
            Err(_) => false,
        }
    }

    /// Renames `from` to `to` in `index` with one `_update_by_query` (refreshed when it
    /// answers); returns how many documents it updated.
    pub async fn rename(&self, index: &str, from: &FsPath, to: &FsPath) -> anyhow::Result<u64> {
        let query = json!({ "bool": {
            "should": [ { "term": { "path": from.as_str() } }, { "prefix": { "path": format!("{from}/") } } ],
            "minimum_should_match": 1
        } });
        let depth = |p: &FsPath| p.as_str().matches('/').count() as i64;
        let body = json!({
            "query": query,
            "script": { "lang": "painless", "source": PREFIX_REWRITE, "params": {
                "from": from.as_str(),
                "to": to.as_str(),
                "to_parent": to.parent().map(|p| p.as_str().to_owned()),
                "to_name": to.name(),
                "depth_delta": depth(to) - depth(from),
            } }
        });
        let answer = self
            .http
            .post(format!(
                "{}/{index}/_update_by_query?refresh=true&conflicts=abort&slices=auto",
                self.url
            ))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("_update_by_query on {}", self.url))?;
        let status = answer.status();
        let answer: Value = answer
            .json()
            .await
            .context("the answer of _update_by_query")?;
        anyhow::ensure!(
            status.is_success() && answer["failures"].as_array().is_none_or(Vec::is_empty),
            "_update_by_query failed ({status}): {answer}"
        );
        Ok(answer["updated"].as_u64().unwrap_or(0))
    }

    /// Reads every document of `index` once, as a user's own export would: a scroll sorted
    /// by `_doc` (the cheapest order: no sort to compute), pages of `page`; returns how many
    /// it read. The peer of `fsck`, which reads the same documents in path order.
    pub async fn read_all(&self, index: &str, page: usize) -> anyhow::Result<u64> {
        let mut answer = self
            .post_json(
                &format!("{}/{index}/_search?scroll=1m", self.url),
                &json!({ "size": page, "sort": ["_doc"], "query": { "match_all": {} } }),
            )
            .await?;
        let mut read = 0u64;
        loop {
            let hits = answer["hits"]["hits"].as_array().map_or(0, Vec::len);
            if hits == 0 {
                break;
            }
            read += hits as u64;
            let id = answer["_scroll_id"].as_str().unwrap_or_default().to_owned();
            answer = self
                .post_json(
                    &format!("{}/_search/scroll", self.url),
                    &json!({ "scroll": "1m", "scroll_id": id }),
                )
                .await?;
        }
        if let Some(id) = answer["_scroll_id"].as_str() {
            // Left open, it would expire in a minute anyway.
            let _ = self
                .http
                .delete(format!("{}/_search/scroll", self.url))
                .json(&json!({ "scroll_id": id }))
                .send()
                .await;
        }
        Ok(read)
    }

    /// Writes `docs` (id and source) into `index` by bulk requests of `per_request` plain
    /// `index` actions, one after another, and refreshes it: a user's own loader. Returns how
    /// many it wrote.
    pub async fn bulk_index(
        &self,
        index: &str,
        docs: impl IntoIterator<Item = anyhow::Result<(String, Value)>>,
        per_request: usize,
    ) -> anyhow::Result<u64> {
        let url = format!("{}/{index}/_bulk", self.url);
        let mut written = 0u64;
        let mut body = String::new();
        let mut in_body = 0;
        let mut docs = docs.into_iter().peekable();
        while let Some(doc) = docs.next() {
            let (id, source) = doc?;
            body.push_str(&json!({ "index": { "_id": id } }).to_string());
            body.push('\n');
            body.push_str(&source.to_string());
            body.push('\n');
            in_body += 1;
            if in_body == per_request || docs.peek().is_none() {
                let answer = self
                    .http
                    .post(&url)
                    .header("content-type", "application/x-ndjson")
                    .body(std::mem::take(&mut body))
                    .send()
                    .await
                    .with_context(|| format!("POST {url}"))?;
                let status = answer.status();
                let value: Value = answer.json().await.context("the answer of _bulk")?;
                anyhow::ensure!(
                    status.is_success() && value["errors"] == json!(false),
                    "_bulk failed ({status}): {}",
                    value.to_string().chars().take(500).collect::<String>()
                );
                written += in_body as u64;
                in_body = 0;
            }
        }
        self.http
            .post(format!("{}/{index}/_refresh", self.url))
            .send()
            .await
            .with_context(|| format!("refreshing {index}"))?;
        Ok(written)
    }

    /// Deletes every document at or under `path` in `index` with one `_delete_by_query`
    /// (`slices=auto`, refreshed when it answers), as a user would; returns how many it
    /// deleted.
    pub async fn delete_by_query(&self, index: &str, path: &FsPath) -> anyhow::Result<u64> {
        let query = json!({ "bool": {
            "should": [ { "term": { "path": path.as_str() } }, { "prefix": { "path": format!("{path}/") } } ],
            "minimum_should_match": 1
        } });
        let answer = self
            .post_json(
                &format!(
                    "{}/{index}/_delete_by_query?refresh=true&conflicts=abort&slices=auto",
                    self.url
                ),
                &json!({ "query": query }),
            )
            .await?;
        anyhow::ensure!(
            answer["failures"].as_array().is_none_or(Vec::is_empty),
            "_delete_by_query failed: {answer}"
        );
        Ok(answer["deleted"].as_u64().unwrap_or(0))
    }

    /// The HTTP requests the server's REST handlers have answered since it started, summed
    /// over its nodes (`_nodes/usage`, `rest_actions`), leaving out the asks for this count
    /// itself: the difference across a command is what the command sent, whatever client it
    /// is (fsrename, a peer) and however it counts.
    pub async fn rest_requests(&self) -> anyhow::Result<u64> {
        let url = format!("{}/_nodes/usage", self.url);
        let answer = self
            .http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = answer.status();
        let value: Value = answer
            .json()
            .await
            .with_context(|| format!("the answer of GET {url}"))?;
        anyhow::ensure!(status.is_success(), "GET {url} failed ({status}): {value}");
        Ok(rest_requests_of(&value))
    }

    /// Deletes the indices `names` (comma-separated; those missing are ignored).
    pub async fn delete_indices(&self, names: &str) -> anyhow::Result<()> {
        let answer = self
            .http
            .delete(format!("{}/{names}?ignore_unavailable=true", self.url))
            .send()
            .await
            .with_context(|| format!("deleting {names} on {}", self.url))?;
        anyhow::ensure!(
            answer.status().is_success(),
            "deleting {names} failed: {}",
            answer.status()
        );
        Ok(())
    }

    async fn post_json(&self, url: &str, body: &Value) -> anyhow::Result<Value> {
        let answer = self
            .http
            .post(url)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {url}"))?;
        let status = answer.status();
        let value: Value = answer
            .json()
            .await
            .with_context(|| format!("the answer of POST {url}"))?;
        anyhow::ensure!(status.is_success(), "POST {url} failed ({status}): {value}");
        Ok(value)
    }
}

/// The sum of `rest_actions` over the nodes of a `_nodes/usage` answer, but its own action.
fn rest_requests_of(usage: &Value) -> u64 {
    usage["nodes"]
        .as_object()
        .into_iter()
        .flat_map(|nodes| nodes.values())
        .filter_map(|node| node["rest_actions"].as_object())
        .flat_map(|actions| actions.iter())
        .filter(|(action, _)| action.as_str() != "nodes_usage_action")
        .filter_map(|(_, count)| count.as_u64())
        .sum()
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn the_requests_are_the_rest_actions_of_every_node_but_the_count_itself() {
        let usage = json!({"nodes": {
            "a": {"rest_actions": {"bulk_action": 7, "search_action": 2, "nodes_usage_action": 5}},
            "b": {"rest_actions": {"bulk_action": 1}},
            "c": {}
        }});
        assert_eq!(rest_requests_of(&usage), 10);
        assert_eq!(rest_requests_of(&json!({"error": "x"})), 0);
    }
}
