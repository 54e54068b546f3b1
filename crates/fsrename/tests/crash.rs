//! The crash test: `fsrename mv` run as a separate process and killed with SIGKILL at random
//! moments, then `fsrename recover`. On the embedded store (a database file) and on osmem.
//!
//! Each round builds `/src` (two directories, 200 files), starts `mv /src /dst` with a short
//! lease and pages of 5, kills it after a random delay (uniform over 0 to 1 times an
//! uninterrupted run, so before, during and after lock acquisition, mid-bulk and before the
//! release all happen), classifies what the kill left, waits for the lease, runs
//! `fsrename recover`, and re-runs the `mv` if the kill came before the rename journaled
//! itself (as a user would). Then: every document exactly once, all under `/dst`, fsck clean,
//! no lock, no journal entry. `FSRENAME_CRASH_ROUNDS` sets the rounds per backend (default
//! 100); the kill delays follow `FSRENAME_CRASH_SEED` (printed).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::{DocKind, FsDoc, FsPath};
use fs_rename::{fsck, FsTree, Journal};
use fs_store::{Scope, SearchRequest, SharedStore, SqliteStore};
use rand::{Rng, SeedableRng};

const LEASE: &str = "300ms";
const AFTER_LEASE: Duration = Duration::from_millis(450);

/// Where a round's tree lives: the `--store` argument and a client of the same store.
struct Place {
    arg: String,
    index: String,
    store: SharedStore,
}

fn embedded(dir: &tempfile::TempDir, round: usize) -> Place {
    let path = dir.path().join(format!("crash-{round}.db"));
    let store: SharedStore = Arc::new(SqliteStore::open(&path).expect("database file"));
    Place {
        arg: format!("file:{}", path.display()),
        index: "fs".to_owned(),
        store,
    }
}

fn osmem() -> Place {
    Place {
        arg: fs_testkit::osmem_url().to_owned(),
        index: fs_testkit::unique_name("crash"),
        store: Arc::new(fs_testkit::osmem_store()),
    }
}

fn fsrename(place: &Place, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fsrename"));
    cmd.args([
        "--store",
        &place.arg,
        "--index",
        &place.index,
        "--lease",
        LEASE,
    ])
    .args(args)
    .env_remove("FSRENAME_STORE")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    cmd
}

fn mv(place: &Place) -> Command {
    fsrename(
        place,
        &["mv", "/src", "/dst", "--page-size", "5", "--wait", "5s"],
    )
}

async fn build(place: &Place) -> usize {
    let tree = FsTree::new(Arc::clone(&place.store), place.index.clone());
    tree.ensure_indices().await.expect("indices");
    let mut docs = vec![
        FsDoc::new(p("/src"), DocKind::Dir, 0, 0),
        FsDoc::new(p("/src/a"), DocKind::Dir, 0, 0),
        FsDoc::new(p("/src/b"), DocKind::Dir, 0, 0),
    ];
    for i in 0..100 {
        docs.push(FsDoc::new(p(&format!("/src/a/f{i}")), DocKind::File, 1, 0));
        docs.push(FsDoc::new(p(&format!("/src/b/g{i}")), DocKind::File, 1, 0));
    }
    let n = docs.len();
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");
    n
}

fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("path")
}

async fn paths(place: &Place) -> BTreeMap<String, String> {
    let store = &place.store;
    store.refresh(&place.index).await.expect("refresh");
    let mut out = BTreeMap::new();
    let mut request = SearchRequest::first(Scope::All, 1_000);
    loop {
        let page = store
            .search(&place.index, request.clone())
            .await
            .expect("search");
        for d in page.docs {
            out.insert(d.id, d.source["path"].as_str().expect("path").to_owned());
        }
        match page.next {
            Some(c) => request.after = Some(c),
            None => return out,
        }
    }
}

async fn locks(place: &Place) -> u64 {
    let index = format!("{}-lock", place.index);
    place.store.refresh(&index).await.expect("refresh");
    place.store.count(&index, &Scope::All).await.expect("count")
}

async fn journals(place: &Place) -> usize {
    Journal::new(Arc::clone(&place.store), &place.index)
        .list()
        .await
        .expect("journal")
        .len()
}

/// What a kill left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Left {
    /// Nothing: killed before taking any lock (or the run had not started).
    Nothing,
    /// Locks, no journal entry: during acquisition or the checks.
    LocksOnly,
    /// A journal entry, nothing moved yet.
    JournaledNothingMoved,
    /// A journal entry and part of the tree moved: mid-bulk.
    HalfMoved,
    /// A journal entry, everything moved: before closing the entry.
    JournaledAllMoved,
    /// All moved, entry closed, locks not yet released.
    MovedLocksHeld,
    /// The run completed.
    Done,
}

async fn classify(place: &Place, n: usize) -> Left {
    let moved = paths(place)
        .await
        .values()
        .filter(|p| p.starts_with("/dst"))
        .count();
    let (locks, journal) = (locks(place).await, journals(place).await);
    match (journal > 0, moved, locks > 0) {
        (false, 0, false) => Left::Nothing,
        (false, 0, true) => Left::LocksOnly,
        (true, 0, _) => Left::JournaledNothingMoved,
        (true, m, _) if m < n => Left::HalfMoved,
        (true, _, _) => Left::JournaledAllMoved,
        (false, m, true) if m == n => Left::MovedLocksHeld,
        (false, m, false) if m == n => Left::Done,
        (false, m, l) => panic!("{m} of {n} moved without a journal entry (locks: {l})"),
    }
}

async fn round(place: Place, delay: Duration) -> Left {
    let n = build(&place).await;
    let mut child = mv(&place).spawn().expect("spawn mv");
    std::thread::sleep(delay);
    // SIGKILL: no destructor, no release, nothing.
    let _ = child.kill();
    let _ = child.wait();
    let left = classify(&place, n).await;

    std::thread::sleep(AFTER_LEASE);
    let out = fsrename(&place, &["recover"]).output().expect("recover");
    assert!(
        out.status.success(),
        "recover failed after {left:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = paths(&place).await;
    let moved = after.values().filter(|p| p.starts_with("/dst")).count();
    assert!(
        moved == 0 || moved == n,
        "after {left:?} and recover: {moved} of {n} moved (a half-renamed tree)"
    );
    if moved == 0 {
        assert!(
            matches!(left, Left::Nothing | Left::LocksOnly),
            "after {left:?}, recover did not finish the journaled rename"
        );
        let out = mv(&place).output().expect("mv again");
        assert!(
            out.status.success(),
            "mv after {left:?} and recover: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = paths(&place).await;
    assert_eq!(after.len(), n, "after {left:?}: documents lost or added");
    assert!(
        after.values().all(|p| p.starts_with("/dst")),
        "after {left:?}: not all under /dst"
    );
    let report = fsck(Arc::clone(&place.store), &place.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "after {left:?}: {report}");
    assert_eq!(locks(&place).await, 0, "after {left:?}: locks left");
    assert_eq!(report.journals_open, 0, "after {left:?}: journal left");
    left
}

/// How long an uninterrupted `mv` takes here, process start included: the median of three.
async fn calibrate(mut place: impl FnMut() -> Place) -> Duration {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let place = place();
        build(&place).await;
        let started = Instant::now();
        let out = mv(&place).output().expect("mv");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        runs.push(started.elapsed());
    }
    runs.sort();
    runs[1]
}

async fn crash_rounds(mut place: impl FnMut(usize) -> Place) {
    let rounds: usize = std::env::var("FSRENAME_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let seed: u64 = std::env::var("FSRENAME_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    println!("FSRENAME_CRASH_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut calibration = usize::MAX;
    let full = calibrate(|| {
        calibration -= 1;
        place(calibration)
    })
    .await;
    let mut seen: BTreeMap<Left, usize> = BTreeMap::new();
    for r in 0..rounds {
        let delay = full.mul_f64(rng.random_range(0.0..1.0));
        let left = round(place(r), delay).await;
        *seen.entry(left).or_default() += 1;
    }
    println!("uninterrupted run: {full:?}; what {rounds} kills left: {seen:?}");
    assert!(
        seen.contains_key(&Left::HalfMoved),
        "no kill landed mid-rewrite: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_recover_on_the_embedded_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    crash_rounds(|r| embedded(&dir, r)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_recover_on_osmem() {
    crash_rounds(|_| osmem()).await;
}
