//! The values that cross the store trait: versions, stored documents, bulk items, search scopes
//! and pages.

use fs_model::FsPath;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::version::Version;

/// A document as read back from the store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDoc {
    /// The document id (`_id`).
    pub id: String,
    /// Its current version.
    pub version: Version,
    /// Its source, always a JSON object.
    pub source: Value,
}

/// One operation of a bulk request.
#[derive(Debug, Clone, PartialEq)]
pub enum BulkOp {
    /// Creates the document; fails with a conflict if the id exists.
    Create {
        /// The document id.
        id: String,
        /// The source, a JSON object.
        source: Value,
    },
    /// Creates or replaces the document, optionally only if it is at `if_version`.
    Index {
        /// The document id.
        id: String,
        /// The source, a JSON object.
        source: Value,
        /// The version the document must be at; `None` writes unconditionally.
        if_version: Option<Version>,
    },
    /// Deletes the document, optionally only if it is at `if_version`.
    Delete {
        /// The document id.
        id: String,
        /// The version the document must be at; `None` deletes unconditionally.
        if_version: Option<Version>,
    },
}

impl BulkOp {
    /// Returns the id of the document this operation writes.
    pub fn id(&self) -> &str {
        match self {
            BulkOp::Create { id, .. } | BulkOp::Index { id, .. } | BulkOp::Delete { id, .. } => id,
        }
    }
}

/// The outcome of one bulk item: the version written (for a delete, the version of the
/// deletion), or why this item failed. Other items are unaffected by one item's failure.
pub type BulkItemResult = Result<Version, crate::StoreError>;

/// A write that goes first and a batch that lands only if it did, in one request and one
/// transaction ([`ChainedBulk::bulk_after`](crate::ChainedBulk::bulk_after) with bulk
/// operations, [`ScriptedUpdates::bulk_update_after`](crate::ScriptedUpdates::bulk_update_after)
/// with scripted updates): a job's journal entry and its first writes, or its entry closed and
/// its locks released, so that neither lands without the other.
///
/// One value rather than five parameters, so that the trait, its wrappers and its stores each
/// name a chained request once.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain<'a, T> {
    /// The index the first write goes to.
    pub first_index: &'a str,
    /// The first write.
    pub first: BulkOp,
    /// The index the batch goes to.
    pub index: &'a str,
    /// Writes that land with the first one or not at all, made right after it: a small
    /// rename's whole rewrite, sent with its journal entry and the release of its locks. Any
    /// of them that fails rolls the transaction back and answers [`Chained::FirstFailed`].
    pub with_first: Option<WithFirst>,
    /// The batch, run only if the first write landed: one result each, in order.
    pub then: Vec<T>,
    /// Whether the batch is made searchable (a refresh of `index`) before the answer, as by
    /// a refreshed bulk request; nothing is refreshed when the first write did not land.
    pub refresh: bool,
}

/// Writes that land together with a chained request's first write, or none of them does
/// ([`Chain::with_first`]).
#[derive(Debug, Clone, PartialEq)]
pub struct WithFirst {
    /// The index they go to.
    pub index: String,
    /// The writes, in order.
    pub ops: Vec<BulkOp>,
    /// Whether they are made searchable (a refresh of `index`) before the answer.
    pub refresh: bool,
}

/// What a chained request did: one write, then (only if it landed) the writes that depend on
/// it, in one transaction ([`ChainedBulk::bulk_after`](crate::ChainedBulk::bulk_after),
/// [`ScriptedUpdates::bulk_update_after`](crate::ScriptedUpdates::bulk_update_after)).
#[derive(Debug)]
pub enum Chained<T> {
    /// The first write did not land (why); nothing else ran.
    FirstFailed(crate::StoreError),
    /// The first write landed at this version, then the rest ran: one result each, in order.
    Ran(Version, Vec<T>),
}

/// Which documents a search or count looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every document in the index, including documents without a `path` field.
    All,
    /// Documents whose `path` field equals the path (one, in a well-formed tree). Meant for a
    /// single page: a store need not keep anything open to page further.
    Exact(FsPath),
    /// Documents whose `path` field equals the path or lies below it, component-wise
    /// (`/clinton` covers `/clinton/a`, not `/clintonx`). The root covers every document that
    /// has a path.
    Subtree(FsPath),
    /// The documents of `Subtree(root)` whose path sorts at or after `start`: the rest of a
    /// subtree read in path order, for a caller that already holds its beginning (a rename's
    /// check reads the first page of a large source). Under locks the subtree does not change
    /// but by the caller, so this needs nothing kept open on the server between the two reads.
    SubtreeFrom {
        /// The subtree.
        root: FsPath,
        /// The first path read (it need not exist).
        start: FsPath,
    },
    /// The directories of `Subtree(root)`: its documents whose `kind` is `dir`. What is left
    /// of a subtree once its files are gone, read without a refresh while a task deletes them
    /// (the task writes no directory, so what is searchable of them is what there is).
    SubtreeDirs(FsPath),
    /// The documents of `SubtreeDirs(root)` whose path sorts at or after `start`: where a scan
    /// of them starts again when its search context is lost.
    SubtreeDirsFrom {
        /// The subtree.
        root: FsPath,
        /// The first path read (it need not exist).
        start: FsPath,
    },
    /// Documents whose `parent` field equals the path: the entries of one directory.
    Children(FsPath),
    /// The documents of `Children(dir)` whose path sorts at or after `start`: a directory's
    /// entries from a name on, for a reader that pages through a large directory at its own
    /// pace (the live page's "show more"), with nothing kept open on the server in between.
    ChildrenFrom {
        /// The directory.
        dir: FsPath,
        /// The first path read (it need not exist).
        start: FsPath,
    },
    /// Documents without a `path` field: nothing of the tree, only what holds an id for it (a
    /// copy's claims, see `fs_model::FsDoc::claim`). Sorted by id, like [`Scope::All`].
    Pathless,
    /// Documents in any of the scopes: what one search reads where a caller would otherwise
    /// send one per scope (a rename's check reads the source's subtree, the destination and
    /// its parent at once). Sorted by path if every scope is.
    AnyOf(Vec<Scope>),
    /// The documents of each scope in turn, in one page: those of the first scope (in its own
    /// order), then those of the second that the first does not hold, and so on. A search of it reads one page and has no next one; a
    /// count counts as [`Scope::AnyOf`]. What a caller reads when some documents must be in
    /// the page whatever the size of the rest: a rename's check puts the destination and its
    /// parent before the source's subtree, so that one search answers for both even when the
    /// subtree is too large to read.
    InTurn(Vec<Scope>),
}

impl Scope {
    /// Returns the documents of this scope whose path sorts at or after `start`, for a scan
    /// that starts again where it had got to (its search context was lost with the node that
    /// held it); `None` for a scope that is not read in path order from a path on.
    pub fn from_path(&self, start: &FsPath) -> Option<Scope> {
        match self {
            Scope::Subtree(root) | Scope::SubtreeFrom { root, .. } => Some(Scope::SubtreeFrom {
                root: root.clone(),
                start: start.clone(),
            }),
            Scope::SubtreeDirs(root) | Scope::SubtreeDirsFrom { root, .. } => {
                Some(Scope::SubtreeDirsFrom {
                    root: root.clone(),
                    start: start.clone(),
                })
            }
            Scope::Children(dir) | Scope::ChildrenFrom { dir, .. } => Some(Scope::ChildrenFrom {
                dir: dir.clone(),
                start: start.clone(),
            }),
            _ => None,
        }
    }

    /// Returns true if a search of this scope is sorted by path (then id); the others are
    /// sorted by id, or not at all ([`Scope::InTurn`] by scope first).
    pub fn sorted_by_path(&self) -> bool {
        match self {
            Scope::All | Scope::Pathless | Scope::InTurn(_) => false,
            Scope::AnyOf(scopes) => scopes.iter().all(Scope::sorted_by_path),
            Scope::Exact(_)
            | Scope::Subtree(_)
            | Scope::SubtreeFrom { .. }
            | Scope::SubtreeDirs(_)
            | Scope::SubtreeDirsFrom { .. }
            | Scope::Children(_)
            | Scope::ChildrenFrom { .. } => true,
        }
    }
}

/// An opaque position in a sorted search, to resume after (Elasticsearch's `search_after`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor(pub Value);

/// A request for one page of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// Which documents.
    pub scope: Scope,
    /// At most this many documents in the page.
    pub size: usize,
    /// Resume after this position; `None` starts at the beginning.
    pub after: Option<Cursor>,
    /// The caller will not ask for a second page (it knows the scope holds fewer than `size`
    /// documents), so the store need not keep anything open to page further. The page then
    /// has no cursor.
    pub single_page: bool,
}

impl SearchRequest {
    /// Refuses a cursor on a search of [`Scope::InTurn`], which is read in one page: what
    /// every store answers the same way.
    pub(crate) fn one_page_in_turn(&self, context: &str) -> crate::error::Result<()> {
        match &self.after {
            Some(cursor) => Err(crate::error::StoreError::rejected(
                context,
                format!(
                    "scopes in turn are read in one page: no cursor ({})",
                    cursor.0
                ),
            )),
            None => Ok(()),
        }
    }

    /// Returns a request for the first page of `scope`, `size` documents at most. Callers
    /// that page read through [`Scan`](crate::Scan), which closes what the search keeps open.
    pub fn first(scope: Scope, size: usize) -> SearchRequest {
        SearchRequest {
            scope,
            size,
            after: None,
            single_page: false,
        }
    }

    /// Returns a request for the only page the caller wants: up to `size` documents of
    /// `scope`, with nothing kept open for more.
    pub fn single_page(scope: Scope, size: usize) -> SearchRequest {
        SearchRequest {
            scope,
            size,
            after: None,
            single_page: true,
        }
    }
}

/// One page of search results.
///
/// Path scopes ([`Scope::Subtree`], [`Scope::Children`]) are sorted by `path` (UTF-8 byte
/// order), ties broken in a backend-specific but stable order; [`Scope::All`] is in a
/// backend-specific stable order. Pages are not a snapshot: each sees the documents searchable
/// when it is fetched.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The documents, with their versions.
    pub docs: Vec<StoredDoc>,
    /// Where the next page starts; `None` when this page was the last (and the store has
    /// closed whatever it kept open for the search). A caller that does not go on passes it to
    /// [`HeldCursors::close_cursor`](crate::HeldCursors::close_cursor).
    pub next: Option<Cursor>,
}
