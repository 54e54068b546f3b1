//! A rename whose rewrite is complete has happened: a release that fails afterwards does not
//! turn it into a failure (issue 14). The job reports it done, names the locks it left, and
//! those locks expire with their lease and are cleared by recovery. On both backends, in real
//! time with a short lease.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fs_model::{tree_lock_id, FsPath};
use fs_rename::{fsck, Journal, Recovery, RenameEvent, RenameOutcome, Renamer, Strategy};
use fs_testkit::{FailingRelease, ReleaseFailure};

const LEASE: Duration = Duration::from_millis(500);
const PAGE: usize = 10;

/// `/src` with 24 files in two directories, and `/dst-parent`.
async fn setup(env: &Env) {
    src_tree(env, 12).await;
}

/// Runs `mv /src /dst-parent/dst` through `store`; returns the outcome and its events.
async fn rename_through(
    store: Arc<FailingRelease>,
    env: &Env,
    strategy: Strategy,
) -> (RenameOutcome, Vec<RenameEvent>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let renamer = Renamer::builder(store, env.index.clone())
        .strategy(strategy)
        .lease(LEASE)
        .page_size(PAGE)
        .wait(Duration::from_secs(5))
        .progress(Arc::new(move |event| {
            seen.lock().unwrap().push(event);
        }))
        .build();
    let outcome = renamer
        .rename_reporting(&p("/src"), &p("/dst-parent/dst"))
        .await;
    let events = events.lock().unwrap().clone();
    (outcome, events)
}

fn recovery(env: &Env) -> Recovery {
    Recovery::new(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .wait(Duration::from_secs(5))
        .page_size(PAGE)
}

/// Every document of `before` under `/src` is now under `/dst-parent/dst`, the others stayed.
async fn assert_moved(env: &Env, before: &BTreeMap<String, String>) {
    let after = paths_by_id(env).await;
    assert_eq!(after.len(), before.len(), "documents lost or added");
    for (id, path) in before {
        let want = match path.strip_prefix("/src") {
            Some(rest) => format!("/dst-parent/dst{rest}"),
            None => path.clone(),
        };
        assert_eq!(after.get(id), Some(&want), "document {id} ({path})");
    }
}

/// The outcome is a success with the locks-left warning; nothing was undone and the journal
/// entry is closed.
fn assert_done_with_locks_left(outcome: &RenameOutcome, events: &[RenameEvent]) {
    let report = &outcome.report;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert_eq!(report.rewritten, report.found, "{report:?}");
    assert_eq!(report.warnings.len(), 1, "{report:?}");
    let warning = &report.warnings[0];
    assert!(warning.contains("the rename is complete"), "{warning}");
    assert!(warning.contains("releasing its locks failed"), "{warning}");
    assert!(warning.contains("fsrename recover"), "{warning}");
    for lock in &report.locks_left {
        assert!(warning.contains(&format!("`{lock}`")), "{warning}");
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e, RenameEvent::Closed { .. })),
        "{events:?}"
    );
    assert!(
        !events.contains(&RenameEvent::Released),
        "no release to report: {events:?}"
    );
}

/// Waits out the lease, recovers, and checks that everything is clean: no lock, no journal
/// entry, fsck happy, and the job's closed journal id fenced (a tombstone).
async fn assert_recovered(env: &Env, locks: u64, shares: usize) {
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(env).run().await.expect("recover");
    assert!(
        report.finished.is_empty(),
        "nothing to roll forward: {report}"
    );
    assert!(report.failed.is_empty(), "{report}");
    assert_eq!(
        report.locks_released as u64 + report.shares_reaped as u64,
        locks,
        "{report}"
    );
    assert_eq!(report.shares_reaped, shares, "{report}");
    // The job's closed journal id is a tombstone already: nothing left to fence.
    assert_eq!(report.fenced, 0, "{report}");
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    assert_eq!(
        journal.fences().await.expect("fences").len(),
        1,
        "the closed id's tombstone"
    );
    assert_eq!(locks_left(env).await, 0, "locks left after recovery");
    let checked = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(checked.is_clean(), "{checked}");
    assert_eq!(checked.journals_open(), 0, "{checked}");
    assert_eq!(checked.locks_expired, 0, "{checked}");
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    assert_eq!(journal.fences().await.expect("fences").len(), 1);
    // The renamed paths are free again.
    Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .wait(Duration::ZERO)
        .build()
        .rename(&p("/dst-parent/dst"), &p("/back"))
        .await
        .expect("the locks left are gone");
}

/// The regression of issue 14: the release of a complete rename failed, and the job was
/// reported failed although every document had moved, so its client retried a rename whose
/// source was gone.
async fn a_complete_rename_whose_release_fails_is_done(env: Env) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let store = FailingRelease::new(Arc::clone(&env.store), &env.index, ReleaseFailure::Request);
    let (outcome, events) = rename_through(Arc::clone(&store), &env, Strategy::Tree).await;

    assert!(store.failed() >= 1, "the release was sent and failed");
    assert_done_with_locks_left(&outcome, &events);
    assert_eq!(outcome.report.rewritten, 27);
    // Exclusive on the source and the destination, shared on the destination's parent.
    let mut left = outcome.report.locks_left.clone();
    left.sort();
    assert_eq!(left, ["/dst-parent", "/dst-parent/dst", "/src"]);
    assert_moved(&env, &before).await;
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    assert!(journal.list().await.expect("journal").is_empty(), "closed");
    assert_eq!(
        locks_left(&env).await,
        3,
        "the lock documents are still there"
    );

    assert_recovered(&env, 3, 1).await;
    // What the clients told "failed" did: the rename again. Its source is gone.
    let again = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .wait(Duration::ZERO)
        .build()
        .rename(&p("/src"), &p("/dst-parent/dst"))
        .await;
    assert!(
        matches!(again, Err(fs_rename::RenameError::SourceNotFound { .. })),
        "{again:?}"
    );
}

/// The release wrote some items and failed one: the report names exactly the lock left.
async fn a_partly_failed_release_names_the_locks_left(env: Env) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let store = FailingRelease::new(
        Arc::clone(&env.store),
        &env.index,
        ReleaseFailure::Item(tree_lock_id(&p("/src"))),
    );
    let (outcome, events) = rename_through(Arc::clone(&store), &env, Strategy::Tree).await;

    assert!(store.failed() >= 1, "the release was sent and failed");
    assert_done_with_locks_left(&outcome, &events);
    assert_eq!(outcome.report.locks_left, ["/src"]);
    assert_moved(&env, &before).await;
    assert_eq!(locks_left(&env).await, 1, "only the source's lock is left");

    assert_recovered(&env, 1, 0).await;
}

/// Document locking holds one lock per document, in several guards: all of them are left,
/// reported, and cleared.
async fn a_document_locked_rename_whose_release_fails_is_done(env: Env) {
    setup(&env).await;
    let before = paths_by_id(&env).await;
    let store = FailingRelease::new(Arc::clone(&env.store), &env.index, ReleaseFailure::Request);
    let (outcome, events) = rename_through(Arc::clone(&store), &env, Strategy::Document).await;

    assert_done_with_locks_left(&outcome, &events);
    // Every document under the source, the destination's path and its parent's document.
    let wanted = outcome.report.found + 2;
    assert_eq!(outcome.report.locks_left.len() as u64, wanted);
    assert_moved(&env, &before).await;
    assert_eq!(locks_left(&env).await, wanted);

    assert_recovered(&env, wanted, 0).await;
}

on_every_backend!(
    a_complete_rename_whose_release_fails_is_done,
    a_partly_failed_release_names_the_locks_left,
    a_document_locked_rename_whose_release_fails_is_done,
);
