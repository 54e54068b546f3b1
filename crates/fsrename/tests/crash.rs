//! The crash test: `fsrename mv`, `cp -r` and `rm -r` run as separate processes and killed
//! with SIGKILL at random moments, then `fsrename recover`. On the embedded store (a database
//! file) and on osmem.
//!
//! Each round builds `/src` (two directories, 200 files), starts `mv /src /dst` (or
//! `cp -r /src /dst`, or `rm -r /src`) with a long lease, pages of 5 and `--progress json`,
//! and kills it: four rounds in ten after a random delay
//! (uniform over 0 to 1 times an uninterrupted run), the other six the moment it reports a
//! chosen event (locks held, journaled, the n-th page rewritten, journal closed), so that
//! kills before, during and after lock acquisition, mid-bulk and before the release all
//! happen, the narrow windows included. Then it classifies what the kill left, runs
//! `fsrename recover` (no waiting: see [`LEASE`]), and re-runs the job if the kill came before it journaled
//! itself (as a user would). Then, all or nothing: after a rename every document exactly once,
//! all under `/dst`; after a copy the source untouched and exactly one copy of each document
//! under `/dst`; after a delete nothing left. Always fsck clean, no lock, no journal entry. A
//! delete is also checked right after the kill: deepest first, it never leaves an orphan.
//! `FSRENAME_CRASH_ROUNDS` sets the rounds per job kind and backend (default 100 for `mv`, 50
//! for `cp` and `rm`); the kill moments follow `FSRENAME_CRASH_SEED` (printed).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::{DocKind, FsDoc, FsPath};
use fs_rename::{fsck, FsTree, Journal};
use fs_store::{Scan, Scope, SharedStore, SqliteStore};
use rand::{Rng, SeedableRng};

/// Ten minutes: no round waits for it. `recover` (and a job run again) finish what a killed
/// process left at once, its process being proven gone on this machine
/// (`fs_locks::OsProcess`). A lease of 300 ms (before issue 47) was lost by the jobs themselves
/// whenever the cores were busy with other work.
const LEASE: &str = "600s";

/// Where a round's tree lives: the `--store` argument and a client of the same store.
struct Place {
    arg: String,
    index: String,
    store: SharedStore,
    /// Network faults that strike the processes (the job, `recover`, a re-run), not the
    /// test's own set-up and checks.
    storm: Option<fs_testkit::Storm>,
}

impl Place {
    fn storm(&self) {
        self.storm.iter().for_each(fs_testkit::Storm::storm);
    }

    fn lull(&self) {
        self.storm.iter().for_each(fs_testkit::Storm::lull);
    }
}

fn embedded(dir: &tempfile::TempDir, round: usize) -> Place {
    let path = dir.path().join(format!("crash-{round}.db"));
    let store: SharedStore = Arc::new(SqliteStore::open(&path).expect("database file"));
    Place {
        arg: format!("file:{}", path.display()),
        index: "fs".to_owned(),
        store,
        storm: None,
    }
}

fn osmem() -> Place {
    Place {
        arg: fs_testkit::es_proxy().url().to_owned(),
        index: fs_testkit::unique_name("crash"),
        store: Arc::new(fs_testkit::osmem_store()),
        storm: None,
    }
}

/// osmem behind a proxy of its own, whose faults (each at 2 %) strike the processes.
fn osmem_in_a_storm(storm: &fs_testkit::Storm) -> Place {
    Place {
        arg: storm.url().to_owned(),
        index: fs_testkit::unique_name("crash"),
        store: Arc::new(storm.store()),
        storm: Some(storm.clone()),
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

/// The job a round kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// `mv /src /dst`.
    Mv,
    /// `cp -r /src /dst`.
    Cp,
    /// `rm -r /src`.
    Rm,
}

impl Job {
    /// The command of the job, with pages of 5 and every event on stderr.
    fn command(self, place: &Place) -> Command {
        let paths: &[&str] = match self {
            Job::Mv => &["mv", "/src", "/dst"],
            Job::Cp => &["cp", "-r", "/src", "/dst"],
            Job::Rm => &["rm", "-r", "/src"],
        };
        let mut args = paths.to_vec();
        args.extend(["--page-size", "5", "--wait", "5s", "--progress", "json"]);
        fsrename(place, &args)
    }

    /// How many of the `n` documents the job has done: moved to `/dst`, copied there, or
    /// deleted from `/src`.
    fn done(self, paths: &BTreeMap<String, String>, n: usize) -> usize {
        let under = |top: &str| {
            paths
                .values()
                .filter(|p| {
                    FsPath::parse(p)
                        .expect("path")
                        .is_inside(&FsPath::parse(top).expect("path"))
                })
                .count()
        };
        match self {
            Job::Mv | Job::Cp => under("/dst"),
            Job::Rm => n - under("/src"),
        }
    }

    /// Checks the tree a finished job leaves: `before` is the built tree (by id).
    fn assert_complete(
        self,
        before: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
        left: Left,
    ) {
        let n = before.len();
        match self {
            Job::Mv => {
                assert_eq!(after.len(), n, "after {left:?}: documents lost or added");
                assert!(
                    after.values().all(|p| p.starts_with("/dst")),
                    "after {left:?}: not all under /dst"
                );
            }
            Job::Cp => {
                for (id, path) in before {
                    assert_eq!(
                        after.get(id),
                        Some(path),
                        "after {left:?}: the source changed"
                    );
                }
                let mut copies: Vec<&str> = after
                    .iter()
                    .filter(|(id, _)| !before.contains_key(*id))
                    .map(|(_, p)| p.as_str())
                    .collect();
                copies.sort_unstable();
                let mut wanted: Vec<String> = before
                    .values()
                    .map(|p| p.replacen("/src", "/dst", 1))
                    .collect();
                wanted.sort_unstable();
                assert_eq!(
                    copies, wanted,
                    "after {left:?}: not exactly one copy of each"
                );
            }
            Job::Rm => assert!(after.is_empty(), "after {left:?}: left {after:?}"),
        }
    }
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

/// The path of every document of the tree, by id. A copy killed between its claims and its
/// copies leaves claims, which have no path and are no part of the tree (`recover` writes the
/// copies over them); [`claims`] counts them.
async fn paths(place: &Place) -> BTreeMap<String, String> {
    let store = &place.store;
    store.refresh(&place.index).await.expect("refresh");
    Scan::new(
        Arc::clone(store),
        &place.index,
        Scope::Subtree(FsPath::root()),
        1_000,
    )
    .read_all()
    .await
    .expect("search")
    .into_iter()
    .map(|d| {
        let path = d.source["path"].as_str().expect("path").to_owned();
        (d.id, path)
    })
    .collect()
}

/// The documents without a path: a copy's claims on its ids.
async fn claims(place: &Place) -> u64 {
    place.store.refresh(&place.index).await.expect("refresh");
    place
        .store
        .count(&place.index, &Scope::Pathless)
        .await
        .expect("count")
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

async fn classify(place: &Place, job: Job, n: usize) -> Left {
    let moved = job.done(&paths(place).await, n);
    let (locks, journal) = (locks(place).await, journals(place).await);
    match (journal > 0, moved, locks > 0) {
        (false, 0, false) => Left::Nothing,
        (false, 0, true) => Left::LocksOnly,
        (true, 0, _) => Left::JournaledNothingMoved,
        (true, m, _) if m < n => Left::HalfMoved,
        (true, _, _) => Left::JournaledAllMoved,
        (false, m, true) if m == n => Left::MovedLocksHeld,
        (false, m, false) if m == n => Left::Done,
        (false, m, l) => panic!("{job:?}: {m} of {n} done without a journal entry (locks: {l})"),
    }
}

/// When a round kills the `mv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kill {
    /// After a random delay.
    Delay,
    /// At once: before it takes any lock.
    Start,
    /// As soon as it reports its locks held.
    Locked,
    /// As soon as it reports its journal entry written.
    Journaled,
    /// As soon as it reports its n-th page rewritten.
    Page(u32),
    /// As soon as it reports its last page rewritten (before closing the journal entry).
    LastPage,
    /// As soon as it reports its journal entry closed (before the release).
    Closed,
}

impl Kill {
    /// Returns true if `event` (the child's JSON line, parsed) is the moment to kill.
    fn is_due(self, event: &serde_json::Value, pages: &mut u32) -> bool {
        let name = event["event"].as_str().unwrap_or_default();
        match self {
            Kill::Delay | Kill::Start => false,
            Kill::LastPage => name == "progress" && event["done"] == event["total"],
            Kill::Locked => name == "locked",
            Kill::Journaled => name == "journaled",
            Kill::Closed => name == "closed",
            Kill::Page(n) => {
                if name == "progress" {
                    *pages += 1;
                }
                name == "progress" && *pages >= n
            }
        }
    }

    /// The label of the aim, for the summary (pages grouped).
    fn label(self) -> &'static str {
        match self {
            Kill::Delay => "random delay",
            Kill::Start => "at start",
            Kill::LastPage => "at last page",
            Kill::Locked => "at locked",
            Kill::Journaled => "at journaled",
            Kill::Page(_) => "at page n",
            Kill::Closed => "at closed",
        }
    }
}

/// Starts the job and kills it as `kill` says (SIGKILL: no destructor, no release, nothing).
fn run_and_kill(place: &Place, job: Job, kill: Kill, delay: Duration) {
    let mut child = job.command(place).spawn().expect("spawn the job");
    let stderr = child.stderr.take().expect("piped stderr");
    let (line_tx, line_rx) = mpsc::channel::<String>();
    // A thread of its own reads the child's events as they come, so the kill follows the
    // event it waits for by microseconds, not by a poll interval.
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    if kill == Kill::Delay {
        std::thread::sleep(delay);
    } else if kill != Kill::Start {
        let mut pages = 0;
        // Until the event, or the child's end (its stderr closes, so the channel does).
        while let Ok(line) = line_rx.recv() {
            let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if kill.is_due(&event, &mut pages) {
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    drop(line_rx);
    let _ = reader.join();
}

async fn round(place: Place, job: Job, kill: Kill, delay: Duration) -> Left {
    let n = build(&place).await;
    let before = paths(&place).await;
    place.storm();
    run_and_kill(&place, job, kill, delay);
    place.lull();
    let left = classify(&place, job, n).await;
    if job == Job::Rm {
        // Deepest first: whatever the moment of the kill, every document left has its parent.
        let report = fsck(Arc::clone(&place.store), &place.index, &FsPath::root())
            .await
            .expect("fsck");
        assert!(
            report.is_clean(),
            "an orphan after a kill that left {left:?}: {report}"
        );
    }

    place.storm();
    let out = fsrename(&place, &["recover"])
        .stdout(Stdio::piped())
        .output()
        .expect("recover");
    place.lull();
    assert!(
        out.status.success(),
        "recover failed after {left:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = job.done(&paths(&place).await, n);
    assert!(
        done == 0 || done == n,
        "{job:?}: after {left:?} and recover: {done} of {n} done (a half-done job): {} {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    if done == 0 {
        assert!(
            matches!(left, Left::Nothing | Left::LocksOnly),
            "{job:?}: after {left:?}, recover did not finish the journaled job"
        );
        run_again(&place, job, n, left).await;
    }
    job.assert_complete(&before, &paths(&place).await, left);
    let report = fsck(Arc::clone(&place.store), &place.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{job:?}: after {left:?}: {report}");
    assert_eq!(
        locks(&place).await,
        0,
        "{job:?}: after {left:?}: locks left"
    );
    assert_eq!(
        report.journals_open(),
        0,
        "{job:?}: after {left:?}: journal left"
    );
    assert_eq!(
        claims(&place).await,
        0,
        "{job:?}: after {left:?}: claims left"
    );
    left
}

/// Runs the job again, as a user would after a kill that came before it journaled itself. A
/// network fault of the storm can stop the new run too: the user's answer is `recover` and,
/// if that had nothing journaled to finish, one more try.
async fn run_again(place: &Place, job: Job, n: usize, left: Left) {
    let mut failures = Vec::new();
    for _ in 0..3 {
        place.storm();
        let out = job.command(place).output().expect("the job again");
        place.lull();
        if out.status.success() {
            return;
        }
        failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
        place.storm();
        let out = fsrename(place, &["recover"]).output().expect("recover");
        place.lull();
        assert!(
            out.status.success(),
            "recover failed after a failed re-run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let done = job.done(&paths(place).await, n);
        assert!(
            done == 0 || done == n,
            "{job:?}: {done} of {n} done after a failed re-run and recover"
        );
        if done == n {
            return;
        }
    }
    panic!("{job:?} after {left:?} and recover failed three times: {failures:#?}");
}

/// How long an uninterrupted job takes here, process start included: the median of three.
async fn calibrate(job: Job, mut place: impl FnMut() -> Place) -> Duration {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let place = place();
        build(&place).await;
        let started = Instant::now();
        let out = job.command(&place).output().expect("the job");
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

async fn crash_rounds(job: Job, mut place: impl FnMut(usize) -> Place) {
    let rounds: usize = std::env::var("FSRENAME_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if job == Job::Mv { 100 } else { 50 });
    let seed: u64 = std::env::var("FSRENAME_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    println!("FSRENAME_CRASH_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut calibration = usize::MAX;
    let full = calibrate(job, || {
        calibration -= 1;
        place(calibration)
    })
    .await;
    let mut seen: BTreeMap<Left, usize> = BTreeMap::new();
    let mut aimed: BTreeMap<(&str, Left), usize> = BTreeMap::new();
    for r in 0..rounds {
        // Four in ten at random moments, the rest aimed at each phase in turn.
        let kill = match r % 10 {
            0 => Kill::Start,
            1 => Kill::Locked,
            3 => Kill::Journaled,
            5 => Kill::Page(rng.random_range(1..=40)),
            7 => Kill::LastPage,
            9 => Kill::Closed,
            _ => Kill::Delay,
        };
        let delay = full.mul_f64(rng.random_range(0.0..1.0));
        let left = round(place(r), job, kill, delay).await;
        *seen.entry(left).or_default() += 1;
        *aimed.entry((kill.label(), left)).or_default() += 1;
    }
    // A loaded machine shifts the moments the kills land at (a kill aimed at the last page
    // left the locks held or the job done in every one of five rounds beside a real-cluster
    // batch and CI): a required moment not met yet gets up to 20 more kills aimed at it.
    if rounds >= 50 {
        for (phase, kill) in [
            (Left::Nothing, Kill::Start),
            (Left::LocksOnly, Kill::Locked),
            (Left::JournaledNothingMoved, Kill::Journaled),
            (Left::HalfMoved, Kill::Page(20)),
            (Left::JournaledAllMoved, Kill::LastPage),
        ] {
            let mut more = 0;
            while !seen.contains_key(&phase) && more < 20 {
                let delay = full.mul_f64(rng.random_range(0.0..1.0));
                let left = round(place(rounds + more), job, kill, delay).await;
                *seen.entry(left).or_default() += 1;
                *aimed.entry((kill.label(), left)).or_default() += 1;
                more += 1;
            }
            if more > 0 {
                println!("{job:?}: {more} more kill(s) aimed at {phase:?}");
            }
        }
    }
    println!("{job:?}: uninterrupted run: {full:?}; what the kills left: {seen:?}");
    for ((aim, left), count) in &aimed {
        println!("  killed {aim:<13} left {left:?}: {count}");
    }
    // The moments the issue names: before any lock, holding locks before the journal, with
    // the journal written, mid-bulk, after the last rewrite, and before the release.
    // Every moment but one is required. The one between the close of the entry and the
    // release of the locks lasts one request (none where the store does both in one
    // transaction): a kill sent when the job reports `closed` lands after the release on a
    // loaded machine (a run beside two CPU hogs left Done at all five such kills), so that
    // moment is counted above, not required.
    if rounds >= 50 {
        for phase in [
            Left::Nothing,
            Left::LocksOnly,
            Left::JournaledNothingMoved,
            Left::HalfMoved,
            Left::JournaledAllMoved,
        ] {
            assert!(
                seen.contains_key(&phase),
                "{job:?}: no kill left {phase:?}: {seen:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_recover_on_the_embedded_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    crash_rounds(Job::Mv, |r| embedded(&dir, r)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_recover_on_osmem() {
    crash_rounds(Job::Mv, |_| osmem()).await;
}

/// `mv` killed at every moment while every network fault strikes 2 % of its requests (and
/// of `recover`'s and the re-run's): ambiguous writes, 429s, cut connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_recover_on_osmem_under_network_faults() {
    let storm = fs_testkit::Storm::start(0.02);
    crash_rounds(Job::Mv, |_| osmem_in_a_storm(&storm)).await;
    storm.calm();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_sigkill_then_recover_on_the_embedded_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    crash_rounds(Job::Cp, |r| embedded(&dir, r)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_sigkill_then_recover_on_osmem() {
    crash_rounds(Job::Cp, |_| osmem()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rm_sigkill_then_recover_on_the_embedded_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    crash_rounds(Job::Rm, |r| embedded(&dir, r)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rm_sigkill_then_recover_on_osmem() {
    crash_rounds(Job::Rm, |_| osmem()).await;
}
