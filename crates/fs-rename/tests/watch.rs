//! `index --watch` under a script of every kind of change (create, write, mkdir, mv file, mv
//! dir, rm, rm -r, moves into and out of the tree), with rename jobs running on another part
//! of the store meanwhile: afterwards the store matches a fresh index of the directory, what
//! was moved kept its id, fsck is clean and the other part lost nothing. And an event-queue
//! overflow, made to happen, ends in the same state through a rescan. On every backend.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::watching::*;
use common::*;
use fs_model::{FindQuery, FsPath};
use fs_rename::{fsck, IndexOptions, Renamer, WatchOptions, WatchReport};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a script test runs in: a tree of `dirs` × `files` files under `work/tree`, watched at
/// `/w`, and a directory `work/outside` to move things out to and in from.
struct Scene {
    _work: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    /// The store's `/other`, where rename jobs run all along.
    other: fs_rename::FsTree,
}

/// The watch and the rename jobs on `/other` of a [`Scene`].
struct Running {
    watching: Watching,
    jobs_stop: tokio::sync::watch::Sender<bool>,
    jobs: tokio::task::JoinHandle<u32>,
}

impl Scene {
    async fn start(env: &Env, dirs: usize, files: usize) -> (Scene, Running) {
        let work = tempfile::tempdir().expect("temp dir");
        let (root, outside) = (work.path().join("tree"), work.path().join("outside"));
        std::fs::create_dir_all(&outside).expect("mkdir");
        build(&root, dirs, files);
        let other = tree_with(
            env,
            &[("/other", true), ("/other/a", true), ("/other/a/f", false)],
        )
        .await;
        let options = WatchOptions {
            debounce: Duration::from_millis(100),
            ..WatchOptions::default()
        };
        let watching = {
            let _creating = CREATING.lock().await;
            Watching::start(env, &root, options).await
        };
        let (jobs_stop, mut jobs_stopped) = tokio::sync::watch::channel(false);
        let jobs_env = env.clone();
        let jobs = tokio::spawn(async move {
            let renamer =
                Renamer::builder(Arc::clone(&jobs_env.store), jobs_env.index.clone()).build();
            let (mut from, mut n) = (p("/other/a"), 0u32);
            while !*jobs_stopped.borrow_and_update() {
                let to = p(&format!("/other/b{n}"));
                renamer
                    .rename(&from, &to)
                    .await
                    .expect("a rename elsewhere");
                from = to;
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            n
        });
        let scene = Scene {
            root: std::fs::canonicalize(&root).expect("canonical"),
            outside: std::fs::canonicalize(&outside).expect("canonical"),
            _work: work,
            other,
        };
        let running = Running {
            watching,
            jobs_stop,
            jobs,
        };
        (scene, running)
    }
}

impl Running {
    /// Waits for the watcher to catch up (`quiet` without a batch), then stops it and the
    /// jobs; returns the watch's report and how many renames the jobs made.
    async fn stop(self, quiet: Duration) -> (WatchReport, u32) {
        self.watching.settle(quiet).await;
        self.jobs_stop.send_replace(true);
        let renamed = self.jobs.await.expect("jobs");
        (self.watching.stop().await, renamed)
    }
}

/// The end every script test checks: the store as a fresh index of the directory, `/other`
/// whole, fsck clean, no lock left.
async fn assert_all_in_step(env: &Env, scene: &Scene) {
    assert_like_a_fresh_index(env, &scene.root).await;
    assert_eq!(
        scene.other.count_under(&p("/other")).await.expect("count"),
        3
    );
    let fsck = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(fsck.is_clean(), "{fsck}");
    assert_eq!(locks_left(env).await, 0);
}

/// `/w/d<i>/f<j>`: `dirs` × `files` files.
fn build(root: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..files {
            std::fs::write(dir.join(format!("f{f}")), b"x").expect("write");
        }
    }
}

/// A short script of every kind of change, with rename jobs on another part of the store
/// meanwhile: the store ends where a fresh index would, what was moved kept its id, and the
/// other part lost nothing.
async fn a_script_of_every_change_ends_where_a_fresh_index_would(env: Env) {
    let (scene, running) = Scene::start(&env, 10, 20).await;
    let (root, outside) = (&scene.root, &scene.outside);
    let id_of = |ids: &BTreeMap<String, String>, path: &str| -> String {
        ids.iter()
            .find(|(_, p)| p.as_str() == path)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("no {path}"))
    };
    let before = paths_by_id(&env).await;
    let (moved_file, moved_dir, moved_in_dir) = (
        id_of(&before, "/w/d1/f3"),
        id_of(&before, "/w/d2"),
        id_of(&before, "/w/d2/f7"),
    );

    std::fs::write(root.join("d0/new"), b"new").expect("create");
    std::fs::write(root.join("d0/f0"), b"rewritten").expect("write");
    std::fs::create_dir(root.join("d0/made")).expect("mkdir");
    std::fs::write(root.join("d0/made/inside"), b"i").expect("create");
    std::fs::rename(root.join("d1/f3"), root.join("d0/made/f3-moved")).expect("mv file");
    std::fs::rename(root.join("d2"), root.join("d0/made/d2-moved")).expect("mv dir");
    std::fs::remove_file(root.join("d3/f1")).expect("rm");
    std::fs::remove_dir_all(root.join("d4")).expect("rm -r");
    std::fs::rename(root.join("d5"), outside.join("d5")).expect("mv out");
    std::fs::create_dir(outside.join("fresh")).expect("mkdir outside");
    std::fs::write(outside.join("fresh/x"), b"x").expect("create outside");
    std::fs::rename(outside.join("fresh"), root.join("d6/fresh")).expect("mv in");
    std::fs::write(root.join("d0/made/d2-moved/f7"), b"changed after the move").expect("write");
    let (report, renamed) = running.stop(Duration::from_millis(1_000)).await;
    println!(
        "{} batches: {} renames, {} directories indexed, {} files, {} removed; {renamed} renames elsewhere",
        report.batches, report.renames, report.indexed, report.files, report.removed
    );
    assert_eq!((report.failures, report.rescans), (0, 0));
    assert_all_in_step(&env, &scene).await;
    let after = paths_by_id(&env).await;
    assert_eq!(
        after.get(&moved_file).map(String::as_str),
        Some("/w/d0/made/f3-moved")
    );
    assert_eq!(
        after.get(&moved_dir).map(String::as_str),
        Some("/w/d0/made/d2-moved")
    );
    assert_eq!(
        after.get(&moved_in_dir).map(String::as_str),
        Some("/w/d0/made/d2-moved/f7")
    );
}

/// `mv b c && echo more >> c/sub/f`, again and again: inotify moves the watches of a renamed
/// directory under new descriptors, and the write that comes meanwhile has no event; the
/// store must still get it (the new place of a renamed directory is looked at again). Before
/// that, 1 or 2 writes of 40 were lost on each store. `FSRENAME_WATCH_TRIES` sets the
/// number of tries (60 by default).
async fn a_write_right_after_its_directory_is_renamed_is_kept(env: Env) {
    let tries: usize = std::env::var("FSRENAME_WATCH_TRIES")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(60);
    let work = tempfile::tempdir().expect("temp dir");
    let root = work.path().join("tree");
    std::fs::create_dir_all(root.join("b/sub")).expect("mkdir");
    std::fs::write(root.join("b/sub/f"), b"x\n").expect("write");
    let options = WatchOptions {
        debounce: Duration::from_millis(100),
        ..WatchOptions::default()
    };
    let watching = {
        let _creating = CREATING.lock().await;
        Watching::start(&env, &root, options).await
    };
    let tree = env.tree();
    let (mut from, mut to) = ("b", "c");
    let mut lost = Vec::new();
    for attempt in 0..tries {
        std::fs::rename(root.join(from), root.join(to)).expect("mv");
        let file = root.join(to).join("sub/f");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .expect("open");
        std::io::Write::write_all(&mut f, b"more\n").expect("append");
        drop(f);
        let size = std::fs::metadata(&file).expect("stat").len();
        watching.caught_up().await;
        let stored = || async {
            tree.refresh().await.expect("refresh");
            tree.find(&p(&format!("/w/{to}/sub/f")))
                .await
                .expect("find")
                .map(|e| e.doc.size)
        };
        let mut stored_size = stored().await;
        if stored_size != Some(size) {
            // Lost for good, or only late (a loaded machine slow to hand over the events)?
            watching.settle(Duration::from_secs(1)).await;
            stored_size = stored().await;
        }
        if stored_size != Some(size) {
            lost.push(format!(
                "try {attempt}: {size} bytes on disk, {stored_size:?} stored"
            ));
        }
        std::mem::swap(&mut from, &mut to);
    }
    let report = watching.stop().await;
    assert_eq!(report.failures, 0);
    assert!(
        lost.is_empty(),
        "{} of {tries} writes lost: {lost:?}",
        lost.len()
    );
    assert_like_a_fresh_index(&env, &root).await;
}

/// The kernel's event queue, shrunk for the watch where the test may (root), overflows under
/// a burst; the watch answers with a rescan and ends where a fresh index would.
async fn an_overflow_ends_in_a_rescan(env: Env) {
    const QUEUE: &str = "/proc/sys/fs/inotify/max_queued_events";
    let work = tempfile::tempdir().expect("temp dir");
    let root = work.path().join("tree");
    build(&root, 10, 10);
    let creating = CREATING.lock().await;
    let before = std::fs::read_to_string(QUEUE).ok();
    // Read by the kernel when the watch is created; put back at once.
    let shrunk = std::fs::write(QUEUE, "64").is_ok();
    let options = WatchOptions {
        debounce: Duration::from_millis(100),
        // A watch that waits for the batches as soon as one event is held: the kernel keeps
        // the rest.
        queue: 1,
        ..WatchOptions::default()
    };
    let watching = Watching::start(&env, &root, options).await;
    if let (true, Some(before)) = (shrunk, before) {
        std::fs::write(QUEUE, before.trim()).expect("put the queue size back");
    }
    drop(creating);
    // The watch is held at its next batch (as while it applies a long one), and a burst of
    // far more events than the kernel's queue holds comes meanwhile.
    let (held, release) = watching.hold();
    std::fs::write(root.join("trigger"), b"t").expect("write");
    tokio::task::spawn_blocking(move || held.recv_timeout(Duration::from_secs(30)))
        .await
        .expect("join")
        .expect("the watch is held");
    let burst = if shrunk { 2_000 } else { 40_000 };
    let dir = root.join("burst");
    std::fs::create_dir(&dir).expect("mkdir");
    for i in 0..burst {
        std::fs::write(dir.join(format!("b{i}")), b"b").expect("write");
    }
    std::fs::rename(root.join("d0"), root.join("d0-moved")).expect("mv");
    let _ = release.send(());
    watching.settle(Duration::from_millis(1_500)).await;
    let rescans = watching.rescans();
    let report = watching.stop().await;
    println!(
        "queue shrunk: {shrunk}; {burst} files; {} batches, {rescans} rescans",
        report.batches
    );
    assert!(rescans >= 1, "the queue never overflowed");
    assert_like_a_fresh_index(&env, &std::fs::canonicalize(&root).expect("canonical")).await;
    let fsck = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(fsck.is_clean(), "{fsck}");
}

/// `--watch --content`: the text of a file written follows it, through a rewrite and a move,
/// and `find` sees it.
async fn the_watcher_keeps_the_text_of_files(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    let root = work.path().join("tree");
    std::fs::create_dir_all(root.join("a")).expect("mkdir");
    std::fs::write(root.join("a/first.txt"), "alpha beta").expect("write");
    let options = WatchOptions {
        debounce: Duration::from_millis(100),
        index: IndexOptions {
            content: Some(1 << 20),
            ..IndexOptions::default()
        },
        ..WatchOptions::default()
    };
    let creating = CREATING.lock().await;
    let watching = Watching::start(&env, &root, options).await;
    drop(creating);
    let find = |words: &'static str| {
        let tree = env.tree();
        async move {
            let query = FindQuery::under(p("/w")).text(words);
            let found = tree.find_matching(&query, 10).await.expect("find");
            found
                .into_iter()
                .map(|e| e.doc.path.to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(find("alpha").await, ["/w/a/first.txt"], "the first run");
    std::fs::write(root.join("a/second.txt"), "gamma delta").expect("write");
    std::fs::write(root.join("a/first.txt"), "epsilon, rewritten").expect("write");
    watching.settle(Duration::from_millis(800)).await;
    assert_eq!(find("gamma").await, ["/w/a/second.txt"], "a new file");
    assert_eq!(
        find("epsilon").await,
        ["/w/a/first.txt"],
        "a rewritten file"
    );
    assert!(find("alpha").await.is_empty(), "its old words are gone");
    std::fs::rename(root.join("a"), root.join("b")).expect("mv");
    watching.settle(Duration::from_millis(800)).await;
    assert_eq!(
        find("delta").await,
        ["/w/b/second.txt"],
        "moved with its text"
    );
    watching.stop().await;
    assert_eq!(locks_left(&env).await, 0);
}

/// A file written and then moved into a directory made just before (faster than the watch
/// can follow: inotify has no watch in the new directory yet, so the move's second half never
/// comes) is the same file by identity, though its size and time are no longer what the store
/// holds: it keeps its id. The random script lost an id this way now and then (seed
/// 2792279743783929527).
async fn a_file_written_then_moved_into_a_new_directory_keeps_its_id(env: Env) {
    const FILES: usize = 30;
    let work = tempfile::tempdir().expect("temp dir");
    let root = work.path().join("tree");
    build(&root, 1, FILES);
    let options = WatchOptions {
        debounce: Duration::from_millis(100),
        ..WatchOptions::default()
    };
    let creating = CREATING.lock().await;
    let watching = Watching::start(&env, &root, options).await;
    drop(creating);
    let ids: BTreeMap<String, String> = paths_by_id(&env)
        .await
        .into_iter()
        .map(|(id, path)| (path, id))
        .collect();
    for f in 0..FILES {
        let file = root.join(format!("d0/f{f}"));
        let mut open = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .expect("open");
        std::io::Write::write_all(&mut open, b" more").expect("write");
        drop(open);
        let dir = root.join(format!("n{f}"));
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::rename(&file, dir.join("g")).expect("mv");
    }
    watching.settle(Duration::from_millis(800)).await;
    let report = watching.stop().await;
    assert_eq!(report.failures, 0);
    assert_like_a_fresh_index(&env, &std::fs::canonicalize(&root).expect("canonical")).await;
    let now = paths_by_id(&env).await;
    let lost: Vec<String> = (0..FILES)
        .filter(|f| {
            let id = &ids[&format!("/w/d0/f{f}")];
            now.get(id).map(String::as_str) != Some(format!("/w/n{f}/g").as_str())
        })
        .map(|f| format!("f{f}"))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {FILES} files lost their id: {lost:?}",
        lost.len()
    );
    assert_eq!(locks_left(&env).await, 0);
}

/// Every path under `root`, directories and files apart (`root` itself left out).
fn entries(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut dirs, mut files) = (Vec::new(), Vec::new());
    for entry in walkdir::WalkDir::new(root).min_depth(1) {
        let entry = entry.expect("walk");
        if entry.file_type().is_dir() {
            dirs.push(entry.into_path());
        } else {
            files.push(entry.into_path());
        }
    }
    (dirs, files)
}

/// Ids of the entries present at the start, by local path: followed through moves, dropped
/// by deletions, overwrites and moves out.
type Kept = HashMap<PathBuf, String>;

fn rebase(kept: &mut Kept, from: &Path, to: &Path) {
    let moved: Vec<(PathBuf, String)> = kept
        .iter()
        .filter(|(p, _)| p.starts_with(from))
        .map(|(p, id)| (p.clone(), id.clone()))
        .collect();
    for (path, id) in moved {
        kept.remove(&path);
        if let Ok(rest) = path.strip_prefix(from) {
            kept.insert(rebased(to, rest), id);
        }
    }
}

/// `to` followed by `rest`, without the trailing slash `Path::join("")` adds.
fn rebased(to: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        to.to_owned()
    } else {
        to.join(rest)
    }
}

fn forget(kept: &mut Kept, gone: &Path) {
    kept.retain(|p, _| !p.starts_with(gone));
}

/// What the script knows is on disk, so that it never has to look (a walk opens every
/// directory, and each open is an event of the watch: a thousand walks would flood it).
#[derive(Default)]
struct Disk {
    dirs: BTreeSet<PathBuf>,
    files: BTreeSet<PathBuf>,
    /// Entries moved out, directly in `outside`.
    out: Vec<PathBuf>,
}

impl Disk {
    fn of(root: &Path) -> Disk {
        let (dirs, files) = entries(root);
        Disk {
            dirs: dirs.into_iter().collect(),
            files: files.into_iter().collect(),
            out: Vec::new(),
        }
    }

    fn remove_under(&mut self, gone: &Path) {
        self.dirs.retain(|p| !p.starts_with(gone));
        self.files.retain(|p| !p.starts_with(gone));
    }

    fn rebase(&mut self, from: &Path, to: &Path) {
        let move_all = |set: &mut BTreeSet<PathBuf>| {
            let moved: Vec<PathBuf> = set
                .iter()
                .filter(|p| p.starts_with(from))
                .cloned()
                .collect();
            for path in moved {
                set.remove(&path);
                if let Ok(rest) = path.strip_prefix(from) {
                    set.insert(rebased(to, rest));
                }
            }
        };
        move_all(&mut self.dirs);
        move_all(&mut self.files);
    }
}

/// One random operation of the script.
fn step(
    rng: &mut StdRng,
    (root, outside): (&Path, &Path),
    n: usize,
    disk: &mut Disk,
    kept: &mut Kept,
) {
    let dirs: Vec<PathBuf> = disk.dirs.iter().cloned().collect();
    let files: Vec<PathBuf> = disk.files.iter().cloned().collect();
    let pick = |rng: &mut StdRng, v: &[PathBuf]| v[rng.random_range(0..v.len())].clone();
    let any_dir = |rng: &mut StdRng| {
        if dirs.is_empty() || rng.random_bool(0.1) {
            root.to_owned()
        } else {
            pick(rng, &dirs)
        }
    };
    match rng.random_range(0..100) {
        0..=19 => {
            let file = any_dir(rng).join(format!("n{n}"));
            std::fs::write(&file, b"new").expect("create");
            disk.files.insert(file);
        }
        20..=34 if !files.is_empty() => {
            let file = pick(rng, &files);
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .expect("open");
            std::io::Write::write_all(&mut f, b" more").expect("write");
        }
        35..=44 => {
            let dir = any_dir(rng).join(format!("m{n}"));
            std::fs::create_dir(&dir).expect("mkdir");
            disk.dirs.insert(dir);
        }
        45..=59 if !files.is_empty() => {
            let (file, dir) = (pick(rng, &files), any_dir(rng));
            let to = dir.join(format!("v{n}"));
            std::fs::rename(&file, &to).expect("mv file");
            rebase(kept, &file, &to);
            disk.rebase(&file, &to);
        }
        60..=69 if !dirs.is_empty() => {
            let (dir, into) = (pick(rng, &dirs), any_dir(rng));
            if into.starts_with(&dir) {
                return;
            }
            let to = into.join(format!("r{n}"));
            std::fs::rename(&dir, &to).expect("mv dir");
            rebase(kept, &dir, &to);
            disk.rebase(&dir, &to);
        }
        70..=79 if !files.is_empty() => {
            let file = pick(rng, &files);
            std::fs::remove_file(&file).expect("rm");
            forget(kept, &file);
            disk.remove_under(&file);
        }
        80..=84 if !dirs.is_empty() => {
            let dir = pick(rng, &dirs);
            std::fs::remove_dir_all(&dir).expect("rm -r");
            forget(kept, &dir);
            disk.remove_under(&dir);
        }
        85..=92 if !dirs.is_empty() || !files.is_empty() => {
            // Out of the tree.
            let what = if files.is_empty() || (!dirs.is_empty() && rng.random_bool(0.3)) {
                pick(rng, &dirs)
            } else {
                pick(rng, &files)
            };
            let to = outside.join(format!("o{n}"));
            std::fs::rename(&what, &to).expect("mv out");
            forget(kept, &what);
            disk.remove_under(&what);
            disk.out.push(to);
        }
        93..=99 if !disk.out.is_empty() => {
            // Into the tree: what is under it is learnt before (outside is not watched).
            let what = disk.out.swap_remove(rng.random_range(0..disk.out.len()));
            let (inner_dirs, inner_files) = if what.is_dir() {
                entries(&what)
            } else {
                (Vec::new(), Vec::new())
            };
            let to = any_dir(rng).join(format!("i{n}"));
            std::fs::rename(&what, &to).expect("mv in");
            let place = |p: PathBuf| p.strip_prefix(&what).map(|rest| rebased(&to, rest)).ok();
            if what_is_dir(&to) {
                disk.dirs.insert(to.clone());
            } else {
                disk.files.insert(to.clone());
            }
            disk.dirs.extend(inner_dirs.into_iter().filter_map(place));
            disk.files.extend(inner_files.into_iter().filter_map(place));
        }
        _ => {}
    }
}

fn what_is_dir(path: &Path) -> bool {
    path.symlink_metadata().is_ok_and(|m| m.is_dir())
}

async fn a_random_script_ends_where_a_fresh_index_would(env: Env, dirs: usize, files: usize) {
    let seed = seed();
    let (scene, running) = Scene::start(&env, dirs, files).await;
    let (root, outside) = (&scene.root, &scene.outside);
    let by_path: BTreeMap<String, String> = paths_by_id(&env)
        .await
        .into_iter()
        .map(|(id, path)| (path, id))
        .collect();
    let mut kept: Kept = entries(root)
        .0
        .into_iter()
        .chain(entries(root).1)
        .filter_map(|local| {
            let rel = local.strip_prefix(root).ok()?.to_str()?.to_owned();
            Some((local, by_path.get(&format!("/w/{rel}"))?.clone()))
        })
        .collect();
    assert_eq!(kept.len(), dirs * (files + 1));

    let mut rng = StdRng::seed_from_u64(seed);
    let mut disk = Disk::of(root);
    let started = Instant::now();
    for n in 0..1_000 {
        step(&mut rng, (root, outside), n, &mut disk, &mut kept);
        if n % 100 == 99 {
            tokio::task::yield_now().await;
        }
    }
    let script = started.elapsed();
    let (report, renamed) = running.stop(Duration::from_millis(1_500)).await;
    let caught_up = started.elapsed() - Duration::from_millis(1_500);
    println!(
        "script {script:?}, caught up after {caught_up:?}; {} batches: {} renames, {} directories indexed, {} files, {} removed, {} rescans; {renamed} renames elsewhere",
        report.batches, report.renames, report.indexed, report.files, report.removed, report.rescans
    );
    assert_eq!(report.failures, 0);
    // A rescan loses what the dropped events said: a file moved and then written in that
    // window is a new file to it (see docs/indexing.md). Nothing here overflows the queue.
    assert_eq!(report.rescans, 0, "seed {seed}: the queue overflowed");
    assert_all_in_step(&env, &scene).await;
    let ids = paths_by_id(&env).await;
    let mut checked = 0;
    for (local, id) in &kept {
        let Ok(rel) = local.strip_prefix(root) else {
            continue;
        };
        let Some(rel) = rel.to_str() else { continue };
        assert_eq!(
            ids.get(id).map(String::as_str),
            Some(format!("/w/{rel}").as_str()),
            "seed {seed}: {id} (was it moved with its id?)"
        );
        checked += 1;
    }
    println!("{checked} entries moved or untouched kept their ids");
}

/// The random script on both stores: the same 100 directories and the same 1 000 operations,
/// with 99 files a directory on the embedded store (10 000 entries) and 19 on osmem (2 000).
///
/// Why fewer on osmem: osmem-server 0.1.6 falls into a state where every write that replaces
/// documents of an index of about 10 000 costs close to 2 s, after some 7 000 replacements
/// (the script's renames and removals make more than that, in the index and in the proxy's
/// searchable copy of it). Measured apart from fsrename, with its own bulk requests: 100
/// random replacements a request cost 15-20 ms until the 68th request, then 1.6-2.0 s each,
/// for good (a force merge, a flush, closing and opening the index do not bring it back);
/// requests that only add documents stay at 15-30 ms. At 2 000 documents it never happens
/// (5 ms a request). The 10 000-entry script took 160-185 s on osmem, almost all of it in
/// that state; at 2 000 entries, 15 s.
mod random {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded() {
        let env = super::common::Env::new(fs_testkit::Backend::Embedded);
        super::a_random_script_ends_where_a_fresh_index_would(env.clone(), 100, 99).await;
        env.finish();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn osmem() {
        const DIRS: usize = 100;
        const FILES: usize = 19;
        let env = super::common::Env::new(fs_testkit::Backend::Osmem);
        super::a_random_script_ends_where_a_fresh_index_would(env.clone(), DIRS, FILES).await;
        env.finish();
    }
}

on_every_backend!(
    a_script_of_every_change_ends_where_a_fresh_index_would,
    an_overflow_ends_in_a_rescan,
    the_watcher_keeps_the_text_of_files,
    a_file_written_then_moved_into_a_new_directory_keeps_its_id,
    a_write_right_after_its_directory_is_renamed_is_kept
);
