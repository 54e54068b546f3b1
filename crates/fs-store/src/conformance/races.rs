//! The conformance cases of concurrent writers: compare-and-set and create races.

use super::*;

/// 8 tasks × 200 compare-and-set increments of one document end at exactly 1600.
pub async fn cas_increments_are_exact(store: SharedStore) {
    let index = fresh_index(&*store, "conf-cas").await;
    store
        .create(&index, "counter", json!({"n": 0}))
        .await
        .expect("create");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (store, index) = (Arc::clone(&store), index.clone());
        tasks.spawn(async move {
            let mut conflicts = 0u64;
            for _ in 0..200 {
                loop {
                    let doc = store
                        .get(&index, "counter")
                        .await
                        .expect("get")
                        .expect("exists");
                    let n = doc.source["n"].as_i64().expect("n");
                    match store
                        .index(&index, "counter", json!({"n": n + 1}), Some(doc.version))
                        .await
                    {
                        Ok(_) => break,
                        Err(e) if e.is_conflict() || e.is_retryable() => conflicts += 1,
                        Err(e) => panic!("increment failed: {e}"),
                    }
                }
            }
            conflicts
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task");
    }
    let doc = store
        .get(&index, "counter")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(doc.source["n"], 1600);
}

/// 16 tasks racing to create one id: exactly one wins, the others see a conflict.
pub async fn create_race_has_one_winner(store: SharedStore) {
    let index = fresh_index(&*store, "conf-race").await;
    for round in 0..5 {
        let id = format!("lock-{round}");
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..16 {
            let (store, index, id) = (Arc::clone(&store), index.clone(), id.clone());
            tasks.spawn(async move { store.create(&index, &id, json!({"owner": task})).await });
        }
        let (mut won, mut lost) = (0, 0);
        while let Some(done) = tasks.join_next().await {
            match done.expect("task") {
                Ok(_) => won += 1,
                Err(e) if e.is_conflict() => lost += 1,
                Err(e) => panic!("create failed with a non-conflict: {e}"),
            }
        }
        assert_eq!((won, lost), (1, 15), "round {round}");
    }
}
