//! The index mappings and create-index bodies of the tree index and the indices beside it.
//!
//! Paths are `keyword`s: exact (`term`) and prefix queries on them are cheap, and they sort by
//! their bytes, as [`FsPath`](crate::FsPath) does. Each body comes in two forms: `*_with` takes
//! an [`IndexLayout`] (shards and replicas), and the form without arguments is the default
//! layout's.

use serde_json::{json, Value};

use crate::layout::IndexLayout;

/// The default name of the tree index.
pub const DEFAULT_TREE_INDEX: &str = "fs";

/// Returns the name of the lock index that goes with a tree index: `fs` → `fs-lock`.
pub fn lock_index_name(tree_index: &str) -> String {
    format!("{tree_index}-lock")
}

/// Returns the name of the rename journal index that goes with a tree index:
/// `fs` → `fs-journal`.
pub fn journal_index_name(tree_index: &str) -> String {
    format!("{tree_index}-journal")
}

/// Returns the name of the service's jobs index that goes with a tree index: `fs` →
/// `fs-jobs`. Every `fsrename serve` instance on the store keeps its jobs there, and a
/// heartbeat of its own, so that any instance answers for any job and takes over the jobs of
/// an instance that died.
pub fn jobs_index_name(tree_index: &str) -> String {
    format!("{tree_index}-jobs")
}

/// Returns the create-index body of the jobs index with the default layout
/// ([`jobs_index_body_with`]).
pub fn jobs_index_body() -> Value {
    jobs_index_body_with(&IndexLayout::default())
}

/// Returns the create-index body of the jobs index: one document per job (what it does, its
/// state, the instance running it, its report) and one per instance (its heartbeat), on one
/// shard whatever the layout (it is small), with the layout's replicas. Reports are stored,
/// not indexed.
pub fn jobs_index_body_with(layout: &IndexLayout) -> Value {
    json!({
        "settings": layout.one_shard_settings(),
        "mappings": {
            "properties": {
                "type": { "type": "keyword" },
                "state": { "type": "keyword" },
                "instance": { "type": "keyword" },
                "heartbeat_at": { "type": "date", "format": "epoch_millis" },
                "submitted_at": { "type": "date", "format": "epoch_millis" },
                "report": { "type": "object", "enabled": false }
            }
        }
    })
}

/// Returns the create-index body of the journal index with the default layout
/// ([`journal_index_body_with`]).
pub fn journal_index_body() -> Value {
    journal_index_body_with(&IndexLayout::default())
}

/// Returns the create-index body of the journal index: one document per rename in progress
/// (job id, source, destination, owner, the locks it holds), on one shard whatever the layout
/// (it is small and searched only by recovery), with the layout's replicas. Only `state`,
/// `from` and `to` are searched; the lock list is stored, not indexed.
pub fn journal_index_body_with(layout: &IndexLayout) -> Value {
    json!({
        "settings": layout.one_shard_settings(),
        "mappings": {
            "properties": {
                "job_id": { "type": "keyword" },
                "from": { "type": "keyword" },
                "to": { "type": "keyword" },
                "strategy": { "type": "keyword" },
                "state": { "type": "keyword" },
                "owner": { "type": "keyword" },
                "previous_owners": { "type": "keyword" },
                "holder": { "type": "keyword" },
                "started_at": { "type": "date", "format": "epoch_millis" },
                "lease_ms": { "type": "long" },
                "recoveries": { "type": "integer" },
                "locks": { "type": "object", "enabled": false }
            }
        }
    })
}

/// Returns the mappings of the tree index (one document per file or directory).
pub fn tree_index_mappings() -> Value {
    json!({
        "dynamic": "strict",
        "properties": {
            "path": { "type": "keyword" },
            "parent": { "type": "keyword" },
            "name": { "type": "keyword" },
            "depth": { "type": "integer" },
            "kind": { "type": "keyword" },
            "size": { "type": "long" },
            "modified": { "type": "date", "format": "epoch_millis" },
            "identity": {
                "properties": {
                    "dev": { "type": "long" },
                    "ino": { "type": "long" }
                }
            },
            "content": { "type": "text" }
        }
    })
}

/// Returns the create-index body of the tree index with the default layout: its mappings,
/// segments sorted by path, the server's default shards and replicas
/// ([`tree_index_body_with`]).
pub fn tree_index_body() -> Value {
    tree_index_body_with(&IndexLayout::default())
}

/// Returns the create-index body of the tree index: its mappings, its segments sorted by path
/// (`index.sort`, which makes a read in path order cheap: `docs/scale.md`), and the layout's shards and replicas (those it leaves unset are the
/// server's default).
pub fn tree_index_body_with(layout: &IndexLayout) -> Value {
    json!({ "settings": layout.tree_settings(), "mappings": tree_index_mappings() })
}

/// Returns the create-index body of the lock index with the default layout
/// ([`lock_index_body_with`]).
pub fn lock_index_body() -> Value {
    lock_index_body_with(&IndexLayout::default())
}

/// Returns the create-index body of the lock index: its mappings, one shard whatever the
/// layout, and the layout's replicas. The lock index is small, and every job's lock requests
/// go to it; on a single shard Elasticsearch applies the items of a bulk request in order,
/// which the lock protocol's release order relies on (across shards, the items of one bulk
/// request are applied by each shard on its own, in no order between them).
pub fn lock_index_body_with(layout: &IndexLayout) -> Value {
    json!({ "settings": layout.one_shard_settings(), "mappings": lock_index_mappings() })
}

/// Returns the mappings of the lock index.
///
/// `lock_type`, `lock_count` and `process_id` are the fields of the source texts, so a client
/// following the book's requests and fsrename see the same locks. The rest is fsrename's own:
/// the locked `path` (kept in full even when the id is hashed), a readable `holder` label, times
/// in epoch milliseconds, the rename journal entry a lock protects (`job`), and `holders`, one
/// entry per shared holder (not indexed: only read back with the document). Mappings are not strict so the book's documents, which carry none of
/// these fields, and later additions can be written.
pub fn lock_index_mappings() -> Value {
    json!({
        "properties": {
            "lock_type": { "type": "keyword" },
            "lock_count": { "type": "integer" },
            "process_id": { "type": "keyword" },
            "path": { "type": "keyword" },
            "holder": { "type": "keyword" },
            "acquired_at": { "type": "date", "format": "epoch_millis" },
            "expires_at": { "type": "date", "format": "epoch_millis" },
            "job": { "type": "keyword" },
            "holders": { "type": "object", "enabled": false },
            "foreign_seen": { "type": "object", "enabled": false }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_keywords() {
        for field in ["path", "parent", "name"] {
            assert_eq!(
                tree_index_mappings()["properties"][field]["type"],
                "keyword"
            );
        }
        assert_eq!(
            lock_index_mappings()["properties"]["path"]["type"],
            "keyword"
        );
        assert_eq!(lock_index_name(DEFAULT_TREE_INDEX), "fs-lock");
        assert_eq!(lock_index_body()["settings"]["number_of_shards"], 1);
        assert_eq!(tree_index_body()["mappings"], tree_index_mappings());
    }

    #[test]
    fn the_default_layout_leaves_shards_and_replicas_to_the_server() {
        assert_eq!(
            tree_index_body(),
            json!({
                "settings": { "sort": { "field": "path", "order": "asc" } },
                "mappings": tree_index_mappings()
            })
        );
        for body in [lock_index_body(), journal_index_body(), jobs_index_body()] {
            assert_eq!(body["settings"], json!({ "number_of_shards": 1 }));
        }
    }

    #[test]
    fn only_the_tree_index_takes_the_shards_and_every_index_the_replicas() {
        let layout = IndexLayout::of(Some(3), Some(2)).unwrap();
        let tree = tree_index_body_with(&layout);
        assert_eq!(tree["settings"]["number_of_shards"], 3);
        assert_eq!(tree["settings"]["number_of_replicas"], 2);
        assert_eq!(tree["mappings"], tree_index_mappings());
        for body in [
            lock_index_body_with(&layout),
            journal_index_body_with(&layout),
            jobs_index_body_with(&layout),
        ] {
            assert_eq!(
                body["settings"],
                json!({ "number_of_shards": 1, "number_of_replicas": 2 })
            );
            assert!(body["mappings"]["properties"].is_object());
        }
        let replicas_only = tree_index_body_with(&IndexLayout::of(None, Some(0)).unwrap());
        assert_eq!(replicas_only["settings"]["number_of_replicas"], 0);
        assert!(replicas_only["settings"].get("number_of_shards").is_none());
    }
}
