//! The conformance suite: the semantics every [`DocStore`] must share, written once.
//!
//! Each case is a public async function taking a fresh store; it panics on a violation, naming
//! what broke. [`conformance_suite!`](crate::conformance_suite) turns them into one test per
//! case for a store factory, so every implementation runs the same code:
//!
//! ```text
//! async fn make_store() -> fs_store::SharedStore { /* ... */ }
//! fs_store::conformance_suite!(make_store);
//! ```
//!
//! Every case works in indices of its own (a random suffix), so one server can serve them all,
//! and refreshes before it searches, so it holds on near-real-time stores too.
//!
//! The cases, by what they check: `documents` (the per-document primitives and bulk),
//! `search` (scopes, paging, counts, near-real-time visibility), `capabilities` (what only
//! some stores can do: chained and refreshed bulks, index checks, find) and `races`
//! (concurrent writers).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod capabilities;
mod documents;
mod races;
mod search;

pub use capabilities::*;
pub use documents::*;
pub use races::*;
pub use search::*;

use std::collections::BTreeSet;
use std::sync::Arc;

use fs_model::{DocKind, FsDoc, FsPath};
use serde_json::{json, Value};

use crate::{
    BulkOp, Chain, Chained, Cursor, DocStore, Scan, Scope, SearchRequest, SharedStore, StoreError,
    StoredDoc, Version,
};

/// Returns a fresh index name `prefix-<random>`, created with `path` and `parent` as keywords
/// (as in both of fsrename's indices) and other fields free, since the cases write free-form
/// documents too.
pub async fn fresh_index(store: &dyn DocStore, prefix: &str) -> String {
    let index = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    assert!(store
        .create_index(&index, &suite_index_body())
        .await
        .expect("create index"));
    index
}

fn suite_index_body() -> Value {
    json!({ "mappings": { "properties": {
        "path": { "type": "keyword" },
        "parent": { "type": "keyword" }
    } } })
}

fn doc(path: &str, kind: DocKind) -> Value {
    let path = FsPath::parse(path).expect("test path");
    serde_json::to_value(FsDoc::new(path, kind, 0, 0)).expect("serialize doc")
}

fn file(path: &str) -> Value {
    doc(path, DocKind::File)
}

/// Indexes `paths` (directories end up as files; only paths matter here) with ids `d0`, `d1`...
async fn put_paths(store: &dyn DocStore, index: &str, paths: &[&str]) {
    let ops = paths
        .iter()
        .enumerate()
        .map(|(i, p)| BulkOp::Create {
            id: format!("d{i}"),
            source: file(p),
        })
        .collect();
    let results = store.bulk(index, ops).await.expect("bulk");
    assert!(
        results.iter().all(Result::is_ok),
        "setup bulk failed: {results:?}"
    );
    store.refresh(index).await.expect("refresh");
}

/// Pages through `scope` `size` documents at a time; returns the paths in order.
async fn search_all(store: &dyn DocStore, index: &str, scope: Scope, size: usize) -> Vec<String> {
    let docs = search_docs(store, index, scope, size).await;
    let path = |d: &StoredDoc| {
        d.source
            .get("path")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    docs.iter()
        .map(|d| path(d).unwrap_or_else(|| "<none>".to_owned()))
        .collect()
}

/// Pages through `scope` `size` documents at a time, checking that no page is larger; returns
/// the documents in order.
async fn search_docs(
    store: &dyn DocStore,
    index: &str,
    scope: Scope,
    size: usize,
) -> Vec<StoredDoc> {
    let mut out = Vec::new();
    let mut request = SearchRequest::first(scope, size);
    loop {
        let page = store.search(index, request.clone()).await.expect("search");
        assert!(page.docs.len() <= size, "page larger than asked");
        out.extend(page.docs);
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => return out,
        }
    }
}

/// Generates one `#[tokio::test]` per conformance case for a store factory: an async function
/// returning a fresh [`SharedStore`](crate::SharedStore). Add `near_real_time` to also run the
/// case that only near-real-time stores pass.
#[macro_export]
macro_rules! conformance_suite {
    ($factory:path) => {
        $crate::conformance_suite!(@every [@cases $factory;]);
    };
    ($factory:path, near_real_time) => {
        $crate::conformance_suite!($factory);
        $crate::conformance_suite!(@cases $factory; near_real_time_hides_unrefreshed_writes);
    };
    // `$factory` returns the store and a check to run after each case (that the case left no
    // search context open on a server that counts them, say).
    ($factory:path, near_real_time, checked) => {
        $crate::conformance_suite!(@every [@checked $factory;]
            near_real_time_hides_unrefreshed_writes);
    };
    // Every case but the near-real-time one, named once, then `$extra`: handed to the arm
    // that `$arm` starts (`@cases` or `@checked`, with the factory).
    (@every [$($arm:tt)*] $($extra:ident),*) => {
        $crate::conformance_suite!($($arm)*
            index_lifecycle, create_then_get, ids_may_contain_slashes_and_unicode,
            index_writes_and_conditions, delete_and_conditions, mget_keeps_order,
            bulk_items_are_independent, search_subtree_is_component_wise, search_exact_path, search_children,
            search_all_pages_everything, search_pathless, search_subtree_dirs, search_any_of, search_in_turn, search_subtree_from, indices_exist_and_bulk_refreshed, chained_writes_land_together_or_not_at_all, a_search_stopped_early_is_closed, count_agrees_with_search, search_hits_carry_versions,
            refresh_makes_writes_searchable, sources_must_be_objects, cas_increments_are_exact,
            create_race_has_one_winner, find_by_name_and_words $(, $extra)*);
    };
    (@checked $factory:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let (store, check) = $factory().await;
                $crate::conformance::$case(store).await;
                check();
            }
        )+
    };
    (@cases $factory:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::conformance::$case($factory().await).await;
            }
        )+
    };
}
