//! [`ReadAhead`]: a scan whose next page is read while its caller works on the page it has.
//!
//! A reader that must take its pages in order, one at a time (`fsck`'s check, which needs
//! every parent before its children), waits on each read in turn with [`Scan::next_page`]:
//! the server sorts while the client waits, then the client parses and checks while the
//! server waits. On Elasticsearch at 1 M documents those two halves were about equal (6.7 s
//! of server query time, 7.7 s of client CPU for `fsck`; `docs/scale.md`), so overlapping
//! them is most of what separates a check from a plain read. [`Scan::pipeline`] overlaps too,
//! but hands pages to work that may end in any order, and holds more of them; this keeps
//! them in order, two in memory at most.

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::{Result, StoreError};
use crate::scan::Scan;
use crate::types::StoredDoc;

/// A [`Scan`] read a page ahead of its caller, each page in a task of its own; made by
/// [`Scan::read_ahead`].
///
/// Only where a page comes from a server (a store that holds a cursor there, as Elasticsearch
/// does): on the embedded store a page is read by this same process, on the cores the caller
/// works on, and a read ahead costs more CPU than it saves time (`fsck` of 1 M documents: 3.5 s
/// read in turn, 3.9 to 4.6 s read ahead with 1.7 times the CPU). There a [`ReadAhead`] reads
/// in turn, as the [`Scan`] would.
///
/// Pages come in the scan's order. Exactly one page is read ahead, and only once the caller
/// has taken the one before it: a read ahead holds two pages in memory, the caller's and the
/// one on its way (a reader that ran further ahead would hold more, and a page of 5 000
/// documents parsed is several megabytes). Reading to the end, or a failed page, closes the
/// scan. A caller that stops earlier calls [`ReadAhead::close`], which stops the read under
/// way and waits until the scan is closed; dropped instead, the read under way closes the
/// scan by itself (in a process that exits next, it may not get to).
#[derive(Debug)]
pub struct ReadAhead {
    mode: Mode,
}

/// How a [`ReadAhead`] reads.
#[derive(Debug)]
enum Mode {
    /// A page ahead; the read of the next page, if one is under way.
    Ahead(Option<NextPage>),
    /// In turn, on a store where reading ahead does not pay.
    InTurn(Box<Scan>),
}

/// What the read of one page hands back: the scan, and the page (`None` if it was stopped).
type Read = (Scan, Option<Result<Option<Vec<StoredDoc>>>>);

/// The read of one page: the task, which hands the scan back with the page, and the signal
/// that stops it.
#[derive(Debug)]
struct NextPage {
    read: JoinHandle<Read>,
    stop: oneshot::Sender<()>,
}

impl NextPage {
    /// Starts reading the next page of `scan`. Stopped (or its `ReadAhead` dropped), the read
    /// closes the scan and hands it back without a page.
    fn start(mut scan: Scan) -> NextPage {
        let (stop, stopped) = oneshot::channel::<()>();
        let read = tokio::spawn(async move {
            // `next_page` is cancel-safe: a read stopped half-way leaves the cursor for `close`.
            let page = tokio::select! {
                page = scan.next_page() => Some(page),
                _ = stopped => None,
            };
            if page.is_none() {
                scan.close().await;
            }
            (scan, page)
        });
        NextPage { read, stop }
    }
}

impl Scan {
    /// Reads this scan a page ahead of the caller, in tasks spawned on the current Tokio
    /// runtime, where its pages come from a server: the next page is on its way while the
    /// caller works on the last. The first page is asked for at once. On a store whose
    /// pages do not (the embedded store), reads in turn.
    ///
    /// # Panics
    /// Outside a Tokio runtime, as [`tokio::spawn`].
    pub fn read_ahead(self) -> ReadAhead {
        let mode = if self.holds_a_cursor_on_a_server() {
            Mode::Ahead(Some(NextPage::start(self)))
        } else {
            Mode::InTurn(Box::new(self))
        };
        ReadAhead { mode }
    }
}

impl ReadAhead {
    /// Returns the next page's documents, or `None` once there are no more (never an empty
    /// page), as [`Scan::next_page`], and starts reading the page after it.
    ///
    /// # Errors
    /// As [`Scan::next_page`]; after an error there are no more pages.
    pub async fn next_page(&mut self) -> Result<Option<Vec<StoredDoc>>> {
        let slot = match &mut self.mode {
            Mode::InTurn(scan) => return scan.next_page().await,
            Mode::Ahead(slot) => slot,
        };
        let Some(next) = slot.take() else {
            return Ok(None);
        };
        let (scan, page) = next.read.await.map_err(lost_reader)?;
        match page {
            Some(Ok(Some(docs))) => {
                // Not the last page: the scan is still open.
                *slot = Some(NextPage::start(scan));
                Ok(Some(docs))
            }
            // The end, or a failure: `next_page` closed the scan.
            Some(page) => page,
            // Stopped: only `close` stops a read, and it takes it first.
            None => Ok(None),
        }
    }

    /// Stops reading and waits until what the store kept open for the scan is closed. Does
    /// nothing the second time.
    pub async fn close(&mut self) {
        let next = match &mut self.mode {
            Mode::InTurn(scan) => return scan.close().await,
            Mode::Ahead(slot) => slot.take(),
        };
        let Some(next) = next else {
            return;
        };
        // Sent to a read that ended already, the signal is not heard: the scan is then closed
        // here.
        let _ = next.stop.send(());
        match next.read.await {
            Ok((mut scan, _)) => scan.close().await,
            Err(e) => {
                tracing::warn!(error = %e, "the read of a scan's page ended without finishing")
            }
        }
    }
}

/// The error for a page whose read panicked or was cancelled with its runtime; the scan went
/// with it (dropped open, it closes in the background).
fn lost_reader(e: tokio::task::JoinError) -> StoreError {
    StoreError::Backend {
        context: "reading a page ahead".to_owned(),
        message: format!("the read ended without finishing: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::scan::tests::store;
    use crate::store::DocStore;
    use crate::types::Scope;

    fn ids(docs: &[StoredDoc]) -> Vec<String> {
        docs.iter().map(|d| d.id.clone()).collect()
    }

    #[tokio::test]
    async fn pages_come_in_the_scans_order_all_of_them_and_the_scan_is_closed() {
        let contexts = store(25, None).await;
        let mut plain = Scan::new(contexts.clone(), "s", Scope::All, 4);
        let mut expected = Vec::new();
        while let Some(page) = plain.next_page().await.expect("a page") {
            expected.push(ids(&page));
        }
        let mut ahead = Scan::new(contexts.clone(), "s", Scope::All, 4).read_ahead();
        assert!(matches!(ahead.mode, Mode::Ahead(_)), "it holds cursors");
        let mut read = Vec::new();
        while let Some(page) = ahead.next_page().await.expect("a page") {
            read.push(ids(&page));
        }
        assert_eq!(read, expected);
        assert_eq!(read.len(), 7, "25 documents in pages of 4");
        assert_eq!(ahead.next_page().await.expect("the end"), None);
        assert_eq!(contexts.open(), 0);
    }

    #[tokio::test]
    async fn a_caller_that_stops_early_stops_the_reader_and_leaves_nothing_open() {
        let contexts = store(40, None).await;
        let mut ahead = Scan::new(contexts.clone(), "s", Scope::All, 4).read_ahead();
        let first = ahead.next_page().await.expect("a page").expect("documents");
        assert_eq!(first.len(), 4);
        ahead.close().await;
        ahead.close().await;
        assert_eq!(contexts.open(), 0, "closed, and waited for");
        let searches = contexts.searches.load(Ordering::SeqCst);
        assert!(
            searches <= 2,
            "the caller's page and the one on its way at most: {searches} searches"
        );
        assert_eq!(ahead.next_page().await.expect("closed"), None);
    }

    #[tokio::test]
    async fn a_failed_page_is_the_callers_error_and_the_last() {
        // The third search fails before the store sees it; a scan of a scope read in no
        // particular order cannot start again, so the failure ends it.
        let contexts = store(40, Some(2)).await;
        let mut ahead = Scan::new(contexts.clone(), "s", Scope::All, 4).read_ahead();
        assert!(ahead.next_page().await.expect("page 1").is_some());
        assert!(ahead.next_page().await.expect("page 2").is_some());
        assert!(ahead.next_page().await.is_err(), "page 3 failed");
        assert_eq!(ahead.next_page().await.expect("over"), None);
        assert_eq!(contexts.open(), 0);
    }

    #[tokio::test]
    async fn on_a_store_whose_pages_come_from_no_server_it_reads_in_turn() {
        let sqlite = crate::SqliteStore::in_memory().expect("store");
        sqlite
            .create_index("s", &serde_json::json!({}))
            .await
            .expect("index");
        for i in 0..20 {
            sqlite
                .create("s", &format!("d{i:03}"), serde_json::json!({}))
                .await
                .expect("doc");
        }
        let counting = std::sync::Arc::new(crate::CountingStore::new(std::sync::Arc::new(sqlite)));
        let mut ahead = Scan::new(counting.clone(), "s", Scope::All, 4).read_ahead();
        assert!(matches!(ahead.mode, Mode::InTurn(_)));
        assert_eq!(
            counting.round_trips(),
            0,
            "nothing is read before it is asked for"
        );
        assert!(ahead.next_page().await.expect("a page").is_some());
        assert_eq!(counting.round_trips(), 1, "and nothing ahead");
        let mut pages = 1;
        while ahead.next_page().await.expect("a page").is_some() {
            pages += 1;
        }
        assert_eq!(pages, 5);
        ahead.close().await;
    }

    #[tokio::test]
    async fn a_dropped_read_ahead_closes_its_scan_by_itself() {
        let contexts = store(40, None).await;
        let mut ahead = Scan::new(contexts.clone(), "s", Scope::All, 4).read_ahead();
        assert!(ahead.next_page().await.expect("a page").is_some());
        drop(ahead);
        for _ in 0..100 {
            if contexts.open() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(contexts.open(), 0);
    }
}
