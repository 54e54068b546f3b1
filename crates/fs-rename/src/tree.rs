//! [`FsTree`]: the tree index as a set of paths: setting it up, finding a path, adding entries.

use std::sync::Arc;

use fs_model::{
    journal_index_name, lock_index_body_with, lock_index_name, tree_index_body_with, DocKind,
    FsDoc, FsPath, IndexLayout,
};
use fs_store::{Scan, Scope, SearchRequest, SharedStore, StoredDoc, Version};

use crate::error::{RenameError, Result};
use crate::fresh::{create_fresh, Fresh};

/// The largest number of documents written in one bulk request.
pub const BULK_BATCH: usize = 1_000;

/// A tree document as found in the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The document id (stable across renames).
    pub id: String,
    /// Its version when read.
    pub version: Version,
    /// The document.
    pub doc: FsDoc,
}

impl Entry {
    /// Reads a stored document as a tree entry.
    ///
    /// # Errors
    /// [`RenameError::BadDocument`] if the source is not a valid [`FsDoc`].
    pub fn from_stored(index: &str, stored: StoredDoc) -> Result<Entry> {
        let doc: FsDoc =
            serde_json::from_value(stored.source).map_err(|e| RenameError::BadDocument {
                index: index.to_owned(),
                id: stored.id.clone(),
                message: e.to_string(),
            })?;
        Ok(Entry {
            id: stored.id,
            version: stored.version,
            doc,
        })
    }
}

/// The tree index (and its lock index) on a store.
#[derive(Debug, Clone)]
pub struct FsTree {
    store: SharedStore,
    index: String,
    layout: IndexLayout,
}

impl FsTree {
    /// Returns the tree in `index` on `store`, whose indices, if [`FsTree::ensure_indices`]
    /// creates them, get the server's default shards and replicas.
    pub fn new(store: SharedStore, index: impl Into<String>) -> FsTree {
        FsTree {
            store,
            index: index.into(),
            layout: IndexLayout::default(),
        }
    }

    /// Returns this tree with the shards and replicas its indices get when
    /// [`FsTree::ensure_indices`] creates them: the tree index takes both, the lock and
    /// journal indices stay on one shard and take the replicas. An index that exists keeps its
    /// own; the embedded store has neither. Default: [`IndexLayout::default`], the server's
    /// defaults.
    pub fn with_layout(mut self, layout: IndexLayout) -> FsTree {
        self.layout = layout;
        self
    }

    /// Returns the layout its indices get when they are created.
    pub fn layout(&self) -> &IndexLayout {
        &self.layout
    }

    /// Returns the store.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// Returns the tree index's name.
    pub fn index(&self) -> &str {
        &self.index
    }

    /// Returns the lock index's name (`<index>-lock`).
    pub fn lock_index(&self) -> String {
        lock_index_name(&self.index)
    }

    /// Creates the tree index, the lock index and the journal index if they are missing, with
    /// the tree's layout ([`FsTree::with_layout`]), the three at once. Asks first whether all
    /// three exist, which on Elasticsearch is one request where creating them is three: every
    /// process that starts a job does this.
    ///
    /// # Errors
    /// [`RenameError::Store`] if the store refuses.
    pub async fn ensure_indices(&self) -> Result<()> {
        let (lock_index, journal_index) = (self.lock_index(), journal_index_name(&self.index));
        let all = [self.index.as_str(), &lock_index, &journal_index];
        let context = format!("looking for indices {}", all.join(", "));
        if self
            .store
            .indices_exist(&all)
            .await
            .map_err(RenameError::store(context))?
        {
            return Ok(());
        }
        // Created together: on Elasticsearch each creation waits for its shards to start
        // (a few hundred milliseconds), a fixed cost of every first run.
        let tree = async {
            let context = format!("creating index `{}`", self.index);
            self.store
                .create_index(&self.index, &tree_index_body_with(&self.layout))
                .await
                .map_err(RenameError::store(context))
        };
        let lock = async {
            let context = format!("creating index `{lock_index}`");
            self.store
                .create_index(&lock_index, &lock_index_body_with(&self.layout))
                .await
                .map_err(RenameError::store(context))
        };
        let journal = crate::journal::Journal::new(self.store.clone(), &self.index);
        futures::try_join!(tree, lock, journal.ensure_index_with(&self.layout))?;
        Ok(())
    }

    /// Makes every write so far visible to [`FsTree::find`] and scans.
    ///
    /// # Errors
    /// [`RenameError::Store`].
    pub async fn refresh(&self) -> Result<()> {
        let context = format!("refreshing `{}`", self.index);
        self.store
            .refresh(&self.index)
            .await
            .map_err(RenameError::store(context))
    }

    /// Returns the entry at `path`, as of the last refresh; `None` if there is none. The root
    /// has an entry only if one was written.
    ///
    /// Reads one page of an exact-path search, which keeps nothing open on the store; more
    /// than one hit means a broken tree, which `fsck` reports, and the first is returned.
    ///
    /// # Errors
    /// [`RenameError::Store`], [`RenameError::BadDocument`].
    pub async fn find(&self, path: &FsPath) -> Result<Option<Entry>> {
        let request = SearchRequest::single_page(Scope::Exact(path.clone()), 1);
        let context = format!("looking up `{path}`");
        let page = self
            .store
            .search(&self.index, request)
            .await
            .map_err(RenameError::store(context))?;
        match page.docs.into_iter().next() {
            Some(hit) => {
                let entry = Entry::from_stored(&self.index, hit)?;
                Ok((entry.doc.path == *path).then_some(entry))
            }
            None => Ok(None),
        }
    }

    /// Returns up to `size` entries that `query` asks for (a name pattern, words of the
    /// content, under a path; see [`fs_model::FindQuery`]), the most relevant first when it
    /// asks for words, by path otherwise. Their documents come without `content`. It sees what
    /// the store has made searchable (every job refreshes before it releases its locks).
    ///
    /// # Errors
    /// Store failures; [`RenameError::BadDocument`] for a hit that is not a tree document.
    pub async fn find_matching(
        &self,
        query: &fs_model::FindQuery,
        size: usize,
    ) -> Result<Vec<Entry>> {
        let context = format!("searching under `{}`", query.under);
        let hits = self
            .store
            .find(&self.index, query, size)
            .await
            .map_err(RenameError::store(context))?;
        hits.into_iter()
            .map(|hit| Entry::from_stored(&self.index, hit))
            .collect()
    }

    /// Returns whether `path` is a directory: the root always is; otherwise as found.
    ///
    /// # Errors
    /// As [`FsTree::find`].
    pub async fn kind_of(&self, path: &FsPath) -> Result<Option<DocKind>> {
        if path.is_root() {
            return Ok(Some(DocKind::Dir));
        }
        Ok(self.find(path).await?.map(|e| e.doc.kind))
    }

    /// Returns how many documents lie at or under `path` (as of the last refresh).
    ///
    /// # Errors
    /// [`RenameError::Store`].
    pub async fn count_under(&self, path: &FsPath) -> Result<u64> {
        let context = format!("counting under `{path}`");
        self.store
            .count(&self.index, &Scope::Subtree(path.clone()))
            .await
            .map_err(RenameError::store(context))
    }

    /// Adds documents with fresh ids, in bulk batches; returns their ids. Does not check
    /// parents (callers building a tree add parents first). A batch whose answer was lost or
    /// replayed is sent again: a fresh id's create is safe to resend ([`crate::fresh`]).
    ///
    /// # Errors
    /// [`RenameError::Store`] naming the first document the store refused.
    pub async fn insert_all(&self, docs: Vec<FsDoc>) -> Result<Vec<String>> {
        let mut ids = Vec::with_capacity(docs.len());
        for batch in docs.chunks(BULK_BATCH) {
            let mut fresh = Vec::with_capacity(batch.len());
            for doc in batch {
                let id = FsDoc::new_id();
                let source = serde_json::to_value(doc).map_err(|e| RenameError::BadDocument {
                    index: self.index.clone(),
                    id: id.clone(),
                    message: e.to_string(),
                })?;
                ids.push(id.clone());
                fresh.push(Fresh {
                    id,
                    source,
                    name: doc.path.to_string(),
                });
            }
            let context = format!("adding {} documents to `{}`", fresh.len(), self.index);
            create_fresh(&self.store, &self.index, &fresh, &context).await?;
        }
        Ok(ids)
    }

    /// Pages through every document at or under `path` (the whole tree for the root), `size`
    /// at a time, calling `each` with every page (none if there is nothing). Closes what the
    /// store keeps open for the scan however it ends, `each` failing included.
    ///
    /// # Errors
    /// [`RenameError::Store`], [`RenameError::BadDocument`], or whatever `each` returns.
    pub async fn for_each_page<F>(&self, path: &FsPath, size: usize, each: F) -> Result<()>
    where
        F: FnMut(Vec<Entry>) -> Result<()>,
    {
        self.for_each_page_of(Scope::Subtree(path.clone()), size, each)
            .await
    }

    /// [`FsTree::for_each_page`] of any scope (several subtrees at once, say).
    ///
    /// # Errors
    /// As [`FsTree::for_each_page`].
    pub async fn for_each_page_of<F>(&self, scope: Scope, size: usize, mut each: F) -> Result<()>
    where
        F: FnMut(Vec<Entry>) -> Result<()>,
    {
        let what = scope_name(&scope);
        let mut scan = Scan::new(Arc::clone(&self.store), &self.index, scope, size);
        let scanned = async {
            let context = || format!("scanning {what}");
            while let Some(page) = next_entries(&mut scan, &self.index, context).await? {
                each(page.collect::<Result<Vec<_>>>()?)?;
            }
            Ok(())
        }
        .await;
        scan.close().await;
        scanned
    }
}

/// Reads the next page of `scan`, a scan of `index`: its documents as entries, each read as
/// it is taken (a caller that stops early never reads the rest), or `None` once the scan is
/// done. `context` says what the scan is for, in a failure's message.
///
/// # Errors
/// [`RenameError::Store`] if the page cannot be read; each entry is
/// [`RenameError::BadDocument`] if its document is not a tree document.
pub(crate) async fn next_entries<'i>(
    scan: &mut Scan,
    index: &'i str,
    context: impl FnOnce() -> String,
) -> Result<Option<impl Iterator<Item = Result<Entry>> + 'i>> {
    let page = scan
        .next_page()
        .await
        .map_err(RenameError::store(context()))?;
    Ok(page.map(|docs| {
        docs.into_iter()
            .map(move |doc| Entry::from_stored(index, doc))
    }))
}

/// What a scan of `scope` reads, in a failure's message.
fn scope_name(scope: &Scope) -> String {
    match scope {
        Scope::Subtree(path) => format!("under `{path}`"),
        Scope::AnyOf(scopes) => format!("{} parts of the tree", scopes.len()),
        other => format!("{other:?}"),
    }
}
