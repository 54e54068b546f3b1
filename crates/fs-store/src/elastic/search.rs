//! Searching and counting: the query of each scope, one-page searches, and paged searches
//! over a point in time or a scroll.
//!
//! A one-page search ([`SearchRequest::single_page`], [`Scope::Exact`]) is one request and
//! opens nothing. A paged search over a point in time first asks, without one, for a page and
//! one document more: an answer that fits in the page is the whole answer, in one request
//! (most scans are of a file or a small directory). One that does not is read again from the
//! start over a point in time, opened with its first page and renewed with every page for
//! the configured keep-alive; the last page (short or empty) closes it before it returns, and
//! so does a page that fails. A caller that stops earlier closes it with
//! [`HeldCursors::close_cursor`](crate::HeldCursors::close_cursor). (Besides the two round
//! trips, a point in time open while others write is what osmem pays most for: it copies the
//! whole index at the first write after one opens.)

use elasticsearch::{CountParts, ScrollParts, SearchParts};
use serde_json::{json, Value};

use super::config::Paging;
use super::cursor::{Context, PageCursor};
use super::request::Retry;
use super::response::{doc_from, shorten};
use super::ElasticStore;
use crate::error::{Result, StoreError};
use crate::types::{Page, Scope, SearchRequest, StoredDoc};
use fs_model::FsPath;

/// Pages this large or larger are paged at once: a search for one more document than the page
/// must stay inside the default result window (`index.max_result_window`, 10 000).
const PROBE_LIMIT: usize = 10_000;

impl ElasticStore {
    pub(super) async fn search_page(&self, index: &str, request: SearchRequest) -> Result<Page> {
        let context = format!("searching `{index}`");
        if request.single_page || matches!(request.scope, Scope::Exact(_) | Scope::InTurn(_)) {
            return self.search_once(&context, index, &request).await;
        }
        let paging = self.paging().await?;
        let cursor = match &request.after {
            Some(cursor) => PageCursor::from_cursor(&context, cursor)?,
            None if paging == Paging::Scroll => {
                return self.first_scroll_page(&context, index, &request).await
            }
            None => {
                if let Some(page) = self.whole_in_one(&context, index, &request).await? {
                    return Ok(page);
                }
                self.open_pit(index).await?
            }
        };
        match self
            .next_page(&context, index, &request, paging, &cursor)
            .await
        {
            Ok(page) => Ok(page),
            Err(e) => {
                // Nobody can page on from a failed page: free its context now. (A continuation
                // refused because the context expired finds nothing to close.)
                self.close_quietly(index, &cursor).await;
                Err(e)
            }
        }
    }

    pub(super) async fn count_scope(&self, index: &str, scope: &Scope) -> Result<u64> {
        let context = format!("counting `{index}`");
        let indices = [index];
        let client = &self.inner.client;
        let body = json!({ "query": scope_query(scope) });
        let answer = self
            .ok(&context, index, "", Retry::Always, || {
                client
                    .count(CountParts::Index(&indices))
                    .body(body.clone())
                    .send()
            })
            .await?;
        answer["count"].as_u64().ok_or_else(|| StoreError::Backend {
            context,
            message: shorten(&answer),
        })
    }

    /// Sends a search of `index` with `body`, opening a scroll kept alive for `scroll` if
    /// given; returns the answer. A search changes nothing, so it is always sent again.
    pub(super) async fn search_body(
        &self,
        context: &str,
        index: &str,
        body: &Value,
        scroll: Option<&str>,
    ) -> Result<Value> {
        let indices = [index];
        let client = &self.inner.client;
        self.ok(context, index, "", Retry::Always, || {
            let request = client.search(SearchParts::Index(&indices));
            let request = match scroll {
                Some(keep_alive) => request.scroll(keep_alive),
                None => request,
            };
            request.body(body.clone()).send()
        })
        .await
    }

    /// One page, nothing kept open.
    async fn search_once(
        &self,
        context: &str,
        index: &str,
        request: &SearchRequest,
    ) -> Result<Page> {
        let sort = match &request.scope {
            Scope::InTurn(_) => {
                request.one_page_in_turn(context)?;
                // The score says which scope holds a document first (see `scope_query`).
                json!([{ "_score": "desc" }, { "path": { "order": "asc", "missing": "_last" } }])
            }
            scope if scope.sorted_by_path() => json!([{ "path": "asc" }]),
            _ => json!(["_doc"]),
        };
        let body = json!({ "size": request.size, "query": scope_query(&request.scope), "sort": sort,
                           "seq_no_primary_term": true, "track_total_hits": false });
        let answer = self.search_body(context, index, &body, None).await?;
        let docs = docs_of(context, answer)?;
        Ok(Page { docs, next: None })
    }

    /// The whole answer of a paged search in one plain request, if it fits in one page: most
    /// scans do (a file, a small directory), and a point in time would cost two more round
    /// trips (open and close) around that page. Asks for one document more than a page: if
    /// it comes, the answer does not fit, and `None` says to page over a point in time from
    /// the start (what was read is dropped, so that every page comes from one snapshot). A
    /// page of the index's whole result window or more is not tried.
    async fn whole_in_one(
        &self,
        context: &str,
        index: &str,
        request: &SearchRequest,
    ) -> Result<Option<Page>> {
        if request.size == 0 || request.size >= PROBE_LIMIT {
            return Ok(None);
        }
        let mut probe = request.clone();
        probe.size += 1;
        let docs = self.search_once(context, index, &probe).await?.docs;
        if docs.len() > request.size {
            return Ok(None);
        }
        Ok(Some(Page { docs, next: None }))
    }

    /// The first page of a scroll, which opens the scroll.
    async fn first_scroll_page(
        &self,
        context: &str,
        index: &str,
        request: &SearchRequest,
    ) -> Result<Page> {
        let body = json!({ "size": request.size, "query": scope_query(&request.scope),
                           "sort": scope_sort(&request.scope, Paging::Scroll),
                           "seq_no_primary_term": true });
        let keep_alive = self.inner.config.keep_alive_param();
        let answer = self
            .search_body(context, index, &body, Some(&keep_alive))
            .await?;
        match answer["_scroll_id"].as_str() {
            Some(id) => {
                let cursor = self.opened(index, Context::Scroll { id: id.to_owned() });
                self.finish_page(context, index, answer, request.size, cursor)
                    .await
            }
            // Nothing was opened, so there is nothing to page on with.
            None => Ok(Page {
                docs: docs_of(context, answer)?,
                next: None,
            }),
        }
    }

    /// A page after the first of a scroll, or any page of a point in time.
    async fn next_page(
        &self,
        context: &str,
        index: &str,
        request: &SearchRequest,
        paging: Paging,
        cursor: &PageCursor,
    ) -> Result<Page> {
        let keep_alive = self.inner.config.keep_alive_param();
        let client = &self.inner.client;
        let mut next = cursor.clone();
        let answer = match &cursor.context {
            Context::Scroll { id } => {
                let body = json!({ "scroll": keep_alive, "scroll_id": id });
                // Not a read to send again blindly: a scroll moves on with every page it
                // serves, so a resend after a lost answer would skip that page. A failure goes
                // back to the scan, which starts again from the last path it returned.
                let answer = self
                    .ok(context, index, "", Retry::IfNotCarriedOut, || {
                        client.scroll(ScrollParts::None).body(body.clone()).send()
                    })
                    .await?;
                if let Some(id) = answer["_scroll_id"].as_str() {
                    next.context = Context::Scroll { id: id.to_owned() };
                }
                answer
            }
            Context::Pit { id, opensearch } => {
                let mut body = json!({ "size": request.size, "query": scope_query(&request.scope),
                                       "sort": scope_sort(&request.scope, paging),
                                       "pit": { "id": id, "keep_alive": keep_alive },
                                       "seq_no_primary_term": true, "track_total_hits": false });
                if let Some(after) = &cursor.after {
                    body["search_after"] = after.clone();
                }
                let answer = self
                    .ok(context, index, "", Retry::Always, || {
                        client.search(SearchParts::None).body(body.clone()).send()
                    })
                    .await?;
                if let Some(id) = answer["pit_id"].as_str() {
                    next.context = Context::Pit {
                        id: id.to_owned(),
                        opensearch: *opensearch,
                    };
                }
                answer
            }
        };
        self.finish_page(context, index, answer, request.size, next)
            .await
    }

    /// Turns a search answer into a page whose context is `cursor` (with the latest id the
    /// server gave). A full page returns the cursor for the next; a short or empty one is the
    /// last, and closes the context before returning, as does an answer that cannot be read.
    async fn finish_page(
        &self,
        context: &str,
        index: &str,
        answer: Value,
        size: usize,
        mut cursor: PageCursor,
    ) -> Result<Page> {
        // The last hit's sort values, before the hits are taken out of the answer.
        let last_sort = answer["hits"]["hits"]
            .as_array()
            .and_then(|h| h.last())
            .and_then(|hit| hit.get("sort"))
            .cloned();
        let unsorted = (last_sort.is_none() && matches!(cursor.context, Context::Pit { .. }))
            .then(|| shorten(&answer));
        let docs = match docs_of(context, answer) {
            Ok(docs) => docs,
            Err(e) => {
                self.close_quietly(index, &cursor).await;
                return Err(e);
            }
        };
        if docs.len() < size || size == 0 {
            self.close_quietly(index, &cursor).await;
            return Ok(Page { docs, next: None });
        }
        if let Context::Pit { .. } = cursor.context {
            match last_sort {
                Some(sort) => cursor.after = Some(sort),
                None => {
                    // Without the last hit's sort values the next page would start over.
                    self.close_quietly(index, &cursor).await;
                    return Err(StoreError::Backend {
                        context: context.to_owned(),
                        message: format!(
                            "a hit without sort values in {}",
                            unsorted.unwrap_or_default()
                        ),
                    });
                }
            }
        }
        match cursor.to_cursor(context) {
            Ok(next) => Ok(Page {
                docs,
                next: Some(next),
            }),
            Err(e) => {
                self.close_quietly(index, &cursor).await;
                Err(e)
            }
        }
    }
}

/// The query selecting a scope.
pub(super) fn scope_query(scope: &Scope) -> Value {
    match scope {
        Scope::All => json!({ "match_all": {} }),
        Scope::Exact(p) => json!({ "term": { "path": p.as_str() } }),
        Scope::Subtree(p) if p.is_root() => json!({ "prefix": { "path": "/" } }),
        Scope::Subtree(p) => json!({ "bool": {
            "should": [ { "term": { "path": p.as_str() } }, { "prefix": { "path": format!("{p}/") } } ],
            "minimum_should_match": 1
        } }),
        Scope::SubtreeFrom { root, start } => subtree_from_query(root, start),
        Scope::SubtreeDirs(p) => dirs_only(scope_query(&Scope::Subtree(p.clone()))),
        Scope::SubtreeDirsFrom { root, start } => dirs_only(subtree_from_query(root, start)),
        Scope::Children(p) => json!({ "term": { "parent": p.as_str() } }),
        Scope::ChildrenFrom { dir, start } => json!({ "bool": { "filter": [
            { "term": { "parent": dir.as_str() } },
            { "range": { "path": { "gte": start.as_str() } } }
        ] } }),
        Scope::Pathless => json!({ "bool": { "must_not": { "exists": { "field": "path" } } } }),
        // A `bool` with no `should` clause matches everything on some servers: none matches
        // nothing, said so.
        Scope::AnyOf(scopes) | Scope::InTurn(scopes) if scopes.is_empty() => {
            json!({ "bool": { "must_not": { "match_all": {} } } })
        }
        Scope::AnyOf(scopes) => json!({ "bool": {
            "should": scopes.iter().map(scope_query).collect::<Vec<_>>(),
            "minimum_should_match": 1
        } }),
        // A document scores the boost of the first scope that holds it (`dis_max` takes the
        // largest, and the first scope's is the largest): sorted by score, the documents of an
        // earlier scope come before any that only later ones hold.
        Scope::InTurn(scopes) => {
            let n = scopes.len();
            json!({ "dis_max": {
                "queries": scopes.iter().enumerate().map(|(i, s)| json!({
                    "constant_score": { "filter": scope_query(s), "boost": (n - i) as f64 }
                })).collect::<Vec<_>>(),
                "tie_breaker": 0.0
            } })
        }
    }
}

/// The directories among what `query` matches.
fn dirs_only(query: Value) -> Value {
    json!({ "bool": { "filter": [ query, { "term": { "kind": "dir" } } ] } })
}

/// A subtree from a path on, as one `range` over the paths below the root, `[max(start, root/),
/// root0)` (`0` follows `/`), and the root itself if `start` does not pass it. The subtree's
/// own query and a `range` together cost osmem half as much again a page as the subtree alone
/// (the whole query is evaluated at every page of a scan); one `range` costs less than either.
fn subtree_from_query(root: &FsPath, start: &FsPath) -> Value {
    if root.is_root() {
        return json!({ "range": { "path": { "gte": start.as_str(), "lt": "0" } } });
    }
    let below = format!("{root}/");
    let from = start.as_str().max(below.as_str());
    let range = json!({ "range": { "path": { "gte": from, "lt": format!("{root}0") } } });
    if start.as_str() <= root.as_str() {
        json!({ "bool": {
            "should": [ { "term": { "path": root.as_str() } }, range ],
            "minimum_should_match": 1
        } })
    } else {
        range
    }
}

/// The sort of a scope under a paging method: by path for path scopes, then a tiebreaker.
fn scope_sort(scope: &Scope, paging: Paging) -> Value {
    let mut sort = Vec::new();
    if scope.sorted_by_path() {
        sort.push(json!({ "path": "asc" }));
    }
    match paging {
        Paging::PitShardDoc | Paging::Auto => sort.push(json!({ "_shard_doc": "asc" })),
        Paging::PitId => sort.push(json!({ "_id": "asc" })),
        Paging::Scroll if sort.is_empty() => sort.push(json!("_doc")),
        Paging::Scroll => {}
    }
    Value::Array(sort)
}

/// Reads the documents of a search answer, taking them out of it: a page of 5 000 hits
/// parsed is several megabytes, and copying each `_source` would hold it twice.
pub(super) fn docs_of(context: &str, mut answer: Value) -> Result<Vec<StoredDoc>> {
    // `pointer_mut`, not `answer["hits"]["hits"]`, whose mutable form panics on an answer
    // that is not an object.
    match answer.pointer_mut("/hits/hits") {
        Some(Value::Array(hits)) => std::mem::take(hits)
            .into_iter()
            .map(|hit| doc_from(context, hit))
            .collect(),
        _ => Err(StoreError::Backend {
            context: context.to_owned(),
            message: format!("no hits in {}", shorten(&answer)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_without_a_list_of_hits_is_an_error_not_a_panic() {
        for answer in [
            json!(null),
            json!(7),
            json!(["hits"]),
            json!({ "hits": 3 }),
            json!({ "hits": { "hits": "many" } }),
        ] {
            assert!(
                matches!(
                    docs_of("reading", answer.clone()),
                    Err(StoreError::Backend { .. })
                ),
                "{answer}"
            );
        }
        let hit =
            json!({ "_id": "a", "_seq_no": 1, "_primary_term": 1, "_source": { "path": "/a" } });
        let docs = docs_of("reading", json!({ "hits": { "hits": [hit] } })).expect("a page");
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].source, json!({ "path": "/a" }));
    }
}
