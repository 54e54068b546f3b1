//! `find`: the tree searched by name pattern and by the words of the content, in one request.

use async_trait::async_trait;
use fs_model::FindQuery;
use serde_json::{json, Value};

use super::search::{docs_of, scope_query};
use super::ElasticStore;
use crate::capabilities::Find;
use crate::error::Result;
use crate::types::{Scope, StoredDoc};

// Implemented here, beside the body it sends: the request is this module's, and `mod.rs`
// holds no forwarding method of the same signature.
#[async_trait]
impl Find for ElasticStore {
    async fn find(&self, index: &str, query: &FindQuery, size: usize) -> Result<Vec<StoredDoc>> {
        let context = format!("searching `{index}` by name and content");
        let mut body = find_body(query, size.min(WINDOW));
        let mut found = Vec::new();
        loop {
            let answer = self.search_body(&context, index, &body, None).await?;
            // The last hit's sort values, where a full window may have more after it.
            let after = answer["hits"]["hits"]
                .as_array()
                .filter(|hits| hits.len() == WINDOW)
                .and_then(|hits| hits.last())
                .map(|hit| hit["sort"].clone());
            found.extend(docs_of(&context, answer)?);
            match after {
                Some(after) if found.len() < size && after.is_array() => {
                    body["size"] = json!((size - found.len()).min(WINDOW));
                    body["search_after"] = after;
                }
                _ => return Ok(found),
            }
        }
    }
}

/// The most hits one search may answer: `index.max_result_window`'s default, which a
/// `from + size` above it makes the server refuse ("Result window is too large"). A larger
/// `size` (`find --limit 10000` asks for one more, to tell whether there are more) is
/// searched a window at a time, each after the last hit of the one before (the sort ends
/// with `path`, unique, so no hit is seen twice).
const WINDOW: usize = 10_000;

/// The search body: the subtree and the name pattern as filters (a `regexp` that means what
/// the pattern means: Elasticsearch 7's `wildcard` has no character classes), the words as a
/// `match` that wants them all, which alone is scored.
fn find_body(query: &FindQuery, size: usize) -> Value {
    let mut filter = vec![scope_query(&Scope::Subtree(query.under.clone()))];
    if let Some(glob) = &query.name {
        filter.push(json!({ "regexp": { "name": { "value": glob.to_lucene_regexp() } } }));
    }
    if query.stores_text {
        filter.push(json!({ "exists": { "field": "content" } }));
    }
    let mut bool_query = json!({ "filter": filter });
    let sort = if query.words.is_empty() {
        json!([{ "path": "asc" }])
    } else {
        bool_query["must"] = json!([{ "match": { "content": {
            "query": query.words.join(" "), "operator": "and"
        } } }]);
        json!([{ "_score": "desc" }, { "path": "asc" }])
    };
    json!({
        "size": size,
        "query": { "bool": bool_query },
        "sort": sort,
        "_source": { "excludes": ["content"] },
        "seq_no_primary_term": true,
        "track_total_hits": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fs_model::{FsPath, NameGlob};

    #[test]
    fn words_are_scored_and_names_filtered() {
        let query = FindQuery::under(FsPath::parse("/clinton").expect("path"))
            .name(NameGlob::parse("*.txt").expect("glob"))
            .text("Quick fox");
        let body = find_body(&query, 10);
        assert_eq!(
            body["query"]["bool"]["filter"][1]["regexp"]["name"]["value"],
            r".*\.txt"
        );
        assert_eq!(
            body["query"]["bool"]["must"][0]["match"]["content"]["query"],
            "quick fox"
        );
        assert_eq!(body["sort"][0], json!({ "_score": "desc" }));
        let by_name = find_body(&FindQuery::under(FsPath::root()), 10);
        assert!(by_name["query"]["bool"].get("must").is_none());
        assert_eq!(by_name["sort"], json!([{ "path": "asc" }]));
        let with_text = find_body(&FindQuery::under(FsPath::root()).storing_text(), 1);
        assert_eq!(
            with_text["query"]["bool"]["filter"][1],
            json!({ "exists": { "field": "content" } })
        );
    }
}
