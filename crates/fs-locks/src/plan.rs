//! Which lock documents an acquisition takes, in which order.

use std::collections::{BTreeMap, BTreeSet};

use fs_model::{tree_lock_id, FsPath};

use crate::error::{LockError, Result};
use crate::lock_doc::LockMode;

/// One lock document an acquisition takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockItem {
    /// The lock document id.
    pub id: String,
    /// The locked path; `None` for global and document locks without one.
    pub path: Option<FsPath>,
    /// Shared or exclusive.
    pub mode: LockMode,
}

impl LockItem {
    /// Returns the path, or the id where there is none, for messages.
    pub fn label(&self) -> String {
        match &self.path {
            Some(p) => p.to_string(),
            None => self.id.clone(),
        }
    }
}

/// A tree-lock acquisition: exclusive locks on some paths and shared locks on all their
/// ancestors, taken together.
///
/// The order is the book's: shared locks root-first, then the exclusive locks; release is the
/// reverse (exclusive locks first, then shared deepest first). Taking ancestors first means a
/// competing exclusive lock on an ancestor is found before anything below it is touched, and
/// releasing deepest first means no instant exists where an exclusive lock is still held below
/// an ancestor that has already become free for someone else's exclusive lock.
///
/// The root is never locked: it cannot be renamed, so no exclusive lock on it exists to guard
/// against, and a shared lock on it would make every acquisition in the system contend on one
/// document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeLockRequest {
    exclusive: BTreeSet<FsPath>,
}

impl TreeLockRequest {
    /// Starts an empty request.
    pub fn new() -> TreeLockRequest {
        TreeLockRequest::default()
    }

    /// Returns the request of the book: an exclusive lock on `path`, shared on its ancestors.
    pub fn path(path: &FsPath) -> TreeLockRequest {
        TreeLockRequest::new().exclusive(path.clone())
    }

    /// Returns the request for renaming `from` to `to`: both exclusive, each one's ancestors
    /// shared once.
    ///
    /// # Errors
    /// [`LockError::MoveIntoItself`] if `to` is `from` or lies inside it.
    pub fn rename(from: &FsPath, to: &FsPath) -> Result<TreeLockRequest> {
        if to.is_inside(from) {
            return Err(LockError::MoveIntoItself {
                from: from.clone(),
                to: to.clone(),
            });
        }
        Ok(TreeLockRequest::new()
            .exclusive(from.clone())
            .exclusive(to.clone()))
    }

    /// Adds an exclusive lock on `path` (and so shared locks on its ancestors).
    pub fn exclusive(mut self, path: FsPath) -> TreeLockRequest {
        self.exclusive.insert(path);
        self
    }

    /// Returns the lock items in acquisition order.
    ///
    /// # Errors
    /// [`LockError::RootLock`] if the root is to be locked exclusively.
    pub fn items(&self) -> Result<Vec<LockItem>> {
        if self.exclusive.iter().any(FsPath::is_root) {
            return Err(LockError::RootLock);
        }
        // Shared ancestors, minus the root and minus paths this request locks exclusively
        // (an exclusive lock already keeps everyone else out). Ordered by depth, then path.
        let mut shared: BTreeMap<(usize, FsPath), ()> = BTreeMap::new();
        for path in &self.exclusive {
            for ancestor in path.ancestors().into_iter().skip(1) {
                if !self.exclusive.contains(&ancestor) {
                    shared.insert((ancestor.depth(), ancestor), ());
                }
            }
        }
        let item = |path: FsPath, mode| LockItem {
            id: tree_lock_id(&path),
            path: Some(path),
            mode,
        };
        let shared = shared.into_keys().map(|(_, p)| item(p, LockMode::Shared));
        let exclusive = self
            .exclusive
            .iter()
            .map(|p| item(p.clone(), LockMode::Exclusive));
        Ok(shared.chain(exclusive).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).expect("path")
    }

    fn describe(items: &[LockItem]) -> Vec<String> {
        items
            .iter()
            .map(|i| format!("{:?} {}", i.mode, i.label()))
            .collect()
    }

    #[test]
    fn the_books_example() {
        let items = TreeLockRequest::path(&p("/clinton/projects/elasticsearch/README.txt"))
            .items()
            .expect("items");
        assert_eq!(
            describe(&items),
            [
                "Shared /clinton",
                "Shared /clinton/projects",
                "Shared /clinton/projects/elasticsearch",
                "Exclusive /clinton/projects/elasticsearch/README.txt",
            ]
        );
    }

    #[test]
    fn a_rename_locks_both_ends_and_shares_common_ancestors_once() {
        let items = TreeLockRequest::rename(&p("/a/b/c"), &p("/a/d"))
            .expect("rename")
            .items();
        assert_eq!(
            describe(&items.expect("items")),
            [
                "Shared /a",
                "Shared /a/b",
                "Exclusive /a/b/c",
                "Exclusive /a/d"
            ]
        );
    }

    #[test]
    fn an_exclusive_path_is_not_also_shared() {
        // Moving `/a/b` up over `/a` is refused later (the destination exists), but the plan
        // must not ask for shared and exclusive on `/a` at once.
        let items = TreeLockRequest::rename(&p("/a/b"), &p("/a"))
            .expect("rename")
            .items();
        assert_eq!(
            describe(&items.expect("items")),
            ["Exclusive /a", "Exclusive /a/b"]
        );
    }

    #[test]
    fn refusals() {
        let into_itself = TreeLockRequest::rename(&p("/a"), &p("/a/b"));
        assert!(matches!(into_itself, Err(LockError::MoveIntoItself { .. })));
        assert!(matches!(
            TreeLockRequest::rename(&p("/a"), &p("/a")),
            Err(LockError::MoveIntoItself { .. })
        ));
        assert_eq!(
            TreeLockRequest::path(&FsPath::root()).items(),
            Err(LockError::RootLock)
        );
        assert!(
            TreeLockRequest::rename(&p("/ab"), &p("/a/b")).is_ok(),
            "component-wise"
        );
    }
}
