//! Scripted bulk updates of one index from concurrent callers of one handle, sent together.
//!
//! Every tree-locked job updates the lock document of each of its ancestors twice (take,
//! release), so K jobs under one directory all update that directory's document. Sent as K
//! requests, those updates race on the server (one wins, the others lose and are re-run by
//! `retry_on_conflict`) and form a chain there, one after the other, each a read and a write:
//! at K = 16 that chain bounds how many renames a second the tree makes. Sent in one bulk
//! request, they are run one after the other inside the shard, with no race and no round trip
//! between them.
//!
//! So a handle keeps a lane per index: a call that finds the lane idle starts a worker that
//! sends it at once; calls that come while a request is in flight wait for it and go out
//! together in the next request, in the order they came. Each caller gets back the results of
//! its own items, in its order; a failure of the request as a whole is each caller's failure.
//! A caller alone sends at once, so one job pays nothing. Items of one caller stay together and
//! in order, as a bulk request runs them; items of different callers are independent, as they
//! were in separate requests. The worker is a task of its own, so a caller that gives up (its
//! future dropped) does not stall the lane; its items are dropped if they have not gone out
//! yet, and may land if they have, as with a request of its own cut off in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::error::{Result, StoreError};
use crate::scripted::{ScriptedUpdate, UpdateItemResult};

/// At most this many items go in one combined request; more wait for the next one. A caller's
/// items are never split (a caller with more goes alone).
const MAX_ITEMS: usize = 1_000;

/// A caller's items waiting for the lane, and where their results go.
struct Waiting {
    items: Vec<ScriptedUpdate>,
    reply: oneshot::Sender<Result<Vec<UpdateItemResult>>>,
}

#[derive(Default)]
struct Lane {
    /// A worker is sending, or about to.
    busy: bool,
    waiting: Vec<Waiting>,
}

/// The lanes of one handle, by index.
#[derive(Default)]
pub(super) struct Lanes {
    lanes: Mutex<HashMap<String, Lane>>,
}

impl Lanes {
    /// Queues `items` on `index`'s lane. Returns the receiver of their results, and whether
    /// the caller must start a worker for the lane (it was idle).
    fn queue(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> (oneshot::Receiver<Result<Vec<UpdateItemResult>>>, bool) {
        let (reply, results) = oneshot::channel();
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let lane = lanes.entry(index.to_owned()).or_default();
        lane.waiting.push(Waiting { items, reply });
        let start = !lane.busy;
        lane.busy = true;
        (results, start)
    }

    /// Takes the next batch of `index`'s lane: the oldest callers, up to [`MAX_ITEMS`] items
    /// (at least one caller). An empty batch means the lane is idle again.
    fn next_batch(&self, index: &str) -> Vec<Waiting> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let Some(lane) = lanes.get_mut(index) else {
            return Vec::new();
        };
        // A caller that gave up before its items went out (its future dropped: a timeout, a
        // cancelled job) has them dropped too, as if it had never sent them.
        lane.waiting.retain(|w| !w.reply.is_closed());
        let mut items = 0;
        let take = lane
            .waiting
            .iter()
            .take_while(|w| {
                let fits = items == 0 || items + w.items.len() <= MAX_ITEMS;
                items += w.items.len();
                fits
            })
            .count();
        let batch: Vec<Waiting> = lane.waiting.drain(..take).collect();
        if batch.is_empty() {
            lanes.remove(index);
        }
        batch
    }
}

/// What sends one request of scripted updates (the handle's plain bulk update).
pub(super) trait SendUpdates: Clone + Send + Sync + 'static {
    /// Sends `items` of `index` in one bulk request.
    fn send(
        &self,
        index: String,
        items: Vec<ScriptedUpdate>,
    ) -> impl std::future::Future<Output = Result<Vec<UpdateItemResult>>> + Send;
}

/// Sends `items` of `index` through `lanes`, together with those of concurrent callers.
pub(super) async fn bulk_update<S: SendUpdates>(
    lanes: &Arc<Lanes>,
    sender: &S,
    index: &str,
    items: Vec<ScriptedUpdate>,
) -> Result<Vec<UpdateItemResult>> {
    let (results, start) = lanes.queue(index, items);
    if start {
        tokio::spawn(work(Arc::clone(lanes), sender.clone(), index.to_owned()));
    }
    results.await.unwrap_or_else(|_| {
        Err(StoreError::Backend {
            context: format!("scripted bulk update of `{index}`"),
            message: "the request carrying these updates was dropped before it answered".into(),
        })
    })
}

/// Sends the lane's batches until nobody waits.
async fn work<S: SendUpdates>(lanes: Arc<Lanes>, sender: S, index: String) {
    loop {
        let batch = lanes.next_batch(&index);
        if batch.is_empty() {
            return;
        }
        let sizes: Vec<usize> = batch.iter().map(|w| w.items.len()).collect();
        let (items, replies): (Vec<Vec<ScriptedUpdate>>, Vec<_>) =
            batch.into_iter().map(|w| (w.items, w.reply)).unzip();
        let answer = sender.send(index.clone(), items.concat()).await;
        match answer {
            Ok(results) => {
                let mut results = results.into_iter();
                for (reply, size) in replies.into_iter().zip(sizes) {
                    // A caller that gave up is not waiting any more.
                    let _ = reply.send(Ok(results.by_ref().take(size).collect()));
                }
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted::{UpdateOutcome, UpdateResult};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Answers each item with its id's length as the seq_no; counts requests; slow.
    #[derive(Clone, Default)]
    struct Echo {
        requests: Arc<AtomicUsize>,
        fail: bool,
    }

    impl SendUpdates for Echo {
        async fn send(
            &self,
            index: String,
            items: Vec<ScriptedUpdate>,
        ) -> Result<Vec<UpdateItemResult>> {
            self.requests.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.fail {
                return Err(StoreError::Transient {
                    context: index,
                    message: "down".into(),
                });
            }
            Ok(items
                .iter()
                .map(|i| {
                    Ok(UpdateOutcome {
                        result: UpdateResult::Updated,
                        version: Some(crate::Version {
                            seq_no: i.id.parse().unwrap_or(-1),
                            primary_term: 1,
                        }),
                    })
                })
                .collect())
        }
    }

    fn items(ids: &[u32]) -> Vec<ScriptedUpdate> {
        ids.iter()
            .map(|id| ScriptedUpdate {
                id: id.to_string(),
                script: "s".into(),
                params: serde_json::Value::Null,
                upsert: None,
            })
            .collect()
    }

    fn seq_nos(results: &[UpdateItemResult]) -> Vec<i64> {
        results
            .iter()
            .map(|r| match r {
                Ok(o) => o.version.map_or(-2, |v| v.seq_no),
                Err(_) => -3,
            })
            .collect()
    }

    #[tokio::test]
    async fn concurrent_callers_share_requests_and_get_their_own_results() {
        let lanes = Arc::new(Lanes::default());
        let echo = Echo::default();
        let calls = (0..16u32).map(|k| {
            let (lanes, echo) = (Arc::clone(&lanes), echo.clone());
            async move {
                let mine = [k * 10, k * 10 + 1, k * 10 + 2];
                let results = bulk_update(&lanes, &echo, "fs-lock", items(&mine))
                    .await
                    .expect("answered");
                assert_eq!(seq_nos(&results), mine.map(i64::from));
            }
        });
        futures::future::join_all(calls).await;
        let requests = echo.requests.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&requests),
            "16 callers at once went out in {requests} requests"
        );
        assert!(lanes.lanes.lock().expect("lock").is_empty(), "lane idle");
        // Alone, a caller goes at once, in a request of its own.
        bulk_update(&lanes, &echo, "fs-lock", items(&[7]))
            .await
            .expect("answered");
        assert_eq!(echo.requests.load(Ordering::SeqCst), requests + 1);
    }

    #[tokio::test]
    async fn a_failed_request_fails_every_caller_in_it() {
        let lanes = Arc::new(Lanes::default());
        let echo = Echo {
            fail: true,
            ..Echo::default()
        };
        let calls = (0..4u32).map(|k| {
            let (lanes, echo) = (Arc::clone(&lanes), echo.clone());
            async move { bulk_update(&lanes, &echo, "fs-lock", items(&[k])).await }
        });
        for result in futures::future::join_all(calls).await {
            assert!(matches!(result, Err(StoreError::Transient { .. })));
        }
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_does_not_stall_the_lane() {
        let lanes = Arc::new(Lanes::default());
        let echo = Echo::default();
        let gave_up = tokio::time::timeout(
            Duration::from_millis(1),
            bulk_update(&lanes, &echo, "fs-lock", items(&[1])),
        )
        .await;
        assert!(gave_up.is_err(), "timed out");
        let results = bulk_update(&lanes, &echo, "fs-lock", items(&[2, 3]))
            .await
            .expect("answered");
        assert_eq!(seq_nos(&results), [2, 3]);
    }

    #[test]
    fn items_of_a_caller_that_gave_up_before_they_went_out_are_dropped() {
        let lanes = Lanes::default();
        let (gave_up, _) = lanes.queue("i", items(&[1]));
        let (_waiting, start) = lanes.queue("i", items(&[2]));
        assert!(!start, "the lane was already busy");
        drop(gave_up);
        let batch = lanes.next_batch("i");
        let ids: Vec<&str> = batch
            .iter()
            .flat_map(|w| w.items.iter().map(|i| i.id.as_str()))
            .collect();
        assert_eq!(ids, ["2"]);
    }

    #[test]
    fn a_batch_stays_under_the_item_cap_but_takes_a_large_caller_alone() {
        let lanes = Lanes::default();
        let big: Vec<u32> = (0..(MAX_ITEMS as u32 + 5)).collect();
        let _first = lanes.queue("i", items(&big));
        let _second = lanes.queue("i", items(&[1]));
        assert_eq!(lanes.next_batch("i").len(), 1, "the large caller alone");
        assert_eq!(lanes.next_batch("i").len(), 1, "then the next");
        assert!(lanes.next_batch("i").is_empty());
    }
}
