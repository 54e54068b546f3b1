//! [`GroupCommit`]: a layer that sends the small bulk requests its callers make at the same
//! time to one index as one request (a group commit).
//!
//! A process that runs many jobs at once (the service) sends each job's lock take and lock
//! release as a bulk request of a few items, and its journal entry and the entry's close as
//! one write each. On a server each request costs far more than its items: the HTTP round,
//! the bulk action, a shard request and a translog sync (whose disk work the kernel does, on
//! the server's machine) each time. Under load those requests queue anyway; grouped, the
//! server does that work once for all of them.
//!
//! How: one request at a time per grouped index. A bulk or a write that finds none under way
//! is sent at once, alone and as it came (a quiet process waits for nothing and sends what it
//! sent before); one that finds a request under way waits for it, and the first of the
//! waiters to get the turn then sends everything waiting, in the order it came, as one bulk
//! request (a write is an item of it), and hands each caller its own items' answers. A bulk's
//! items stay together and in order, so what a caller sees is what it would have seen alone:
//! on a server the items of one request to one shard are applied in order (the lock index has
//! one shard), and two callers' items were not ordered to begin with. A write sent as a bulk
//! item is answered as the write alone would have been: the same version, the same conflict.
//!
//! The Elasticsearch store does the same inside one handle for scripted updates
//! (`elastic/combine.rs`), where K jobs' updates of one ancestor's lock document would
//! otherwise race; this layer does it for plain bulks and writes, on any store, for the
//! indices its owner names.
//!
//! A caller dropped while its bulk waits takes it back: nothing of it is sent. Once sent, the
//! request runs to its end in a task of its own, so a cancelled caller never leaves the
//! others' writes half-answered.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{oneshot, OwnedMutexGuard};

use crate::error::{Result, StoreError};
use crate::layer::StoreLayer;
use crate::store::{DocStore, SharedStore};
use crate::types::{BulkItemResult, BulkOp, Version};

/// A bulk of more items than this is sent alone, as it comes: it is a request's worth on its
/// own.
pub const SMALL_BULK: usize = 100;

/// The most items one grouped request carries; the bulks that would go past it wait for the
/// next one.
pub const GROUP_ITEMS: usize = 2_000;

/// Wraps a store and groups the small bulk requests made at the same time to the indices it
/// was given ([`GroupCommit::new`]); every other call goes through unchanged. Needs a Tokio
/// runtime: a grouped request runs in a task of its own.
#[derive(Debug)]
pub struct GroupCommit {
    inner: SharedStore,
    /// The indices grouped; `None`: every one.
    grouped: Option<HashSet<String>>,
    lanes: Mutex<HashMap<String, Arc<Lane>>>,
}

/// The bulks waiting for one index, and the turn to send them.
#[derive(Debug, Default)]
struct Lane {
    /// Held by the task that sends a request, until every caller in it has its answers.
    turn: Arc<tokio::sync::Mutex<()>>,
    waiting: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    next_key: u64,
    queue: VecDeque<Queued>,
}

/// One caller's bulk (or write), waiting.
#[derive(Debug)]
struct Queued {
    key: u64,
    ops: Vec<BulkOp>,
    /// Came as a [`DocStore::write`]: sent alone, it goes as one.
    write: bool,
    answer: oneshot::Sender<Result<Vec<BulkItemResult>>>,
}

impl GroupCommit {
    /// Wraps `inner`, grouping the small bulks sent to `indices`.
    pub fn new(inner: SharedStore, indices: impl IntoIterator<Item = String>) -> GroupCommit {
        GroupCommit {
            inner,
            grouped: Some(indices.into_iter().collect()),
            lanes: Mutex::default(),
        }
    }

    /// Wraps `inner`, grouping the small bulks and the writes sent to any index.
    pub fn every_index(inner: SharedStore) -> GroupCommit {
        GroupCommit {
            inner,
            grouped: None,
            lanes: Mutex::default(),
        }
    }

    fn groups(&self, index: &str) -> bool {
        self.grouped
            .as_ref()
            .is_none_or(|grouped| grouped.contains(index))
    }

    fn lane(&self, index: &str) -> Arc<Lane> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(lanes.entry(index.to_owned()).or_default())
    }
}

impl Lane {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // A panic elsewhere cannot leave the queue half-changed: every change is one call.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enqueue(
        &self,
        (ops, write): (Vec<BulkOp>, bool),
        answer: oneshot::Sender<Result<Vec<BulkItemResult>>>,
    ) -> u64 {
        let mut waiting = self.waiting();
        let key = waiting.next_key;
        waiting.next_key += 1;
        waiting.queue.push_back(Queued {
            key,
            ops,
            write,
            answer,
        });
        key
    }

    /// Takes the bulks waiting, oldest first, up to [`GROUP_ITEMS`] items (and always the
    /// oldest one).
    fn take(&self) -> Vec<Queued> {
        let mut waiting = self.waiting();
        let mut items = 0;
        let mut batch = Vec::new();
        while let Some(next) = waiting.queue.front() {
            if !batch.is_empty() && items + next.ops.len() > GROUP_ITEMS {
                break;
            }
            items += next.ops.len();
            batch.extend(waiting.queue.pop_front());
        }
        batch
    }

    /// Takes back the bulk `key` if it is still waiting.
    fn withdraw(&self, key: u64) {
        self.waiting().queue.retain(|queued| queued.key != key);
    }
}

/// Withdraws a caller's bulk when the caller is dropped before it was sent.
struct Withdraw<'a> {
    lane: &'a Lane,
    key: u64,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.lane.withdraw(self.key);
    }
}

/// Sends `batch` to `index` as one request and hands each caller its answers; `turn` is
/// given back once they all have them.
async fn send(
    inner: SharedStore,
    index: String,
    mut batch: Vec<Queued>,
    turn: OwnedMutexGuard<()>,
) {
    if batch.len() == 1 && batch[0].write {
        // A write alone goes as it came.
        let Queued {
            mut ops, answer, ..
        } = batch.remove(0);
        if let Some(op) = ops.pop() {
            let written = inner.write(&index, op).await;
            let _ = answer.send(Ok(vec![written]));
        }
        drop(turn);
        return;
    }
    let mut sizes = Vec::with_capacity(batch.len());
    let mut answers = Vec::with_capacity(batch.len());
    let mut ops = Vec::new();
    for queued in batch {
        sizes.push(queued.ops.len());
        answers.push(queued.answer);
        ops.extend(queued.ops);
    }
    let sent = ops.len();
    let result = inner.bulk(&index, ops).await;
    match result {
        Ok(items) if items.len() == sent => {
            let mut items = items.into_iter();
            for (size, answer) in sizes.into_iter().zip(answers) {
                // A caller that went away meanwhile needs no answer.
                let _ = answer.send(Ok(items.by_ref().take(size).collect()));
            }
        }
        Ok(items) => {
            let cause = StoreError::Backend {
                context: inner.describe(),
                message: format!(
                    "a bulk request of {sent} items to `{index}` (grouped from {} callers) got {} answers",
                    answers.len(),
                    items.len()
                ),
            };
            for answer in answers {
                let _ = answer.send(Err(cause.clone()));
            }
        }
        Err(cause) => {
            for answer in answers {
                let _ = answer.send(Err(cause.clone()));
            }
        }
    }
    drop(turn);
}

#[async_trait]
impl StoreLayer for GroupCommit {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }

    async fn on_bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        if ops.len() > SMALL_BULK || !self.groups(index) {
            return self.inner.bulk(index, ops).await;
        }
        self.grouped_call(index, (ops, false)).await
    }

    async fn on_write(&self, index: &str, op: BulkOp) -> Result<Version> {
        if !self.groups(index) {
            return self.inner.write(index, op).await;
        }
        let mut answers = self.grouped_call(index, (vec![op], true)).await?;
        answers.pop().unwrap_or_else(|| {
            Err(StoreError::Backend {
                context: self.inner.describe(),
                message: format!("a write to `{index}` sent in a grouped bulk got no answer"),
            })
        })
    }
}

impl GroupCommit {
    /// Waits for the turn of `index`'s lane (unless this call's items were sent meanwhile),
    /// sends what waits, and returns this call's answers.
    async fn grouped_call(
        &self,
        index: &str,
        ops: (Vec<BulkOp>, bool),
    ) -> Result<Vec<BulkItemResult>> {
        let lane = self.lane(index);
        let (answer, mut answered) = oneshot::channel();
        let key = lane.enqueue(ops, answer);
        // Dropped with this call: takes the bulk back if it was not sent yet.
        let _withdraw = Withdraw { lane: &lane, key };
        loop {
            let turn = Arc::clone(&lane.turn).lock_owned().await;
            // The task that held the turn before has answered every caller it sent for, so
            // this bulk was either sent and answered, or still waits.
            if let Ok(answer) = answered.try_recv() {
                return answer;
            }
            let batch = lane.take();
            let ours = batch.iter().any(|queued| queued.key == key);
            if batch.is_empty() {
                // Not answered and not waiting: only a bug elsewhere in this file would get
                // here; say so rather than wait for ever.
                return Err(StoreError::Backend {
                    context: self.inner.describe(),
                    message: format!(
                        "a grouped bulk request to `{index}` was lost before it was sent"
                    ),
                });
            }
            tokio::spawn(send(Arc::clone(&self.inner), index.to_owned(), batch, turn));
            if ours {
                break;
            }
        }
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::Backend {
                context: self.inner.describe(),
                message: format!("a grouped bulk request to `{index}` ended without an answer"),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::sqlite::SqliteStore;

    /// Holds every bulk until let go, and notes each request's size.
    #[derive(Debug)]
    struct Gate {
        inner: SharedStore,
        open: tokio::sync::Semaphore,
        sizes: Mutex<Vec<usize>>,
        started: AtomicUsize,
        writes: AtomicUsize,
    }

    #[async_trait]
    impl StoreLayer for Gate {
        fn inner(&self) -> &dyn DocStore {
            &*self.inner
        }

        async fn on_bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
            self.sizes.lock().unwrap().push(ops.len());
            self.started.fetch_add(1, Ordering::SeqCst);
            self.open.acquire().await.unwrap().forget();
            self.inner.bulk(index, ops).await
        }

        async fn on_write(&self, index: &str, op: BulkOp) -> Result<Version> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            self.started.fetch_add(1, Ordering::SeqCst);
            self.open.acquire().await.unwrap().forget();
            self.inner.write(index, op).await
        }
    }

    fn create(id: &str) -> BulkOp {
        BulkOp::Create {
            id: id.to_owned(),
            source: json!({ "id": id }),
        }
    }

    async fn gated() -> (Arc<Gate>, Arc<GroupCommit>) {
        let store: SharedStore = Arc::new(SqliteStore::in_memory().unwrap());
        store.create_index("locks", &json!({})).await.unwrap();
        let gate = Arc::new(Gate {
            inner: store,
            open: tokio::sync::Semaphore::new(0),
            sizes: Mutex::default(),
            started: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
        });
        let grouped = Arc::new(GroupCommit::new(
            Arc::clone(&gate) as SharedStore,
            ["locks".to_owned()],
        ));
        (gate, grouped)
    }

    async fn until(what: impl Fn() -> bool) {
        for _ in 0..500 {
            if what() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("waited in vain");
    }

    #[tokio::test]
    async fn bulks_made_while_one_is_under_way_go_as_one_request_and_each_gets_its_answers() {
        let (gate, grouped) = gated().await;
        let first = tokio::spawn({
            let grouped = Arc::clone(&grouped);
            async move { grouped.bulk("locks", vec![create("a")]).await }
        });
        until(|| gate.started.load(Ordering::SeqCst) == 1).await;
        // Three more while the first is under way; the third asks for a lock the second takes.
        let mut later = Vec::new();
        for ids in [vec!["b", "c"], vec!["d"], vec!["d", "e"]] {
            let grouped = Arc::clone(&grouped);
            later.push(tokio::spawn(async move {
                grouped
                    .bulk("locks", ids.into_iter().map(create).collect())
                    .await
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        gate.open.add_permits(10);
        assert_eq!(first.await.unwrap().unwrap().len(), 1);
        let mut answers = Vec::new();
        for task in later {
            answers.push(task.await.unwrap().unwrap());
        }
        assert_eq!(*gate.sizes.lock().unwrap(), vec![1, 5]);
        assert_eq!(answers[0].len(), 2);
        assert!(answers[0].iter().all(Result::is_ok));
        assert!(answers[1][0].is_ok());
        // Its first item came after the second caller's, in the same request: a conflict, as
        // it would have been alone; its second item is its own.
        assert!(
            matches!(answers[2][0], Err(StoreError::Conflict { .. })),
            "{:?}",
            answers[2]
        );
        assert!(answers[2][1].is_ok());
    }

    #[tokio::test]
    async fn a_caller_dropped_while_it_waits_sends_nothing() {
        let (gate, grouped) = gated().await;
        let first = tokio::spawn({
            let grouped = Arc::clone(&grouped);
            async move { grouped.bulk("locks", vec![create("a")]).await }
        });
        until(|| gate.started.load(Ordering::SeqCst) == 1).await;
        let dropped = tokio::spawn({
            let grouped = Arc::clone(&grouped);
            async move { grouped.bulk("locks", vec![create("gone")]).await }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        dropped.abort();
        let _ = dropped.await;
        let kept = tokio::spawn({
            let grouped = Arc::clone(&grouped);
            async move { grouped.bulk("locks", vec![create("kept")]).await }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        gate.open.add_permits(10);
        first.await.unwrap().unwrap();
        kept.await.unwrap().unwrap();
        assert_eq!(*gate.sizes.lock().unwrap(), vec![1, 1]);
        assert!(grouped.get("locks", "gone").await.unwrap().is_none());
        assert!(grouped.get("locks", "kept").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_write_alone_goes_as_a_write_and_one_made_meanwhile_as_an_item_answered_alike() {
        let (gate, grouped) = gated().await;
        let first = tokio::spawn({
            let grouped = Arc::clone(&grouped);
            async move { grouped.write("locks", create("a")).await }
        });
        until(|| gate.started.load(Ordering::SeqCst) == 1).await;
        let mut later = Vec::new();
        for op in [
            create("a"),
            create("b"),
            BulkOp::Index {
                id: "a".into(),
                source: json!({}),
                if_version: Some(Version {
                    seq_no: 77,
                    primary_term: 7,
                }),
            },
        ] {
            let grouped = Arc::clone(&grouped);
            later.push(tokio::spawn(
                async move { grouped.write("locks", op).await },
            ));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        gate.open.add_permits(10);
        let written = first.await.unwrap().unwrap();
        let answers: Vec<_> = futures::future::join_all(later)
            .await
            .into_iter()
            .map(|joined| joined.unwrap())
            .collect();
        // The first went as a write; the three made meanwhile as one bulk of three items.
        assert_eq!(gate.writes.load(Ordering::SeqCst), 1);
        assert_eq!(*gate.sizes.lock().unwrap(), vec![3]);
        let alone = grouped.inner.write("locks", create("a")).await;
        assert_eq!(
            answers[0], alone,
            "a create of an existing document, as alone"
        );
        assert!(matches!(answers[0], Err(StoreError::Conflict { .. })));
        assert!(answers[1].is_ok());
        assert!(matches!(answers[2], Err(StoreError::Conflict { .. })));
        assert_eq!(
            grouped.get("locks", "a").await.unwrap().unwrap().version,
            written
        );
    }

    #[tokio::test]
    async fn other_indices_and_large_bulks_go_alone() {
        let (gate, grouped) = gated().await;
        grouped.create_index("tree", &json!({})).await.unwrap();
        gate.open.add_permits(10);
        let large: Vec<BulkOp> = (0..=SMALL_BULK).map(|i| create(&format!("l{i}"))).collect();
        let (a, b) = tokio::join!(
            grouped.bulk("locks", large),
            grouped.bulk("tree", vec![create("t")])
        );
        assert_eq!(a.unwrap().len(), SMALL_BULK + 1);
        assert_eq!(b.unwrap().len(), 1);
        let mut sizes = gate.sizes.lock().unwrap().clone();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![1, SMALL_BULK + 1]);
    }
}
