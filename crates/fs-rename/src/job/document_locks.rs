//! The book's document locking: one lock per document under the source.
//!
//! A copy locks like a rename (its source documents and its destination); a delete locks the
//! documents under its path and the document of its parent directory, so that nobody renames
//! or deletes the directory it is emptying.

use std::collections::HashSet;

use fs_locks::{LockClient, LockGuard};
use fs_model::{tree_lock_id, FsPath};

use super::{Renamer, Task};
use crate::error::Result;
use crate::tree::FsTree;

/// How many times document locking re-scans for documents added under the source meanwhile.
const DOCUMENT_LOCK_ROUNDS: usize = 8;

impl Renamer {
    /// The book's document locking: a lock per document under the source, plus the
    /// destination's path and its parent's document, so that two renames to one destination,
    /// or a rename into a directory being moved, still exclude each other (a delete has no
    /// destination: it locks its parent's document). Scans again after locking until no
    /// document was added meanwhile.
    pub(super) async fn lock_documents(
        &self,
        locks: &LockClient,
        tree: &FsTree,
        task: &Task,
    ) -> Result<Vec<LockGuard>> {
        let from = task.from();
        // The path whose parent's document is locked too; a delete's is its own path, whose
        // document is among those under its source already.
        let to = task.to();
        let locks_destination = !matches!(task, Task::Delete { .. });
        let mut guards: Vec<LockGuard> = Vec::new();
        let mut locked: HashSet<String> = HashSet::new();
        for _ in 0..DOCUMENT_LOCK_ROUNDS {
            tree.refresh().await?;
            let mut wanted: Vec<(String, Option<FsPath>)> = Vec::new();
            tree.for_each_page(from, self.config.page_size, |page| {
                wanted.extend(page.into_iter().map(|e| (e.id, Some(e.doc.path))));
                Ok(())
            })
            .await?;
            if locks_destination {
                wanted.push((tree_lock_id(to), Some(to.clone())));
            }
            if let Some(parent) = to.parent().filter(|p| !p.is_root()) {
                if let Some(entry) = tree.find(&parent).await? {
                    wanted.push((entry.id, Some(parent)));
                }
            }
            wanted.retain(|(id, _)| !locked.contains(id));
            if wanted.is_empty() {
                return Ok(guards);
            }
            match locks.lock_documents(&wanted).await {
                Ok(guard) => {
                    locked.extend(wanted.into_iter().map(|(id, _)| id));
                    guards.push(guard);
                }
                Err(e) => {
                    for guard in guards {
                        let _ = guard.release().await;
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(guards)
    }
}
