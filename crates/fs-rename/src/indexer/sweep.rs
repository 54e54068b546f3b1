//! Forgetting in bulk what is gone from disk: the documents at and under many paths deleted
//! under one tree lock the caller holds, a few requests in all. A journaled `rm -r` job
//! each costs its own locks, journal entry and refreshes: `rm -rf` of 711 directories took
//! 44.8 s to follow on Elasticsearch, a restart after 3 940 deletions 97 s (issue 48).
//!
//! No journal is needed because the disk is the truth for an index run or a watcher, and
//! the deletes go deepest first, one depth a request, a depth only once every deeper one
//! succeeded: whatever stops a sweep half-way (the process killed, a request refused) leaves
//! every remaining document with its parent (fsck clean) and less of the gone subtree in the
//! store, which the next run or batch finds stale and sweeps. A subtree too large to hold in
//! memory is handed back, for a journaled `rm -r` of its own.

use std::collections::HashSet;

use fs_model::FsPath;
use fs_store::{BulkOp, Scan, Scope};

use crate::error::{RenameError, Result};
use crate::tree::{next_entries, Entry, FsTree};

/// Topmost paths read with one scan.
const GROUP: usize = 200;

/// Documents held at most for one group: a group that has more is split, and a single path
/// with more is left to a journaled `rm -r`.
const MAX_HELD: usize = 20_000;

/// Documents deleted by one bulk request.
const BULK: usize = 1_000;

/// What [`sweep`] did.
#[derive(Debug, Default)]
pub(super) struct Swept {
    /// Documents deleted.
    pub removed: u64,
    /// Paths whose subtree has more than [`MAX_HELD`] documents: not touched.
    pub too_large: Vec<FsPath>,
    /// Paths not (wholly) deleted, and why: a delete refused, a read that failed.
    pub failed: Vec<(FsPath, String)>,
}

/// Deletes every document at or under each of `paths`, as the store holds them now. The
/// caller holds a tree lock covering them all and has refreshed; it refreshes after.
pub(super) async fn sweep(tree: &FsTree, paths: Vec<FsPath>) -> Swept {
    let mut swept = Swept::default();
    // A path under another is swept with it (read twice, it would be deleted twice: a
    // search does not see a delete before the next refresh).
    let all: HashSet<FsPath> = paths.iter().cloned().collect();
    let mut topmost: Vec<FsPath> = all
        .iter()
        .filter(|p| !std::iter::successors(p.parent(), FsPath::parent).any(|a| all.contains(&a)))
        .cloned()
        .collect();
    topmost.sort();
    let mut groups: Vec<Vec<FsPath>> = topmost.chunks(GROUP).map(<[FsPath]>::to_vec).collect();
    groups.reverse();
    while let Some(group) = groups.pop() {
        match read_group(tree, &group).await {
            Ok(Some(entries)) => {
                if let Err((path, why)) = delete_deepest_first(tree, entries, &mut swept).await {
                    swept.failed.push((path, why));
                }
            }
            // Too many documents to hold: halves, read again; one path alone is left.
            Ok(None) if group.len() > 1 => {
                let (first, second) = group.split_at(group.len() / 2);
                groups.push(second.to_vec());
                groups.push(first.to_vec());
            }
            Ok(None) => swept.too_large.extend(group),
            Err(e) => {
                let why = e.to_string();
                swept
                    .failed
                    .extend(group.into_iter().map(|p| (p, why.clone())));
            }
        }
    }
    swept
}

/// Every document at or under the paths of `group`, in one scan; `None` if there are more
/// than [`MAX_HELD`].
async fn read_group(tree: &FsTree, group: &[FsPath]) -> Result<Option<Vec<Entry>>> {
    let scope = Scope::AnyOf(group.iter().cloned().map(Scope::Subtree).collect());
    let mut scan = Scan::new(
        std::sync::Arc::clone(tree.store()),
        tree.index(),
        scope,
        BULK,
    );
    let read = async {
        let context = || format!("reading the {} paths gone from disk", group.len());
        let mut entries = Vec::new();
        while let Some(page) = next_entries(&mut scan, tree.index(), context).await? {
            for entry in page {
                entries.push(entry?);
            }
            if entries.len() > MAX_HELD {
                return Ok(None);
            }
        }
        Ok(Some(entries))
    }
    .await;
    scan.close().await;
    read
}

/// Deletes `entries`, deepest first, one depth a request (split in [`BULK`]s); stops at the
/// first depth a delete of which is refused, naming it.
async fn delete_deepest_first(
    tree: &FsTree,
    mut entries: Vec<Entry>,
    swept: &mut Swept,
) -> std::result::Result<(), (FsPath, String)> {
    entries.sort_by_key(|e| std::cmp::Reverse(e.doc.path.depth()));
    for depth in entries.chunk_by(|a, b| a.doc.path.depth() == b.doc.path.depth()) {
        for chunk in depth.chunks(BULK) {
            let ops = chunk
                .iter()
                .map(|e| BulkOp::Delete {
                    id: e.id.clone(),
                    if_version: Some(e.version),
                })
                .collect();
            let first = chunk.first().map(|e| e.doc.path.clone());
            let context = format!("deleting {} documents gone from disk", chunk.len());
            let results = tree.store().bulk(tree.index(), ops).await.map_err(|e| {
                let why = RenameError::store(context.clone())(e).to_string();
                (first.clone().unwrap_or_else(FsPath::root), why)
            })?;
            let mut refused = None;
            for (entry, result) in chunk.iter().zip(results) {
                match result {
                    Ok(_) => swept.removed += 1,
                    Err(e) => {
                        refused.get_or_insert((entry.doc.path.clone(), e.to_string()));
                    }
                }
            }
            if let Some(refused) = refused {
                return Err(refused);
            }
        }
    }
    Ok(())
}
