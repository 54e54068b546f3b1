//! Consistent reads: a listing ([`list_consistent`]) and a check ([`fsck_consistent`]) made
//! under a shared lock (S) on the subtree read, so that nothing in it is renamed, copied over
//! or deleted while it is read. Without it a listing pages through a tree that may change
//! between two pages, and shows, say, part of a directory before a rename and part after.
//!
//! The lock is taken before the read and released after it, whatever happened (a failed read,
//! a reader gone); the store is refreshed once it is held, so the read sees every write made
//! before. The root cannot be read this way: writers lock only below it, so a shared lock on
//! `/` would keep none of them out, and these functions say so
//! ([`RenameError::RootNotLockable`]) rather than read without a lock.

use std::sync::Arc;

use fs_model::{DocKind, FsPath};
use fs_store::SharedStore;

use crate::error::{RenameError, Result};
use crate::fsck::{fsck_ignoring, FsckReport};
use crate::ops::{list, under_lock, LockSettings};
use crate::tree::{Entry, FsTree};

/// Calls `each` with the entries directly in `path` (or, `recursive`, everything under it),
/// in path order, while a shared lock on `path` keeps every writer out of it; if `path` is a
/// file, `each` is called once, with it. `holder` labels the lock (`ls -R /a`, say).
///
/// # Errors
/// [`RenameError::RootNotLockable`] for `/`; a lock timeout (or another lock error);
/// [`RenameError::SourceNotFound`] if nothing is at `path` once the lock is held; store
/// failures, or whatever `each` returns; a lost lease if the lock was not certainly ours
/// until the read ended: what `each` was given is then no single state of the subtree, and a
/// caller that streams it says so.
pub async fn list_consistent<F>(
    tree: &FsTree,
    locks: &LockSettings,
    holder: impl Into<String>,
    path: &FsPath,
    recursive: bool,
    mut each: F,
) -> Result<()>
where
    F: FnMut(&Entry) -> Result<()>,
{
    if path.is_root() {
        return Err(RenameError::RootNotLockable);
    }
    let client = locks.client(tree, holder.into());
    let guard = client.lock_read(path).await?;
    under_lock(guard, async {
        tree.refresh().await?;
        let Some(top) = tree.find(path).await? else {
            return Err(RenameError::SourceNotFound { path: path.clone() });
        };
        if top.doc.kind == DocKind::File {
            each(&top)?;
        } else {
            list(tree.store(), tree.index(), path, recursive, each).await?;
        }
        still_held(&client, path).await
    })
    .await
}

/// Runs [`fsck`](crate::fsck()) on `scope` while a shared lock on it keeps every writer out:
/// the report describes one state of the subtree, not a mix of the states it went through
/// while it was read. `holder` labels the lock; the lock documents held by this check alone
/// are left out of the report's lock counts.
///
/// # Errors
/// [`RenameError::RootNotLockable`] for `/`; a lock error (a lost lease if the lock was not
/// certainly ours until the check ended); as [`fsck`](crate::fsck()).
pub async fn fsck_consistent(
    store: SharedStore,
    index: &str,
    scope: &FsPath,
    locks: &LockSettings,
    holder: impl Into<String>,
) -> Result<FsckReport> {
    if scope.is_root() {
        return Err(RenameError::RootNotLockable);
    }
    let tree = FsTree::new(Arc::clone(&store), index);
    let client = locks.client(&tree, holder.into());
    let guard = client.lock_read(scope).await?;
    let own = client.owner().process_id.clone();
    under_lock(guard, async {
        let report = fsck_ignoring(store, index, scope, Some(&own)).await?;
        still_held(&client, scope).await?;
        Ok(report)
    })
    .await
}

/// Fails unless the shared lock on `path` was ours all through the read just made. A reader
/// paused past its lease (a stalled request, a stopped process) may have been reaped by
/// `recover`, and writers may have changed the subtree under it since: what it read is then
/// no single state of the subtree, and saying so is the only honest answer. Checked after the
/// read, since a lease that is still good now was good all along (an expired lock refuses
/// every other grant until a recoverer removes it, and a removed one is never ours again).
async fn still_held(client: &fs_locks::LockClient, path: &FsPath) -> Result<()> {
    client.ensure_held(path.as_str()).await?;
    Ok(())
}
