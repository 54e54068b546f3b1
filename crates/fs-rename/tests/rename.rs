//! Rename jobs on every backend: what moves, each check's error, every strategy, stale
//! writes, transient faults, progress, and fsck.

mod common;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::*;
use fs_rename::{fsck, Entry, RenameError, RenameEvent, RenameHooks, Renamer, Strategy};
use fs_store::SharedStore;
use serde_json::json;

const SMALL: &[(&str, bool)] = &[
    ("/a", true),
    ("/a/b", true),
    ("/a/b/c.txt", false),
    ("/a/d.txt", false),
    ("/x", true),
    ("/x/file", false),
];

/// The paths of [`SMALL`] once `/a` is renamed to `/x/a2`, sorted.
const SMALL_MOVED: [&str; 6] = [
    "/x",
    "/x/a2",
    "/x/a2/b",
    "/x/a2/b/c.txt",
    "/x/a2/d.txt",
    "/x/file",
];

fn renamer(env: &Env) -> Renamer {
    Renamer::builder(Arc::clone(&env.store), env.index.clone()).build()
}

async fn a_directory_moves_with_everything_under_it(env: Env) {
    tree_with(&env, SMALL).await;
    let before = paths_by_id(&env).await;
    let report = renamer(&env)
        .rename(&p("/a"), &p("/x/a2"))
        .await
        .expect("rename");
    assert_eq!((report.found, report.rewritten), (4, 4));
    // Locks; the check, which reads the whole (small) subtree with the destination and its
    // parent; the journal entry; the rewrite, refreshed in the same request; the journal
    // closed; the release. No refresh before the check: every writer leaves its writes
    // searchable before it releases its locks. Where the store makes several writes in one
    // transaction (the embedded store), the entry, the rewrite, the close and the release go
    // in one.
    let chains = env.store.chains_bulk() && env.store.scripted().is_some_and(|s| s.chains());
    assert_eq!(
        report.round_trips,
        if chains { 3 } else { 6 },
        "locks, check, journal, write, close, release (the last four in one where the store chains them): {report:?}"
    );
    let after = paths_by_id(&env).await;
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "ids stay"
    );
    let mut moved: Vec<&str> = after.values().map(String::as_str).collect();
    moved.sort();
    assert_eq!(moved, SMALL_MOVED);
    let doc = env
        .store
        .get(
            &env.index,
            after
                .iter()
                .find(|(_, p)| *p == "/x/a2/b/c.txt")
                .expect("c")
                .0,
        )
        .await
        .expect("get")
        .expect("doc")
        .source;
    assert_eq!(
        (
            doc["parent"].clone(),
            doc["name"].clone(),
            doc["depth"].clone()
        ),
        (json!("/x/a2/b"), json!("c.txt"), json!(4))
    );
    let report = fsck(Arc::clone(&env.store), &env.index, &p("/"))
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(locks_left(&env).await, 0);
}

async fn a_file_rename_moves_one_document(env: Env) {
    tree_with(&env, SMALL).await;
    let report = renamer(&env)
        .rename(&p("/a/d.txt"), &p("/x/d.md"))
        .await
        .expect("rename");
    assert_eq!(report.rewritten, 1);
    assert!(paths_by_id(&env).await.values().any(|p| p == "/x/d.md"));
}

async fn each_check_has_its_own_error(env: Env) {
    tree_with(&env, SMALL).await;
    let r = renamer(&env);
    type IsExpected = fn(&RenameError) -> bool;
    let cases: Vec<(&str, &str, IsExpected)> = vec![
        ("/nope", "/y", |e| {
            matches!(e, RenameError::SourceNotFound { .. })
        }),
        ("/a", "/x", |e| {
            matches!(e, RenameError::DestinationExists { .. })
        }),
        ("/a", "/", |e| {
            matches!(e, RenameError::DestinationExists { .. })
        }),
        ("/a", "/missing/a", |e| {
            matches!(e, RenameError::DestinationParentMissing { .. })
        }),
        ("/a", "/x/file/a", |e| {
            matches!(e, RenameError::DestinationParentNotDir { .. })
        }),
        ("/a", "/a/b/a", |e| {
            matches!(e, RenameError::MoveIntoItself { .. })
        }),
        ("/a", "/a", |e| {
            matches!(e, RenameError::MoveIntoItself { .. })
        }),
        ("/", "/y", |e| matches!(e, RenameError::RootCannotMove)),
    ];
    let before = paths_by_id(&env).await;
    for (from, to, expected) in cases {
        let err = r.rename(&p(from), &p(to)).await.expect_err(from);
        assert!(expected(&err), "{from} → {to}: {err:?}");
        assert!(
            err.to_string()
                .contains(if from == "/" { "root" } else { "`" }),
            "{err}"
        );
    }
    assert_eq!(
        paths_by_id(&env).await,
        before,
        "failed renames change nothing"
    );
    assert_eq!(
        locks_left(&env).await,
        0,
        "failed renames release their locks"
    );
}

async fn every_strategy_renames_and_cleans_up(first: Env) {
    for strategy in [
        Strategy::Tree,
        Strategy::Global,
        Strategy::Document,
        Strategy::None,
    ] {
        let env = Env {
            index: fs_testkit::unique_name("fs"),
            ..first.clone()
        };
        tree_with(&env, SMALL).await;
        let r = Renamer::builder(Arc::clone(&env.store), env.index.clone())
            .strategy(strategy)
            .build();
        let report = r.rename(&p("/a"), &p("/x/a")).await.expect("rename");
        assert_eq!(report.rewritten, 4, "{strategy}");
        assert!(fsck(Arc::clone(&env.store), &env.index, &p("/"))
            .await
            .expect("fsck")
            .is_clean());
        assert_eq!(locks_left(&env).await, 0, "{strategy}");
    }
}

async fn a_write_from_a_stale_read_fails_instead_of_overwriting(env: Env) {
    tree_with(&env, SMALL).await;
    let r = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .strategy(Strategy::None)
        .hooks(Arc::new(MeddleWith {
            env: env.clone(),
            path: "/a/d.txt",
        }))
        .build();
    let err = r.rename(&p("/a"), &p("/x/a")).await.expect_err("conflict");
    assert!(
        matches!(err, RenameError::Conflict { ref path, .. } if path == "/a/d.txt"),
        "{err:?}"
    );
    let docs = paths_by_id(&env).await;
    assert!(docs.values().any(|p| p == "/a/d.txt"), "left in place");
    assert_changed_by_the_other_writer(&env, "/a/d.txt").await;
}

/// Asserts that the document at `path` keeps what [`MeddleWith`] wrote.
async fn assert_changed_by_the_other_writer(env: &Env, path: &str) {
    let docs = paths_by_id(env).await;
    let (id, _) = docs.iter().find(|(_, p)| *p == path).expect(path);
    let doc = env
        .store
        .get(&env.index, id)
        .await
        .expect("get")
        .expect("doc");
    assert_eq!(
        doc.source["size"], 999,
        "the other writer's change survives"
    );
}

/// A tree-locked rename sent whole (entry, rewrite and release in one transaction, where the
/// store has them) that meets a write it did not see lands none of it: it does not report
/// done with a document left behind, and the other writer's change survives.
async fn a_rename_that_meets_a_stale_write_does_not_land_half_of_it(env: Env) {
    tree_with(&env, SMALL).await;
    let seen = Arc::new(Mutex::new(None));
    let r = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .hooks(Arc::new(MeddleUnlocked {
            meddle: MeddleWith {
                env: env.clone(),
                path: "/a/d.txt",
            },
            journal_id: Arc::clone(&seen),
        }))
        .build();
    let result = r.rename(&p("/a"), &p("/x/a")).await;
    let paths = paths_by_id(&env).await;
    let d = paths
        .values()
        .find(|p| p.ends_with("/d.txt"))
        .expect("d.txt");
    assert_changed_by_the_other_writer(&env, d).await;
    let first = seen
        .lock()
        .expect("journal id")
        .clone()
        .expect("the job journaled");
    let journal = fs_rename::Journal::new(Arc::clone(&env.store), &env.index);
    let state = journal.state_of(&first).await.expect("state");
    match result {
        Ok(report) => panic!("the stale write cannot be done over: {report:?}, {paths:?}"),
        Err(e) => assert!(
            state != fs_rename::JournalState::Closed,
            "closed as if done ({e}): {paths:?}"
        ),
    }
}

/// [`MeddleWith`], in a job whose hooks need no locks after its writes (as the service's),
/// recording the job's journal id.
struct MeddleUnlocked {
    meddle: MeddleWith,
    journal_id: Arc<Mutex<Option<String>>>,
}

#[async_trait]
impl RenameHooks for MeddleUnlocked {
    async fn journaling(&self, job_id: &str) -> Result<(), String> {
        *self.journal_id.lock().expect("journal id") = Some(job_id.to_owned());
        Ok(())
    }
    async fn before_write(&self, page: &[Entry]) {
        self.meddle.before_write(page).await;
    }
    fn need_locks_after_writes(&self) -> bool {
        false
    }
}

/// Changes one document (by path) behind the job's back just before its page is written.
struct MeddleWith {
    env: Env,
    path: &'static str,
}

#[async_trait]
impl RenameHooks for MeddleWith {
    async fn before_write(&self, page: &[Entry]) {
        if let Some(e) = page.iter().find(|e| e.doc.path.as_str() == self.path) {
            let mut changed = e.doc.clone();
            changed.size = 999;
            let source = serde_json::to_value(&changed).expect("json");
            self.env
                .store
                .index(&self.env.index, &e.id, source, None)
                .await
                .expect("meddle");
        }
    }
}

/// With several bulk requests in flight, a conflict on one page stops the job after the
/// pages under way have ended, and the error counts what the store shows was written.
///
/// How many pages start before the conflict comes back depends on timing (a slow answer to
/// the conflicting bulk request lets later pages run meanwhile; on a loaded machine the 13
/// pages of an earlier version of this test all ran). So the conflict comes early in a long
/// run of pages: a stop that works leaves most of them unread.
async fn a_conflict_with_pages_in_flight_reports_what_was_written(env: Env) {
    const FILES: usize = 200;
    let files: Vec<(String, bool)> = std::iter::once(("/a".to_owned(), true))
        .chain(std::iter::once(("/x".to_owned(), true)))
        .chain((0..FILES).map(|i| (format!("/a/f{i:03}"), false)))
        .collect();
    let entries: Vec<(&str, bool)> = files.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(&env, &entries).await;
    let r = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .strategy(Strategy::None)
        .page_size(5)
        .in_flight(4)
        .hooks(Arc::new(MeddleWith {
            env: env.clone(),
            path: "/a/f012",
        }))
        .build();
    let err = r.rename(&p("/a"), &p("/x/a")).await.expect_err("conflict");
    let RenameError::Conflict {
        ref path,
        rewritten,
        found,
        ..
    } = err
    else {
        panic!("expected a conflict: {err:?}");
    };
    assert_eq!(path, "/a/f012");
    env.store.refresh(&env.index).await.expect("refresh");
    let moved = paths_by_id(&env)
        .await
        .values()
        .filter(|p| p.starts_with("/x/a"))
        .count() as u64;
    assert_eq!(rewritten, moved, "the error counts what was written");
    // The stop counts against the whole job, as the progress did ("11999 of the 20043"),
    // not against the pages read so far.
    let all = FILES as u64 + 1;
    assert_eq!(found, all, "found {found} of {all}");
    // The conflict is in the third of 41 pages: a stop that works leaves most of them
    // unwritten, however slow the conflicting page's answer.
    assert!(
        rewritten < all / 2,
        "rewritten {rewritten} of {all}: the pages after the conflict were not started"
    );
}

/// A rename whose writes landed and whose journal closed, but whose last refresh failed, has
/// happened: it is reported done, with a warning, and it keeps its locks (until their lease
/// runs out) rather than let the next holder check against a view without its writes.
async fn a_failed_last_refresh_keeps_the_locks_of_a_complete_rename(env: Env) {
    let files: Vec<(String, bool)> = [("/a".to_owned(), true), ("/x".to_owned(), true)]
        .into_iter()
        .chain((0..70).map(|i| (format!("/a/f{i:02}"), false)))
        .collect();
    let entries: Vec<(&str, bool)> = files.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(&env, &entries).await;
    let flaky: SharedStore = Arc::new(Flaky {
        inner: Arc::clone(&env.store),
        index: env.index.clone(),
        fault: Fault::Dropped,
        remaining: AtomicUsize::new(0),
        failing_refreshes: AtomicUsize::new(1),
    });
    let report = Renamer::builder(flaky, env.index.clone())
        .page_size(32)
        .build()
        .rename(&p("/a"), &p("/x/a"))
        .await
        .expect("the rename happened");
    assert_eq!(report.rewritten, 71);
    assert!(
        report.warnings.iter().any(|w| w.contains("refreshing")),
        "{:?}",
        report.warnings
    );
    assert!(!report.locks_left.is_empty(), "{report:?}");
    assert!(
        locks_left(&env).await > 0,
        "the locks stay until their lease ends"
    );
    env.store.refresh(&env.index).await.expect("refresh");
    let moved = paths_by_id(&env)
        .await
        .values()
        .filter(|p| p.starts_with("/x/a"))
        .count();
    assert_eq!(moved, 71);
}

async fn survives(env: &Env, fault: Fault) {
    tree_with(env, SMALL).await;
    let flaky: SharedStore = Arc::new(Flaky {
        inner: Arc::clone(&env.store),
        index: env.index.clone(),
        fault,
        remaining: AtomicUsize::new(3),
        failing_refreshes: AtomicUsize::new(0),
    });
    let report = renamer(&env.through(flaky))
        .rename(&p("/a"), &p("/x/a"))
        .await
        .expect("rename despite faults");
    assert_eq!((report.rewritten, report.retries), (4, 3), "{fault:?}");
    assert!(fsck(Arc::clone(&env.store), &env.index, &p("/"))
        .await
        .expect("fsck")
        .is_clean());
    assert_eq!(locks_left(env).await, 0);
}

async fn transient_item_failures_are_retried(env: Env) {
    survives(&env, Fault::Dropped).await;
}

async fn a_retried_write_that_had_landed_is_recognised(env: Env) {
    survives(&env, Fault::LostAnswer).await;
}

async fn progress_is_reported_in_order(env: Env) {
    tree_with(&env, SMALL).await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let r = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(2)
        .progress(Arc::new(move |e| sink.lock().expect("events").push(e)))
        .build();
    r.rename(&p("/a"), &p("/x/a")).await.expect("rename");
    let events = events.lock().expect("events").clone();
    assert!(
        matches!(events.first(), Some(RenameEvent::Locked { .. })),
        "{events:?}"
    );
    assert_eq!(events.get(1), Some(&RenameEvent::Checked { total: 4 }));
    let progress: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            RenameEvent::Progress { done, .. } => Some(*done),
            _ => None,
        })
        .collect();
    assert_eq!(progress, [2, 4]);
    assert_eq!(events.last(), Some(&RenameEvent::Released));
}

/// A subtree larger than a page: the check reads its first page, the rewrite writes it and
/// scans the rest from the next path on. A second document at the path where the two reads
/// meet (a tree with a duplicate path) moves once, like every other; so does one at the first
/// page's last path. Progress counts whole pages.
async fn the_checks_first_page_and_the_rest_move_once_each(env: Env) {
    let files: Vec<(String, bool)> = std::iter::once(("/a".to_owned(), true))
        .chain(std::iter::once(("/x".to_owned(), true)))
        .chain((0..10).map(|i| (format!("/a/f{i:02}"), false)))
        .collect();
    let entries: Vec<(&str, bool)> = files.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    tree_with(&env, &entries).await;
    // Page size 3: the check reads `/a`, `/a/f00`, `/a/f01` and more; the rest starts at
    // `/a/f02`. Duplicates of both paths where the reads meet.
    for (id, path) in [("zz-dup-f01", "/a/f01"), ("zz-dup-f02", "/a/f02")] {
        let doc = fs_model::FsDoc::file(p(path), 1, 0);
        env.store
            .create(&env.index, id, serde_json::to_value(&doc).expect("json"))
            .await
            .expect("duplicate");
    }
    env.store.refresh(&env.index).await.expect("refresh");
    let before = paths_by_id(&env).await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let report = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(3)
        .progress(Arc::new(move |e| sink.lock().expect("events").push(e)))
        .build()
        .rename(&p("/a"), &p("/x/a"))
        .await
        .expect("rename");
    assert_eq!((report.found, report.rewritten), (13, 13), "{report:?}");
    env.store.refresh(&env.index).await.expect("refresh");
    let after = paths_by_id(&env).await;
    assert_eq!(after.len(), before.len());
    for (id, path) in &before {
        let want = match path.strip_prefix("/a") {
            Some(rest) if path == "/a" || path.starts_with("/a/") => format!("/x/a{rest}"),
            _ => path.clone(),
        };
        assert_eq!(after.get(id), Some(&want), "{id} ({path})");
    }
    let events = events.lock().expect("events").clone();
    assert!(
        events.contains(&RenameEvent::Checked { total: 13 }),
        "the count beside the journal: {events:?}"
    );
    let last = events.iter().rev().find_map(|e| match e {
        RenameEvent::Progress { done, total } => Some((*done, *total)),
        _ => None,
    });
    assert_eq!(last, Some((13, 13)), "{events:?}");
}

async fn fsck_finds_what_is_broken(env: Env) {
    tree_with(&env, &[("/a", true), ("/a/f", false)]).await;
    let put = |id: &str, source: serde_json::Value| {
        let env = env.clone();
        let id = id.to_owned();
        async move {
            env.store
                .create(&env.index, &id, source)
                .await
                .expect("put")
        }
    };
    let doc = |path: &str, parent: &str, name: &str, depth: u32, kind: &str| {
        json!({
            "path": path, "parent": parent, "name": name, "depth": depth, "kind": kind, "size": 0, "modified": 0
        })
    };
    put("orphan", doc("/gone/x", "/gone", "x", 2, "file")).await;
    put("under-file", doc("/a/f/x", "/a/f", "x", 3, "file")).await;
    put("wrong-depth", doc("/a/w", "/a", "w", 7, "file")).await;
    put("twin", doc("/a/f", "/a", "f", 2, "file")).await;
    // Missing fields: the only way to store a bad tree document under a strict mapping.
    put("junk", json!({"path": "/a/junk", "kind": "file"})).await;
    let report = fsck(Arc::clone(&env.store), &env.index, &p("/"))
        .await
        .expect("fsck");
    assert!(!report.is_clean());
    let all = report.problems.join("\n");
    for expected in [
        "`/gone/x`: parent directory `/gone` does not exist",
        "`/a/f/x`: parent `/a/f` is a file",
        "`/a/w` (document `wrong-depth`)",
        "`/a/f` is stored twice",
        "document `junk` is not a valid tree document",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
    assert_eq!(report.problem_count, 5, "{all}");
    let scoped = fsck(Arc::clone(&env.store), &env.index, &p("/a/f"))
        .await
        .expect("scoped fsck");
    assert!(
        scoped.problems.iter().any(|p| p.contains("stored twice")),
        "{scoped}"
    );
}

/// Siblings whose names go on with a byte below `/` (`/a-b`, `/a.c`, `/a b`) sort between a
/// directory and what it holds: the check, which remembers only what the scan can still
/// reach, must still find `/a` the parent of `/a/x` after them, and a missing parent after
/// them too. Problems past the first hundred are counted.
async fn fsck_reads_siblings_that_sort_inside_a_directory(env: Env) {
    tree_with(
        &env,
        &[
            ("/a", true),
            ("/a b", true),
            ("/a b/y", false),
            ("/a-b", true),
            ("/a-b/c", true),
            ("/a-b/c/d", false),
            ("/a.c", false),
            ("/a/x", true),
            ("/a/x/z", false),
            ("/a0", false),
        ],
    )
    .await;
    let clean = fsck(Arc::clone(&env.store), &env.index, &p("/"))
        .await
        .expect("fsck");
    assert!(clean.is_clean(), "{clean}");
    assert_eq!((clean.documents, clean.dirs, clean.files), (10, 5, 5));
    let scoped = fsck(Arc::clone(&env.store), &env.index, &p("/a"))
        .await
        .expect("fsck of /a");
    assert!(scoped.is_clean(), "{scoped}");
    assert_eq!(scoped.documents, 3, "{scoped}");
    for i in 0..120 {
        let path = format!("/gone-{i:03}/f");
        env.store
            .create(
                &env.index,
                &format!("orphan-{i}"),
                json!({
                    "path": path, "parent": &path[..9], "name": "f", "depth": 2,
                    "kind": "file", "size": 0, "modified": 0
                }),
            )
            .await
            .expect("put");
    }
    let report = fsck(Arc::clone(&env.store), &env.index, &p("/"))
        .await
        .expect("fsck");
    assert_eq!(report.problem_count, 120, "{report}");
    assert_eq!(report.problems.len(), 101, "{report}");
    assert_eq!(report.problems[100], "... and 20 more");
    assert!(
        report.problems[0].contains("`/gone-000/f`: parent directory `/gone-000` does not exist"),
        "{report}"
    );
}

async fn fsck_reports_locks_without_failing(env: Env) {
    tree_with(&env, SMALL).await;
    let locks = fs_locks::LockClient::builder(Arc::clone(&env.store), env.lock_index()).build();
    let guard = locks.lock_tree(&p("/a")).await.expect("lock");
    let report = fsck(Arc::clone(&env.store), &env.index, &p("/"))
        .await
        .expect("fsck");
    assert!(report.is_clean());
    assert_eq!((report.locks_active, report.locks_expired), (1, 0));
    assert!(
        report.to_string().contains("held by jobs at work"),
        "{report}"
    );
    guard.release().await.expect("release");
}

/// Issue 14: on Elasticsearch 7.2.1 every rename left a scroll context open until, after a few
/// hundred renames, the server's limit was reached and every search failed. Through the
/// Elasticsearch-behaviour proxy with a limit of 50, 1 000 paged renames (scroll paging, as on
/// 7.2.1) must all succeed and leave nothing open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_renames_leave_no_search_context_open() {
    let proxy = fs_testkit::start_es_proxy(fs_testkit::EsProxyOptions {
        max_open_contexts: 50,
        ..fs_testkit::EsProxyOptions::default()
    });
    let config = fs_store::ElasticConfig::new(proxy.url())
        .expect("url")
        .paging(fs_store::Paging::Scroll);
    let store: SharedStore = Arc::new(fs_store::ElasticStore::connect(config).expect("client"));
    let env = Env {
        store,
        ..Env::new(fs_testkit::Backend::Embedded)
    };
    // More than a check reads at once (64), so each rename counts and scans; pages of 32: every
    // rename scans its 71 documents in three pages through one scroll.
    dir_of_files(&env, "/d", 70).await;
    let renamer = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(32)
        .build();
    let (mut here, mut there) = (p("/d"), p("/e"));
    for n in 0..1_000 {
        let report = renamer
            .rename(&here, &there)
            .await
            .unwrap_or_else(|e| panic!("rename {n}: {e}"));
        assert_eq!(report.rewritten, 71, "rename {n}");
        std::mem::swap(&mut here, &mut there);
    }
    let stats = proxy.stats();
    println!("1 000 renames: {stats:?}");
    assert_eq!(stats.contexts_refused, 0);
    assert!(stats.contexts_opened >= 1_000, "{stats:?}");
    let open = proxy.open_contexts();
    assert!(open.is_empty(), "left open: {open:?}");
}

/// The same on a real Elasticsearch (7.2.1 pages with scroll): after 100 paged renames the
/// server has no more scroll contexts open than before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: set FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_renames_close_their_scroll_contexts() {
    let url = std::env::var(fs_testkit::REAL_ES_VAR).expect("FSRENAME_TEST_ES_URL");
    let env = Env::new(fs_testkit::Backend::RealElastic);
    // Larger than a check reads at once, so that every rename pages (see above).
    dir_of_files(&env, "/d", 70).await;
    let before = fs_testkit::scroll_contexts_open(&url).await;
    let renamer = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .page_size(32)
        .build();
    let (mut here, mut there) = (p("/d"), p("/e"));
    for n in 0..100 {
        renamer
            .rename(&here, &there)
            .await
            .unwrap_or_else(|e| panic!("rename {n}: {e}"));
        std::mem::swap(&mut here, &mut there);
    }
    let after = fs_testkit::scroll_contexts_open(&url).await;
    println!("scroll contexts open: {before} before, {after} after 100 renames");
    assert!(
        after <= before,
        "{before} before, {after} after: renames leak scroll contexts"
    );
}

/// Each strategy's rename of 601 documents, pages of 50, while every network fault strikes
/// (tree locks, the global lock, one document lock per document): each document moved exactly
/// once with its id, nothing left locked, and no rename failed on its own retried write.
async fn every_strategy_rides_out_network_faults(first: Env) {
    let mut resolved = 0;
    for strategy in [Strategy::Tree, Strategy::Global, Strategy::Document] {
        let env = Env {
            index: fs_testkit::unique_name("fs"),
            ..first.clone()
        };
        dir_of_files(&env, "/s", 600).await;
        let before = paths_by_id(&env).await;
        let renamer = Renamer::builder(Arc::clone(&env.store), env.index.clone())
            .strategy(strategy)
            .page_size(50)
            .build();
        env.storm();
        let report = renamer.rename(&p("/s"), &p("/t")).await;
        env.lull();
        let report = report.unwrap_or_else(|e| panic!("{strategy}: {e}"));
        resolved += report.ambiguous_resolved;
        assert_eq!(report.rewritten, 601, "{strategy}");
        let after = paths_by_id(&env).await;
        assert_eq!(after.len(), before.len(), "{strategy}");
        for (id, path) in &before {
            let moved = format!("/t{}", &path["/s".len()..]);
            assert_eq!(after.get(id), Some(&moved), "{strategy}: {id}");
        }
        let report = fsck(Arc::clone(&env.store), &env.index, &p("/"))
            .await
            .expect("fsck");
        assert!(report.is_clean(), "{strategy}: {report}");
        assert_eq!(locks_left(&env).await, 0, "{strategy}");
    }
    first.calm();
    println!("own landed writes recognised: {resolved}");
}

/// A job whose journal id was fenced (a recovery cleared its expired locks before it
/// journaled) writes nothing under that id, whether its writes would go with its entry and
/// release in one transaction (the embedded store) or the usual way: it meets the fence,
/// starts over under a new id, and renames once.
async fn a_fenced_job_writes_nothing_and_starts_over(env: Env) {
    tree_with(&env, SMALL).await;
    let journal = fs_rename::Journal::new(Arc::clone(&env.store), &env.index);
    journal.ensure_index().await.expect("journal index");
    let fenced = fs_model::entropy::uuid();
    let outcome = journal
        .fence(&fenced, "a recovery", 1)
        .await
        .expect("fence");
    assert!(matches!(
        outcome,
        fs_rename::FenceOutcome::Fenced { new: true }
    ));
    let report = Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .first_journal_id(fenced.clone())
        .build()
        .rename(&p("/a"), &p("/x/a2"))
        .await
        .expect("rename after starting over");
    assert_eq!(report.restarts, 1, "{report:?}");
    assert_eq!((report.found, report.rewritten), (4, 4));
    assert_eq!(
        journal.state_of(&fenced).await.expect("state"),
        fs_rename::JournalState::Fenced,
        "the fence stands"
    );
    let mut paths: Vec<String> = paths_by_id(&env).await.into_values().collect();
    paths.sort();
    assert_eq!(paths, SMALL_MOVED);
    assert_eq!(locks_left(&env).await, 0);
}

on_every_backend!(
    a_fenced_job_writes_nothing_and_starts_over,
    a_directory_moves_with_everything_under_it,
    a_file_rename_moves_one_document,
    each_check_has_its_own_error,
    every_strategy_renames_and_cleans_up,
    a_write_from_a_stale_read_fails_instead_of_overwriting,
    a_rename_that_meets_a_stale_write_does_not_land_half_of_it,
    a_conflict_with_pages_in_flight_reports_what_was_written,
    a_failed_last_refresh_keeps_the_locks_of_a_complete_rename,
    transient_item_failures_are_retried,
    a_retried_write_that_had_landed_is_recognised,
    progress_is_reported_in_order,
    the_checks_first_page_and_the_rest_move_once_each,
    fsck_finds_what_is_broken,
    fsck_reads_siblings_that_sort_inside_a_directory,
    fsck_reports_locks_without_failing,
);

with_network_faults!(every_strategy_rides_out_network_faults);
