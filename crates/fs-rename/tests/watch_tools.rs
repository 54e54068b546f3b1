//! `index --watch` against the tools people change directories with: git (commits, a branch
//! that moves directories, checkouts back and forth, stash), tar, rsync, `cp -a`, an editor's
//! save (a temporary file renamed over the original), a rename cycle, a directory moved out
//! and back in, a burst of thousands of files and their parent renamed, a watch stopped in
//! the middle of a burst and started again. After each, once the watcher says it has caught
//! up: the store is what a fresh index of the directory would be, fsck is clean, and what was
//! moved (not rewritten) kept its id. On every backend.
//!
//! The tools are Debian's (`git`, `tar`, `rsync`, coreutils' `cp`), which `.ci/run` installs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::watching::*;
use common::*;
use fs_model::FsPath;
use fs_rename::{fsck, WatchOptions};

/// A watched directory of a test's own (`work/tree`, at `/w`), with `work/outside` beside it.
struct Bench {
    _work: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

impl Bench {
    fn new() -> Bench {
        let work = tempfile::tempdir().expect("temp dir");
        let root = work.path().join("tree");
        let outside = work.path().join("outside");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        Bench {
            root: std::fs::canonicalize(&root).expect("canonical"),
            outside: std::fs::canonicalize(&outside).expect("canonical"),
            _work: work,
        }
    }

    async fn watch(&self, env: &Env) -> Watching {
        let options = WatchOptions {
            debounce: Duration::from_millis(100),
            ..WatchOptions::default()
        };
        let _creating = CREATING.lock().await;
        Watching::start(env, &self.root, options).await
    }
}

/// Runs a tool in `dir`; it must succeed.
fn run(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        // git: no configuration of the machine's, an author of the test's.
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (does .ci/run install it?): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `count` files of a few bytes in `dir/d<i>/f<j>`, `per_dir` to a directory.
fn files(dir: &Path, count: usize, per_dir: usize) {
    for i in 0..count {
        let sub = dir.join(format!("d{}", i / per_dir));
        if i % per_dir == 0 {
            std::fs::create_dir_all(&sub).expect("mkdir");
        }
        std::fs::write(sub.join(format!("f{i}")), format!("file {i}\n")).expect("write");
    }
}

/// Waits for the watcher to catch up, then checks the store against the disk and fsck.
async fn in_step(env: &Env, watching: &Watching, root: &Path, what: &str) {
    let started = Instant::now();
    watching.caught_up().await;
    println!("{what}: caught up in {:?}", started.elapsed());
    assert_like_a_fresh_index(env, root).await;
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{what}: {report}");
    assert_eq!(locks_left(env).await, 0, "{what}: locks left");
}

/// The ids of the documents under `/w`, by their path under `root` on disk.
async fn ids(env: &Env, root: &Path) -> BTreeMap<PathBuf, String> {
    paths_by_id(env)
        .await
        .into_iter()
        .filter_map(|(id, path)| {
            let rel = path.strip_prefix("/w")?.trim_start_matches('/');
            Some((root.join(rel), id))
        })
        .collect()
}

/// Asserts that what was at each `(before, after)` pair's first path has its id at the second.
async fn kept(env: &Env, root: &Path, before: &BTreeMap<PathBuf, String>, moves: &[(&str, &str)]) {
    let now = ids(env, root).await;
    for (from, to) in moves {
        let id = before
            .get(&root.join(from))
            .unwrap_or_else(|| panic!("no {from}"));
        assert_eq!(
            now.get(&root.join(to)),
            Some(id),
            "{from} → {to}: id not kept"
        );
    }
}

/// A git repository: commits, a branch that moves a directory and deletes and adds files,
/// ten checkouts back and forth, a stash and its pop. Git writes files anew (temporary files
/// renamed into place, `index.lock` renamed over `index`): it rewrites, it does not move, so
/// no id is asked to survive; the store must follow.
async fn git_checkouts_and_stash(env: Env) {
    let bench = Bench::new();
    let repo = bench.root.join("repo");
    std::fs::create_dir(&repo).expect("mkdir");
    files(&repo.join("src"), 200, 20);
    run(&repo, "git", &["init", "-q", "-b", "main"]);
    run(&repo, "git", &["add", "."]);
    run(&repo, "git", &["commit", "-q", "-m", "first"]);
    let watching = bench.watch(&env).await;
    run(&repo, "git", &["checkout", "-q", "-b", "moves"]);
    run(&repo, "git", &["mv", "src/d0", "src/moved"]);
    run(&repo, "git", &["rm", "-q", "-r", "src/d1"]);
    files(&repo.join("added"), 30, 10);
    run(&repo, "git", &["add", "."]);
    run(&repo, "git", &["commit", "-q", "-m", "moves"]);
    for _ in 0..10 {
        run(&repo, "git", &["checkout", "-q", "main"]);
        run(&repo, "git", &["checkout", "-q", "moves"]);
    }
    in_step(&env, &watching, &bench.root, "git checkouts").await;
    std::fs::write(repo.join("src/moved/f0"), "changed\n").expect("write");
    std::fs::write(repo.join("untracked"), "u\n").expect("write");
    run(&repo, "git", &["stash", "-q", "--include-untracked"]);
    in_step(&env, &watching, &bench.root, "git stash").await;
    run(&repo, "git", &["stash", "pop", "-q"]);
    in_step(&env, &watching, &bench.root, "git stash pop").await;
    assert_eq!(watching.stop().await.failures, 0);
}

/// `tar -xf` of 2 000 files, `mv` of its top (ids kept), `rm -rf` of part of it.
async fn tar_then_move_then_remove(env: Env) {
    let bench = Bench::new();
    files(&bench.outside.join("t"), 2_000, 100);
    run(&bench.outside, "tar", &["-cf", "t.tar", "t"]);
    let watching = bench.watch(&env).await;
    run(
        &bench.root,
        "tar",
        &["-xf", &bench.outside.join("t.tar").to_string_lossy()],
    );
    in_step(&env, &watching, &bench.root, "tar -xf").await;
    let before = ids(&env, &bench.root).await;
    run(&bench.root, "mv", &["t", "top"]);
    run(
        &bench.root,
        "rm",
        &["-rf", "top/d3", "top/d4", "top/d5/f510"],
    );
    in_step(&env, &watching, &bench.root, "mv, rm -rf").await;
    kept(
        &env,
        &bench.root,
        &before,
        &[
            ("t", "top"),
            ("t/d0", "top/d0"),
            ("t/d19/f1999", "top/d19/f1999"),
        ],
    )
    .await;
    assert_eq!(watching.stop().await.failures, 0);
}

/// `rm -rf` of 300 directories at once: a few requests in all, not a journaled `rm -r` job
/// each (issue 48: `rm -rf` of 711 directories took 44.8 s to follow on Elasticsearch).
async fn rm_rf_of_many_directories(env: Env) {
    let bench = Bench::new();
    files(&bench.root, 1_200, 4);
    std::fs::write(bench.root.join("kept"), b"kept").expect("write");
    let counting = Arc::new(fs_store::CountingStore::new(Arc::clone(&env.store)));
    let watching = bench.watch(&env.through(counting.clone())).await;
    let before = counting.round_trips();
    run(&bench.root, "sh", &["-c", "rm -rf d*"]);
    in_step(&env, &watching, &bench.root, "rm -rf of 300 directories").await;
    let requests = counting.round_trips() - before;
    println!("rm -rf of 300 directories (1 500 documents): {requests} requests");
    // A journaled job a directory made at least six requests each (1 800 in all).
    assert!(requests < 150, "{requests} requests to follow rm -rf");
    assert_eq!(watching.stop().await.failures, 0);
}

/// `rsync -a --delete` into a new directory of the tree (each file written to a temporary
/// name, then renamed), again after changes on the source side, and `cp -a` of the result.
async fn rsync_and_cp(env: Env) {
    let bench = Bench::new();
    let source = bench.outside.join("src");
    files(&source, 1_500, 100);
    let watching = bench.watch(&env).await;
    let (from, into) = (
        format!("{}/", source.display()),
        format!("{}/", bench.root.join("mirror").display()),
    );
    run(&bench.root, "rsync", &["-a", "--delete", &from, &into]);
    in_step(&env, &watching, &bench.root, "rsync into a new directory").await;
    std::fs::remove_dir_all(source.join("d2")).expect("rm");
    std::fs::write(source.join("d3/f300"), "rewritten, longer\n").expect("write");
    files(&source.join("new"), 50, 50);
    let before = ids(&env, &bench.root).await;
    run(&bench.root, "rsync", &["-a", "--delete", &from, &into]);
    in_step(&env, &watching, &bench.root, "rsync --delete again").await;
    kept(
        &env,
        &bench.root,
        &before,
        &[("mirror/d0/f0", "mirror/d0/f0")],
    )
    .await;
    run(&bench.root, "cp", &["-a", "mirror", "copy"]);
    in_step(&env, &watching, &bench.root, "cp -a").await;
    assert_eq!(watching.stop().await.failures, 0);
}

/// An editor's save (a temporary file written, renamed over the original), a rename cycle
/// (a → tmp, b → a, tmp → b: the ids swap) and a directory moved out and back in.
async fn saves_cycles_and_out_and_back(env: Env) {
    let bench = Bench::new();
    let root = &bench.root;
    files(&root.join("docs"), 20, 10);
    std::fs::write(root.join("a"), "a\n").expect("write");
    std::fs::write(root.join("b"), "bb\n").expect("write");
    let watching = bench.watch(&env).await;
    in_step(&env, &watching, root, "first run").await;
    let before = ids(&env, root).await;
    for round in 0..5 {
        let tmp = root.join("docs/d0/.f0.swp");
        std::fs::write(&tmp, format!("saved {round}\n")).expect("write");
        std::fs::rename(&tmp, root.join("docs/d0/f0")).expect("mv over");
    }
    std::fs::rename(root.join("a"), root.join("tmp")).expect("mv");
    std::fs::rename(root.join("b"), root.join("a")).expect("mv");
    std::fs::rename(root.join("tmp"), root.join("b")).expect("mv");
    in_step(&env, &watching, root, "saves and a rename cycle").await;
    kept(
        &env,
        root,
        &before,
        &[("a", "b"), ("b", "a"), ("docs/d1/f10", "docs/d1/f10")],
    )
    .await;
    std::fs::rename(root.join("docs/d1"), bench.outside.join("d1")).expect("mv out");
    in_step(&env, &watching, root, "moved out").await;
    std::fs::rename(bench.outside.join("d1"), root.join("docs/d1-back")).expect("mv in");
    in_step(&env, &watching, root, "moved back in").await;
    assert_eq!(watching.stop().await.failures, 0);
}

/// A burst of files made as fast as can be, their parent renamed right after (its id kept);
/// then a watch stopped in the middle of a burst (within 2 s) and started again: the first
/// run of the new one brings the store in step.
async fn a_burst_its_parent_renamed_and_a_stop_mid_burst(env: Env) {
    let count = if env.backend == fs_testkit::Backend::Embedded {
        5_000
    } else {
        2_000
    };
    let bench = Bench::new();
    let root = &bench.root;
    std::fs::create_dir(root.join("burst")).expect("mkdir");
    let watching = bench.watch(&env).await;
    let before = ids(&env, root).await;
    files(&root.join("burst"), count, 500);
    std::fs::rename(root.join("burst"), root.join("burst-renamed")).expect("mv");
    in_step(&env, &watching, root, "burst").await;
    kept(&env, root, &before, &[("burst", "burst-renamed")]).await;

    files(&root.join("second"), count, 500);
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::rename(root.join("burst-renamed"), root.join("burst-again")).expect("mv");
    let stopping = Instant::now();
    watching.stop().await;
    let took = stopping.elapsed();
    println!("stopped in {took:?}");
    // The 2 s a user is promised are measured apart (docs/benchmarks.md); here, only that it
    // does not wait for the burst to be applied, whatever the load of the machine.
    assert!(
        took < Duration::from_secs(20),
        "the watch took {took:?} to stop"
    );
    let watching = bench.watch(&env).await;
    in_step(
        &env,
        &watching,
        root,
        "after a stop mid-burst, started again",
    )
    .await;
    assert_eq!(watching.stop().await.failures, 0);
}

on_every_backend!(
    git_checkouts_and_stash,
    tar_then_move_then_remove,
    rm_rf_of_many_directories,
    rsync_and_cp,
    saves_cycles_and_out_and_back,
    a_burst_its_parent_renamed_and_a_stop_mid_burst
);

/// The same cases on a real Elasticsearch: `FSRENAME_TEST_ES_URL=http://127.0.0.1:9200 cargo
/// test -p fs-rename --test watch_tools -- --ignored`.
mod real_elasticsearch {
    macro_rules! on_real_elasticsearch {
        ($($case:ident),+ $(,)?) => {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs a real Elasticsearch: set FSRENAME_TEST_ES_URL"]
                async fn $case() {
                    let env = super::common::Env::new(fs_testkit::Backend::RealElastic);
                    super::$case(env.clone()).await;
                    env.finish();
                }
            )+
        };
    }

    on_real_elasticsearch!(
        git_checkouts_and_stash,
        tar_then_move_then_remove,
        rm_rf_of_many_directories,
        rsync_and_cp,
        saves_cycles_and_out_and_back,
        a_burst_its_parent_renamed_and_a_stop_mid_burst
    );
}
