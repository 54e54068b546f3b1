//! Which lock documents an acquisition takes, in which order.

use std::collections::BTreeMap;

use fs_model::{tree_lock_id, FsPath};

use crate::error::{LockError, Result};
use fs_model::LockMode;

/// One lock document an acquisition takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockItem {
    /// The lock document id.
    pub id: String,
    /// The locked path; `None` for global and document locks without one.
    pub path: Option<FsPath>,
    /// The mode: IS, IX, S or X.
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

/// A tree-lock acquisition: shared (S) or exclusive (X) locks on some paths and the matching
/// intention locks on all their ancestors (IS for S, IX for X), taken together.
///
/// The order is the book's: intention locks root-first, then the locks on the targets; release
/// is the reverse (the targets first, then the ancestors deepest first). Taking ancestors first
/// means a competing lock on an ancestor (someone renaming `/clinton`) is found before anything
/// below it is touched, and releasing deepest first means no instant exists where a lock is
/// still held below an ancestor that has already become free for someone else's lock.
///
/// The root is never locked: it cannot be renamed, so no exclusive lock on it exists to guard
/// against, and an intention lock on it would make every acquisition in the system contend on
/// one document. For the same reason a shared lock on the root would exclude nobody, and is
/// refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeLockRequest {
    targets: BTreeMap<FsPath, LockMode>,
}

impl TreeLockRequest {
    /// Starts an empty request.
    pub fn new() -> TreeLockRequest {
        TreeLockRequest::default()
    }

    /// Returns the request of the book: an exclusive lock on `path`, intention-exclusive
    /// (the book's shared lock) on its ancestors.
    pub fn path(path: &FsPath) -> TreeLockRequest {
        TreeLockRequest::new().exclusive(path.clone())
    }

    /// Returns the request of a reader of the subtree at `path`: shared on it,
    /// intention-shared on its ancestors. Nothing at or under `path` changes while it is held.
    pub fn read(path: &FsPath) -> TreeLockRequest {
        TreeLockRequest::new().shared(path.clone())
    }

    /// Returns the request for renaming `from` to `to`: both exclusive, each one's ancestors
    /// intention-exclusive once.
    ///
    /// # Errors
    /// [`LockError::MoveIntoItself`] if `to` is `from` or lies inside it.
    pub fn rename(from: &FsPath, to: &FsPath) -> Result<TreeLockRequest> {
        not_into_itself(from, to)?;
        Ok(TreeLockRequest::new()
            .exclusive(from.clone())
            .exclusive(to.clone()))
    }

    /// Returns the request for copying `from` to `to`: shared on the source (nothing under it
    /// changes while it is copied), exclusive on the destination.
    ///
    /// # Errors
    /// [`LockError::MoveIntoItself`] if `to` is `from` or lies inside it.
    pub fn copy(from: &FsPath, to: &FsPath) -> Result<TreeLockRequest> {
        not_into_itself(from, to)?;
        Ok(TreeLockRequest::new()
            .shared(from.clone())
            .exclusive(to.clone()))
    }

    /// Adds an exclusive lock on `path` (and so intention-exclusive locks on its ancestors).
    pub fn exclusive(mut self, path: FsPath) -> TreeLockRequest {
        self.targets.insert(path, LockMode::Exclusive);
        self
    }

    /// Adds a shared lock on `path` (and so intention-shared locks on its ancestors), unless
    /// the request already locks `path` exclusively.
    pub fn shared(mut self, path: FsPath) -> TreeLockRequest {
        self.targets.entry(path).or_insert(LockMode::Shared);
        self
    }

    /// Returns the lock items in acquisition order.
    ///
    /// # Errors
    /// [`LockError::RootLock`] if the root is to be locked; [`LockError::Upgrade`] if a path
    /// locked shared is also an ancestor of a path locked exclusively (that would need Gray's
    /// SIX mode, which fsrename does not have).
    pub fn items(&self) -> Result<Vec<LockItem>> {
        if self.targets.keys().any(FsPath::is_root) {
            return Err(LockError::RootLock);
        }
        // Intention locks on ancestors, minus the root and minus the targets themselves (their
        // own lock covers them, or refuses as below). Ordered by depth, then path; IX wins
        // over IS where a path is an ancestor of both kinds of target.
        let mut intentions: BTreeMap<(usize, FsPath), LockMode> = BTreeMap::new();
        for (path, mode) in &self.targets {
            for ancestor in path.ancestors().into_iter().skip(1) {
                if ancestor.is_root() {
                    continue;
                }
                if let Some(target) = self.targets.get(&ancestor) {
                    if !target.covers(mode.intention()) {
                        return Err(LockError::Upgrade {
                            path: ancestor.to_string(),
                        });
                    }
                    continue;
                }
                let slot = intentions
                    .entry((ancestor.depth(), ancestor))
                    .or_insert(LockMode::IntentShared);
                if mode.intention() == LockMode::IntentExclusive {
                    *slot = LockMode::IntentExclusive;
                }
            }
        }
        let item = |path: FsPath, mode| LockItem {
            id: tree_lock_id(&path),
            path: Some(path),
            mode,
        };
        let ancestors = intentions.into_iter().map(|((_, p), m)| item(p, m));
        let targets = self.targets.iter().map(|(p, m)| item(p.clone(), *m));
        Ok(ancestors.chain(targets).collect())
    }
}

/// Refuses a destination `to` that is `from` or lies inside it.
fn not_into_itself(from: &FsPath, to: &FsPath) -> Result<()> {
    if to.is_inside(from) {
        return Err(LockError::MoveIntoItself {
            from: from.clone(),
            to: to.clone(),
        });
    }
    Ok(())
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
            .map(|i| format!("{} {}", i.mode, i.label()))
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
                "IX /clinton",
                "IX /clinton/projects",
                "IX /clinton/projects/elasticsearch",
                "X /clinton/projects/elasticsearch/README.txt",
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
            ["IX /a", "IX /a/b", "X /a/b/c", "X /a/d"]
        );
    }

    #[test]
    fn an_exclusive_path_is_not_also_shared() {
        // Moving `/a/b` up over `/a` is refused later (the destination exists), but the plan
        // must not ask for shared and exclusive on `/a` at once.
        let items = TreeLockRequest::rename(&p("/a/b"), &p("/a"))
            .expect("rename")
            .items();
        assert_eq!(describe(&items.expect("items")), ["X /a", "X /a/b"]);
    }

    #[test]
    fn readers_take_intention_shared_and_ix_wins_over_is() {
        let items = TreeLockRequest::copy(&p("/a/b/src"), &p("/a/c/dst"))
            .expect("copy")
            .items();
        assert_eq!(
            describe(&items.expect("items")),
            ["IX /a", "IS /a/b", "IX /a/c", "S /a/b/src", "X /a/c/dst"]
        );
        let read = TreeLockRequest::read(&p("/a/b")).items().expect("items");
        assert_eq!(describe(&read), ["IS /a", "S /a/b"]);
        // Copying a directory into its own parent: the destination's X covers the source's IS.
        let up = TreeLockRequest::copy(&p("/a/b"), &p("/a"))
            .expect("copy")
            .items();
        assert_eq!(describe(&up.expect("items")), ["X /a", "S /a/b"]);
        // S on a path that is also the ancestor of an X target would be SIX.
        let six = TreeLockRequest::new()
            .shared(p("/a"))
            .exclusive(p("/a/b"))
            .items();
        assert!(matches!(six, Err(LockError::Upgrade { .. })));
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
        assert_eq!(
            TreeLockRequest::read(&FsPath::root()).items(),
            Err(LockError::RootLock)
        );
        assert!(matches!(
            TreeLockRequest::copy(&p("/a"), &p("/a/b")),
            Err(LockError::MoveIntoItself { .. })
        ));
        assert!(
            TreeLockRequest::rename(&p("/ab"), &p("/a/b")).is_ok(),
            "component-wise"
        );
    }
}
