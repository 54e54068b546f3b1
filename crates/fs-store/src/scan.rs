//! [`Scan`]: a paged search read page by page, which closes what the store keeps open for it
//! on every way out.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use fs_model::FsPath;
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::retry::{Backoff, Jitter, RetryPolicy};
use crate::store::SharedStore;
use crate::types::{Cursor, Scope, SearchRequest, StoredDoc};

/// The page of a scan that reads a whole subtree in path order and writes nothing (`fsck`,
/// `ls -R`, the indexer's merge with the walk). On Elasticsearch a page sorted by path costs the
/// server a pass over every document the query matches, whatever the page's size, so a full
/// read costs documents / page passes: 1 001 001 documents read in pages of 5 000 took 52.6 s
/// where pages of 1 000 took 79.9 s (`docs/scale.md`). It stays well under the server's result
/// window (10 000 by default), and a page costs the client a few megabytes.
pub const READ_PAGE: usize = 5_000;

/// Reads the documents of a scope a page at a time, and closes what the store keeps open
/// for the search (a point in time or a scroll on Elasticsearch) however the reading ends.
///
/// Reading to the end, or a failed page, closes it by itself. A caller that stops earlier
/// calls [`Scan::close`], on every path, errors included: run the loop in an inner block,
/// then close, then return the loop's result. A scan dropped open (its task was cancelled)
/// closes in a task spawned on the current runtime, as a last resort: in a process that
/// exits next, that task never runs.
///
/// ```
/// use std::sync::Arc;
/// use fs_store::{DocStore, Scan, Scope, SharedStore, SqliteStore, StoreError};
/// use serde_json::json;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store: SharedStore = Arc::new(SqliteStore::in_memory()?);
/// store.create_index("fs-lock", &json!({})).await?;
/// for path in ["/a", "/b", "/c"] {
///     store.create("fs-lock", path, json!({"path": path})).await?;
/// }
/// let mut scan = Scan::new(Arc::clone(&store), "fs-lock", Scope::All, 2);
/// let first = async {
///     // Stops after the first page, however many there are.
///     Ok::<_, StoreError>(scan.next_page().await?.unwrap_or_default().len())
/// }
/// .await;
/// scan.close().await;
/// assert_eq!(first?, 2);
/// # Ok::<(), StoreError>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Scan {
    store: SharedStore,
    index: String,
    request: SearchRequest,
    /// The cursor of the next page: what the store may keep open for this scan.
    open: Option<Cursor>,
    /// The last page was read, or a page failed, or the scan was closed.
    done: bool,
    /// Where the scan had got to, for a scope read in path order: it starts again from there
    /// when its search context is lost.
    reached: Option<Reached>,
    /// The pauses before fresh starts from `reached` after continuations that failed in a
    /// row: begun again by each page read.
    restarts: Backoff,
}

/// How many failed continuations in a row a scan starts again after; the next failure is
/// returned.
const MAX_RESTARTS: u32 = 10;

/// The pauses before a fresh start: 100 ms doubling to 1.6 s (each at least half of that),
/// for [`MAX_RESTARTS`] restarts in a row, time for a failed node's shards to move.
const RESTARTS: RetryPolicy =
    RetryPolicy::new(Duration::from_millis(100), Duration::from_millis(1_600))
        .jitter(Jitter::Equal)
        .attempts(MAX_RESTARTS);

/// The last path a scan returned, and the ids it returned at that path: a fresh start from
/// that path (inclusive) leaves those out.
#[derive(Debug, Clone)]
struct Reached {
    path: FsPath,
    ids: HashSet<String>,
}

impl Scan {
    /// Starts a scan of `scope` in `index`, `page_size` documents a page. Nothing is sent
    /// before the first [`Scan::next_page`].
    pub fn new(
        store: SharedStore,
        index: impl Into<String>,
        scope: Scope,
        page_size: usize,
    ) -> Scan {
        Scan::with_request(store, index, SearchRequest::first(scope, page_size))
    }

    /// Starts a scan of one page of up to `size` documents of `scope`, for a caller that knows
    /// the scope holds fewer: the store keeps nothing open for it.
    pub fn single_page(
        store: SharedStore,
        index: impl Into<String>,
        scope: Scope,
        size: usize,
    ) -> Scan {
        Scan::with_request(store, index, SearchRequest::single_page(scope, size))
    }

    fn with_request(store: SharedStore, index: impl Into<String>, request: SearchRequest) -> Scan {
        Scan {
            store,
            index: index.into(),
            request,
            open: None,
            done: false,
            reached: None,
            restarts: RESTARTS.start(),
        }
    }

    /// Returns the next page's documents, or `None` once there are no more (never an empty
    /// page). The last page, and a failed one, close what the store kept open.
    ///
    /// Cancel-safe: dropped before it returns, it leaves the scan's cursor in place, so that
    /// [`Scan::close`] (or the drop of the scan) still closes what the store keeps open.
    ///
    /// A continuation that fails (its point in time or scroll died with the node that held
    /// it, its answer was lost, or some shards did not answer) does not end a scan of a scope
    /// read in path order: it starts again with a fresh search from the last path it
    /// returned, leaving out the documents it returned at that path, up to ten
    /// times in a row. Nothing is returned twice and nothing is skipped, provided the
    /// documents from that path on did not change meanwhile (a scan under the locks of its
    /// subtree, whose holder writes only what the scan has returned).
    ///
    /// # Errors
    /// The store's: [`StoreError::Transient`](crate::StoreError::Transient) and backend
    /// failures, [`StoreError::IndexNotFound`](crate::StoreError::IndexNotFound). After an
    /// error the scan is over.
    pub async fn next_page(&mut self) -> Result<Option<Vec<StoredDoc>>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let mut request = self.request.clone();
            // The cursor stays in the scan until the page is read: a read dropped half-way (the
            // task cancelled, or a pipeline that stopped) leaves it for `close` to close.
            request.after = self.open.clone();
            let continuation = request.after.is_some();
            match self.store.search(&self.index, request).await {
                Ok(page) => {
                    self.restarts = RESTARTS.start();
                    self.open = page.next;
                    if self.open.is_none() || page.docs.is_empty() || self.request.single_page {
                        self.close().await;
                    }
                    let docs = self.leave_out_returned(page.docs);
                    if docs.is_empty() && !self.done {
                        // A fresh start's first page held only what was returned before it.
                        continue;
                    }
                    self.note_reached(&docs);
                    return Ok((!docs.is_empty()).then_some(docs));
                }
                Err(e) => {
                    // A store closes what a failed page was paging with, but the failure may
                    // have come from a wrapper before the store saw the request: close it here
                    // too.
                    self.close().await;
                    let restart = self.restarted_scope(continuation, &e);
                    let (Some(scope), Some(pause)) = (restart, self.restarts.next()) else {
                        return Err(e);
                    };
                    tracing::debug!(index = %self.index, error = %e, restarts = self.restarts.attempt(),
                        "a paged search lost its context; starting again where it had got to");
                    tokio::time::sleep(pause).await;
                    self.request = SearchRequest::first(scope, self.request.size);
                    self.done = false;
                }
            }
        }
    }

    /// The scope to start again from after failure `e`, if this scan may: from where it had
    /// got to, or from its start if it had returned nothing yet (the first page of a point in
    /// time is its first continuation). A transient failure of a first page was retried by
    /// the store already, and a request the server refuses stays refused.
    fn restarted_scope(&self, continuation: bool, e: &StoreError) -> Option<Scope> {
        let lasting = matches!(
            e,
            StoreError::IndexNotFound { .. }
                | StoreError::Rejected {
                    status: Some(400),
                    ..
                }
        ) || (!continuation && e.is_retryable());
        if lasting || self.request.single_page {
            return None;
        }
        match &self.reached {
            Some(reached) => self.request.scope.from_path(&reached.path),
            None => self
                .request
                .scope
                .from_path(&FsPath::root())
                .map(|_| self.request.scope.clone()),
        }
    }

    /// `docs` without those this scan returned already: the documents at the path a fresh
    /// start began from.
    fn leave_out_returned(&self, mut docs: Vec<StoredDoc>) -> Vec<StoredDoc> {
        if let Some(reached) = &self.reached {
            docs.retain(|d| !reached.ids.contains(&d.id));
        }
        docs
    }

    /// Notes the last path of `docs` (in path order) and the ids returned at it.
    fn note_reached(&mut self, docs: &[StoredDoc]) {
        // Only a scope that can start again from a path needs to know where it got to.
        if self.request.scope.from_path(&FsPath::root()).is_none() {
            return;
        }
        for doc in docs {
            let Some(path) = doc.source.get("path").and_then(Value::as_str) else {
                continue;
            };
            match &mut self.reached {
                Some(reached) if reached.path.as_str() == path => {
                    reached.ids.insert(doc.id.clone());
                }
                _ => {
                    let Ok(path) = FsPath::parse(path) else {
                        continue;
                    };
                    self.reached = Some(Reached {
                        path,
                        ids: HashSet::from([doc.id.clone()]),
                    });
                }
            }
        }
    }

    /// Reads every remaining page; returns their documents. Closes what was open, whatever
    /// happens.
    ///
    /// # Errors
    /// As [`Scan::next_page`].
    pub async fn read_all(mut self) -> Result<Vec<StoredDoc>> {
        let mut all = Vec::new();
        while let Some(docs) = self.next_page().await? {
            all.extend(docs);
        }
        Ok(all)
    }

    /// Returns true while the store may keep something open for this scan: between a page
    /// that has a next one and the end of the scan.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Returns true if the store keeps something open on a server for a scan of several pages
    /// (a point in time or a scroll on Elasticsearch): its pages come from that server.
    pub(crate) fn holds_a_cursor_on_a_server(&self) -> bool {
        self.store.capabilities().held_cursors.is_some()
    }

    /// Ends the scan: closes what the store keeps open for it, and waits for that. Does
    /// nothing the second time, or if nothing is open. A failure to close is logged (at
    /// debug): the server drops the context when its keep-alive runs out.
    pub async fn close(&mut self) {
        self.done = true;
        if let Some(cursor) = self.open.take() {
            if let Err(e) = self.store.close_cursor(&self.index, cursor).await {
                tracing::debug!(index = %self.index, error = %e, "closing a scan failed; it expires with its keep-alive");
            }
        }
    }
}

impl Drop for Scan {
    fn drop(&mut self) {
        let Some(cursor) = self.open.take() else {
            return;
        };
        let index = std::mem::take(&mut self.index);
        // Dropped open: a cancelled task, or a caller that forgot to close. Nothing can be
        // waited for here; a spawned close is what is left (and it runs only if the runtime
        // lives on, as the service's does).
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::debug!(%index, "a scan was dropped open; closing it in the background");
                let store = Arc::clone(&self.store);
                runtime.spawn(async move {
                    if let Err(e) = store.close_cursor(&index, cursor).await {
                        tracing::debug!(%index, error = %e, "closing a dropped scan failed; it expires with its keep-alive");
                    }
                });
            }
            Err(_) => {
                tracing::debug!(%index, "a scan was dropped open outside a runtime; it expires with its keep-alive");
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::error::StoreError;
    use crate::store::DocStore;
    use crate::types::Page;
    use crate::{Capabilities, SqliteStore, StoreLayer};

    /// A store that counts the cursors it hands out and those closed, as a server counts its
    /// contexts, over the embedded store; its search can be made to fail.
    #[derive(Debug)]
    pub(crate) struct Contexts {
        inner: SqliteStore,
        opened: AtomicUsize,
        closed: AtomicUsize,
        fail_search_at: Option<usize>,
        pub(crate) searches: AtomicUsize,
    }

    impl Contexts {
        pub(crate) fn open(&self) -> usize {
            self.opened.load(Ordering::SeqCst) - self.closed.load(Ordering::SeqCst)
        }
    }

    /// Counted like a server's contexts: the embedded store's cursors hold nothing, so this
    /// one offers held cursors of its own.
    #[async_trait]
    impl StoreLayer for Contexts {
        fn inner(&self) -> &dyn DocStore {
            &self.inner
        }
        fn on_capabilities<'a>(&'a self, offered: Capabilities<'a>) -> Capabilities<'a> {
            Capabilities {
                held_cursors: Some(self),
                ..offered
            }
        }
        async fn on_search(&self, index: &str, request: SearchRequest) -> Result<Page> {
            let n = self.searches.fetch_add(1, Ordering::SeqCst);
            if self.fail_search_at == Some(n) {
                // Fails before the "server" sees it: it does not close the context.
                return Err(StoreError::Transient {
                    context: "test".into(),
                    message: "injected".into(),
                });
            }
            let first = request.after.is_none();
            let page = self.inner.search(index, request).await?;
            // Opened with a first page that has a next one; closed with the last page.
            match (first, page.next.is_some()) {
                (true, true) => self.opened.fetch_add(1, Ordering::SeqCst),
                (false, false) => self.closed.fetch_add(1, Ordering::SeqCst),
                _ => 0,
            };
            Ok(page)
        }
        async fn on_close_cursor(&self, _index: &str, _cursor: Cursor) -> Result<()> {
            self.closed.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    pub(crate) async fn store(docs: usize, fail_search_at: Option<usize>) -> Arc<Contexts> {
        let inner = SqliteStore::in_memory().expect("store");
        inner.create_index("s", &json!({})).await.expect("index");
        for i in 0..docs {
            inner
                .create("s", &format!("d{i:03}"), json!({}))
                .await
                .expect("doc");
        }
        Arc::new(Contexts {
            inner,
            opened: AtomicUsize::new(0),
            closed: AtomicUsize::new(0),
            fail_search_at,
            searches: AtomicUsize::new(0),
        })
    }

    #[tokio::test]
    async fn reading_to_the_end_reads_everything_once() {
        let contexts = store(25, None).await;
        let docs = Scan::new(contexts.clone(), "s", Scope::All, 10)
            .read_all()
            .await
            .expect("scan");
        assert_eq!(docs.len(), 25);
        assert_eq!(contexts.open(), 0);
        assert_eq!(contexts.searches.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn stopping_early_and_closing_closes_once() {
        let contexts = store(25, None).await;
        let mut scan = Scan::new(contexts.clone(), "s", Scope::All, 10);
        assert_eq!(
            scan.next_page().await.expect("page").map(|d| d.len()),
            Some(10)
        );
        assert!(scan.is_open());
        scan.close().await;
        scan.close().await;
        assert!(!scan.is_open());
        assert_eq!(contexts.closed.load(Ordering::SeqCst), 1);
        assert_eq!(scan.next_page().await.expect("closed"), None);
    }

    #[tokio::test]
    async fn a_failed_page_closes_the_cursor_it_was_paging_with() {
        let contexts = store(25, Some(1)).await;
        let mut scan = Scan::new(contexts.clone(), "s", Scope::All, 10);
        scan.next_page().await.expect("first page");
        scan.next_page().await.expect_err("injected");
        assert!(!scan.is_open());
        assert_eq!(contexts.open(), 0);
        assert_eq!(scan.next_page().await.expect("over"), None);
    }

    /// A scan of a subtree's directories that loses its context starts again where it had
    /// got to, as a scan of the whole subtree does: every directory once, no file.
    #[tokio::test]
    async fn a_scan_of_directories_starts_again_where_it_had_got_to() {
        let inner = SqliteStore::in_memory().expect("store");
        inner.create_index("s", &json!({})).await.expect("index");
        let mut dirs = vec!["/t".to_owned()];
        for d in 0..5 {
            let dir = format!("/t/d{d}");
            for f in 0..3 {
                let file = format!("{dir}/f{f}");
                let doc = json!({"path": file, "parent": dir, "kind": "file"});
                inner.create("s", &file, doc).await.expect("file");
            }
            dirs.push(dir);
        }
        for dir in &dirs {
            let parent = if dir == "/t" { "/" } else { "/t" };
            let doc = json!({"path": dir, "parent": parent, "kind": "dir"});
            inner.create("s", dir, doc).await.expect("dir");
        }
        let contexts = Arc::new(Contexts {
            inner,
            opened: AtomicUsize::new(0),
            closed: AtomicUsize::new(0),
            // The first continuation.
            fail_search_at: Some(1),
            searches: AtomicUsize::new(0),
        });
        let root = FsPath::parse("/t").expect("path");
        let docs = Scan::new(contexts.clone(), "s", Scope::SubtreeDirs(root), 2)
            .read_all()
            .await
            .expect("a scan that starts again");
        let paths: Vec<&str> = docs
            .iter()
            .filter_map(|d| d.source.get("path").and_then(Value::as_str))
            .collect();
        assert_eq!(paths, dirs);
        assert_eq!(contexts.open(), 0);
    }

    #[tokio::test]
    async fn a_dropped_open_scan_closes_in_the_background() {
        let contexts = store(25, None).await;
        let mut scan = Scan::new(contexts.clone(), "s", Scope::All, 10);
        scan.next_page().await.expect("first page");
        drop(scan);
        for _ in 0..100 {
            if contexts.open() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(contexts.open(), 0);
    }

    #[tokio::test]
    async fn a_single_page_scan_keeps_nothing_open() {
        let contexts = store(5, None).await;
        let mut scan = Scan::single_page(contexts.clone(), "s", Scope::All, 10);
        assert_eq!(
            scan.next_page().await.expect("page").map(|d| d.len()),
            Some(5)
        );
        assert!(!scan.is_open());
        assert_eq!(scan.next_page().await.expect("one page only"), None);
        assert_eq!(contexts.opened.load(Ordering::SeqCst), 0);
    }
}
