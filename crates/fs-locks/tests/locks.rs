//! The rules of the book's tree locking, the global and document locks, and what fsrename
//! adds (rename locks, reentrancy, retry safety, round trips), on every backend.

mod common;

use std::time::Duration;

use common::*;
use fs_locks::{
    FirstWrite, LockError, LockProtocol, ReleasedAfter, ReleasedOrKept, TreeLockRequest,
};
use fs_store::BulkOp;
use fs_testkit::Backend;
use serde_json::json;

async fn shared_and_shared_are_compatible(env: Env) {
    let (a, b) = (client(&env, "a"), client(&env, "b"));
    let ga = a.lock_tree(&p("/clinton/a")).await.expect("a");
    let gb = b
        .lock_tree(&p("/clinton/b"))
        .await
        .expect("b shares /clinton with a");
    let shared = lock_doc(&env, "/clinton").await.expect("shared lock doc");
    assert_eq!(shared["lock_type"], "shared");
    assert_eq!(shared["lock_count"], 2);
    ga.release().await.expect("release a");
    assert_eq!(
        lock_doc(&env, "/clinton").await.expect("still shared")["lock_count"],
        1
    );
    gb.release().await.expect("release b");
    assert_eq!(
        lock_count(&env).await,
        0,
        "release leaves no lock document behind"
    );
}

async fn exclusive_is_refused_under_a_shared_lock(env: Env) {
    let (a, b) = (client(&env, "job-a"), client(&env, "job-b"));
    let ga = a.lock_tree(&p("/clinton/a")).await.expect("a");
    let msg = assert_blocked_on(b.lock_tree(&p("/clinton")).await, "/clinton");
    assert!(
        msg.contains("shared lock on `/clinton` held by job-a"),
        "{msg}"
    );
    ga.release().await.expect("release");
    b.lock_tree(&p("/clinton"))
        .await
        .expect("free now")
        .release()
        .await
        .expect("release");
    assert_eq!(lock_count(&env).await, 0);
}

async fn shared_is_refused_under_an_exclusive_lock(env: Env) {
    let (a, b) = (client(&env, "job-a"), client(&env, "job-b"));
    let ga = a.lock_tree(&p("/clinton")).await.expect("a");
    let msg = assert_blocked_on(b.lock_tree(&p("/clinton/a/b")).await, "/clinton");
    assert!(
        msg.contains("exclusive lock on `/clinton` held by job-a"),
        "{msg}"
    );
    assert_eq!(
        lock_doc(&env, "/clinton/a").await,
        None,
        "the refused attempt left nothing"
    );
    ga.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
}

async fn the_books_example(env: Env) {
    let (a, b) = (client(&env, "readme"), client(&env, "clinton"));
    let readme = p("/clinton/projects/elasticsearch/README.txt");
    let guard = a.lock_tree(&readme).await.expect("lock README");
    for ancestor in [
        "/clinton",
        "/clinton/projects",
        "/clinton/projects/elasticsearch",
    ] {
        let doc = lock_doc(&env, ancestor).await.expect("shared ancestor");
        assert_eq!(
            (doc["lock_type"].as_str(), doc["lock_count"].as_i64()),
            (Some("shared"), Some(1))
        );
    }
    let exclusive = lock_doc(&env, readme.as_str()).await.expect("exclusive");
    assert_eq!(exclusive["lock_type"], "exclusive");
    assert_eq!(exclusive["process_id"], a.owner().process_id.as_str());
    assert_blocked_on(b.lock_tree(&p("/clinton")).await, "/clinton");
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
    b.lock_tree(&p("/clinton"))
        .await
        .expect("now free")
        .release()
        .await
        .expect("release");
}

async fn waiting_ends_when_the_holder_releases(env: Env) {
    let a = client(&env, "a");
    let b = client_builder(&env, "b")
        .wait(Duration::from_secs(10))
        .build();
    let ga = a.lock_tree(&p("/clinton")).await.expect("a");
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        ga.release().await.expect("release a");
    });
    let gb = b.lock_tree(&p("/clinton/x")).await.expect("b after a");
    assert!(gb.grant().attempts > 1 && gb.grant().waited >= Duration::from_millis(100));
    releaser.await.expect("releaser");
    gb.release().await.expect("release b");
    assert_eq!(lock_count(&env).await, 0);
}

async fn the_timeout_names_the_path_and_the_holder(env: Env) {
    let a = client(&env, "mv /clinton /gormley");
    let b = client_builder(&env, "b")
        .wait(Duration::from_millis(50))
        .build();
    let _ga = a.lock_tree(&p("/clinton")).await.expect("a");
    let err = b
        .lock_tree(&p("/clinton/projects"))
        .await
        .expect_err("blocked");
    let msg = err.to_string();
    assert!(
        msg.contains("`/clinton`") && msg.contains("mv /clinton /gormley"),
        "{msg}"
    );
    assert!(msg.contains(&a.owner().process_id), "{msg}");
    assert!(err.is_retryable());
}

async fn reentrant_for_the_same_owner(env: Env) {
    let a = client(&env, "a");
    let outer = a.lock_tree(&p("/x/y")).await.expect("outer");
    let inner = a.lock_tree(&p("/x/y")).await.expect("reentrant");
    assert_eq!(inner.grant().round_trips, 0, "granted from memory");
    let below = a
        .lock_tree(&p("/x/y/z"))
        .await
        .expect("under our own exclusive lock");
    assert_eq!(
        lock_doc(&env, "/x").await.expect("shared")["lock_count"],
        1,
        "counted once"
    );
    assert_eq!(
        lock_doc(&env, "/x/y").await.expect("ours")["lock_type"],
        "exclusive"
    );
    inner.release().await.expect("inner");
    below.release().await.expect("below");
    assert!(
        lock_doc(&env, "/x/y").await.is_some(),
        "the outer guard still holds it"
    );
    outer.release().await.expect("outer");
    assert_eq!(lock_count(&env).await, 0);
}

async fn a_retried_share_is_not_counted_twice(env: Env) {
    // As if an earlier increment landed but its answer was lost: the document already lists
    // us. The next attempt adopts it instead of counting again.
    let a = client(&env, "a");
    let pid = a.owner().process_id.clone();
    let landed = json!({"lock_type": "shared", "lock_count": 1, "path": "/x",
                        "holders": {pid: {"holder": "a", "acquired_at": 0, "expires_at": 0}}});
    put_lock(&env, "/x", landed).await;
    let guard = a.lock_tree(&p("/x/y")).await.expect("lock");
    assert_eq!(lock_doc(&env, "/x").await.expect("shared")["lock_count"], 1);
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
}

async fn upgrading_shared_to_exclusive_is_refused_clearly(env: Env) {
    let a = client(&env, "a");
    let guard = a.lock_tree(&p("/x/y")).await.expect("lock");
    let err = a.lock_tree(&p("/x")).await.expect_err("upgrade");
    assert!(
        matches!(err, LockError::Upgrade { ref path } if path == "/x"),
        "{err:?}"
    );
    guard.release().await.expect("release");
}

async fn a_rename_locks_source_and_destination_at_once(env: Env) {
    let (a, b) = (client(&env, "a"), client(&env, "b"));
    let guard = a
        .lock_rename(&p("/clinton/a"), &p("/gormley/b"))
        .await
        .expect("rename lock");
    for (id, kind) in [
        ("/clinton", "shared"),
        ("/gormley", "shared"),
        ("/clinton/a", "exclusive"),
        ("/gormley/b", "exclusive"),
    ] {
        assert_eq!(
            lock_doc(&env, id).await.expect(id)["lock_type"],
            kind,
            "{id}"
        );
    }
    assert_eq!(
        guard.grant().round_trips,
        acquisition_round_trips(&env, true)
    );
    assert_blocked_on(b.lock_tree(&p("/gormley/b/c")).await, "/gormley/b");
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
    let into_itself = a.lock_rename(&p("/clinton"), &p("/clinton/sub")).await;
    assert!(
        matches!(into_itself, Err(LockError::MoveIntoItself { .. })),
        "{into_itself:?}"
    );
    assert!(matches!(
        a.lock_tree(&fs_model::FsPath::root()).await,
        Err(LockError::RootLock)
    ));
}

/// A release that depends on a write (a job's journal entry closed): the write lands, then
/// the locks go, in one round trip where the store chains them (the embedded store's atomic
/// updates) and two elsewhere; a write that fails releases nothing, and the locks stay for
/// their lease.
async fn a_release_after_a_write(env: Env) {
    let a = client(&env, "a");
    let other = format!("{}-first", env.locks);
    env.store
        .create_index(&other, &json!({}))
        .await
        .expect("index for the write");
    let version = env
        .store
        .create(&other, "entry", json!({"state": "running"}))
        .await
        .expect("entry");
    let close = |version| FirstWrite {
        index: other.clone(),
        op: BulkOp::Index {
            id: "entry".to_owned(),
            source: json!({"state": "closed"}),
            if_version: Some(version),
        },
        with: None,
    };
    let chains = a.chains_release().await;
    let guard = a.lock_tree(&p("/clinton/a")).await.expect("lock");
    match guard.release_after(close(version)).await {
        ReleasedAfter::Released(Ok(report)) => {
            assert_eq!(
                report.round_trips,
                if chains { 1 } else { 2 },
                "chains: {chains}"
            )
        }
        other => panic!("the write lands and the locks go: {other:?}"),
    }
    assert_eq!(lock_count(&env).await, 0);
    let entry = env.store.get(&other, "entry").await.expect("get");
    assert_eq!(entry.expect("entry").source["state"], "closed");

    let guard = a.lock_tree(&p("/clinton/b")).await.expect("lock");
    match guard.release_after(close(version)).await {
        ReleasedAfter::FirstFailed(e) => assert!(e.is_conflict(), "{e}"),
        other => panic!("a stale write fails and nothing is released: {other:?}"),
    }
    assert_eq!(
        lock_doc(&env, "/clinton/b").await.expect("left")["lock_type"],
        "exclusive"
    );
    assert_eq!(
        lock_doc(&env, "/clinton").await.expect("left")["lock_type"],
        "shared"
    );
}

/// A release with writes that go with its first one ([`FirstWrite::with`], a small rename
/// sent whole): where the store chains them, all land and the locks go in one round trip; a
/// write among them that fails changes nothing, and the guard comes back holding its locks,
/// still its own to use and release. A store that cannot chain them refuses, changing
/// nothing.
async fn a_release_with_writes_lands_whole_or_keeps_the_locks(env: Env) {
    let a = client(&env, "a");
    let (journal, tree) = (
        format!("{}-journal", env.locks),
        format!("{}-tree", env.locks),
    );
    for index in [&journal, &tree] {
        env.store
            .create_index(index, &json!({}))
            .await
            .expect("index for the writes");
    }
    env.store
        .create(&tree, "taken", json!({"path": "/taken"}))
        .await
        .expect("taken");
    let first = |entry: &str, ids: &[&str]| FirstWrite {
        index: journal.clone(),
        op: BulkOp::Create {
            id: entry.to_owned(),
            source: json!({"state": "closed"}),
        },
        with: Some(fs_store::WithFirst {
            index: tree.clone(),
            ops: ids
                .iter()
                .map(|id| BulkOp::Create {
                    id: (*id).to_owned(),
                    source: json!({ "path": format!("/{id}") }),
                })
                .collect(),
            refresh: true,
        }),
    };
    let chains = a.chains_release().await;

    let guard = a.lock_tree(&p("/clinton/a")).await.expect("lock");
    let guard = match guard
        .release_after_or_keep(first("one", &["x", "taken"]))
        .await
    {
        ReleasedOrKept::Kept(guard, why) => {
            assert!(
                if chains {
                    why.is_conflict()
                } else {
                    matches!(why, fs_store::StoreError::Rejected { .. })
                },
                "chains: {chains}: {why}"
            );
            guard
        }
        other => panic!("nothing lands, the guard comes back: {other:?}"),
    };
    assert!(env.store.get(&journal, "one").await.expect("get").is_none());
    assert!(env.store.get(&tree, "x").await.expect("get").is_none());
    assert_eq!(
        lock_doc(&env, "/clinton/a").await.expect("kept")["lock_type"],
        "exclusive"
    );
    a.ensure_held("/clinton/a")
        .await
        .expect("still held, and renewed as before");
    assert_blocked_on(
        client(&env, "b").lock_tree(&p("/clinton")).await,
        "/clinton",
    );

    if chains {
        match guard.release_after_or_keep(first("two", &["x", "y"])).await {
            ReleasedOrKept::Released(Ok(report)) => assert_eq!(report.round_trips, 1),
            other => panic!("all lands, the locks go: {other:?}"),
        }
        assert!(env.store.get(&journal, "two").await.expect("get").is_some());
        assert!(env.store.get(&tree, "y").await.expect("get").is_some());
    } else {
        guard.release().await.expect("released the usual way");
    }
    assert_eq!(lock_count(&env).await, 0);
}

async fn a_foreign_clients_book_documents_are_respected(env: Env) {
    // Written exactly as the book writes them, by a client that is not fsrename.
    put_lock(&env, "/clinton/projects", json!({"lock_type": "exclusive"})).await;
    put_lock(
        &env,
        "/clinton",
        json!({"lock_type": "shared", "lock_count": 1}),
    )
    .await;
    let a = client(&env, "a");
    let msg = assert_blocked_on(
        a.lock_tree(&p("/clinton/projects/elasticsearch/README.txt"))
            .await,
        "/clinton/projects",
    );
    assert!(msg.contains("did not record a process_id"), "{msg}");
    assert_blocked_on(a.lock_tree(&p("/clinton")).await, "/clinton");
    let guard = a
        .lock_tree(&p("/clinton/other"))
        .await
        .expect("shares with the foreign client");
    assert_eq!(
        lock_doc(&env, "/clinton").await.expect("shared")["lock_count"],
        2
    );
    guard.release().await.expect("release");
    let left = lock_doc(&env, "/clinton")
        .await
        .expect("the foreign share is kept");
    assert_eq!(left["lock_count"], 1);
    assert_eq!(left["holders"], json!({}));
    assert!(
        lock_doc(&env, "/clinton/projects").await.is_some(),
        "foreign exclusive untouched"
    );
}

async fn the_global_lock(env: Env) {
    let (a, b) = (client(&env, "a"), client(&env, "b"));
    let guard = a.lock_global().await.expect("global");
    assert_blocked_on(b.lock_global().await, "global");
    let again = a.lock_global().await.expect("reentrant");
    again.release().await.expect("inner");
    assert_blocked_on(b.lock_global().await, "global");
    assert_eq!(guard.grant().round_trips, 1, "a single _create");
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
    // The book's own global lock document: `PUT /fs/lock/global/_create {}`.
    put_lock(&env, "global", json!({})).await;
    assert_blocked_on(b.lock_global().await, "global");
}

async fn document_locks(env: Env) {
    let (a, b) = (client(&env, "a"), client(&env, "b"));
    let docs = |ids: &[&str]| {
        ids.iter()
            .map(|id| (id.to_string(), None))
            .collect::<Vec<_>>()
    };
    let guard = a
        .lock_documents(&docs(&["d1", "d2", "d3"]))
        .await
        .expect("a's documents");
    assert_eq!(guard.grant().round_trips, 1, "one bulk create");
    assert_eq!(
        lock_doc(&env, "d1").await.expect("d1")["process_id"],
        a.owner().process_id.as_str()
    );
    assert_blocked_on(b.lock_documents(&docs(&["d4", "d3"])).await, "d3");
    assert_eq!(
        lock_doc(&env, "d4").await,
        None,
        "a refused attempt releases what it took"
    );
    let again = a
        .lock_documents(&docs(&["d2", "d3", "d5"]))
        .await
        .expect("reentrant");
    again.release().await.expect("release again");
    assert!(lock_doc(&env, "d5").await.is_none() && lock_doc(&env, "d2").await.is_some());
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
}

async fn document_locks_released_by_query_after_a_refresh(env: Env) {
    let (a, b) = (client(&env, "a"), client(&env, "b"));
    let ids: Vec<(String, Option<fs_model::FsPath>)> =
        (0..50).map(|i| (format!("a{i}"), None)).collect();
    let guard = a.lock_documents(&ids).await.expect("a's documents");
    let other = b
        .lock_documents(&[("b0".to_string(), None)])
        .await
        .expect("b's document");
    // Nothing has refreshed the lock index since the locks were created; the release must.
    assert_eq!(a.release_all_by_query().await.expect("by query"), 50);
    assert!(lock_doc(&env, "a0").await.is_none() && lock_doc(&env, "b0").await.is_some());
    std::mem::forget(guard); // its locks are gone already
    other.release().await.expect("release b");
    assert_eq!(lock_count(&env).await, 0);
}

async fn hashed_ids_for_long_paths(env: Env) {
    let a = client(&env, "a");
    let long = p(&format!(
        "/{}/{}/{}",
        "a".repeat(200),
        "b".repeat(200),
        "c".repeat(200)
    ));
    let guard = a.lock_tree(&long).await.expect("lock");
    let id = fs_model::tree_lock_id(&long);
    assert!(id.starts_with("sha256:"));
    assert_eq!(
        lock_doc(&env, &id).await.expect("hashed lock")["path"],
        long.as_str()
    );
    let listed = a.list_locks().await.expect("list");
    assert!(listed
        .iter()
        .any(|l| l.path.as_deref() == Some(long.as_str())));
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
}

/// Lock + unlock round trips at depth 1, 4 and 16, nothing in the way. Printed for the record.
async fn round_trips_by_depth(env: Env) {
    let a = client(&env, "a");
    for depth in [1usize, 4, 16] {
        let path = p(&(1..=depth).map(|i| format!("/d{i}")).collect::<String>());
        let guard = a.lock_tree(&path).await.expect("lock");
        let lock = guard.grant().round_trips;
        let unlock = guard.release().await.expect("release").round_trips;
        println!("depth {depth:>2}: lock {lock} round trips, unlock {unlock}");
        let expected = acquisition_round_trips(&env, depth > 1);
        assert_eq!((lock, unlock), (expected, 1), "depth {depth}");
        let rename = a
            .lock_request(&TreeLockRequest::rename(&path, &p(&format!("{path}x"))).expect("plan"))
            .await
            .expect("rename lock");
        assert!(rename.grant().round_trips <= 2);
        rename.release().await.expect("release");
    }
    assert_eq!(lock_count(&env).await, 0);
}

/// Stores that run the lock scripts (the embedded store, atomically; servers that run
/// painless) get them when asked for, and compare-and-set when that is asked for.
async fn the_protocol_follows_the_store(env: Env) {
    let chosen = client(&env, "a").protocol().await.expect("protocol");
    let expected = match env.protocol {
        LockProtocol::Cas => LockProtocol::Cas,
        _ => LockProtocol::Scripted,
    };
    assert_eq!(chosen, expected);
}

/// The automatic choice: scripts where the server stores and runs them (the proxy in front of
/// osmem, like Elasticsearch), compare-and-set where it does not (osmem itself).
#[tokio::test]
async fn automatic_protocol_is_scripted_where_scripts_run() {
    let proxied = Env::new(fs_testkit::Backend::Osmem).await;
    let chosen = client(&proxied, "a").protocol().await.expect("protocol");
    assert_eq!(chosen, LockProtocol::Scripted);
    let raw = Env {
        store: std::sync::Arc::new(fs_testkit::raw_osmem_store()),
        ..proxied
    };
    let chosen = client(&raw, "a").protocol().await.expect("protocol");
    assert_eq!(chosen, LockProtocol::Cas);
}

/// Round trips of an uncontended acquisition by a client that has found no lock document
/// existing yet: scripted, one bulk; compare-and-set on a server, one bulk of creates (no
/// read: nothing is there to read); compare-and-set on the embedded store, which reads in the
/// write's own transaction, one read and one write, or just the write when there is no shared
/// lock to read.
fn acquisition_round_trips(env: &Env, takes_shared: bool) -> u32 {
    let creates_first = env.protocol == LockProtocol::Cas && env.backend != Backend::Embedded;
    if env.protocol == LockProtocol::Scripted || !takes_shared || creates_first {
        1
    } else {
        2
    }
}

/// Compare-and-set on a server creates first only until a lock document is found existing:
/// the first acquisition that meets one pays for its refused creates (a bulk, then the read
/// and the write), and every later one of the process reads first, as a busy tree (whose
/// root's document is nearly always there) wants.
#[tokio::test]
async fn compare_and_set_reads_first_once_a_document_was_found_existing() {
    let env = Env::with_protocol(Backend::Osmem, LockProtocol::Cas).await;
    let (a, b) = (client(&env, "a"), client(&env, "b"));
    let held = a.lock_tree(&p("/x/y")).await.expect("a's lock");
    assert_eq!(held.grant().round_trips, 1, "a quiet tree: one bulk");
    let first = b.lock_tree(&p("/x/z")).await.expect("b's first lock");
    assert_eq!(
        first.grant().round_trips,
        3,
        "creates refused, then read and write"
    );
    first.release().await.expect("release");
    let second = b.lock_tree(&p("/x/w")).await.expect("b's second lock");
    assert_eq!(second.grant().round_trips, 2, "read and write");
    second.release().await.expect("release");
    held.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
    env.finish();
}

#[tokio::test]
async fn asking_for_scripts_where_none_run_is_a_clear_error() {
    let proxied = Env::new(fs_testkit::Backend::Osmem).await;
    let raw_osmem = Env {
        store: std::sync::Arc::new(fs_testkit::raw_osmem_store()),
        ..proxied
    };
    let scripted = client_builder(&raw_osmem, "a")
        .protocol(LockProtocol::Scripted)
        .build();
    let err = scripted.lock_tree(&p("/x")).await.expect_err("no scripts");
    assert!(
        err.to_string().contains("does not run stored scripts"),
        "{err}"
    );
}

/// Issue 35: the automatic choice is made only when it matters. On a quiet tree an acquisition
/// creates its documents (what both protocols write on a missing one) in one `bulk` and the
/// release gives them back by compare-and-set: nothing asks the server about scripts (which
/// cost a one-file `mv` two requests on a server without them). A document found to exist
/// decides it, and is taken by the protocol decided; refused there, the attempt gives back
/// what its creates took.
#[tokio::test]
async fn the_automatic_protocol_is_decided_when_a_lock_document_exists() {
    let proxied = Env::new(fs_testkit::Backend::Osmem).await;
    for (env, decided) in [
        (
            Env {
                store: std::sync::Arc::new(fs_testkit::raw_osmem_store()),
                ..proxied.clone()
            },
            LockProtocol::Cas,
        ),
        (proxied, LockProtocol::Scripted),
    ] {
        let memo = fs_locks::ProtocolMemo::new();
        let auto = |holder: &str| {
            client_builder(&env, holder)
                .protocol(LockProtocol::Auto)
                .protocol_memo(memo.clone())
                .build()
        };
        let (a, b) = (auto("a"), auto("b"));
        let guard = a.lock_tree(&p("/q/r/s/t")).await.expect("quiet lock");
        assert_eq!(guard.grant().round_trips, 1, "one bulk of creates");
        assert_eq!(memo.decided(), None, "nothing to decide on a quiet tree");
        // `/q` exists now (a holds a share): b's acquisition decides, shares it, and its own
        // exclusive lock on `/q/x` was created alongside.
        let shared = b.lock_tree(&p("/q/x")).await.expect("shares /q with a");
        assert_eq!(memo.decided(), Some(decided));
        assert_eq!(
            lock_doc(&env, "/q").await.expect("shared by both")["lock_count"],
            2
        );
        // A client still undecided (a memo of its own) is refused on `/q/r/s/t`, which a
        // holds: what its creates took (`/q/r/s/t/u`) goes back.
        let c = client_builder(&env, "c")
            .protocol(LockProtocol::Auto)
            .protocol_memo(fs_locks::ProtocolMemo::new())
            .build();
        let refused = c.lock_tree(&p("/q/r/s/t/u")).await;
        assert!(
            matches!(refused, Err(LockError::Timeout { .. })),
            "{refused:?}"
        );
        assert!(lock_doc(&env, "/q/r/s/t/u").await.is_none(), "given back");
        shared.release().await.expect("release b");
        guard.release().await.expect("release a");
        assert_eq!(lock_count(&env).await, 0);
    }
}

/// The embedded store runs the lock scripts' twins atomically, so the automatic choice there
/// is the scripted protocol: one round trip per acquisition, and no lost races.
#[tokio::test]
async fn the_embedded_store_runs_the_lock_scripts_atomically() {
    let embedded = Env::new(fs_testkit::Backend::Embedded).await;
    let chosen = client(&embedded, "a").protocol().await.expect("protocol");
    assert_eq!(chosen, LockProtocol::Scripted);
    // Any other script is not stored, and a script it does not know is refused as
    // Elasticsearch refuses it.
    let scripted = embedded.store.scripted().expect("scripted updates");
    let stored = scripted
        .put_script("someone-elses", "ctx._source.n += 1")
        .await
        .expect("put");
    assert!(!stored, "only the lock scripts are known");
    let results = scripted
        .bulk_update(
            &embedded.locks,
            vec![fs_store::ScriptedUpdate {
                id: "x".to_owned(),
                script: "someone-elses".to_owned(),
                params: serde_json::json!({}),
                upsert: None,
            }],
        )
        .await
        .expect("bulk");
    let err = results[0].clone().expect_err("unknown script");
    assert!(err.to_string().contains("unable to find script"), "{err}");
}

/// What an acquisition is given to settle a dead holder's lock, here: reap it (recovery would
/// finish the holder's job first), counting the calls.
struct Reap {
    reaper: fs_locks::LockClient,
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl fs_locks::Orphans for Reap {
    async fn settle(&self, blocker: &fs_locks::Blocker) -> bool {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.reaper.reap_expired(&blocker.id).await.is_ok()
    }
}

/// Issue 47, item 3: a holder that ran on this machine and whose process is gone (a child
/// process, killed) loses its lease at once, where it used to keep everyone out for the whole
/// lease (`mv` run again after a Ctrl-C or a crash waited 30 s, then failed). A live holder,
/// and one that recorded no process (another machine's, the book's), keep theirs. The lock is
/// still not free (only recovery clears a dead job's locks): an acquisition given `Orphans`
/// has it settled, once, and is granted at once after.
async fn a_holder_proven_gone_loses_its_lease_at_once(env: Env) {
    let long = Duration::from_secs(600);
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("start a child process");
    let its = fs_locks::OsProcess::running(child.id()).expect("the child, on Linux");
    // It never renews: once its process is gone, nothing would.
    let dead = client_builder(&env, "dead")
        .os_process(Some(its))
        .lease(long)
        .renew_every(long)
        .build();
    let elsewhere = client_builder(&env, "elsewhere")
        .os_process(None)
        .lease(long)
        .renew_every(long)
        .build();
    let _dead = dead.lock_tree(&p("/g/x")).await.expect("lock");
    let _elsewhere = elsewhere.lock_tree(&p("/g/y")).await.expect("lock");
    let b = client_builder(&env, "b")
        .wait(Duration::from_millis(100))
        .build();

    // Its process runs: its lease holds.
    assert_blocked_on(b.lock_tree(&p("/g/x")).await, "/g/x");
    let doc = lock_doc(&env, "/g/x").await.expect("held");
    assert_eq!(doc["os_process"]["pid"], child.id(), "{doc}");

    child.kill().expect("kill the child");
    child.wait().expect("reap the child");
    let before = fs_locks::LeaseClock::new().now_ms();
    match b.lock_tree(&p("/g/x")).await {
        Err(LockError::Timeout { blocker, .. }) => {
            assert!(blocker.expired_ms_ago.is_some(), "{blocker:?}");
            assert!(blocker.to_string().contains("expired"), "{blocker}");
        }
        other => panic!("expected a timeout on an expired lock, got {other:?}"),
    }
    let doc = lock_doc(&env, "/g/x")
        .await
        .expect("still there: expired is not free");
    assert!(
        doc["expires_at"].as_i64().expect("expiry") < before,
        "{doc}"
    );
    // Only what refused was touched: the dead holder's share of `/g` refuses nobody here.
    // A sweep of the whole lock index (recovery's first step) ends it, and not the other's.
    let dead_pid = dead.owner().process_id.clone();
    let other_pid = elsewhere.owner().process_id.clone();
    let share = |group: &serde_json::Value, pid: &str| {
        group["holders"][pid]["expires_at"].as_i64().expect("entry")
    };
    let group = lock_doc(&env, "/g").await.expect("shared");
    assert!(share(&group, &dead_pid) > before, "{group}");
    assert_eq!(b.end_all_gone_leases().await.expect("sweep"), 1);
    let group = lock_doc(&env, "/g").await.expect("shared");
    assert!(share(&group, &dead_pid) < before, "{group}");
    assert!(share(&group, &other_pid) > before, "{group}");
    // Another machine's holder: nothing proven, its lease holds.
    assert_blocked_on(b.lock_tree(&p("/g/y")).await, "/g/y");
    assert!(
        lock_doc(&env, "/g/y").await.expect("held")["expires_at"]
            .as_i64()
            .expect("expiry")
            > before
    );

    let reap = std::sync::Arc::new(Reap {
        reaper: client(&env, "reaper"),
        calls: std::sync::atomic::AtomicUsize::new(0),
    });
    let c = client_builder(&env, "c")
        .wait(long)
        .orphans(reap.clone())
        .build();
    let started = std::time::Instant::now();
    let guard = c.lock_tree(&p("/g/x")).await.expect("granted once settled");
    assert_eq!(reap.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Settled, not waited out: far from the lease (the bound is the lease itself, not a
    // guess at how fast this machine is).
    assert!(started.elapsed() < long / 2, "{:?}", started.elapsed());
    guard.release().await.expect("release");
}

/// A gone holder's lease is ended even when the requests that end it fail in transit: a
/// crash test under network faults (`crash.rs`, fault seed 18190615197988031288) lost the one
/// write that ended a killed `mv`'s lease on `/dst`, and `recover` then left the half-done
/// rename for the whole ten-minute lease, exiting 0. Each seed here strikes three calls in
/// five: reads failing, writes failing unsent, writes landing with their answer lost.
async fn a_gone_holders_lease_ends_through_failing_requests(env: Env) {
    let long = Duration::from_secs(600);
    for seed in 0..8 {
        let path = format!("/g/{seed}");
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("start a child process");
        let its = fs_locks::OsProcess::running(child.id()).expect("the child, on Linux");
        let dead = client_builder(&env, "dead")
            .os_process(Some(its))
            .lease(long)
            .renew_every(long)
            .build();
        let _held = dead.lock_tree(&p(&path)).await.expect("lock");
        child.kill().expect("kill the child");
        child.wait().expect("reap the child");
        let before = fs_locks::LeaseClock::new().now_ms();

        let plan = fs_testkit::FaultPlan {
            transient: 0.3,
            lost_reply: 0.3,
            ..fs_testkit::FaultPlan::default()
        };
        let flaky: fs_store::SharedStore =
            fs_testkit::faulty(std::sync::Arc::clone(&env.store), plan, seed);
        let ender = fs_locks::LockClient::builder(flaky, env.locks.clone())
            .protocol(env.protocol)
            .holder("recover")
            .build();
        let ended = ender
            .end_gone_leases(&path)
            .await
            .expect("ended in the end");
        let doc = lock_doc(&env, &path).await.expect("expired is not free");
        assert!(
            doc["expires_at"].as_i64().expect("expiry") < before,
            "seed {seed}: the lease still runs after ending {ended}: {doc}"
        );
        assert!(ended <= 1, "seed {seed}: one holder, {ended} ended");
    }
}

on_every_backend!(
    a_holder_proven_gone_loses_its_lease_at_once,
    a_gone_holders_lease_ends_through_failing_requests,
    the_protocol_follows_the_store,
    shared_and_shared_are_compatible,
    exclusive_is_refused_under_a_shared_lock,
    shared_is_refused_under_an_exclusive_lock,
    the_books_example,
    waiting_ends_when_the_holder_releases,
    the_timeout_names_the_path_and_the_holder,
    reentrant_for_the_same_owner,
    a_retried_share_is_not_counted_twice,
    upgrading_shared_to_exclusive_is_refused_clearly,
    a_rename_locks_source_and_destination_at_once,
    a_release_after_a_write,
    a_release_with_writes_lands_whole_or_keeps_the_locks,
    a_foreign_clients_book_documents_are_respected,
    the_global_lock,
    document_locks,
    document_locks_released_by_query_after_a_refresh,
    hashed_ids_for_long_paths,
    round_trips_by_depth,
);
