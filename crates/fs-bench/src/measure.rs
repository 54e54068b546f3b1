//! The measurements, on one backend at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_locks::LockClient;
use fs_model::{FsDoc, FsPath};
use fs_rename::{FsTree, Renamer, Strategy};
use fs_store::{BulkOp, Scope, SearchRequest, SharedStore};
use fs_testkit::Backend;

/// What to run.
pub struct Plan {
    pub depths: Vec<usize>,
    pub lock_repeat: u32,
    pub sizes: Vec<usize>,
    pub osmem_max_docs: usize,
    pub ks: Vec<usize>,
    pub concurrent_docs: usize,
    pub concurrent_secs: f64,
    pub affected: Vec<usize>,
}

impl Plan {
    pub fn new(quick: bool, max_docs: usize, full: bool) -> Plan {
        let sizes: Vec<usize> = [1_000, 10_000, 100_000]
            .into_iter()
            .filter(|n| *n <= max_docs)
            .collect();
        Plan {
            depths: vec![1, 2, 4, 8, 16, 32],
            lock_repeat: if quick { 5 } else { 50 },
            sizes: if quick { vec![1_000, 2_000] } else { sizes },
            osmem_max_docs: if full { usize::MAX } else { 10_000 },
            ks: vec![1, 2, 4, 8, 16, 32],
            concurrent_docs: if quick { 20 } else { 50 },
            concurrent_secs: if quick { 0.5 } else { 3.0 },
            affected: if quick {
                vec![10, 100]
            } else {
                vec![10, 100, 1_000, 10_000]
            },
        }
    }
}

#[derive(Debug, Clone)]
pub struct LockRow {
    pub depth: usize,
    pub batched: (u32, u32),
    pub batched_ms: f64,
    pub book: (u32, u32),
    pub book_ms: f64,
}

#[derive(Debug, Clone)]
pub struct RenameRow {
    pub docs: usize,
    pub rename_s: f64,
    pub raw_s: f64,
    pub round_trips: u64,
}

impl RenameRow {
    pub fn rate(&self) -> f64 {
        self.docs as f64 / self.rename_s
    }
    pub fn raw_rate(&self) -> f64 {
        self.docs as f64 / self.raw_s
    }
}

#[derive(Debug, Clone)]
pub struct ConcurrencyRow {
    pub k: usize,
    pub strategy: Strategy,
    pub per_sec: f64,
}

#[derive(Debug, Clone)]
pub struct AffectedRow {
    pub docs: usize,
    pub strategy: Strategy,
    pub lock_ms: f64,
    pub round_trips: u32,
}

#[derive(Debug, Clone)]
pub struct BackendResults {
    pub name: &'static str,
    pub locks: Vec<LockRow>,
    pub renames: Vec<RenameRow>,
    pub concurrency: Vec<ConcurrencyRow>,
    pub affected: Vec<AffectedRow>,
}

pub async fn run_all(plan: &Plan) -> anyhow::Result<Vec<BackendResults>> {
    let mut out = Vec::new();
    for (name, backend) in [("embedded", Backend::Embedded), ("osmem", Backend::Osmem)] {
        eprintln!("== {name}");
        let store = backend.store();
        let max = if backend == Backend::Osmem {
            plan.osmem_max_docs
        } else {
            usize::MAX
        };
        out.push(BackendResults {
            name,
            locks: locks(&store, plan).await?,
            renames: renames(&store, plan, max).await?,
            concurrency: concurrency(&store, plan).await?,
            affected: affected(&store, plan).await?,
        });
    }
    Ok(out)
}

fn deep_path(depth: usize) -> anyhow::Result<FsPath> {
    Ok(FsPath::parse(
        &(1..=depth).map(|i| format!("/d{i}")).collect::<String>(),
    )?)
}

/// Measurement 1: Lock + unlock by depth: batched acquisition against the text's sequence.
async fn locks(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<LockRow>> {
    let index = fs_testkit::unique_name("bench-lock");
    let client = LockClient::builder(Arc::clone(store), index.clone()).build();
    client.ensure_index().await?;
    let mut rows = Vec::new();
    for &depth in &plan.depths {
        let path = deep_path(depth)?;
        let started = Instant::now();
        let mut batched = (0, 0);
        for _ in 0..plan.lock_repeat {
            let guard = client.lock_tree(&path).await?;
            let lock = guard.grant().round_trips;
            batched = (lock, guard.release().await?.round_trips);
        }
        let batched_ms = ms(started.elapsed()) / f64::from(plan.lock_repeat);
        let started = Instant::now();
        let mut book = (0, 0);
        for _ in 0..plan.lock_repeat {
            let trips = crate::book::lock_unlock(store.as_ref(), &index, &path).await?;
            book = (trips.lock, trips.unlock);
        }
        let book_ms = ms(started.elapsed()) / f64::from(plan.lock_repeat);
        eprintln!("lock depth {depth}: batched {batched:?} {batched_ms:.3} ms, book {book:?} {book_ms:.3} ms");
        rows.push(LockRow {
            depth,
            batched,
            batched_ms,
            book,
            book_ms,
        });
    }
    Ok(rows)
}

/// A tree `/big` of `docs` documents in directories of 1 000.
async fn big_tree(store: &SharedStore, docs: usize, top: &str) -> anyhow::Result<FsTree> {
    let tree = FsTree::new(Arc::clone(store), fs_testkit::unique_name("bench-fs"));
    tree.ensure_indices().await?;
    insert_dir(&tree, docs, top).await?;
    Ok(tree)
}

async fn insert_dir(tree: &FsTree, docs: usize, top: &str) -> anyhow::Result<()> {
    let top = FsPath::parse(top)?;
    let mut all = vec![FsDoc::dir(top.clone(), 0)];
    let mut d = 0;
    while all.len() < docs {
        let dir = top.join(&format!("d{d}"))?;
        all.push(FsDoc::dir(dir.clone(), 0));
        let mut f = 0;
        while all.len() < docs && f < 999 {
            all.push(FsDoc::file(dir.join(&format!("f{f}"))?, 1, 0));
            f += 1;
        }
        d += 1;
    }
    for chunk in all.chunks(10_000) {
        tree.insert_all(chunk.to_vec()).await?;
    }
    tree.refresh().await?;
    Ok(())
}

/// The store's limit: the same scan and the same rewrite of every document, with no lock, no
/// check and no version condition.
async fn raw_rewrite(tree: &FsTree, from: &FsPath, to: &FsPath) -> anyhow::Result<usize> {
    let store = tree.store();
    let mut request = SearchRequest::first(Scope::Subtree(from.clone()), 1_000);
    let mut n = 0;
    loop {
        let page = store.search(tree.index(), request.clone()).await?;
        let mut ops = Vec::with_capacity(page.docs.len());
        for d in page.docs {
            let doc: FsDoc = serde_json::from_value(d.source)?;
            let moved = doc.renamed(from, to)?;
            ops.push(BulkOp::Index {
                id: d.id,
                source: serde_json::to_value(&moved)?,
                if_version: None,
            });
        }
        n += ops.len();
        if !ops.is_empty() {
            for r in store.bulk(tree.index(), ops).await? {
                r?;
            }
        }
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => break,
        }
    }
    store.refresh(tree.index()).await?;
    Ok(n)
}

/// Measurement 2: Directory renames of N documents against the raw rewrite of the same documents.
async fn renames(store: &SharedStore, plan: &Plan, max: usize) -> anyhow::Result<Vec<RenameRow>> {
    let mut rows = Vec::new();
    for &docs in plan.sizes.iter().filter(|n| **n <= max) {
        let tree = big_tree(store, docs, "/big").await?;
        let (big, moved, back) = (
            FsPath::parse("/big")?,
            FsPath::parse("/moved")?,
            FsPath::parse("/big")?,
        );
        // Alternate which runs first, twice each, and keep the best of each.
        let renamer = Renamer::builder(Arc::clone(store), tree.index()).build();
        let mut rename_s = f64::MAX;
        let mut raw_s = f64::MAX;
        let mut round_trips = 0;
        for _ in 0..2 {
            let started = Instant::now();
            let report = renamer.rename(&big, &moved).await?;
            rename_s = rename_s.min(started.elapsed().as_secs_f64());
            round_trips = report.round_trips;
            let started = Instant::now();
            let n = raw_rewrite(&tree, &moved, &back).await?;
            raw_s = raw_s.min(started.elapsed().as_secs_f64());
            anyhow::ensure!(n == docs, "raw rewrite moved {n} of {docs}");
        }
        store.delete_index(tree.index()).await?;
        let row = RenameRow {
            docs,
            rename_s,
            raw_s,
            round_trips,
        };
        eprintln!(
            "rename {docs}: {:.0} docs/s, raw {:.0} docs/s",
            row.rate(),
            row.raw_rate()
        );
        rows.push(row);
    }
    Ok(rows)
}

/// Measurement 3: K concurrent renames of disjoint subtrees under one parent, back and forth for a fixed
/// time; renames per second for each scheme.
async fn concurrency(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<ConcurrencyRow>> {
    let mut rows = Vec::new();
    for strategy in [Strategy::Tree, Strategy::Document, Strategy::Global] {
        for &k in &plan.ks {
            let tree = FsTree::new(Arc::clone(store), fs_testkit::unique_name("bench-k"));
            tree.ensure_indices().await?;
            tree.insert_all(vec![FsDoc::dir(FsPath::parse("/p")?, 0)])
                .await?;
            for i in 0..k {
                insert_dir(&tree, plan.concurrent_docs, &format!("/p/s{i}")).await?;
            }
            let deadline = Instant::now() + Duration::from_secs_f64(plan.concurrent_secs);
            let started = Instant::now();
            let tasks = (0..k).map(|i| {
                let renamer = Renamer::builder(Arc::clone(store), tree.index())
                    .strategy(strategy)
                    .wait(Duration::from_secs(120))
                    .build();
                tokio::spawn(async move {
                    let (a, b) = (
                        FsPath::parse(&format!("/p/s{i}"))?,
                        FsPath::parse(&format!("/p/t{i}"))?,
                    );
                    let mut done = 0u64;
                    while Instant::now() < deadline {
                        let (from, to) = if done % 2 == 0 { (&a, &b) } else { (&b, &a) };
                        renamer.rename(from, to).await?;
                        done += 1;
                    }
                    anyhow::Ok(done)
                })
            });
            let mut done = 0u64;
            for finished in futures::future::join_all(tasks).await {
                done += finished??;
            }
            let per_sec = done as f64 / started.elapsed().as_secs_f64();
            eprintln!("{strategy} K={k}: {per_sec:.1} renames/s");
            rows.push(ConcurrencyRow {
                k,
                strategy,
                per_sec,
            });
            store.delete_index(tree.index()).await?;
        }
    }
    Ok(rows)
}

/// Measurement 4: Locking cost (lock + release, round trips and time) as the affected documents grow.
async fn affected(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<AffectedRow>> {
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
        store.delete_index(tree.index()).await?;
    }
    Ok(rows)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
