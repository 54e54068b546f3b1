//! The built `fsrename` binary, end to end.

use std::process::{Command, Output};

fn fsrename(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(args)
        .env_remove("FSRENAME_STORE")
        .output()
        .expect("run fsrename")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn demo_shows_all_four_runs_and_exits_0() {
    let out = fsrename(&["demo", "--files", "600"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let verdicts = stdout
        .lines()
        .filter(|l| l.starts_with("as expected:"))
        .count();
    assert_eq!(verdicts, 4, "{stdout}");
    for title in [
        "tree locks, A first",
        "tree locks, B first",
        "no locks, no versions",
        "version numbers only",
    ] {
        assert!(stdout.contains(title), "missing {title}: {stdout}");
    }
    assert!(
        stdout.contains("waits: blocked by the exclusive lock on `/clinton` held by job A"),
        "{stdout}"
    );
    assert!(stdout.contains("B's rename was silently lost"), "{stdout}");
}

#[test]
fn fsck_of_an_empty_store_says_so() {
    let out = fsrename(&["--store", "mem", "fsck"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("there is no tree in index `fs` of mem"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_bad_path_is_a_usage_error_naming_it() {
    let out = fsrename(&["--store", "mem", "fsck", "relative/path"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("path `relative/path` is not absolute"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_unreachable_server_is_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["--store", "http://127.0.0.1:9", "fsck"])
        .env("FSRENAME_ES_RETRY_DEADLINE_MS", "200")
        .output()
        .expect("run fsrename");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("http://127.0.0.1:9") && stderr.contains("refreshing"),
        "{stderr}"
    );
}

/// A directory of `dirs` × `files_per_dir` files: 100 × 99 + 100 directories = 10 000 entries
/// below the top directory.
fn generate(top: &std::path::Path, dirs: usize, files_per_dir: usize) {
    for d in 0..dirs {
        let dir = top.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..files_per_dir {
            std::fs::write(dir.join(format!("f{f:03}.txt")), b"0123456789").expect("write");
        }
    }
}

fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

fn with_db(db: &std::path::Path, args: &[&str]) -> Output {
    let mut all = vec!["--store", db.to_str().expect("utf-8 temp path")];
    all.extend_from_slice(args);
    fsrename(&all)
}

#[test]
fn index_ls_mv_fsck_on_a_generated_tree() {
    let work = tempfile::tempdir().expect("temp dir");
    let top = work.path().join("gen");
    generate(&top, 100, 99);
    // A symbolic link: counted, not followed.
    std::os::unix::fs::symlink(top.join("d000"), top.join("link")).expect("symlink");
    // A name that is not UTF-8 (Linux allows any bytes but `/` and NUL).
    use std::os::unix::ffi::OsStrExt;
    let bad = top.join(std::ffi::OsStr::from_bytes(b"bad-\xff-name"));
    std::fs::write(&bad, b"x").expect("non-UTF-8 name");
    // An unreadable directory, where the filesystem (and our user) allows it: root reads
    // everything, so then there is nothing unreadable to count.
    let locked = top.join("locked");
    std::fs::create_dir(&locked).expect("mkdir");
    std::fs::write(locked.join("secret"), b"x").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let unreadable = std::fs::read_dir(&locked).is_err();

    let db = work.path().join("tree.db");
    let top_arg = top.to_str().expect("utf-8 temp path");
    let out = with_db(&db, &["index", top_arg, "--json"]);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).expect("chmod back");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = json_of(&out);
    let expected_files = 100 * 99 + if unreadable { 0 } else { 1 };
    assert_eq!(report["files"], expected_files, "{report}");
    assert_eq!(
        report["dirs"],
        100 + 1 + 1,
        "the top, d000..d099 and locked/: {report}"
    );
    assert_eq!(report["symlinks"], 1);
    let skipped = report["skipped"].to_string();
    assert!(skipped.contains("the name is not UTF-8"), "{skipped}");
    assert!(skipped.contains("symbolic link"), "{skipped}");
    if unreadable {
        assert!(skipped.contains("unreadable"), "{skipped}");
        assert_eq!(report["skipped_count"], 3);
    } else {
        eprintln!("running as a user who can read any directory: no unreadable entry to count");
        assert_eq!(report["skipped_count"], 2);
    }
    let indexed = report["files"].as_u64().unwrap_or(0) + report["dirs"].as_u64().unwrap_or(0);
    assert_eq!(report["created"], indexed);

    // Indexing again changes nothing.
    let again = json_of(&with_db(&db, &["index", top_arg, "--json"]));
    assert_eq!(
        (again["created"].clone(), again["updated"].clone()),
        (serde_json::json!(0), serde_json::json!(0))
    );
    assert_eq!(again["unchanged"], indexed);
    // A changed file is updated in place: same count, one document rewritten.
    std::fs::write(top.join("d001/f001.txt"), b"now longer than before").expect("change a file");
    let changed = json_of(&with_db(&db, &["index", top_arg, "--json"]));
    assert_eq!(
        (changed["created"].as_u64(), changed["updated"].as_u64()),
        (Some(0), Some(1)),
        "{changed}"
    );
    let size = text(&with_db(&db, &["ls", "--json", "/gen/d001/f001.txt"]).stdout);
    assert!(size.contains("\"size\":22"), "{size}");

    let listing = with_db(&db, &["ls", "/gen"]);
    let names = text(&listing.stdout);
    assert_eq!(
        names.lines().count(),
        101,
        "d000..d099 and locked/: {names}"
    );
    assert!(names.lines().any(|l| l == "d042/"));
    let long = text(&with_db(&db, &["ls", "--long", "/gen/d000/f000.txt"]).stdout);
    assert!(
        long.starts_with("file") && long.contains("10 ") && long.contains("/gen/d000/f000.txt"),
        "{long}"
    );

    let moved = with_db(&db, &["mv", "/gen/d007", "/gen/seven", "--json"]);
    assert_eq!(moved.status.code(), Some(0), "{}", text(&moved.stderr));
    assert_eq!(json_of(&moved)["rewritten"], 100);
    let seven = text(&with_db(&db, &["ls", "/gen/seven"]).stdout);
    assert_eq!(seven.lines().count(), 99);
    let missing = with_db(&db, &["ls", "/gen/d007"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        text(&missing.stderr).contains("`/gen/d007` not found"),
        "{}",
        text(&missing.stderr)
    );

    let fsck = with_db(&db, &["fsck"]);
    assert_eq!(fsck.status.code(), Some(0), "{}", text(&fsck.stdout));
    assert!(
        text(&fsck.stdout).contains(&format!("{indexed} documents")),
        "{}",
        text(&fsck.stdout)
    );
}

#[test]
fn two_mv_processes_on_one_file_exclude_each_other() {
    let work = tempfile::tempdir().expect("temp dir");
    let top = work.path().join("big");
    generate(&top, 40, 249);
    let db = work.path().join("tree.db");
    let out = with_db(
        &db,
        &["index", top.to_str().expect("utf-8"), "--as", "/big"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(with_db(&db, &["mkdir", "/other"]).status.code(), Some(0));

    // A renames 10 000 documents from /big to /dest; while it holds its locks, B wants to
    // move /other into /dest. Locks are watched in the database itself.
    let watcher = fs_store::SqliteStore::open(&db).expect("open the database");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let lock_count = || {
        runtime.block_on(async {
            use fs_store::DocStore;
            watcher
                .count("fs-lock", &fs_store::Scope::All)
                .await
                .unwrap_or(0)
        })
    };
    for (from, to) in [("/big", "/dest"), ("/dest", "/big"), ("/big", "/dest")] {
        let mut a = Command::new(env!("CARGO_BIN_EXE_fsrename"))
            .args(["--store", db.to_str().expect("utf-8"), "mv", from, to])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start A");
        let mut seen = false;
        while a.try_wait().expect("poll A").is_none() {
            if lock_count() > 0 {
                seen = true;
                break;
            }
        }
        if !seen {
            assert!(a.wait().expect("A").success());
            continue; // A was done before we looked; go the other way and look again.
        }
        let target = format!("{to}/other");
        let b = with_db(&db, &["mv", "/other", &target, "--wait", "0s"]);
        let a_status = a.wait().expect("A ends");
        assert!(a_status.success(), "A failed");
        assert_eq!(
            b.status.code(),
            Some(3),
            "B should time out: {}",
            text(&b.stderr)
        );
        let stderr = text(&b.stderr);
        assert!(
            stderr.contains(&format!("`{to}`")) && stderr.contains(&format!("mv {from} {to}")),
            "{stderr}"
        );
        let retried = with_db(&db, &["mv", "/other", &target]);
        assert_eq!(retried.status.code(), Some(0), "{}", text(&retried.stderr));
        assert_eq!(with_db(&db, &["fsck"]).status.code(), Some(0));
        return;
    }
    panic!("A finished every time before its locks could be seen");
}

#[test]
fn every_verb_explains_itself() {
    for verb in [
        "index", "mkdir", "touch", "mv", "ls", "locks", "fsck", "demo",
    ] {
        let out = fsrename(&[verb, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{verb}");
        let help = text(&out.stdout);
        assert!(help.contains("Usage: fsrename"), "{verb}: {help}");
        assert!(help.lines().count() > 5, "{verb} explains little: {help}");
    }
    let mv = text(&fsrename(&["mv", "--help"]).stdout);
    assert!(
        mv.contains("[default: 30s]")
            && mv.contains("Exit code 3")
            && mv.contains("[default: tree]"),
        "{mv}"
    );
    let bad = fsrename(&["mv", "/a", "/b", "--wait", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("`soon` is not a duration"),
        "{}",
        text(&bad.stderr)
    );
}
