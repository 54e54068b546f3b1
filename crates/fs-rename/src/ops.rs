//! Small tree operations under locks: making directories and files, listing.
//!
//! Creating a document at a path takes the exclusive tree lock on that path, since ids are
//! random and two jobs creating the same path at once would otherwise both succeed.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;

use fs_locks::{LockClient, LockGuard, LockProtocol, Orphans};
use fs_model::{DocKind, FsDoc, FsPath};
use fs_store::{BulkOp, Scan, Scope, SharedStore, READ_PAGE};
use serde_json::Value;

use crate::error::{RenameError, Result};
use crate::lease_bound::within_lease;
use crate::tree::{next_entries, Entry, FsTree};

/// How tree operations take their locks.
#[derive(Clone)]
pub struct LockSettings {
    /// The lease of the locks. Default: 30 s.
    pub lease: Duration,
    /// How long to wait for them. Default: 30 s.
    pub wait: Duration,
    /// How lock documents are written. Default: automatic.
    pub protocol: LockProtocol,
    /// What an acquisition does about a lock whose holder died (see [`Orphans`]). Default:
    /// none: it waits until recovery clears it.
    pub orphans: Option<Arc<dyn Orphans>>,
}

impl std::fmt::Debug for LockSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockSettings")
            .field("lease", &self.lease)
            .field("wait", &self.wait)
            .field("protocol", &self.protocol)
            .field("orphans", &self.orphans.is_some())
            .finish()
    }
}

impl Default for LockSettings {
    fn default() -> LockSettings {
        LockSettings {
            lease: Duration::from_secs(30),
            wait: Duration::from_secs(30),
            protocol: LockProtocol::Auto,
            orphans: None,
        }
    }
}

impl LockSettings {
    /// Returns a lock client for one operation on `tree`, labelled `holder`.
    pub fn client(&self, tree: &FsTree, holder: String) -> LockClient {
        let builder = LockClient::builder(Arc::clone(tree.store()), tree.lock_index())
            .holder(holder)
            .lease(self.lease)
            .wait(self.wait)
            .protocol(self.protocol);
        match &self.orphans {
            Some(orphans) => builder.orphans(Arc::clone(orphans)),
            None => builder,
        }
        .build()
    }
}

/// Runs `work` while `guard`'s locks are held, then releases them whatever happened; the
/// work's error wins over a release error.
pub(crate) async fn under_lock<T>(
    guard: LockGuard,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    let result = work.await;
    let released = guard.release().await;
    let value = result?;
    released?;
    Ok(value)
}

/// [`under_lock`] for work that writes to the tree. Work that ends well has made its writes
/// searchable itself; work that fails is followed by a refresh here, before the locks go. So
/// the next holder of these locks sees every write without a refresh of its own: the rule
/// every writer keeps, on which a job's check relies (see `docs/locking.md`). If that refresh
/// fails, the locks are left to expire instead: the server makes writes searchable by itself
/// within its refresh interval (a second by default), long before a lease runs out.
pub(crate) async fn under_write_lock<T>(
    tree: &FsTree,
    mut guard: LockGuard,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    let result = work.await;
    if result.is_err() {
        if let Err(e) = tree.refresh().await {
            tracing::warn!(error = %e, "could not make a failed write searchable; its locks stay until their lease ends");
            guard.keep_on_drop();
            drop(guard);
            return result;
        }
    }
    under_lock(guard, async { result }).await
}

/// [`under_write_lock`] for work that ends with its one write (`mkdir`, `touch`): once that
/// write is made, the operation has happened, and nothing after it may report it failed (a
/// client told "failed" believes nothing changed: the Jepsen-style test found `mkdir`
/// reported failed, its directory there, when the release of its lock failed). So the refresh
/// and the release that follow a write only warn: a refresh that fails leaves the locks to
/// expire (as [`under_write_lock`] does), a release that fails leaves them to their lease.
pub(crate) async fn under_single_write<T>(
    tree: &FsTree,
    mut guard: LockGuard,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    let value = match work.await {
        Ok(value) => value,
        failed @ Err(_) => return under_write_lock(tree, guard, async { failed }).await,
    };
    if let Err(e) = tree.refresh().await {
        tracing::warn!(error = %e, "done, but could not make the write searchable: its locks stay until their lease ends");
        guard.keep_on_drop();
        return Ok(value);
    }
    if let Err(e) = guard.release().await {
        tracing::warn!(error = %e, "done, but its locks were not released: they expire with their lease");
    }
    Ok(value)
}

/// What [`mkdir`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    /// Directories created, parents first.
    pub created: Vec<FsPath>,
}

/// Returns now in epoch milliseconds.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Creates the directory `path`; with `parents`, also its missing ancestors, and an existing
/// directory is not an error (`mkdir -p`).
///
/// # Errors
/// [`RenameError::AlreadyExists`] if `path` exists (without `parents`, or as a file);
/// [`RenameError::DestinationParentMissing`] / [`RenameError::DestinationParentNotDir`];
/// lock and store failures.
pub async fn mkdir(
    tree: &FsTree,
    locks: &LockSettings,
    path: &FsPath,
    parents: bool,
) -> Result<Made> {
    if path.is_root() {
        return if parents {
            Ok(Made {
                created: Vec::new(),
            })
        } else {
            Err(RenameError::AlreadyExists {
                path: path.clone(),
                what: ": it is the root (mkdir -p accepts an existing directory)",
            })
        };
    }
    let mut created = Vec::new();
    let mut targets: Vec<FsPath> = if parents {
        path.ancestors().into_iter().skip(1).collect()
    } else {
        Vec::new()
    };
    targets.push(path.clone());
    for target in targets {
        let is_last = &target == path;
        if create(
            tree,
            locks,
            FsDoc::dir(target.clone(), now_ms()),
            !is_last || parents,
        )
        .await?
        {
            created.push(target);
        }
    }
    Ok(Made { created })
}

/// Creates an empty file at `path`, or updates the modification time of an existing file.
///
/// # Errors
/// As [`mkdir`]; [`RenameError::AlreadyExists`] if `path` is a directory.
pub async fn touch(tree: &FsTree, locks: &LockSettings, path: &FsPath) -> Result<()> {
    if path.is_root() {
        return Err(RenameError::AlreadyExists {
            path: path.clone(),
            what: TOUCH_ON_DIR,
        });
    }
    let client = locks.client(tree, format!("touch {path}"));
    let guard = client.lock_tree(path).await?;
    under_single_write(tree, guard, async {
        tree.refresh().await?;
        check_parent(tree, path).await?;
        match tree.find(path).await? {
            Some(entry) if entry.doc.kind == DocKind::File => {
                let mut doc = entry.doc;
                doc.modified = now_ms();
                let source = to_source(tree, &entry.id, &doc)?;
                let ops = vec![BulkOp::Index {
                    id: entry.id,
                    source,
                    if_version: Some(entry.version),
                }];
                within_lease(&client, path, write(tree, ops, path)).await
            }
            Some(_) => Err(RenameError::AlreadyExists {
                path: path.clone(),
                what: TOUCH_ON_DIR,
            }),
            None => {
                let doc = FsDoc::file(path.clone(), 0, now_ms());
                within_lease(&client, path, tree.insert_all(vec![doc]))
                    .await
                    .map(|_| ())
            }
        }
    })
    .await
}

/// What `touch` says of a directory at its path.
const TOUCH_ON_DIR: &str = " as a directory: touch makes or updates files";

/// Creates `doc` under the exclusive lock on its path; returns false if a directory was there
/// already and `existing_dir_ok`.
async fn create(
    tree: &FsTree,
    locks: &LockSettings,
    doc: FsDoc,
    existing_dir_ok: bool,
) -> Result<bool> {
    let path = doc.path.clone();
    let client = locks.client(tree, format!("mkdir {path}"));
    let guard = client.lock_tree(&path).await?;
    under_single_write(tree, guard, async {
        tree.refresh().await?;
        match tree.find(&path).await? {
            Some(e) if e.doc.kind == DocKind::Dir && existing_dir_ok => return Ok(false),
            Some(e) => {
                return Err(RenameError::AlreadyExists {
                    path: path.clone(),
                    what: if e.doc.kind == DocKind::Dir {
                        " as a directory (mkdir -p accepts an existing directory)"
                    } else {
                        " as a file"
                    },
                })
            }
            None => {}
        }
        check_parent(tree, &path).await?;
        within_lease(&client, &path, tree.insert_all(vec![doc])).await?;
        Ok(true)
    })
    .await
}

async fn check_parent(tree: &FsTree, path: &FsPath) -> Result<()> {
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    match tree.kind_of(&parent).await? {
        Some(DocKind::Dir) => Ok(()),
        Some(DocKind::File) => Err(RenameError::DestinationParentNotDir { path: parent }),
        None => Err(RenameError::DestinationParentMissing { path: parent }),
    }
}

pub(crate) fn to_source(tree: &FsTree, id: &str, doc: &FsDoc) -> Result<Value> {
    serde_json::to_value(doc).map_err(|e| RenameError::BadDocument {
        index: tree.index().to_owned(),
        id: id.to_owned(),
        message: e.to_string(),
    })
}

async fn write(tree: &FsTree, ops: Vec<BulkOp>, path: &FsPath) -> Result<()> {
    let context = format!("writing `{path}`");
    let results = tree
        .store()
        .bulk(tree.index(), ops)
        .await
        .map_err(RenameError::store(context.clone()))?;
    for result in results {
        result.map_err(RenameError::store(context.clone()))?;
    }
    Ok(())
}

/// Returns the entry at `path` (the root is a directory even without a document).
///
/// # Errors
/// [`RenameError::SourceNotFound`] if nothing is there.
pub async fn stat(tree: &FsTree, path: &FsPath) -> Result<Entry> {
    tree.refresh().await?;
    if let Some(entry) = tree.find(path).await? {
        return Ok(entry);
    }
    if path.is_root() {
        return Ok(Entry {
            id: String::new(),
            version: fs_store::Version {
                seq_no: -1,
                primary_term: -1,
            },
            doc: FsDoc::dir(FsPath::root(), 0),
        });
    }
    Err(RenameError::SourceNotFound { path: path.clone() })
}

/// Calls `each` with the entries directly in `dir` (or, `recursive`, everything under it), in
/// path order, a page at a time. Sees what was refreshed; call [`FsTree::refresh`] first.
///
/// # Errors
/// Store failures, or whatever `each` returns.
pub async fn list<F>(
    store: &SharedStore,
    index: &str,
    dir: &FsPath,
    recursive: bool,
    mut each: F,
) -> Result<()>
where
    F: FnMut(&Entry) -> Result<()>,
{
    let scope = if recursive {
        Scope::Subtree(dir.clone())
    } else {
        Scope::Children(dir.clone())
    };
    scan_entries(store, index, dir, scope, READ_PAGE, |entry| {
        if !(recursive && entry.doc.path == *dir) {
            // A reader that goes away (`ls | head`) stops the listing here.
            each(&entry)?;
        }
        Ok(ControlFlow::Continue(()))
    })
    .await
}

/// Reads `scope` (a listing of `dir`) in pages of `page`, giving `each` every entry until it
/// breaks; closes the search on every way out.
async fn scan_entries(
    store: &SharedStore,
    index: &str,
    dir: &FsPath,
    scope: Scope,
    page: usize,
    mut each: impl FnMut(Entry) -> Result<ControlFlow<()>>,
) -> Result<()> {
    let mut scan = Scan::new(Arc::clone(store), index, scope, page);
    let read = async {
        let context = || format!("listing `{dir}`");
        while let Some(page) = next_entries(&mut scan, index, context).await? {
            for entry in page {
                if each(entry?)?.is_break() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
    .await;
    scan.close().await;
    read
}

/// One page of a listing: the entries found, and whether more follow.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// At most the limit asked for, in path order.
    pub entries: Vec<Entry>,
    /// More entries follow the last one: ask again with it as `after`.
    pub more: bool,
}

/// Returns, in path order, up to `limit` of the entries directly in `dir` (or, `recursive`,
/// everything under it) that `keep` keeps, from just after the path `after` on: a listing
/// read a page at a time by a caller that comes back when it likes (the live page's "show
/// more"). Each page is one fresh search from `after`, with nothing kept open in between, so
/// a directory of a million entries costs each page only its own entries (recursive listings
/// read, and skip, what `keep` does not keep). Sees what was refreshed.
///
/// # Errors
/// Store failures.
pub async fn list_page(
    store: &SharedStore,
    index: &str,
    dir: &FsPath,
    recursive: bool,
    after: Option<&FsPath>,
    limit: usize,
    keep: impl Fn(&Entry) -> bool,
) -> Result<Listed> {
    let scope = match (recursive, after) {
        (false, None) => Scope::Children(dir.clone()),
        (false, Some(start)) => Scope::ChildrenFrom {
            dir: dir.clone(),
            start: start.clone(),
        },
        (true, None) => Scope::Subtree(dir.clone()),
        (true, Some(start)) => Scope::SubtreeFrom {
            root: dir.clone(),
            start: start.clone(),
        },
    };
    // One more than asked for tells whether more follow.
    let page = limit.saturating_add(1).min(1_000);
    let mut listed = Listed::default();
    scan_entries(store, index, dir, scope, page, |entry| {
        let skipped = (recursive && entry.doc.path == *dir)
            || Some(&entry.doc.path) == after
            || !keep(&entry);
        if skipped {
            return Ok(ControlFlow::Continue(()));
        }
        if listed.entries.len() == limit {
            listed.more = true;
            return Ok(ControlFlow::Break(()));
        }
        listed.entries.push(entry);
        Ok(ControlFlow::Continue(()))
    })
    .await?;
    Ok(listed)
}
