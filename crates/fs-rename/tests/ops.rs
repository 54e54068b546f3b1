//! mkdir, touch, stat, list and index_dir on every backend.

mod common;

use common::*;
use fs_rename::{index_dir, list, mkdir, stat, touch, IndexOptions, LockSettings, RenameError};

async fn mkdir_and_touch_check_what_they_must(env: Env) {
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    let locks = LockSettings::default();
    let missing_parent = mkdir(&tree, &locks, &p("/a/b"), false).await;
    assert!(
        matches!(
            missing_parent,
            Err(RenameError::DestinationParentMissing { .. })
        ),
        "{missing_parent:?}"
    );
    let made = mkdir(&tree, &locks, &p("/a/b/c"), true)
        .await
        .expect("mkdir -p");
    assert_eq!(made.created, vec![p("/a"), p("/a/b"), p("/a/b/c")]);
    assert!(mkdir(&tree, &locks, &p("/a/b"), true)
        .await
        .expect("again, -p")
        .created
        .is_empty());
    let exists = mkdir(&tree, &locks, &p("/a/b"), false).await;
    match exists {
        Err(e @ RenameError::AlreadyExists { .. }) => assert_eq!(
            e.to_string(),
            "`/a/b` already exists as a directory (mkdir -p accepts an existing directory)"
        ),
        other => panic!("mkdir of an existing directory: {other:?}"),
    }
    touch(&tree, &locks, &p("/a/f")).await.expect("touch");
    let first = stat(&tree, &p("/a/f")).await.expect("stat").doc.modified;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    touch(&tree, &locks, &p("/a/f")).await.expect("touch again");
    assert!(stat(&tree, &p("/a/f")).await.expect("stat").doc.modified > first);
    let on_dir = touch(&tree, &locks, &p("/a/b")).await;
    match on_dir {
        Err(e @ RenameError::AlreadyExists { .. }) => assert_eq!(
            e.to_string(),
            "`/a/b` already exists as a directory: touch makes or updates files"
        ),
        other => panic!("touch of a directory: {other:?}"),
    }
    let on_file = mkdir(&tree, &locks, &p("/a/f"), true).await;
    assert!(
        matches!(&on_file, Err(e) if e.to_string() == "`/a/f` already exists as a file"),
        "{on_file:?}"
    );
    let under_file = mkdir(&tree, &locks, &p("/a/f/x"), false).await;
    assert!(
        matches!(under_file, Err(RenameError::DestinationParentNotDir { .. })),
        "{under_file:?}"
    );
    let mut names = Vec::new();
    list(tree.store(), tree.index(), &p("/a"), false, |e| {
        names.push(e.doc.name.clone());
        Ok(())
    })
    .await
    .expect("list");
    assert_eq!(names, ["b", "f"]);
    assert_eq!(locks_left(&env).await, 0);
}

async fn indexing_is_idempotent_and_prunes_on_request(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path().join("src");
    std::fs::create_dir_all(dir.join("a/b")).expect("mkdir");
    std::fs::write(dir.join("a/x"), b"123").expect("write");
    std::fs::write(dir.join("a/b/y"), b"45").expect("write");
    let tree = env.tree();
    let options = IndexOptions::default();
    let first = index_dir(&tree, &dir, &p("/deep/src"), &options, None)
        .await
        .expect("index");
    assert_eq!(
        (first.files, first.dirs, first.bytes, first.created),
        (2, 3, 5, 5)
    );
    assert_eq!(
        stat(&tree, &p("/deep"))
            .await
            .expect("parent made")
            .doc
            .kind,
        fs_model::DocKind::Dir
    );
    let again = index_dir(&tree, &dir, &p("/deep/src"), &options, None)
        .await
        .expect("index again");
    assert_eq!((again.created, again.updated, again.unchanged), (0, 0, 5));
    std::fs::remove_file(dir.join("a/x")).expect("remove");
    let kept = index_dir(&tree, &dir, &p("/deep/src"), &options, None)
        .await
        .expect("index");
    assert_eq!((kept.stale, kept.pruned), (1, 0));
    let prune = IndexOptions {
        prune: true,
        ..IndexOptions::default()
    };
    let pruned = index_dir(&tree, &dir, &p("/deep/src"), &prune, None)
        .await
        .expect("prune");
    assert_eq!((pruned.stale, pruned.pruned), (1, 1));
    assert!(matches!(
        stat(&tree, &p("/deep/src/a/x")).await,
        Err(RenameError::SourceNotFound { .. })
    ));
    let not_a_dir = index_dir(&tree, &dir.join("a/b/y"), &p("/y"), &options, None).await;
    assert!(
        matches!(not_a_dir, Err(RenameError::Local { .. })),
        "{not_a_dir:?}"
    );
    assert_eq!(locks_left(&env).await, 0);
}

/// `find` asked for more than one search may answer (Elasticsearch refuses `from + size`
/// above 10 000; `find --limit 10000` asks for 10 001, to tell whether there are more): every
/// hit once, in path order.
async fn find_answers_past_one_search_window(env: Env) {
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    let mut docs = vec![fs_model::FsDoc::dir(p("/w"), 0)];
    docs.extend((0..10_050).map(|i| fs_model::FsDoc::file(p(&format!("/w/f{i:05}")), 0, 0)));
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");
    let query = fs_model::FindQuery::under(p("/w"));
    let found = tree
        .find_matching(&query, 10_001)
        .await
        .expect("find 10 001");
    let paths: Vec<String> = found.iter().map(|e| e.doc.path.to_string()).collect();
    assert_eq!(paths.len(), 10_001);
    assert!(
        paths.windows(2).all(|w| w[0] < w[1]),
        "in path order, each once"
    );
    assert_eq!(
        (paths[0].as_str(), paths[10_000].as_str()),
        ("/w", "/w/f09999")
    );
    let all = tree.find_matching(&query, 30_000).await.expect("find all");
    assert_eq!(all.len(), 10_051);
}

on_every_backend!(
    mkdir_and_touch_check_what_they_must,
    indexing_is_idempotent_and_prunes_on_request,
    find_answers_past_one_search_window
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
async fn real_elasticsearch_find_answers_past_one_search_window() {
    find_answers_past_one_search_window(common::real_env("fs-find")).await;
}

/// A proxy of its own in front of osmem and a tree (indices made) through it, whose store
/// resends for `retry_deadline` (the default's half minute if `None`): for the tests below,
/// each of which sets the proxy's trap.
async fn through_a_proxy(
    retry_deadline: Option<std::time::Duration>,
) -> (fs_testkit::EsProxy, Env, fs_rename::FsTree) {
    let proxy = fs_testkit::start_es_proxy(fs_testkit::EsProxyOptions::default());
    let mut config = fs_store::ElasticConfig::new(proxy.url()).expect("a loopback URL");
    if let Some(deadline) = retry_deadline {
        config = config.retry_deadline(deadline);
    }
    let store: fs_store::SharedStore =
        std::sync::Arc::new(fs_store::ElasticStore::connect(config).expect("a client"));
    let env = Env::new(fs_testkit::Backend::Osmem).through(store);
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    (proxy, env, tree)
}

/// Found by the Jepsen-style test (`docs/reliability.md`) on a real cluster: `mkdir` reported
/// failed ("lock store failure while releasing") with its directory made. Once the one write
/// of `mkdir` or `touch` is made, the operation has happened: a release that fails after it is
/// a warning (the locks expire with their lease), not an error. Through the proxy, whose trap
/// refuses every request to the lock index once the tree's bulk write has come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_and_touch_that_wrote_succeed_though_their_release_fails() {
    // A short retry deadline: the release gives up in a second, not the default's half minute.
    let (proxy, env, tree) = through_a_proxy(Some(std::time::Duration::from_secs(1))).await;
    let locks = LockSettings {
        lease: std::time::Duration::from_millis(500),
        ..LockSettings::default()
    };
    let (bulk, lock_index) = (
        format!("/{}/_bulk", env.index),
        format!("/{}/", env.lock_index()),
    );
    proxy.trap(&bulk, &lock_index, usize::MAX);
    let made = mkdir(&tree, &locks, &p("/made"), false).await;
    proxy.clear_trap();
    assert_eq!(
        made.expect("mkdir whose write was made").created,
        vec![p("/made")]
    );
    assert!(stat(&tree, &p("/made")).await.is_ok());
    // Its locks are left to their lease (and then to recovery): elsewhere, the same for touch.
    proxy.trap(&bulk, &lock_index, usize::MAX);
    let touched = touch(&tree, &locks, &p("/f")).await;
    proxy.clear_trap();
    touched.expect("touch whose write was made");
    assert!(stat(&tree, &p("/f")).await.is_ok());
    // A write that did not happen still fails: the parent is missing, nothing is written.
    proxy.trap(&bulk, &lock_index, usize::MAX);
    let missing = touch(&tree, &locks, &p("/nowhere/f")).await;
    proxy.clear_trap();
    assert!(
        matches!(missing, Err(RenameError::DestinationParentMissing { .. })),
        "{missing:?}"
    );
}

/// Found by the Jepsen-style test through the proxy (`docs/reliability.md`, anomaly 7):
/// `mkdir` and `touch` reported failed with their document made, when the create of their
/// document was carried out and its answer lost (or replayed after a failover, answered 409).
/// A fresh id's create is safe to send again, and a 409 on it is its own earlier landing.
/// Through the proxy, whose trap carries out the tree's bulk write and cuts its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_and_touch_whose_create_answer_was_lost_succeed_once() {
    let (proxy, env, tree) = through_a_proxy(None).await;
    let locks = LockSettings::default();
    let (bulk, lock_index) = (
        format!("/{}/_bulk", env.index),
        format!("/{}/", env.lock_index()),
    );
    proxy.trap_cut_after(&lock_index, &bulk, 1);
    let made = mkdir(&tree, &locks, &p("/made"), false).await;
    proxy.clear_trap();
    assert_eq!(
        made.expect("mkdir whose create landed unanswered").created,
        vec![p("/made")]
    );
    proxy.trap_cut_after(&lock_index, &bulk, 1);
    let touched = touch(&tree, &locks, &p("/made/f")).await;
    proxy.clear_trap();
    touched.expect("touch whose create landed unanswered");
    tree.refresh().await.expect("refresh");
    for path in ["/made", "/made/f"] {
        assert_eq!(
            tree.count_under(&p(path)).await.expect("count"),
            if path == "/made" { 2 } else { 1 },
            "{path} made once"
        );
    }
    assert_eq!(locks_left(&env).await, 0);
}

/// Found by the Jepsen-style test on a real cluster (`docs/reliability.md`, anomaly 8):
/// `mkdir /d/f` waited out the flood-stage block, which refused its lock renewals as well as
/// its create; recovery cleared its expired locks, `mv /d /a/b` moved the parent, and the
/// create, still resent by the store, landed after it: a directory under a parent that was
/// gone. The one write of `mkdir` and `touch` now goes out only while the locks are held, and
/// is given up, its outcome unknown, once their lease runs out. Through the proxy, whose trap
/// refuses every request to the tree's indices (the create and the lock renewals) once mkdir
/// has looked for its path, until the test lets go, well past the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_whose_write_outlives_its_lease_gives_it_up() {
    let (proxy, env, tree) = through_a_proxy(None).await;
    let locks = LockSettings {
        lease: std::time::Duration::from_secs(1),
        ..LockSettings::default()
    };
    // After mkdir's search for its path, every request to the tree's indices: the create,
    // and the lock renewals, whatever form they take.
    proxy.trap("/_search", &format!("/{}", env.index), usize::MAX);
    let made = {
        let (tree, locks) = (tree.clone(), locks.clone());
        tokio::spawn(async move { mkdir(&tree, &locks, &p("/made"), false).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    proxy.clear_trap();
    let made = made.await.expect("mkdir's task");
    // Given up while out, or, on a machine so loaded that the lease ran out before the write
    // went out, not sent at all.
    assert!(
        matches!(&made, Err(RenameError::WriteUnanswered { path, .. }) if *path == p("/made"))
            || matches!(
                &made,
                Err(RenameError::Lock(fs_locks::LockError::LeaseLost { .. }))
            ),
        "{made:?}"
    );
    // Given up, it sends nothing more: the directory is not made later either.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    tree.refresh().await.expect("refresh");
    assert!(
        matches!(
            stat(&tree, &p("/made")).await,
            Err(RenameError::SourceNotFound { .. })
        ),
        "a write given up landed"
    );
}

/// A create that is never answered as done and is not found when read back may still land (a
/// send held by a paused node is carried out when it wakes): `mkdir` says its outcome is
/// unknown, not that it failed, which a later landing would make a lie. Through the proxy,
/// whose trap refuses every bulk request to the tree index once mkdir has looked for its path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_whose_create_is_never_answered_says_its_outcome_is_unknown() {
    let (proxy, env, tree) = through_a_proxy(Some(std::time::Duration::from_millis(200))).await;
    let locks = LockSettings {
        lease: std::time::Duration::from_secs(60),
        ..LockSettings::default()
    };
    proxy.trap("/_search", &format!("/{}/_bulk", env.index), usize::MAX);
    let made = mkdir(&tree, &locks, &p("/made"), false).await;
    proxy.clear_trap();
    let Err(e) = made else {
        panic!("mkdir succeeded with every create refused: {made:?}");
    };
    assert!(
        matches!(&e, RenameError::CreateUnanswered { name, .. } if name == "/made"),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("whether it happened is unknown"),
        "{e}"
    );
    assert_eq!(locks_left(&env).await, 0);
}
