//! Measurement 1: lock and unlock by depth.

use std::sync::Arc;
use std::time::Instant;

use fs_locks::{LockClient, LockProtocol};
use fs_model::FsPath;
use fs_store::SharedStore;

use super::{ms, LockRow, Plan};

fn deep_path(depth: usize) -> anyhow::Result<FsPath> {
    Ok(FsPath::parse(
        &(1..=depth).map(|i| format!("/d{i}")).collect::<String>(),
    )?)
}

/// Measurement 1: Lock + unlock by depth: batched acquisition against the text's sequence.
pub(super) async fn locks(store: &SharedStore, plan: &Plan) -> anyhow::Result<Vec<LockRow>> {
    let index = fs_testkit::unique_name("bench-lock");
    let cas = LockClient::builder(Arc::clone(store), index.clone())
        .protocol(LockProtocol::Cas)
        .build();
    cas.ensure_index().await?;
    let auto = LockClient::builder(Arc::clone(store), index.clone()).build();
    let atomic = (auto.protocol().await? == LockProtocol::Scripted).then_some(auto);
    let mut rows = Vec::new();
    for &depth in &plan.depths {
        let path = deep_path(depth)?;
        let batched = lock_unlock(&cas, &path, plan.lock_repeat).await?;
        let atomic = match &atomic {
            Some(client) => Some(lock_unlock(client, &path, plan.lock_repeat).await?),
            None => None,
        };
        let started = Instant::now();
        let mut book = (0, 0);
        for _ in 0..plan.lock_repeat {
            let trips = crate::book::lock_unlock(store.as_ref(), &index, &path).await?;
            book = (trips.lock, trips.unlock);
        }
        let book_ms = ms(started.elapsed()) / f64::from(plan.lock_repeat);
        eprintln!("lock depth {depth}: compare-and-set {batched:?}, atomic {atomic:?}, book {book:?} {book_ms:.3} ms");
        rows.push(LockRow {
            depth,
            batched: batched.0,
            batched_ms: batched.1,
            atomic,
            book,
            book_ms,
        });
    }
    store.delete_index(&index).await?;
    Ok(rows)
}

/// Locks and unlocks `path` `repeat` times; returns the round trips of the last (lock,
/// unlock) and the mean ms of a lock and unlock.
async fn lock_unlock(
    client: &LockClient,
    path: &FsPath,
    repeat: u32,
) -> anyhow::Result<((u32, u32), f64)> {
    let started = Instant::now();
    let mut trips = (0, 0);
    for _ in 0..repeat {
        let guard = client.lock_tree(path).await?;
        let lock = guard.grant().round_trips;
        trips = (lock, guard.release().await?.round_trips);
    }
    Ok((trips, ms(started.elapsed()) / f64::from(repeat.max(1))))
}
