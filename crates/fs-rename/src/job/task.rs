//! [`Task`]: what one run of a job does (rename, copy or delete), with what each kind needs
//! before its locks, from its locks and under them.

use fs_locks::{LockClient, LockGuard};
use fs_model::{DocKind, FsPath};
use fs_store::{Scope, SearchRequest, StoredDoc};
use serde_json::Value;

use crate::error::{RenameError, Result};
use crate::kind::JobKind;
use crate::tree::{Entry, FsTree};

/// What a job's check read under its locks.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// The documents at or under the source that the check read, in path order: all of them
    /// if `whole`, else the first page (a rename writes it, then scans the rest). Empty for a
    /// delete, whose check reads no subtree.
    pub subtree: Vec<StoredDoc>,
    /// `subtree` is every document at or under the source.
    pub whole: bool,
}

/// What a run does to the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Task {
    /// Rewrites every document at or under `from` to lie under `to`.
    Rename { from: FsPath, to: FsPath },
    /// Creates a copy of every document at or under `from` under `to`.
    Copy { from: FsPath, to: FsPath },
    /// Deletes every document at or under `path`; a directory with entries only if
    /// `recursive`.
    Delete { path: FsPath, recursive: bool },
}

impl Task {
    /// Returns the task a journal entry of `kind` records. A journaled delete passed its
    /// checks, so finishing it is recursive whatever it was asked.
    pub fn journaled(kind: JobKind, from: FsPath, to: FsPath) -> Task {
        match kind {
            JobKind::Rename => Task::Rename { from, to },
            JobKind::Copy => Task::Copy { from, to },
            JobKind::Delete => Task::Delete {
                path: from,
                recursive: true,
            },
        }
    }

    pub fn kind(&self) -> JobKind {
        match self {
            Task::Rename { .. } => JobKind::Rename,
            Task::Copy { .. } => JobKind::Copy,
            Task::Delete { .. } => JobKind::Delete,
        }
    }

    /// The source: the subtree the job reads (and, but for a copy, changes).
    pub fn from(&self) -> &FsPath {
        match self {
            Task::Rename { from, .. } | Task::Copy { from, .. } => from,
            Task::Delete { path, .. } => path,
        }
    }

    /// The destination; a delete's is its path.
    pub fn to(&self) -> &FsPath {
        match self {
            Task::Rename { to, .. } | Task::Copy { to, .. } => to,
            Task::Delete { path, .. } => path,
        }
    }

    /// The default label of the job's locks: `mv FROM TO`, `cp FROM TO`, `rm PATH`.
    pub fn describe(&self) -> String {
        self.kind()
            .describe(self.from().as_str(), self.to().as_str())
    }

    /// The checks that need no lock: what the paths alone say.
    pub fn check_paths(&self) -> Result<()> {
        match self {
            Task::Rename { from, .. } if from.is_root() => Err(RenameError::RootCannotMove),
            Task::Rename { from, to } if to.is_inside(from) => Err(RenameError::MoveIntoItself {
                from: from.clone(),
                to: to.clone(),
            }),
            Task::Copy { from, to } if to.is_inside(from) => Err(RenameError::CopyIntoItself {
                from: from.clone(),
                to: to.clone(),
            }),
            // The root always exists, so this answer needs no lock (and the root is never
            // locked).
            Task::Rename { to, .. } | Task::Copy { to, .. } if to.is_root() => {
                Err(RenameError::DestinationExists { path: to.clone() })
            }
            Task::Delete { path, .. } if path.is_root() => Err(RenameError::RootCannotDelete),
            _ => Ok(()),
        }
    }

    /// Takes the tree locks of the task: exclusive on source and destination for a rename;
    /// shared on the source (nothing under it changes while it is read) and exclusive on the
    /// destination for a copy; exclusive on the path for a delete.
    pub async fn lock_tree(&self, locks: &LockClient) -> Result<LockGuard> {
        Ok(match self {
            Task::Rename { from, to } => locks.lock_rename(from, to).await?,
            Task::Copy { from, to } => locks.lock_copy(from, to).await?,
            Task::Delete { path, .. } => locks.lock_tree(path).await?,
        })
    }

    /// The checks a task makes once its locks are held; before that their answers are stale.
    /// A rename's or a copy's reads up to `page_size` documents of the source's subtree too.
    pub async fn check(&self, tree: &FsTree, page_size: usize) -> Result<Checked> {
        match self {
            Task::Rename { from, to } | Task::Copy { from, to } => {
                check_source_and_destination(tree, from, to, page_size).await
            }
            Task::Delete { path, recursive } => {
                check_delete(tree, path, *recursive).await?;
                Ok(Checked::default())
            }
        }
    }
}

/// A rename or a copy: the source exists, the destination does not, and its parent is a
/// directory. One search reads the destination and its parent, then (in the same page) the
/// source's subtree in path order, up to `page_size` documents: a subtree that fits needs no
/// count and no scan; a larger one has its first page read. Scopes read in turn
/// ([`Scope::InTurn`]) put the destination and its parent in the page however large the
/// subtree: the check is one round trip at any size.
async fn check_source_and_destination(
    tree: &FsTree,
    from: &FsPath,
    to: &FsPath,
    page_size: usize,
) -> Result<Checked> {
    let Some(parent) = to.parent() else {
        return Err(RenameError::DestinationExists { path: to.clone() });
    };
    let mut scopes = vec![Scope::Exact(to.clone())];
    if !parent.is_root() {
        scopes.push(Scope::Exact(parent.clone()));
    }
    // Room for the destination and its parent before the subtree, and one more document to
    // tell a subtree that fits from one that does not.
    let size = scopes.len() + page_size.max(1) + 1;
    scopes.push(Scope::Subtree(from.clone()));
    let context = format!("checking `{from}` and `{to}`");
    let page = tree
        .store()
        .search(
            tree.index(),
            SearchRequest::single_page(Scope::InTurn(scopes), size),
        )
        .await
        .map_err(RenameError::store(context))?;
    let whole = page.docs.len() < size;
    let subtree = judge(tree, page.docs, (from, to, &parent))?;
    Ok(Checked { subtree, whole })
}

/// Judges what the check read (`docs`: the destination and its parent if they exist, then
/// the source's subtree); returns the documents at or under the source, as read. Only the
/// destination's parent is parsed here: the subtree's documents are parsed where they are
/// written.
fn judge(
    tree: &FsTree,
    docs: Vec<StoredDoc>,
    (from, to, parent): (&FsPath, &FsPath, &FsPath),
) -> Result<Vec<StoredDoc>> {
    let mut subtree = Vec::with_capacity(docs.len());
    let (mut source, mut destination, mut parent_kind) = (false, false, None);
    for stored in docs {
        let path = stored.source.get("path").and_then(Value::as_str);
        if path == Some(to.as_str()) {
            destination = true;
        } else if path == Some(parent.as_str()) {
            let entry = Entry::from_stored(tree.index(), stored)?;
            parent_kind.get_or_insert(entry.doc.kind);
        } else {
            source |= path == Some(from.as_str());
            subtree.push(stored);
        }
    }
    if parent.is_root() {
        parent_kind = Some(DocKind::Dir);
    }
    if !source {
        return Err(RenameError::SourceNotFound { path: from.clone() });
    }
    if destination {
        return Err(RenameError::DestinationExists { path: to.clone() });
    }
    match parent_kind {
        None => Err(RenameError::DestinationParentMissing {
            path: parent.clone(),
        }),
        Some(DocKind::File) => Err(RenameError::DestinationParentNotDir {
            path: parent.clone(),
        }),
        Some(DocKind::Dir) => Ok(subtree),
    }
}

/// A delete: the path exists, and unless `recursive` it is a file or an empty directory.
async fn check_delete(tree: &FsTree, path: &FsPath, recursive: bool) -> Result<()> {
    let Some(entry) = tree.find(path).await? else {
        return Err(RenameError::SourceNotFound { path: path.clone() });
    };
    if recursive || entry.doc.kind == DocKind::File {
        return Ok(());
    }
    let entries = tree
        .store()
        .count(tree.index(), &Scope::Children(path.clone()))
        .await
        .map_err(RenameError::store(format!(
            "counting the entries of `{path}`"
        )))?;
    if entries > 0 {
        return Err(RenameError::DirectoryNotEmpty {
            path: path.clone(),
            entries,
        });
    }
    Ok(())
}
