//! What locking and renaming cost, in round trips and wall time, on the embedded store and on
//! osmem-server over HTTP: `cargo run --release -p fs-rename --example costs -- [DOCS]`.
//!
//! Measures lock + unlock of a tree lock at depth 1, 4 and 16, and the rename of a directory
//! of DOCS documents (default 10 000). osmem-server must be installed (`.ci/run` does it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_locks::LockClient;
use fs_model::{FsDoc, FsPath};
use fs_rename::{FsTree, Renamer};
use fs_store::SharedStore;
use fs_testkit::Backend;

const REPEAT: u32 = 50;

async fn lock_costs(store: &SharedStore) -> anyhow::Result<()> {
    let index = fs_testkit::unique_name("costs-lock");
    let client = LockClient::builder(Arc::clone(store), index).build();
    client.ensure_index().await?;
    for depth in [1usize, 4, 16] {
        let path = FsPath::parse(&(1..=depth).map(|i| format!("/d{i}")).collect::<String>())?;
        let (mut lock_rt, mut unlock_rt, mut elapsed) = (0, 0, Duration::ZERO);
        for _ in 0..REPEAT {
            let started = Instant::now();
            let guard = client.lock_tree(&path).await?;
            lock_rt = guard.grant().round_trips;
            unlock_rt = guard.release().await?.round_trips;
            elapsed += started.elapsed();
        }
        println!(
            "  lock + unlock, depth {depth:>2}: {lock_rt} + {unlock_rt} round trips, {:>7.3} ms",
            elapsed.as_secs_f64() * 1e3 / f64::from(REPEAT)
        );
    }
    Ok(())
}

async fn rename_cost(store: &SharedStore, docs: usize) -> anyhow::Result<()> {
    let tree = FsTree::new(Arc::clone(store), fs_testkit::unique_name("costs-fs"));
    tree.ensure_indices().await?;
    let top = FsPath::parse("/big")?;
    let mut all = vec![FsDoc::dir(top.clone(), 0)];
    for d in 0..(docs - 1).div_ceil(1_000) {
        let dir = top.join(&format!("d{d}"))?;
        all.push(FsDoc::dir(dir.clone(), 0));
        for f in 0..999.min(docs.saturating_sub(all.len())) {
            all.push(FsDoc::file(dir.join(&format!("f{f}"))?, 1, 0));
        }
    }
    all.truncate(docs);
    tree.insert_all(all).await?;
    tree.refresh().await?;
    let renamer = Renamer::builder(Arc::clone(store), tree.index()).build();
    let started = Instant::now();
    let report = renamer.rename(&top, &FsPath::parse("/moved")?).await?;
    let elapsed = started.elapsed();
    println!(
        "  rename of a directory of {} documents: {} round trips, {:.0} ms, {:.0} documents/s",
        report.rewritten,
        report.round_trips,
        elapsed.as_secs_f64() * 1e3,
        report.rewritten as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let docs = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|e| anyhow::anyhow!("DOCS must be a number, got `{arg}`: {e}"))?,
        None => 10_000,
    };
    for (name, backend) in [
        ("embedded store (in memory)", Backend::Embedded),
        ("osmem-server over HTTP", Backend::Osmem),
    ] {
        println!("{name}:");
        let store = backend.store();
        lock_costs(&store).await?;
        rename_cost(&store, docs).await?;
    }
    Ok(())
}
