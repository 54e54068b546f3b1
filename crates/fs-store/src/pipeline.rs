//! [`Scan::pipeline`]: a scan whose pages are worked on while the next one is read, several
//! at once, so that a rewrite waits on neither the reads nor one write at a time.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::{FuturesUnordered, Stream, StreamExt};

use crate::error::Result;
use crate::scan::Scan;
use crate::types::StoredDoc;

impl Scan {
    /// Reads every page and hands each to `work`; the next page is read while earlier ones
    /// are worked on, and up to `in_flight` of them are worked on at once (at least one).
    /// `done` gets each page's outcome as it ends, in whatever order they end; when it
    /// answers [`ControlFlow::Break`], no more pages are read or started, and the pipeline
    /// returns once the pages under way have ended (their outcomes go to `done` too: what was
    /// sent is accounted for).
    ///
    /// At most one page waits, read ahead, for a place: a slow `work` holds at most
    /// `in_flight + 1` pages in memory. The scan is closed on every way out.
    ///
    /// Pages are handed out in the scan's order but may end in any order: the work on one
    /// page must not depend on another's being done (a rename's rewrite does not; a copy's,
    /// whose parents must exist before their children, does).
    ///
    /// # Errors
    /// A page that could not be read, after the pages under way have ended: as
    /// [`Scan::next_page`].
    pub async fn pipeline<T, W, Fut, D>(&mut self, in_flight: usize, work: W, done: D) -> Result<()>
    where
        W: FnMut(Vec<StoredDoc>) -> Fut,
        Fut: Future<Output = T>,
        D: FnMut(T) -> ControlFlow<()>,
    {
        self.pipeline_after(Vec::new(), in_flight, work, done).await
    }

    /// As [`Scan::pipeline`], with `first` (unless empty) handed to `work` as the first page,
    /// before any the scan reads: a page the caller read otherwise (a rename's check reads the
    /// first page of its source; the scan reads the rest).
    ///
    /// # Errors
    /// As [`Scan::pipeline`].
    pub async fn pipeline_after<T, W, Fut, D>(
        &mut self,
        first: Vec<StoredDoc>,
        in_flight: usize,
        mut work: W,
        mut done: D,
    ) -> Result<()>
    where
        W: FnMut(Vec<StoredDoc>) -> Fut,
        Fut: Future<Output = T>,
        D: FnMut(T) -> ControlFlow<()>,
    {
        let in_flight = in_flight.max(1);
        let mut failed = None;
        {
            let reading_now = AtomicBool::new(false);
            let mut pages = pin!(read_pages(&mut *self, &reading_now));
            let mut running = FuturesUnordered::new();
            let mut ahead: Option<Vec<StoredDoc>> = (!first.is_empty()).then_some(first);
            let (mut reading, mut stopped) = (true, false);
            loop {
                while running.len() < in_flight && !stopped {
                    match ahead.take() {
                        Some(page) => running.push(work(page)),
                        None => break,
                    }
                }
                let read = reading && !stopped && ahead.is_none();
                if running.is_empty() && !read {
                    break;
                }
                // `biased`: the branches are tried in order, not at random, so that a run is
                // the same every time (the simulation replays a seed call for call). A page
                // that ended is taken first: it frees a place for the page read ahead.
                tokio::select! {
                    biased;
                    Some(outcome) = running.next(), if !running.is_empty() => {
                        if done(outcome).is_break() {
                            stopped = true;
                        }
                    }
                    page = pages.next(), if read => match page {
                        Some(Ok(page)) => ahead = Some(page),
                        Some(Err(e)) => {
                            failed = Some(e);
                            stopped = true;
                        }
                        None => reading = false,
                    },
                }
            }
            if reading_now.load(Ordering::Relaxed) {
                // What it read is not worked on (the pipeline stopped); the close below
                // closes what it opened.
                let _ = pages.next().await;
            }
        }
        self.close().await;
        failed.map_or(Ok(()), Err)
    }
}

/// Returns the pages of `scan` as a stream, with `reading_now` set while a read is under way.
///
/// `next` on this stream may be dropped unfinished (the other branch of the pipeline's select
/// won) and polled again later: the stream keeps the read under way, so no page is lost, as it
/// would be by dropping a `next_page` half-way.
///
/// A read under way when the pipeline stops is finished, not dropped (that is what
/// `reading_now` tells): the first read of a scan opens what the store keeps open for it (a
/// point in time), and a read dropped half-way would leave that open with no cursor to close
/// it. (It can happen only with a page handed in first, whose work may fail before the scan's
/// first read has come back.)
fn read_pages<'s>(
    scan: &'s mut Scan,
    reading_now: &'s AtomicBool,
) -> impl Stream<Item = Result<Vec<StoredDoc>>> + 's {
    futures::stream::unfold(scan, move |scan| async move {
        reading_now.store(true, Ordering::Relaxed);
        let page = scan.next_page().await;
        reading_now.store(false, Ordering::Relaxed);
        match page {
            Ok(Some(page)) => Some((Ok(page), scan)),
            Ok(None) => None,
            Err(e) => Some((Err(e), scan)),
        }
    })
    .fuse()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use crate::store::{DocStore, SharedStore};
    use crate::types::Scope;
    use crate::{Scan, SqliteStore};

    impl Scan {
        async fn next_page_then_close(mut self) -> Vec<crate::types::StoredDoc> {
            let page = self.next_page().await.expect("page").unwrap_or_default();
            self.close().await;
            page
        }
    }

    async fn store_of(docs: usize) -> SharedStore {
        let store = SqliteStore::in_memory().expect("in-memory store");
        store.create_index("t", &json!({})).await.expect("index");
        for i in 0..docs {
            let path = format!("/d/{i:04}");
            store
                .create("t", &format!("{i}"), json!({ "path": path }))
                .await
                .expect("create");
        }
        Arc::new(store)
    }

    #[tokio::test]
    async fn every_page_is_worked_on_once_with_at_most_in_flight_at_a_time() {
        let store = store_of(95).await;
        for in_flight in [1, 3] {
            let mut scan = Scan::new(Arc::clone(&store), "t", Scope::All, 10);
            let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let mut seen = Vec::new();
            scan.pipeline(
                in_flight,
                |page| {
                    let (now, most) = (&now, &most);
                    async move {
                        let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(running, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                        page.into_iter().map(|d| d.id).collect::<Vec<_>>()
                    }
                },
                |ids| {
                    seen.extend(ids);
                    std::ops::ControlFlow::Continue(())
                },
            )
            .await
            .expect("pipeline");
            seen.sort_by_key(|id| id.parse::<usize>().unwrap_or(usize::MAX));
            let all: Vec<String> = (0..95).map(|i| i.to_string()).collect();
            assert_eq!(seen, all, "in_flight {in_flight}");
            assert_eq!(
                most.load(Ordering::SeqCst),
                in_flight,
                "in_flight {in_flight}"
            );
            assert!(!scan.is_open());
        }
    }

    #[tokio::test]
    async fn a_page_read_before_goes_first() {
        let store = store_of(25).await;
        let first = Scan::new(Arc::clone(&store), "t", Scope::All, 5)
            .next_page_then_close()
            .await;
        let mut scan = Scan::new(Arc::clone(&store), "t", Scope::All, 10);
        let mut pages = Vec::new();
        scan.pipeline_after(
            first,
            1,
            |page| async move { page.into_iter().map(|d| d.id).collect::<Vec<_>>() },
            |ids| {
                pages.push(ids);
                std::ops::ControlFlow::Continue(())
            },
        )
        .await
        .expect("pipeline");
        let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            vec![5, 10, 10, 5],
            "the page read before, then the scan's"
        );
        assert!(!scan.is_open());
    }

    #[tokio::test]
    async fn a_break_starts_no_more_pages_and_waits_for_those_under_way() {
        let store = store_of(100).await;
        let mut scan = Scan::new(Arc::clone(&store), "t", Scope::All, 10);
        let started = AtomicUsize::new(0);
        let mut ended = 0;
        scan.pipeline(
            2,
            |_page| {
                started.fetch_add(1, Ordering::SeqCst);
                async { tokio::time::sleep(Duration::from_millis(2)).await }
            },
            |()| {
                ended += 1;
                if ended == 3 {
                    std::ops::ControlFlow::Break(())
                } else {
                    std::ops::ControlFlow::Continue(())
                }
            },
        )
        .await
        .expect("pipeline");
        let started = started.load(Ordering::SeqCst);
        assert!(started < 10, "{started} pages started after the break");
        assert_eq!(ended, started, "every page started was accounted for");
        assert!(!scan.is_open());
    }
}
