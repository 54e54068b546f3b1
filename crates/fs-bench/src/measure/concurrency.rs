//! Measurements 3 and 4: concurrent renames of disjoint subtrees, and how many documents a
//! rename's locks keep from other jobs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_locks::{LockClient, LockProtocol};
use fs_model::{FsDoc, FsPath};
use fs_rename::{FsTree, Renamer, Strategy};
use fs_store::SharedStore;

use super::renames::{big_tree, drop_tree, insert_dir};
use super::{ms, AffectedRow, ConcurrencyRow, Plan};

/// Measurement 3: K concurrent renames of disjoint subtrees under one parent, back and forth for a fixed
/// time; renames per second for each scheme.
pub(super) async fn concurrency(
    store: &SharedStore,
    plan: &Plan,
) -> anyhow::Result<Vec<ConcurrencyRow>> {
    let mut rows = Vec::new();
    // Tree locking by compare-and-set too, where the store also has atomic updates.
    let probe = LockClient::builder(Arc::clone(store), fs_testkit::unique_name("bench-probe"));
    let atomic = probe.build().protocol().await? == LockProtocol::Scripted;
    let mut schemes = vec![(Strategy::Tree, LockProtocol::Auto)];
    if atomic {
        schemes.push((Strategy::Tree, LockProtocol::Cas));
    }
    // `None` is the store's own ceiling: the same renames with no lock at all (safe here, the
    // subtrees are disjoint).
    for strategy in [Strategy::Document, Strategy::Global, Strategy::None] {
        schemes.push((strategy, LockProtocol::Auto));
    }
    for (strategy, protocol) in schemes {
        for &k in &plan.ks {
            let tree = FsTree::new(Arc::clone(store), fs_testkit::unique_name("bench-k"));
            tree.ensure_indices().await?;
            tree.insert_all(vec![FsDoc::dir(FsPath::parse("/p")?, 0)])
                .await?;
            for i in 0..k {
                insert_dir(&tree, plan.concurrent_docs, &format!("/p/s{i}")).await?;
            }
            let (reports, elapsed) =
                disjoint_renames(store, &tree, (strategy, protocol), k, plan.concurrent_secs)
                    .await?;
            let done = reports.len() as u64;
            let trips: u64 = reports.iter().map(|(r, _)| r.round_trips).sum();
            let locking: Duration = reports
                .iter()
                .map(|(r, _)| r.phases.locking + r.phases.releasing)
                .sum();
            let per_sec = done as f64 / elapsed.as_secs_f64();
            let per = done.max(1) as f64;
            let (round_trips, lock_ms) = (trips as f64 / per, ms(locking) / per);
            eprintln!(
                "{strategy} ({protocol}) K={k}: {per_sec:.1} renames/s, {round_trips:.1} round trips and {lock_ms:.1} ms locking per rename"
            );
            rows.push(ConcurrencyRow {
                k,
                strategy,
                protocol,
                per_sec,
                round_trips,
                lock_ms,
            });
            drop_tree(&tree).await?;
        }
    }
    Ok(rows)
}

/// Runs `k` jobs on `tree`, each renaming its own `/p/sI` to `/p/tI` and back for `secs`;
/// returns every rename's report with its duration, and the time they all took.
pub async fn disjoint_renames(
    store: &SharedStore,
    tree: &FsTree,
    (strategy, protocol): (Strategy, LockProtocol),
    k: usize,
    secs: f64,
) -> anyhow::Result<(Vec<(fs_rename::RenameReport, Duration)>, Duration)> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let tasks = (0..k).map(|i| {
        let renamer = Renamer::builder(Arc::clone(store), tree.index())
            .strategy(strategy)
            .lock_protocol(protocol)
            .wait(Duration::from_secs(120))
            .build();
        tokio::spawn(async move {
            let (a, b) = (
                FsPath::parse(&format!("/p/s{i}"))?,
                FsPath::parse(&format!("/p/t{i}"))?,
            );
            let mut reports = Vec::new();
            while Instant::now() < deadline {
                let (from, to) = if reports.len() % 2 == 0 {
                    (&a, &b)
                } else {
                    (&b, &a)
                };
                let began = Instant::now();
                let report = renamer.rename(from, to).await?;
                reports.push((report, began.elapsed()));
            }
            anyhow::Ok(reports)
        })
    });
    let mut all = Vec::new();
    for finished in futures::future::join_all(tasks).await {
        all.extend(finished??);
    }
    Ok((all, started.elapsed()))
}

/// Measurement 4: Locking cost (lock + release, round trips and time) as the affected documents grow.
pub(super) async fn affected(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<AffectedRow>> {
    let mut rows = Vec::new();
    for &docs in &plan.affected {
        let tree = big_tree(store, docs, "/a").await?;
        for strategy in [Strategy::Tree, Strategy::Document] {
            // The lock requests' round trips, from the job's own events.
            let trips = Arc::new(std::sync::atomic::AtomicU32::new(0));
            let sink_trips = Arc::clone(&trips);
            let renamer = Renamer::builder(Arc::clone(store), tree.index())
                .strategy(strategy)
                .progress(Arc::new(move |event| {
                    if let fs_rename::RenameEvent::Locked { round_trips, .. } = event {
                        sink_trips.fetch_add(round_trips, std::sync::atomic::Ordering::Relaxed);
                    }
                }))
                .build();
            let (a, b) = (FsPath::parse("/a")?, FsPath::parse("/b")?);
            let report = renamer.rename(&a, &b).await?;
            let lock_ms = ms(report.phases.locking + report.phases.releasing);
            let round_trips = trips.load(std::sync::atomic::Ordering::Relaxed);
            renamer.rename(&b, &a).await?;
            eprintln!(
                "{strategy} over {docs} docs: {lock_ms:.2} ms locking, {round_trips} round trips"
            );
            rows.push(AffectedRow {
                docs,
                strategy,
                lock_ms,
                round_trips,
            });
        }
        drop_tree(&tree).await?;
    }
    Ok(rows)
}
