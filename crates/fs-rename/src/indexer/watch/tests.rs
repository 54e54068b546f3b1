//! Batches whose events come after the disk has moved on: what a slow watcher (a loaded
//! machine, a long batch) meets, replayed batch by batch without inotify's timing.

use std::path::Path;
use std::sync::Arc;

use fs_model::FsPath;
use fs_store::{SharedStore, SqliteStore};

use super::{Applier, Change, WatchOptions};
use crate::indexer::index_dir;
use crate::tree::FsTree;

fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("path")
}

/// A tree indexed from `root` at `/w`.
async fn indexed(root: &Path) -> (FsTree, WatchOptions) {
    let store: SharedStore = Arc::new(SqliteStore::in_memory().expect("store"));
    let tree = FsTree::new(store, "fs");
    let options = WatchOptions::default();
    index_dir(&tree, root, &p("/w"), &options.index, None)
        .await
        .expect("first run");
    (tree, options)
}

async fn id_at(tree: &FsTree, path: &str) -> Option<String> {
    tree.find(&p(path)).await.expect("find").map(|e| e.id)
}

/// A directory is made and, an instant later, a directory and a file the store holds are
/// moved into it. The batch of the `mkdir` indexes the new directory as the disk is by then,
/// with the moved ones inside it (new documents, new ids); the halves of the moves inotify saw
/// (the other had no watch yet) come in the next batch. The store's documents of what moved
/// must replace those new ones, ids kept, not be deleted as gone. (Seen under load in the
/// random script of `tests/watch.rs`.)
#[tokio::test]
async fn a_move_into_a_directory_indexed_ahead_of_its_event_keeps_the_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::create_dir(root.join("d")).expect("mkdir");
    std::fs::write(root.join("d/f"), b"text").expect("write");
    std::fs::write(root.join("g"), b"more text").expect("write");
    let (tree, options) = indexed(&root).await;
    let (dir_id, file_id) = (id_at(&tree, "/w/d").await, id_at(&tree, "/w/d/f").await);
    let lone_id = id_at(&tree, "/w/g").await;
    assert!(dir_id.is_some() && file_id.is_some() && lone_id.is_some());

    std::fs::create_dir(root.join("q")).expect("mkdir");
    std::fs::rename(root.join("d"), root.join("q/e")).expect("mv");
    std::fs::rename(root.join("g"), root.join("q/h")).expect("mv");
    let at = p("/w");
    let mut applier = Applier::new(&tree, &root, &at, &options.index, Arc::default());
    let batches: [Vec<Change>; 3] = [
        vec![Change::Dirty(root.join("q"), None)],
        vec![
            Change::Dirty(root.join("d"), Some(7)),
            Change::Dirty(root.join("g"), Some(8)),
        ],
        Vec::new(),
    ];
    for changes in batches {
        let batch = applier.apply(changes, true).await;
        assert_eq!(batch.failures, Vec::<String>::new());
    }
    assert_eq!(id_at(&tree, "/w/d").await, None);
    assert_eq!(id_at(&tree, "/w/g").await, None);
    assert_eq!(id_at(&tree, "/w/q/h").await, lone_id, "the lone file's id");
    assert_eq!(id_at(&tree, "/w/q/e").await, dir_id, "the directory's id");
    assert_eq!(id_at(&tree, "/w/q/e/f").await, file_id, "the file's id");
}
