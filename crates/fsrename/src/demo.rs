//! `fsrename demo`: the source texts' locking primitive shown on the embedded store.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use fs_model::{lock_index_mappings, lock_index_name, DEFAULT_TREE_INDEX, GLOBAL_LOCK_ID};
use fs_store::{DocStore, SqliteStore};
use serde_json::json;

/// Races 16 jobs for the book's global lock (`PUT /fs-lock/_create/global`) and checks that
/// exactly one is granted it: the per-document atomicity every lock scheme stands on.
pub async fn run() -> anyhow::Result<ExitCode> {
    let store = Arc::new(SqliteStore::in_memory().context("opening the in-memory store")?);
    let locks = lock_index_name(DEFAULT_TREE_INDEX);
    store.create_index(&locks, &lock_index_mappings()).await?;
    println!("16 jobs race to create the global lock document `{locks}/{GLOBAL_LOCK_ID}`:");
    let mut jobs = tokio::task::JoinSet::new();
    for job in 0..16 {
        let (store, locks) = (Arc::clone(&store), locks.clone());
        jobs.spawn(async move {
            let result = store
                .create(&locks, GLOBAL_LOCK_ID, json!({"process_id": job}))
                .await;
            (job, result)
        });
    }
    let mut granted = Vec::new();
    while let Some(done) = jobs.join_next().await {
        let (job, result) = done.context("a demo job panicked")?;
        match result {
            Ok(_) => granted.push(job),
            Err(e) if e.is_conflict() => {}
            Err(e) => return Err(e).context(format!("job {job} could not ask for the lock")),
        }
    }
    println!(
        "  granted to job {granted:?}; the other 15 got a conflict (HTTP 409 on Elasticsearch)"
    );
    if granted.len() == 1 {
        println!("ok: exactly one holder");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("FAILED: {} holders", granted.len());
        Ok(ExitCode::FAILURE)
    }
}
