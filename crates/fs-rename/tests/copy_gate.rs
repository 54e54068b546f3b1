//! `cp -r` through a write gate (issue 73): on a store with gates (Elasticsearch), a copy of
//! more than a page writes each copy once, through a gate of its own that it shuts when it
//! ends; a run that died leaves its gate to the recovery, which shuts it before it finishes the
//! copy, so that what the dead run sends afterwards lands nowhere. On the embedded store
//! (no gates) the copy claims each id first, as before.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fs_model::FsDoc;
use fs_rename::{Recovery, Renamer};
use fs_store::{BulkItemResult, BulkOp, Call, DocStore, SharedStore, StoreLayer};
use fs_testkit::{faulty, FaultPlan};
use futures::future::BoxFuture;
use serde_json::Value;

const LEASE: Duration = Duration::from_millis(600);
const PAGE: usize = 10;

/// A store that notes every call made through it, and the gates written through.
#[derive(Debug)]
struct Noting {
    inner: SharedStore,
    calls: Mutex<Vec<Call>>,
    gates: Mutex<Vec<String>>,
    /// The paths written through a gate and acknowledged.
    acked: Mutex<std::collections::HashSet<String>>,
    /// Copies sent through a gate before their parent's copy was acknowledged.
    orphans: Mutex<Vec<String>>,
}

impl Noting {
    fn over(inner: SharedStore) -> Arc<Noting> {
        Arc::new(Noting {
            inner,
            calls: Mutex::default(),
            gates: Mutex::default(),
            acked: Mutex::default(),
            orphans: Mutex::default(),
        })
    }

    fn count(&self, call: Call) -> usize {
        let calls = self.calls.lock().expect("calls");
        calls.iter().filter(|&&c| c == call).count()
    }
}

#[async_trait::async_trait]
impl StoreLayer for Noting {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: Call,
        next: BoxFuture<'a, fs_store::Result<T>>,
    ) -> BoxFuture<'a, fs_store::Result<T>> {
        self.calls.lock().expect("calls").push(call);
        next
    }

    async fn on_bulk_through_gate(
        &self,
        gate: &str,
        ops: Vec<BulkOp>,
    ) -> fs_store::Result<Vec<BulkItemResult>> {
        self.gates.lock().expect("gates").push(gate.to_owned());
        // No copy may be sent before its parent's copy is acknowledged (pages go through the
        // gate several at once): each copy's parent is one acknowledged before, or earlier in
        // the same request, or the destination's parent (there before the copy).
        let paths: Vec<String> = ops
            .iter()
            .filter_map(|op| match op {
                BulkOp::Create { source, .. } | BulkOp::Index { source, .. } => {
                    source["path"].as_str().map(str::to_owned)
                }
                _ => None,
            })
            .collect();
        {
            let acked = self.acked.lock().expect("acked");
            let mut orphans = self.orphans.lock().expect("orphans");
            for (i, path) in paths.iter().enumerate() {
                let parent = match path.rsplit_once('/') {
                    Some(("", _)) | None => "/".to_owned(),
                    Some((parent, _)) => parent.to_owned(),
                };
                let known = parent == "/dst-parent"
                    || acked.contains(&parent)
                    || paths[..i].contains(&parent);
                if !known && path.starts_with("/dst-parent/copy") {
                    orphans.push(path.clone());
                }
            }
        }
        // Requests of different sizes take different times, so that pages under way at once
        // end out of order.
        tokio::time::sleep(Duration::from_millis((ops.len() % 4) as u64)).await;
        let answers = match self.inner.write_gates() {
            Some(gates) => gates.bulk_through_gate(gate, ops).await?,
            None => panic!("a gate used on a store without gates"),
        };
        self.acked.lock().expect("acked").extend(paths);
        Ok(answers)
    }
}

fn recovery(env: &Env) -> Recovery {
    Recovery::new(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .wait(Duration::from_secs(5))
        .page_size(PAGE)
}

/// The copies under `/dst-parent/copy`, by path.
fn copies(docs: &BTreeMap<String, Value>) -> Vec<String> {
    let mut paths: Vec<String> = docs
        .values()
        .filter_map(|d| d["path"].as_str())
        .filter(|p| p.starts_with("/dst-parent/copy"))
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths
}

async fn a_large_copy_writes_each_copy_once_through_a_gate(env: Env) {
    src_tree(&env, 25).await;
    let noting = Noting::over(Arc::clone(&env.store));
    let report = Renamer::builder(noting.clone(), env.index.clone())
        .page_size(PAGE)
        .build()
        .copy(&p("/src"), &p("/dst-parent/copy"))
        .await
        .expect("cp -r");
    assert_eq!((report.found, report.rewritten), (53, 53), "{report:?}");
    let docs = docs_by_id(&env).await;
    assert_eq!(copies(&docs).len(), 53);
    assert!(
        docs.values().all(|d| FsDoc::claim_job(d).is_none()),
        "no claim anywhere"
    );
    let pages = 53usize.div_ceil(PAGE);
    if env.store.write_gates().is_some() {
        assert_eq!(noting.count(Call::OpenGate), 1);
        // Its own, once: a first run has no earlier gates to shut.
        assert_eq!(noting.count(Call::ShutGates), 1);
        // Each page's files, and (in a request of their own, sent in turn) its directories.
        let bulks = noting.count(Call::BulkThroughGate);
        assert!(
            (pages..=2 * pages).contains(&bulks),
            "{bulks} bulk requests"
        );
        let orphans = noting.orphans.lock().expect("orphans").clone();
        assert!(orphans.is_empty(), "sent before their parents: {orphans:?}");
        let gates = noting.gates.lock().expect("gates").clone();
        assert!(
            gates
                .iter()
                .all(|g| g.starts_with(&format!("{}-gate-", env.index))),
            "{gates:?}"
        );
        // The gate is shut: a write through it now is refused, every item.
        let late = gates[0].clone();
        let refused = env
            .store
            .write_gates()
            .expect("gates")
            .bulk_through_gate(
                &late,
                vec![BulkOp::Create {
                    id: "late".to_owned(),
                    source: serde_json::to_value(FsDoc::file(p("/dst-parent/late"), 0, 0))
                        .expect("json"),
                }],
            )
            .await;
        assert!(
            refused
                .as_ref()
                .map_or(true, |items| items.iter().all(Result::is_err)),
            "{refused:?}"
        );
        assert_eq!(
            docs_by_id(&env).await,
            docs,
            "nothing landed through a shut gate"
        );
    } else {
        assert_eq!(noting.count(Call::OpenGate), 0);
        assert_eq!(noting.count(Call::BulkThroughGate), 0);
    }
    // A copy of a page or less claims, whatever the store: two gates' changes of the cluster
    // state cost more than a page written twice.
    let small = Noting::over(Arc::clone(&env.store));
    Renamer::builder(small.clone(), env.index.clone())
        .page_size(PAGE)
        .build()
        .copy(&p("/src/a/f00"), &p("/dst-parent/one"))
        .await
        .expect("cp");
    assert_eq!(small.count(Call::OpenGate), 0);
    assert_eq!(small.count(Call::BulkThroughGate), 0);
}

/// A copy run that dies half-way leaves its gate open; the recovery shuts it (and waits for
/// its writes) before it finishes the copy. What the dead run sends afterwards, through its
/// gate, lands nowhere: after `rm -r` of the finished copy, nothing of it comes back.
async fn a_dead_copy_writes_nothing_once_recovered(env: Env) {
    // The run dies in the middle of its scan of the source.
    env.scans_die_open(1);
    src_tree(&env, 25).await;
    let before = docs_by_id(&env).await;
    let noting = Noting::over(Arc::clone(&env.store));
    let store = faulty(noting.clone(), FaultPlan::default(), 1);
    // Pages go through the gate four at once (the default `in_flight`): the fifth is taken
    // up only once one of the first four is written, so the run has written through its
    // gate before it dies.
    let hooks = Arc::new(KillAtPage::new(5, Arc::clone(&store)));
    let renamer = Renamer::builder(store.clone(), env.index.clone())
        .lease(LEASE)
        .page_size(PAGE)
        .wait(Duration::from_secs(5))
        .hooks(hooks)
        .build();
    let job = tokio::spawn(async move {
        let _ = renamer.copy(&p("/src"), &p("/dst-parent/copy")).await;
    });
    wait_until_dead(&store).await;
    let gate = noting
        .gates
        .lock()
        .expect("gates")
        .first()
        .cloned()
        .expect("the dead run wrote through its gate");

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    let done = docs_by_id(&env).await;
    assert_eq!(copies(&done).len(), 53, "the recovery finished the copy");
    Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(PAGE)
        .build()
        .remove(&p("/dst-parent/copy"), true)
        .await
        .expect("rm -r");
    assert_eq!(docs_by_id(&env).await, before);

    // The dead run wakes and sends a page: the copies of the first sources, with its ids.
    let job_id = recovery_job(&report);
    let page: Vec<BulkOp> = before
        .iter()
        .filter(|(_, d)| d["path"].as_str().is_some_and(|p| p.starts_with("/src/")))
        .take(PAGE)
        .map(|(id, d)| {
            let mut copy = d.clone();
            let path = d["path"].as_str().unwrap_or_default();
            copy["path"] = Value::from(path.replacen("/src", "/dst-parent/copy", 1));
            BulkOp::Create {
                id: FsDoc::copy_id(&job_id, id),
                source: copy,
            }
        })
        .collect();
    let sent = env
        .store
        .write_gates()
        .expect("gates")
        .bulk_through_gate(&gate, page)
        .await;
    assert!(
        sent.as_ref()
            .map_or(true, |items| items.iter().all(Result::is_err)),
        "{sent:?}"
    );
    assert_eq!(docs_by_id(&env).await, before, "nothing came back");
    job.abort();
}

/// The journal id of the one job `report` finished.
fn recovery_job(report: &fs_rename::RecoveryReport) -> String {
    report.finished[0].job_id.clone()
}

on_every_backend!(a_large_copy_writes_each_copy_once_through_a_gate);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osmem_a_dead_copy_writes_nothing_once_recovered() {
    let env = Env::new(fs_testkit::Backend::Osmem);
    a_dead_copy_writes_nothing_once_recovered(env.clone()).await;
    env.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_copies_through_a_gate() {
    a_large_copy_writes_each_copy_once_through_a_gate(real_env("fs-gate")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_a_dead_copy_writes_nothing_once_recovered() {
    a_dead_copy_writes_nothing_once_recovered(real_env("fs-gate")).await;
}
