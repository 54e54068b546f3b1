//! Copies (`cp -r`) and deletes (`rm [-r]`) on every backend: what they write, each check's
//! error, every strategy, resent writes, a job killed half-way and finished by recovery, and
//! the consistent reads (a listing and fsck under a shared lock).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fs_model::{DocKind, FsDoc, FsPath};
use fs_rename::{
    fsck, fsck_consistent, list_consistent, JobKind, Journal, LockSettings, Recovery, RenameError,
    Renamer, Strategy,
};
use fs_store::SharedStore;
use fs_testkit::{faulty, FaultPlan};
use serde_json::Value;

const LEASE: Duration = Duration::from_millis(600);
const PAGE: usize = 10;

fn renamer(env: &Env) -> Renamer {
    Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(PAGE)
        .build()
}

fn recovery(env: &Env) -> Recovery {
    Recovery::new(Arc::clone(&env.store), env.index.clone())
        .lease(LEASE)
        .wait(Duration::from_secs(5))
        .page_size(PAGE)
}

/// `/src` (two directories of `per_dir` files each, with sizes and times of their own) and
/// `/dst-parent`.
async fn sized_tree(env: &Env, per_dir: usize) {
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    let mut docs = vec![
        FsDoc::dir(p("/src"), 1_000),
        FsDoc::dir(p("/src/a"), 2_000),
        FsDoc::dir(p("/src/b"), 3_000),
        FsDoc::dir(p("/dst-parent"), 4_000),
    ];
    for i in 0..per_dir {
        docs.push(FsDoc::file(
            p(&format!("/src/a/f{i:02}")),
            i as u64 + 1,
            10 + i as i64,
        ));
        docs.push(FsDoc::file(
            p(&format!("/src/b/g{i:02}")),
            100 + i as u64,
            20 + i as i64,
        ));
    }
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");
}

async fn assert_clean(env: &Env) {
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.journals_open(), 0, "journal entries left: {report}");
    assert_eq!(locks_left(env).await, 0, "locks left");
}

/// Checks that `after` is `before` plus exactly one copy of every document under `from`, at
/// its place under `to`, with a new id and the same kind, size and modification time; the
/// source untouched. Returns the copies' ids.
fn assert_copied(
    before: &BTreeMap<String, Value>,
    after: &BTreeMap<String, Value>,
    from: &str,
    to: &str,
) -> Vec<String> {
    for (id, source) in before {
        assert_eq!(
            after.get(id),
            Some(source),
            "source document {id} untouched"
        );
    }
    let originals: Vec<&Value> = before
        .values()
        .filter(|d| p(d["path"].as_str().unwrap()).is_inside(&p(from)))
        .collect();
    let copies: BTreeMap<&String, &Value> = after
        .iter()
        .filter(|(id, _)| !before.contains_key(*id))
        .collect();
    assert_eq!(
        after.len(),
        before.len() + originals.len(),
        "documents after = before + copied"
    );
    for original in originals {
        let want = FsDoc::new(
            p(original["path"].as_str().unwrap())
                .rebase(&p(from), &p(to))
                .unwrap(),
            serde_json::from_value(original["kind"].clone()).unwrap(),
            original["size"].as_u64().unwrap(),
            original["modified"].as_i64().unwrap(),
        );
        let want = serde_json::to_value(&want).unwrap();
        let found: Vec<_> = copies.values().filter(|c| ***c == want).collect();
        assert_eq!(found.len(), 1, "exactly one copy of {original}");
    }
    copies.keys().map(|id| (*id).clone()).collect()
}

async fn a_file_is_copied(env: Env) {
    sized_tree(&env, 3).await;
    let before = docs_by_id(&env).await;
    let report = renamer(&env)
        .copy(&p("/src/a/f01"), &p("/dst-parent/f01-copy"))
        .await
        .expect("copy");
    assert_eq!(report.kind, JobKind::Copy);
    assert_eq!((report.found, report.rewritten), (1, 1));
    let after = docs_by_id(&env).await;
    let copies = assert_copied(&before, &after, "/src/a/f01", "/dst-parent/f01-copy");
    assert_eq!(copies.len(), 1);
    assert_eq!(after[&copies[0]]["size"], 2);
    assert_clean(&env).await;
}

async fn a_directory_tree_is_copied(env: Env) {
    sized_tree(&env, 25).await;
    let before = docs_by_id(&env).await;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let report = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(PAGE)
        .progress(Arc::new(move |e| seen.lock().unwrap().push(e)))
        .build()
        .copy(&p("/src"), &p("/dst-parent/copy"))
        .await
        .expect("copy");
    assert_eq!((report.found, report.rewritten), (53, 53), "{report:?}");
    let after = docs_by_id(&env).await;
    let copies = assert_copied(&before, &after, "/src", "/dst-parent/copy");
    assert_eq!(copies.len(), 53);
    assert_clean(&env).await;
    let events = events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, fs_rename::RenameEvent::Journaled { .. })),
        "a copy journals itself: {events:?}"
    );
    // A second copy of the copy is a copy of its own: other ids again.
    renamer(&env)
        .copy(&p("/dst-parent/copy"), &p("/copy2"))
        .await
        .expect("copy of the copy");
    assert_eq!(docs_by_id(&env).await.len(), after.len() + 53);
    assert_clean(&env).await;
}

async fn each_copy_check_has_its_own_error(env: Env) {
    tree_with(
        &env,
        &[("/a", true), ("/a/b", true), ("/a/f", false), ("/x", true)],
    )
    .await;
    let before = docs_by_id(&env).await;
    let r = renamer(&env);
    let err = r.copy(&p("/missing"), &p("/y")).await.unwrap_err();
    assert!(
        matches!(err, RenameError::SourceNotFound { ref path } if path == &p("/missing")),
        "{err}"
    );
    let err = r.copy(&p("/a"), &p("/x")).await.unwrap_err();
    assert!(
        matches!(err, RenameError::DestinationExists { ref path } if path == &p("/x")),
        "{err}"
    );
    let err = r.copy(&p("/a"), &p("/a/b/c")).await.unwrap_err();
    assert!(matches!(err, RenameError::CopyIntoItself { .. }), "{err}");
    assert!(
        err.to_string().contains("cannot copy `/a` into itself"),
        "{err}"
    );
    let err = r.copy(&p("/a"), &p("/a")).await.unwrap_err();
    assert!(matches!(err, RenameError::CopyIntoItself { .. }), "{err}");
    let err = r.copy(&p("/a"), &p("/nowhere/y")).await.unwrap_err();
    assert!(
        matches!(err, RenameError::DestinationParentMissing { ref path } if path == &p("/nowhere")),
        "{err}"
    );
    let err = r.copy(&p("/a"), &p("/a/f/y")).await.unwrap_err();
    assert!(matches!(err, RenameError::CopyIntoItself { .. }), "{err}");
    let err = r.copy(&p("/x"), &p("/a/f/y")).await.unwrap_err();
    assert!(
        matches!(err, RenameError::DestinationParentNotDir { ref path } if path == &p("/a/f")),
        "{err}"
    );
    let err = r.copy(&p("/a"), &FsPath::root()).await.unwrap_err();
    assert!(
        matches!(err, RenameError::DestinationExists { .. }),
        "{err}"
    );
    assert_eq!(
        docs_by_id(&env).await,
        before,
        "a refused copy writes nothing"
    );
    assert_clean(&env).await;
}

async fn each_remove_check_has_its_own_error(env: Env) {
    tree_with(
        &env,
        &[
            ("/a", true),
            ("/a/b", true),
            ("/a/f", false),
            ("/empty", true),
        ],
    )
    .await;
    let before = docs_by_id(&env).await;
    let r = renamer(&env);
    let err = r.remove(&FsPath::root(), true).await.unwrap_err();
    assert!(matches!(err, RenameError::RootCannotDelete), "{err}");
    assert_eq!(err.to_string(), "the root `/` cannot be removed");
    let err = r.remove(&p("/a"), false).await.unwrap_err();
    assert!(
        matches!(err, RenameError::DirectoryNotEmpty { ref path, entries: 2 } if path == &p("/a")),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "`/a` is a directory with 2 entries; use -r to remove it and everything under it"
    );
    let err = r.remove(&p("/missing"), true).await.unwrap_err();
    assert!(matches!(err, RenameError::SourceNotFound { .. }), "{err}");
    assert_eq!(
        docs_by_id(&env).await,
        before,
        "a refused delete deletes nothing"
    );
    assert_eq!(locks_left(&env).await, 0);

    // Without -r: a file, and an empty directory.
    let report = r.remove(&p("/a/f"), false).await.expect("rm file");
    assert_eq!(
        (report.kind, report.found, report.rewritten),
        (JobKind::Delete, 1, 1)
    );
    r.remove(&p("/empty"), false).await.expect("rm empty dir");
    let left: Vec<String> = paths_by_id(&env).await.into_values().collect();
    let mut left = left;
    left.sort();
    assert_eq!(left, ["/a", "/a/b"]);
    assert_clean(&env).await;
}

async fn a_subtree_is_deleted(env: Env) {
    sized_tree(&env, 25).await;
    let report = renamer(&env).remove(&p("/src"), true).await.expect("rm -r");
    assert_eq!((report.found, report.rewritten), (53, 53), "{report:?}");
    let left: Vec<String> = paths_by_id(&env).await.into_values().collect();
    assert_eq!(left, ["/dst-parent"]);
    assert_clean(&env).await;
}

async fn every_strategy_copies_and_removes(env: Env) {
    sized_tree(&env, 4).await;
    for (i, strategy) in [Strategy::Tree, Strategy::Global, Strategy::Document]
        .into_iter()
        .enumerate()
    {
        let before = docs_by_id(&env).await;
        let r = Renamer::builder(Arc::clone(&env.store), env.index.clone())
            .strategy(strategy)
            .page_size(3)
            .build();
        let to = format!("/dst-parent/c{i}");
        let report = r.copy(&p("/src"), &p(&to)).await.expect("copy");
        assert_eq!((report.found, report.rewritten), (11, 11), "{strategy}");
        let after = docs_by_id(&env).await;
        assert_copied(&before, &after, "/src", &to);
        assert_clean(&env).await;
        let report = r.remove(&p(&to), true).await.expect("rm -r");
        assert_eq!(report.rewritten, 11, "{strategy}");
        assert_eq!(docs_by_id(&env).await, before, "{strategy}");
        assert_clean(&env).await;
    }
}

/// The store writes the first items of the tree index's bulk requests but answers that they
/// failed: the resends find a copy already made, or a document already deleted, and count it.
async fn resent_writes_that_had_landed_are_recognised(env: Env) {
    sized_tree(&env, 5).await;
    let before = docs_by_id(&env).await;
    let flaky: SharedStore = Arc::new(Flaky {
        inner: Arc::clone(&env.store),
        index: env.index.clone(),
        fault: Fault::LostAnswer,
        remaining: AtomicUsize::new(4),
        failing_refreshes: AtomicUsize::new(0),
    });
    let r = Renamer::builder(flaky, env.index.clone())
        .page_size(4)
        .build();
    let report = r.copy(&p("/src"), &p("/dst-parent/c")).await.expect("copy");
    assert_eq!((report.found, report.rewritten), (13, 13), "{report:?}");
    assert!(report.retries >= 4, "{report:?}");
    assert_copied(&before, &docs_by_id(&env).await, "/src", "/dst-parent/c");

    let flaky: SharedStore = Arc::new(Flaky {
        inner: Arc::clone(&env.store),
        index: env.index.clone(),
        fault: Fault::LostAnswer,
        remaining: AtomicUsize::new(4),
        failing_refreshes: AtomicUsize::new(0),
    });
    let r = Renamer::builder(flaky, env.index.clone())
        .page_size(4)
        .build();
    let report = r.remove(&p("/dst-parent/c"), true).await.expect("rm -r");
    assert_eq!((report.found, report.rewritten), (13, 13), "{report:?}");
    assert_eq!(docs_by_id(&env).await, before);
    assert_clean(&env).await;
}

/// Starts a job through a store that dies before page `page`; returns when it has died.
async fn start_dying(
    env: &Env,
    page: usize,
    job: impl FnOnce(Renamer) -> tokio::task::JoinHandle<()>,
) -> tokio::task::JoinHandle<()> {
    let store = faulty(Arc::clone(&env.store), FaultPlan::default(), 1);
    let hooks = Arc::new(KillAtPage::new(page, Arc::clone(&store)));
    // Pages written by the client, which the hooks count (a delete the server's task
    // carries out dies elsewhere: `server_delete.rs`, `crash_server.rs`).
    let renamer = Renamer::builder(store.clone(), env.index.clone())
        .lease(LEASE)
        .page_size(PAGE)
        .wait(Duration::from_secs(5))
        .rewrite(fs_rename::Rewrite::Client)
        .hooks(hooks)
        .build();
    let handle = job(renamer);
    wait_until_dead(&store).await;
    handle
}

async fn a_copy_killed_half_way_is_finished_by_recovery(env: Env) {
    // The job dies in the middle of its scan of the source.
    env.scans_die_open(1);
    sized_tree(&env, 25).await;
    let before = docs_by_id(&env).await;
    let job = start_dying(&env, 3, |r| {
        tokio::spawn(async move {
            let _ = r.copy(&p("/src"), &p("/dst-parent/copy")).await;
            unreachable!("a dead job never returns");
        })
    })
    .await;
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    let open = journal.list().await.expect("journal");
    assert_eq!(open.len(), 1, "the dying copy journaled itself");
    let entry = &open[0].0;
    assert_eq!((entry.kind, entry.from.as_str()), (JobKind::Copy, "/src"));
    let half = docs_by_id(&env).await.len() - before.len();
    if env.store.write_gates().is_some() {
        // Through a gate, pages go several at once (`copy_gated.rs`): the first two, and the
        // third, were under way when it died, each written or not. Never the whole copy, and
        // never a copy without its parent.
        assert!(half < 53, "{half} copied before it died");
        let now = docs_by_id(&env).await;
        let paths: std::collections::HashSet<&str> =
            now.values().filter_map(|d| d["path"].as_str()).collect();
        for path in paths.iter().filter(|p| p.starts_with("/dst-parent/copy/")) {
            let parent = path.rsplit_once('/').map_or("/", |(parent, _)| parent);
            assert!(
                paths.contains(parent),
                "{path} was copied before its parent"
            );
        }
    } else {
        assert_eq!(half, 20, "two pages were copied before it died");
    }

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    let done = &report.finished[0];
    assert_eq!((done.kind, done.rewritten), (JobKind::Copy, 53), "{report}");
    assert!(
        report.to_string().contains("cp /src /dst-parent/copy"),
        "{report}"
    );
    let after = docs_by_id(&env).await;
    let copies = assert_copied(&before, &after, "/src", "/dst-parent/copy");
    // The ids are the job's: the recovery recognised the copies made before the death.
    let sources: Vec<&String> = before.keys().collect();
    for id in &copies {
        assert!(
            sources
                .iter()
                .any(|s| FsDoc::copy_id(&entry.job_id, s) == **id),
            "copy {id} has an id of the journaled job"
        );
    }
    assert_clean(&env).await;
    job.abort();
}

async fn a_delete_killed_half_way_is_finished_by_recovery(env: Env) {
    // The job dies in the middle of its scan: a delete reads as it deletes.
    env.scans_die_open(1);
    sized_tree(&env, 25).await;
    let job = start_dying(&env, 3, |r| {
        tokio::spawn(async move {
            let _ = r.remove(&p("/src"), true).await;
            unreachable!("a dead job never returns");
        })
    })
    .await;
    let journal = Journal::new(Arc::clone(&env.store), &env.index);
    let open = journal.list().await.expect("journal");
    assert_eq!(open.len(), 1, "the dying delete journaled itself");
    assert_eq!(open[0].0.kind, JobKind::Delete);
    assert_eq!(docs_by_id(&env).await.len(), 54 - 20, "two pages deleted");
    // What lies under a document goes before it: what is left of the half-done delete is
    // still a well-formed tree.
    let half = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(
        half.is_clean(),
        "no orphan after a death mid-delete: {half}"
    );
    assert_eq!(half.journals_open(), 1);

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.finished.len(), 1, "{report}");
    assert_eq!(report.finished[0].kind, JobKind::Delete);
    assert_eq!(report.finished[0].rewritten, 33, "{report}");
    assert!(report.to_string().contains("rm /src"), "{report}");
    let left: Vec<String> = paths_by_id(&env).await.into_values().collect();
    assert_eq!(left, ["/dst-parent"]);
    assert_clean(&env).await;
    job.abort();
}

async fn consistent_reads_hold_a_shared_lock_and_refuse_the_root(env: Env) {
    sized_tree(&env, 2).await;
    let tree = env.tree();
    let settings = LockSettings::default();
    let mut seen = Vec::new();
    list_consistent(&tree, &settings, "ls -R /src", &p("/src"), true, |e| {
        seen.push(e.doc.path.to_string());
        Ok(())
    })
    .await
    .expect("list");
    assert_eq!(
        seen,
        [
            "/src/a",
            "/src/a/f00",
            "/src/a/f01",
            "/src/b",
            "/src/b/g00",
            "/src/b/g01"
        ]
    );
    assert_eq!(locks_left(&env).await, 0, "released after the listing");

    let mut files = Vec::new();
    list_consistent(&tree, &settings, "ls", &p("/src/a/f01"), false, |e| {
        files.push((e.doc.path.to_string(), e.doc.kind));
        Ok(())
    })
    .await
    .expect("list a file");
    assert_eq!(files, [("/src/a/f01".to_owned(), DocKind::File)]);

    // A reader that stops the listing: the lock is released all the same.
    let stopped = list_consistent(&tree, &settings, "ls", &p("/src"), true, |_| {
        Err(RenameError::Cancelled {
            kind: fs_rename::JobKind::Copy,
            rewritten: 0,
            found: 0,
        })
    })
    .await;
    assert!(
        matches!(stopped, Err(RenameError::Cancelled { .. })),
        "{stopped:?}"
    );
    assert_eq!(locks_left(&env).await, 0, "released after a failed listing");

    let missing = list_consistent(&tree, &settings, "ls", &p("/nope"), false, |_| Ok(())).await;
    assert!(
        matches!(missing, Err(RenameError::SourceNotFound { .. })),
        "{missing:?}"
    );
    let root = list_consistent(&tree, &settings, "ls", &FsPath::root(), true, |_| Ok(())).await;
    assert!(
        matches!(root, Err(RenameError::RootNotLockable)),
        "{root:?}"
    );
    assert!(root
        .unwrap_err()
        .to_string()
        .contains("writers take no lock on the root"));

    let report = fsck_consistent(
        Arc::clone(&env.store),
        &env.index,
        &p("/src"),
        &settings,
        "fsck",
    )
    .await
    .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.documents, 7);
    assert_eq!(
        report.locks_active, 0,
        "its own lock is not counted: {report}"
    );
    let root = fsck_consistent(
        Arc::clone(&env.store),
        &env.index,
        &FsPath::root(),
        &settings,
        "fsck",
    )
    .await;
    assert!(
        matches!(root, Err(RenameError::RootNotLockable)),
        "{root:?}"
    );
    assert_clean(&env).await;
}

/// A copy holds S on its source: renames inside the source, attempted all the time it runs,
/// each happen entirely before or entirely after it. The copy must equal the source as it was
/// after some prefix of the renames that completed, in their order.
async fn a_copy_sees_nothing_change_below_it(env: Env) {
    const FILES: usize = 40;
    src_tree(&env, FILES).await;
    let relative =
        |paths: &BTreeMap<String, String>, root: &str| -> std::collections::BTreeSet<String> {
            paths
                .values()
                .filter_map(|path| path.strip_prefix(root))
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
                .map(str::to_owned)
                .collect()
        };
    let initial = relative(&paths_by_id(&env).await, "/src");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
    let mover = {
        let (env, stop, done) = (env.clone(), Arc::clone(&stop), Arc::clone(&done));
        tokio::spawn(async move {
            let renamer = Renamer::builder(Arc::clone(&env.store), env.index.clone())
                .holder("mover")
                .wait(Duration::from_secs(30))
                .build();
            for k in 0usize.. {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                // One file travels between /src/a and /src/b under a new name each time, so
                // that no two states of the source are alike and the replay below finds the
                // one the copy saw without ambiguity.
                let at = |k: usize| match k {
                    0 => "/src/a/f00".to_owned(),
                    k if k % 2 == 0 => format!("/src/a/step{k}"),
                    k => format!("/src/b/step{k}"),
                };
                let (from, to) = (at(k), at(k + 1));
                renamer
                    .rename(&p(&from), &p(&to))
                    .await
                    .expect("a rename inside the source");
                done.lock().expect("done").push((from, to));
            }
        })
    };
    while done.lock().expect("done").len() < 3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let copier = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(5)
        .holder("copier")
        .wait(Duration::from_secs(30))
        .build();
    let report = copier
        .copy(&p("/src"), &p("/dst-parent/copy"))
        .await
        .expect("copy");
    // Let a few renames happen after the copy too, then stop.
    let after_copy = done.lock().expect("done").len();
    while done.lock().expect("done").len() < after_copy + 3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    mover.await.expect("mover");
    let copied = relative(&paths_by_id(&env).await, "/dst-parent/copy");
    assert_eq!(
        copied.len(),
        initial.len(),
        "{} documents copied",
        report.rewritten
    );
    let done = done.lock().expect("done").clone();
    // Replay the renames in the order they completed: the copy must be one of the states.
    let mut state = initial.clone();
    let mut matched = (state == copied).then_some(0);
    for (k, (from, to)) in done.iter().enumerate() {
        if matched.is_some() {
            break;
        }
        state.remove(from.trim_start_matches("/src"));
        state.insert(to.trim_start_matches("/src").to_owned());
        if state == copied {
            matched = Some(k + 1);
        }
    }
    let k = matched.unwrap_or_else(|| {
        panic!(
            "the copy matches no state of the source between renames: it saw a rename half-done ({} renames)",
            done.len()
        )
    });
    println!(
        "the copy equals the source after {k} of {} renames",
        done.len()
    );
    assert!(
        k >= 3 && k < done.len(),
        "renames happened before and after the copy"
    );
    assert_clean(&env).await;
}

/// A copy job paused past its lease may land its first request of a page (the claims) after a
/// recovery finished the copy and `rm -r` removed it. Such a claim brings nothing back: no
/// listing, count or fsck sees it, and `recover` removes it (its job has no open entry).
async fn a_late_claim_is_invisible_and_recover_removes_it(env: Env) {
    sized_tree(&env, 3).await;
    let before = docs_by_id(&env).await;
    let job = Arc::new(std::sync::Mutex::new(None));
    let seen = Arc::clone(&job);
    Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(PAGE)
        .progress(Arc::new(move |e| {
            if let fs_rename::RenameEvent::Journaled { job } = e {
                *seen.lock().unwrap() = Some(job);
            }
        }))
        .build()
        .copy(&p("/src"), &p("/dst-parent/copy"))
        .await
        .expect("copy");
    let job = job.lock().unwrap().clone().expect("the copy journaled");
    renamer(&env)
        .remove(&p("/dst-parent/copy"), true)
        .await
        .expect("rm -r");
    assert_eq!(docs_by_id(&env).await, before);

    // The paused job's page of claims lands now.
    let late: Vec<String> = before
        .keys()
        .take(4)
        .map(|source| FsDoc::copy_id(&job, source))
        .collect();
    let land = |ids: &[String]| {
        let ids = ids.to_vec();
        let (store, index, job) = (Arc::clone(&env.store), env.index.clone(), job.clone());
        async move {
            for id in ids {
                store
                    .create(&index, &id, FsDoc::claim(&job))
                    .await
                    .expect("a late claim lands on a free id");
            }
        }
    };
    land(&late[..2]).await;
    env.store.refresh(&env.index).await.expect("refresh");
    let tree = env.tree();
    let listed = tree.count_under(&FsPath::root()).await.expect("count");
    assert_eq!(listed, before.len() as u64, "no path search sees a claim");
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.documents, before.len() as u64);

    // Two more land after the last refresh: the sweep must see them all the same.
    land(&late[2..]).await;
    let report = recovery(&env).run().await.expect("recover");
    assert_eq!(report.claims_removed, late.len(), "{report}");
    assert!(
        report.to_string().contains("removed 4 claim(s)"),
        "{report}"
    );
    assert_eq!(
        docs_by_id(&env).await,
        before,
        "nothing but the tree is left"
    );
    let again = recovery(&env).run().await.expect("recover again");
    assert!(again.is_idle(), "{again}");
    assert_clean(&env).await;
}

on_every_backend!(
    a_late_claim_is_invisible_and_recover_removes_it,
    a_copy_sees_nothing_change_below_it,
    a_file_is_copied,
    a_directory_tree_is_copied,
    each_copy_check_has_its_own_error,
    each_remove_check_has_its_own_error,
    a_subtree_is_deleted,
    every_strategy_copies_and_removes,
    resent_writes_that_had_landed_are_recognised,
    a_copy_killed_half_way_is_finished_by_recovery,
    a_delete_killed_half_way_is_finished_by_recovery,
    consistent_reads_hold_a_shared_lock_and_refuse_the_root,
);
