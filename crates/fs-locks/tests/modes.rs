//! Gray's four modes against each other, on every backend and protocol: the sixteen pairs on
//! one path, a lock on an ancestor against one on a descendant, and fsrename's modes against a
//! client that follows the book, whose requests are written out here by hand. The tables are
//! those of `docs/locking.md`, "Which lock refuses which"; each test names the rows it checks.
//!
//! A request never names an intention mode: it gets IS (below an S) or IX (below an X) on
//! every ancestor of what it locks. So "A holds IS on `/p/x`" is set up as A holding S on a
//! child of `/p/x`, and likewise for IX.

mod common;

use std::time::Duration;

use common::*;
use fs_locks::{LockClient, LockError, LockMode, Observed, TreeLockRequest};
use fs_store::StoreError;
use serde_json::{json, Value};

/// How long a request that should be refused keeps trying: long enough to pass
/// `queue_after` (10 ms with the helpers' backoff), so that the refused request also registers
/// as a waiter and its timeout must take that registration away again.
const SHORT_WAIT: Duration = Duration::from_millis(150);

/// Gray's compatibility matrix written out (the table "held by another owner \ asked" of
/// `docs/locking.md`), rather than read from `LockMode::compatible`, which is under test too.
/// Rows: the mode held; columns: the mode asked; both in the order of [`LockMode::ALL`]: IS,
/// IX, S, X.
const GRAY: [[bool; 4]; 4] = [
    // asked: IS    IX     S      X
    [true, true, true, false],    // IS held
    [true, true, false, false],   // IX held
    [true, false, true, false],   // S held
    [false, false, false, false], // X held
];

/// Returns the request that leaves `mode` on `path`: S or X on `path` itself, or, for an
/// intention mode, S or X on `path/child` (different clients use different children, so that
/// they meet only on `path` and its ancestors).
fn request_in(mode: LockMode, path: &str, child: &str) -> TreeLockRequest {
    let target = if mode.is_intention() {
        p(&format!("{path}/{child}"))
    } else {
        p(path)
    };
    match mode {
        LockMode::IntentShared | LockMode::Shared => TreeLockRequest::new().shared(target),
        LockMode::IntentExclusive | LockMode::Exclusive => TreeLockRequest::new().exclusive(target),
    }
}

/// A client whose refused requests give up after [`SHORT_WAIT`].
fn asker(env: &Env, holder: &str) -> LockClient {
    client_builder(env, holder).wait(SHORT_WAIT).build()
}

/// Returns what the lock document on `path` says, which must exist.
async fn observed(env: &Env, path: &str) -> Observed {
    let source = lock_doc(env, path)
        .await
        .unwrap_or_else(|| panic!("no lock document on `{path}`"));
    Observed::from_source(&source)
}

/// Asks `request` of `client`: true if granted (and then released at once), false if refused
/// by a lock on `blocked_on` (anything else fails the test).
async fn granted(client: &LockClient, request: &TreeLockRequest, blocked_on: &str) -> bool {
    match client.lock_request(request).await {
        Ok(guard) => {
            guard.release().await.expect("release the asker");
            true
        }
        refused => {
            assert_blocked_on(refused, blocked_on);
            false
        }
    }
}

/// Every row and column of the table "held by another owner \ asked": A holds M1 on `/p/x`,
/// B asks M2 there; B is granted exactly where the table says so, and a refusal names `/p/x`.
async fn same_path_pairs_follow_grays_table(env: Env) {
    let mut wrong = Vec::new();
    for (i, held) in LockMode::ALL.into_iter().enumerate() {
        for (j, asked) in LockMode::ALL.into_iter().enumerate() {
            let (a, b) = (client(&env, "a"), asker(&env, "b"));
            let guard = a
                .lock_request(&request_in(held, "/p/x", "a"))
                .await
                .unwrap_or_else(|e| panic!("A takes {held} on /p/x: {e}"));
            assert_eq!(
                observed(&env, "/p/x").await.mode(),
                held,
                "the setup leaves {held} on /p/x"
            );
            let got = granted(&b, &request_in(asked, "/p/x", "b"), "/p/x").await;
            if got != GRAY[i][j] {
                wrong.push(format!(
                    "{held} held, {asked} asked: {}",
                    if got { "granted" } else { "refused" }
                ));
            }
            guard.release().await.expect("release A");
            assert_eq!(
                lock_count(&env).await,
                0,
                "{held} held, {asked} asked: lock documents left behind"
            );
        }
    }
    assert!(wrong.is_empty(), "against Gray's table: {wrong:#?}");
}

/// A lock on `/p` against one on `/p/q/r`, either one held first ("So on ancestor/descendant
/// pairs" in `docs/locking.md`): they meet on `/p`, where the lock below puts its intention
/// mode. S on `/p` admits S below (IS) and refuses X below (IX); X refuses everything; and the
/// same seen from below.
async fn an_ancestor_against_a_descendant(env: Env) {
    use LockMode::{Exclusive as X, Shared as S};
    // (held, on, asked, on, granted); every refusal happens on `/p`.
    let cases = [
        (S, "/p", S, "/p/q/r", true),
        (S, "/p", X, "/p/q/r", false),
        (X, "/p", S, "/p/q/r", false),
        (X, "/p", X, "/p/q/r", false),
        (S, "/p/q/r", S, "/p", true),
        (S, "/p/q/r", X, "/p", false),
        (X, "/p/q/r", S, "/p", false),
        (X, "/p/q/r", X, "/p", false),
    ];
    for (held, held_on, asked, asked_on, expected) in cases {
        let (a, b) = (client(&env, "a"), asker(&env, "b"));
        let guard = a
            .lock_request(&request_in(held, held_on, "-"))
            .await
            .unwrap_or_else(|e| panic!("A takes {held} on {held_on}: {e}"));
        let got = granted(&b, &request_in(asked, asked_on, "-"), "/p").await;
        assert_eq!(
            got, expected,
            "{held} held on {held_on}, {asked} asked on {asked_on}"
        );
        guard.release().await.expect("release A");
        assert_eq!(
            lock_count(&env).await,
            0,
            "{held} on {held_on} against {asked} on {asked_on}: lock documents left behind"
        );
    }
}

// --- The book's client, by hand ------------------------------------------------------------
//
// What a client following *Elasticsearch: The Definitive Guide* sends, done through the plain
// document store: `_create` for its exclusive lock, and for its shared lock the `_update` with
// an upsert and the script `if (ctx._source.lock_type == 'exclusive') { assert false };
// ctx._source.lock_count++`, which Elasticsearch runs as read, apply, write conditionally on
// the version read (again on a conflict); that is what `book_share` does.

/// The book's shared lock on `id`: true if taken (created with `lock_count` 1, or counted up),
/// false if its script's `assert false` refused (the document says `lock_type: exclusive`).
async fn book_share(env: &Env, id: &str) -> bool {
    loop {
        let Some(doc) = env.store.get(&env.locks, id).await.expect("book: get") else {
            let upsert = json!({"lock_type": "shared", "lock_count": 1});
            match env.store.create(&env.locks, id, upsert).await {
                Ok(_) => return true,
                Err(e) if e.is_conflict() => continue, // created meanwhile: run the script
                Err(e) => panic!("book: upsert `{id}`: {e}"),
            }
        };
        let mut source = doc.source;
        if source["lock_type"] == "exclusive" {
            return false;
        }
        let count = source["lock_count"].as_i64().expect("book: lock_count");
        source["lock_count"] = json!(count + 1);
        match env
            .store
            .index(&env.locks, id, source, Some(doc.version))
            .await
        {
            Ok(_) => return true,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("book: increment `{id}`: {e}"),
        }
    }
}

/// The book's release of a shared lock: `if (--ctx._source.lock_count == 0) { ctx.op =
/// 'delete' }`.
async fn book_unshare(env: &Env, id: &str) {
    loop {
        let doc = env
            .store
            .get(&env.locks, id)
            .await
            .expect("book: get")
            .unwrap_or_else(|| panic!("book: its share on `{id}` is gone"));
        let mut source = doc.source;
        let count = source["lock_count"].as_i64().expect("book: lock_count") - 1;
        let written = if count == 0 {
            env.store
                .delete(&env.locks, id, Some(doc.version))
                .await
                .map(drop)
        } else {
            source["lock_count"] = json!(count);
            env.store
                .index(&env.locks, id, source, Some(doc.version))
                .await
                .map(drop)
        };
        match written {
            Ok(()) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("book: decrement `{id}`: {e}"),
        }
    }
}

/// The book's exclusive lock: `PUT /fs/lock/<id>/_create {"lock_type": "exclusive"}`.
async fn book_exclusive(env: &Env, id: &str) -> Result<(), StoreError> {
    let source = json!({"lock_type": "exclusive"});
    env.store.create(&env.locks, id, source).await.map(drop)
}

/// The book's release of its exclusive lock: `DELETE /fs/lock/<id>`.
async fn book_unlock(env: &Env, id: &str) {
    env.store
        .delete(&env.locks, id, None)
        .await
        .expect("book: delete its exclusive lock");
}

fn lock_count_of(doc: &Value) -> i64 {
    doc["lock_count"].as_i64().expect("lock_count")
}

/// (a) Table "book document" (fsrename asks), row `{"lock_type": "shared", "lock_count":
/// N}`: a book share on `/p` is an IX held by someone without a `process_id`.
async fn a_book_share_is_an_ix(env: Env) {
    assert!(book_share(&env, "/p").await, "the book takes its share");
    let b = asker(&env, "b");
    // Column S ("book share vs S"): IX–S, refused.
    let msg = assert_blocked_on(
        b.lock_request(&request_in(LockMode::Shared, "/p", "q"))
            .await,
        "/p",
    );
    assert!(msg.contains("share(s) without a process_id"), "{msg}");
    // Column X ("book share vs X"): IX–X, refused.
    assert_blocked_on(
        b.lock_request(&request_in(LockMode::Exclusive, "/p", "q"))
            .await,
        "/p",
    );
    // Columns IS and IX ("book share vs IS", "book share vs IX"): both granted, `lock_count`
    // + 1 and our entry; the book's share survives fsrename's release.
    for mode in [LockMode::IntentShared, LockMode::IntentExclusive] {
        let guard = b
            .lock_request(&request_in(mode, "/p", "q"))
            .await
            .unwrap_or_else(|e| panic!("{mode} beside a book share: {e}"));
        let joined = lock_doc(&env, "/p").await.expect("/p");
        assert_eq!(
            lock_count_of(&joined),
            2,
            "{mode} joins the share: {joined}"
        );
        assert_eq!(joined["lock_type"], "shared", "{mode}: {joined}");
        guard.release().await.expect("release");
        let left = lock_doc(&env, "/p")
            .await
            .expect("the book's share is kept");
        assert_eq!(lock_count_of(&left), 1, "after {mode}: {left}");
    }
    book_unshare(&env, "/p").await;
    assert_eq!(lock_count(&env).await, 0);
}

/// (b) Table "book document" (fsrename asks), row `{"lock_type": "exclusive"}` ("book
/// exclusive vs IS/IX/S/X"): a book exclusive lock (no `process_id`) refuses all four modes.
async fn a_book_exclusive_refuses_every_mode(env: Env) {
    book_exclusive(&env, "/p")
        .await
        .expect("the book takes its exclusive lock");
    let b = asker(&env, "b");
    for mode in LockMode::ALL {
        let msg = assert_blocked_on(b.lock_request(&request_in(mode, "/p", "q")).await, "/p");
        assert!(msg.contains("did not record a process_id"), "{mode}: {msg}");
    }
    assert_eq!(
        lock_doc(&env, "/p").await.expect("still the book's"),
        json!({"lock_type": "exclusive"}),
        "the refused requests' waiter entries are gone again"
    );
    book_unlock(&env, "/p").await;
    assert_eq!(lock_count(&env).await, 0);
}

/// (c) Table "existing document" (the book asks), row "fsrename S, alone or with IS", both
/// columns: while fsrename holds S on `/p` the document says `lock_type: exclusive`, so the
/// book's shared-lock script refuses, and the book's `_create` finds the document there.
async fn an_s_refuses_the_book(env: Env) {
    let a = client(&env, "reader");
    let guard = a
        .lock_request(&TreeLockRequest::read(&p("/p")))
        .await
        .expect("S on /p");
    let before = lock_doc(&env, "/p").await.expect("/p");
    assert_eq!(before["lock_type"], "exclusive", "{before}");
    assert!(!book_share(&env, "/p").await, "the book's script refuses");
    let created = book_exclusive(&env, "/p").await;
    assert!(
        matches!(created, Err(ref e) if e.is_conflict()),
        "the book's _create: {created:?}"
    );
    assert_eq!(
        lock_doc(&env, "/p").await,
        Some(before),
        "the book changed nothing"
    );
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
}

/// (d) Table "existing document" (the book asks), row "fsrename IS or IX only", both
/// columns: while fsrename holds IS on `/p` the document says `lock_type: shared`, the book's
/// increment joins (IS–IX) while its `_create` is refused, and fsrename's release leaves the
/// book's share in place.
async fn an_is_admits_a_book_share(env: Env) {
    let a = client(&env, "reader");
    let guard = a
        .lock_request(&request_in(LockMode::IntentShared, "/p", "q"))
        .await
        .expect("IS on /p");
    assert_eq!(
        lock_doc(&env, "/p").await.expect("/p")["lock_type"],
        "shared"
    );
    let created = book_exclusive(&env, "/p").await;
    assert!(
        matches!(created, Err(ref e) if e.is_conflict()),
        "the book's _create: {created:?}"
    );
    assert!(book_share(&env, "/p").await, "the book's increment joins");
    assert_eq!(lock_count_of(&lock_doc(&env, "/p").await.expect("/p")), 2);
    guard.release().await.expect("release");
    let left = lock_doc(&env, "/p")
        .await
        .expect("the book's share is kept");
    assert_eq!(lock_count_of(&left), 1, "{left}");
    assert_eq!(left["lock_type"], "shared", "{left}");
    assert_eq!(left["holders"], json!({}), "{left}");
    assert_eq!(lock_doc(&env, "/p/q").await, None);
    book_unshare(&env, "/p").await;
    assert_eq!(lock_count(&env).await, 0);
}

/// The timeout of a refused request says which mode refused it, in the words of
/// `Blocker::lock_type`.
async fn a_refusal_names_the_refusing_mode(env: Env) {
    let a = client(&env, "reader");
    let guard = a
        .lock_request(&TreeLockRequest::read(&p("/p")))
        .await
        .expect("S on /p");
    let b = asker(&env, "writer");
    match b.lock_tree(&p("/p/q")).await {
        Err(LockError::Timeout { blocker, .. }) => {
            assert_eq!(blocker.path, "/p");
            assert!(blocker.lock_type.starts_with('S'), "{blocker}");
            assert!(blocker.holders.contains("reader"), "{blocker}");
        }
        other => panic!("X under an S: {other:?}"),
    }
    guard.release().await.expect("release");
    assert_eq!(lock_count(&env).await, 0);
}

on_every_backend!(
    same_path_pairs_follow_grays_table,
    an_ancestor_against_a_descendant,
    a_book_share_is_an_ix,
    a_book_exclusive_refuses_every_mode,
    an_s_refuses_the_book,
    an_is_admits_a_book_share,
    a_refusal_names_the_refusing_mode,
);
