//! The built `fsrename` binary, end to end.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};

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

/// The report of a verb run with `--json`: its last line.
fn json_of(out: &Output) -> serde_json::Value {
    json_lines(out)
        .pop()
        .unwrap_or_else(|| panic!("no line: {}", text(&out.stdout)))
}

/// Every line a verb printed with `--json`.
fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
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
    assert_eq!(json_of(&moved)["report"]["rewritten"], 100);
    let seven = text(&with_db(&db, &["ls", "/gen/seven"]).stdout);
    assert_eq!(seven.lines().count(), 99);
    let missing = with_db(&db, &["ls", "/gen/d007"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        text(&missing.stderr).contains("`/gen/d007`: no such file or directory in the tree"),
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
    // A's locks may be gone by the time B has started (a busy machine): then both moves
    // happened one after the other, which is fine, and the round is tried again the other way.
    let rounds = [("/big", "/dest"), ("/dest", "/big")];
    for (from, to) in rounds.into_iter().cycle().take(8) {
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
        if b.status.code() == Some(0) {
            // B came after A's release: move /other back and look again.
            let back = with_db(&db, &["mv", &target, "/other"]);
            assert_eq!(back.status.code(), Some(0), "{}", text(&back.stderr));
            continue;
        }
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
    panic!("A released its locks every time before B could be refused");
}

/// `index --content` then `find` by name and by words; bad patterns, sizes and word lists are
/// refused with a message naming them.
#[test]
fn find_by_name_and_text() {
    let work = tempfile::tempdir().expect("temp dir");
    let top = work.path().join("docs");
    std::fs::create_dir_all(top.join("sub")).expect("mkdir");
    std::fs::write(top.join("readme.txt"), "The quick brown fox").expect("write");
    std::fs::write(top.join("sub/notes.md"), "a lazy dog").expect("write");
    std::fs::write(top.join("sub/big.txt"), "fox ".repeat(1_000)).expect("write");
    let db = work.path().join("tree.db");
    let top_arg = top.to_str().expect("utf-8 temp path");
    let out = with_db(
        &db,
        &[
            "index",
            top_arg,
            "--content",
            "--content-max",
            "1K",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(json_of(&out)["texts"], 2, "the large file holds no text");
    let lines = |args: &[&str]| {
        let out = with_db(&db, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(lines(&["find", "--text", "FOX"]), ["/docs/readme.txt"]);
    assert_eq!(
        lines(&["find", "/docs/sub", "--name", "*.md"]),
        ["/docs/sub/notes.md"]
    );
    assert_eq!(lines(&["find", "--name", "*.txt", "--limit", "1"]).len(), 1);
    assert_eq!(
        with_db(&db, &["mv", "/docs/sub", "/docs/moved"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        lines(&["find", "--text", "lazy dog"]),
        ["/docs/moved/notes.md"]
    );
    for (args, says) in [
        (&["find", "--name", "a/b"][..], "a name holds no `/`"),
        (&["find", "--name", "[ab"][..], "no `]`"),
        (&["find", "--text", "!!"][..], "no word"),
        (&["find", "--limit", "0"][..], "from 1 to 10000"),
        (
            &["index", top_arg, "--content", "--content-max", "lots"][..],
            "`lots` is not a size",
        ),
    ] {
        let out = with_db(&db, args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn every_verb_explains_itself() {
    for verb in [
        "index", "mkdir", "touch", "mv", "cp", "rm", "ls", "find", "locks", "fsck", "demo",
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
    let cp = text(&fsrename(&["cp", "--help"]).stdout);
    assert!(
        cp.contains("shared lock on SRC")
            && cp.contains("exclusive lock on DST")
            && cp.contains("-r, --recursive"),
        "{cp}"
    );
    let rm = text(&fsrename(&["rm", "--help"]).stdout);
    assert!(
        rm.contains("exclusive lock on PATH") && rm.contains("deepest first"),
        "{rm}"
    );
    for verb in ["ls", "fsck"] {
        let help = text(&fsrename(&[verb, "--help"]).stdout);
        assert!(
            help.contains("--consistent") && help.contains("shared lock"),
            "{verb}: {help}"
        );
    }
    let bad = fsrename(&["mv", "/a", "/b", "--wait", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("`soon` is not a duration"),
        "{}",
        text(&bad.stderr)
    );
}

/// `fsrename ARGS` on the database `db`, with no store or log settings from the environment.
fn command(db: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fsrename"));
    cmd.arg("--store")
        .arg(db)
        .args(args)
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_LOG");
    cmd
}

/// A pipe whose reader is already gone, as `| head -1` leaves it once `head` has exited:
/// every write into it fails with EPIPE, from the first. Its only reading end belonged to
/// `true`, which has exited without reading.
fn closed_pipe() -> Stdio {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("run true");
    let writer = reader.stdin.take().expect("the pipe's writing end");
    reader.wait().expect("true exits");
    Stdio::from(writer)
}

/// Runs `fsrename ARGS | head -1`: reads the first line, closes the pipe, waits for the end.
/// The child goes on writing into the pipe until it is full, so if it writes more than a pipe
/// holds (64 KiB on Linux) plus what was read, its next write meets the closed pipe whatever
/// the timing. Returns the line and how the process ended.
fn first_line_then_close(mut cmd: Command) -> (String, Output) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fsrename");
    let mut reader = BufReader::new(child.stdout.take().expect("its stdout"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("read a line");
    drop(reader);
    (line, child.wait_with_output().expect("fsrename ends"))
}

/// Asserts that `out` is the quiet end of a process whose reader went away: exit 0, and
/// nothing on stderr about it (no panic, no backtrace, no error message; `mv --progress json`
/// prints its events there).
fn assert_quiet_end(what: &str, out: &Output) {
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.to_lowercase().contains("backtrace"),
        "{what}: {stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
    assert!(
        stderr
            .lines()
            .all(|l| l.starts_with("{\"type\":\"job_event\",\"event\":")),
        "{what}: {stderr}"
    );
}

/// A database holding 10 000 files under a long top path, so that `ls -R /` prints far more
/// than a pipe holds.
fn big_tree(work: &std::path::Path) -> std::path::PathBuf {
    let top = work.join("gen");
    generate(&top, 100, 99);
    let db = work.join("tree.db");
    let out = with_db(
        &db,
        &[
            "index",
            top.to_str().expect("utf-8 temp path"),
            "--as",
            LONG_TOP,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    db
}

const LONG_TOP: &str = "/a-top-directory-with-a-long-name-so-that-ls-prints-a-lot";

#[test]
fn ls_r_into_head_ends_quietly_instead_of_panicking() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = big_tree(work.path());
    let whole = with_db(&db, &["ls", "-R", "/"]);
    assert_eq!(whole.status.code(), Some(0), "{}", text(&whole.stderr));
    assert!(
        whole.stdout.len() > 8 * 64 * 1024,
        "too little to fill a pipe: {} bytes",
        whole.stdout.len()
    );
    for args in [
        &["ls", "-R", "/"][..],
        &["ls", "-R", "--long", "/"],
        &["ls", "-R", "--json", "/"],
        &["ls", "-R", LONG_TOP],
    ] {
        let (line, out) = first_line_then_close(command(&db, args));
        assert!(line.contains(LONG_TOP), "{args:?}: {line}");
        assert_quiet_end(&format!("{args:?} | head -1"), &out);
    }
    // Stopping early changed nothing.
    let locks = with_db(&db, &["locks"]);
    assert_eq!(text(&locks.stdout), "no locks\n");
}

#[test]
fn every_printing_verb_ends_quietly_into_a_closed_pipe() {
    let work = tempfile::tempdir().expect("temp dir");
    let top = work.path().join("small");
    generate(&top, 5, 20);
    let top_arg = top.to_str().expect("utf-8 temp path");
    let db = work.path().join("tree.db");
    let moved = format!("{LONG_TOP}-moved");
    let verbs: [&[&str]; 18] = [
        &["schema"],
        &["completions", "bash"],
        &["man"],
        &["index", top_arg, "--as", LONG_TOP],
        &["index", top_arg, "--as", LONG_TOP, "--json"],
        &["ls", "/"],
        &["ls", "-R", "--long", "/"],
        &["ls", "--json", "/"],
        &["mkdir", "-p", "/made/deep/down"],
        &["touch", "/made/file"],
        &["mv", LONG_TOP, &moved, "--progress", "json"],
        &["mv", &moved, LONG_TOP, "--json", "--progress", "lines"],
        &["locks"],
        &["locks", "--json"],
        &["fsck"],
        &["fsck", "--json"],
        &["recover"],
        &["recover", "--json"],
    ];
    for args in verbs {
        let out = command(&db, args)
            .stdout(closed_pipe())
            .output()
            .expect("run fsrename");
        assert_quiet_end(&format!("{args:?} into a closed pipe"), &out);
    }
    // Progress and warnings go to stderr: that one closing too must not stop a rename
    // half-way (nor panic: a panic exits with 101).
    let out = command(&db, &["mv", LONG_TOP, "/last", "--progress", "json"])
        .stdout(closed_pipe())
        .stderr(closed_pipe())
        .output()
        .expect("run fsrename");
    assert_eq!(out.status.code(), Some(0));

    // Every verb did its work, and the renames released their locks.
    let listing = text(&with_db(&db, &["ls", "-R", "/"]).stdout);
    assert!(
        listing.lines().any(|l| l == "/last/d004/f019.txt"),
        "{listing}"
    );
    assert!(
        listing.lines().any(|l| l == "/made/deep/down/"),
        "{listing}"
    );
    assert!(listing.lines().any(|l| l == "/made/file"), "{listing}");
    assert_eq!(text(&with_db(&db, &["locks"]).stdout), "no locks\n");
    let fsck = with_db(&db, &["fsck"]);
    assert_eq!(fsck.status.code(), Some(0), "{}", text(&fsck.stdout));
}

#[test]
fn demo_options_are_checked() {
    for (args, names) in [
        (
            &["demo", "--slow", "fast"][..],
            "`fast` is not a slow-down factor",
        ),
        (&["demo", "--slow", "-1"][..], "-1"),
        (
            &["demo", "--slow", "1000"][..],
            "`1000` is not a slow-down factor",
        ),
        (&["demo", "--listen", "127.0.0.1:1"][..], "--serve"),
        (
            &["serve", "--listen", "localhost:http:x"][..],
            "`localhost:http:x` is not an address to listen on",
        ),
        (
            &["mv", "/a", "/b", "--strategy", "bogus"][..],
            "unknown strategy `bogus`: expected tree, global or document",
        ),
        (
            &["mv", "/a", "/b", "--strategy", "none"][..],
            "`none` exists only for the demonstration",
        ),
    ] {
        let out = fsrename(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
    }
}

/// A slowed demo still shows all four runs (here at a tenth of the watching pace).
#[test]
fn a_slowed_demo_shows_the_same_runs() {
    let out = fsrename(&["demo", "--files", "300", "--slow", "0.1"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let verdicts = stdout
        .lines()
        .filter(|l| l.starts_with("as expected:"))
        .count();
    assert_eq!(verdicts, 4, "{stdout}");
}

#[test]
fn demo_into_a_closed_pipe_stops_quietly() {
    let (line, out) = first_line_then_close({
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fsrename"));
        cmd.args(["demo", "--files", "200"])
            .env_remove("FSRENAME_LOG");
        cmd
    });
    assert!(
        line.starts_with("The scenario of Elasticsearch: The Definitive Guide"),
        "the demo names the book: {line}"
    );
    assert_quiet_end("demo | head -1", &out);

    let out = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["demo", "--files", "200"])
        .env_remove("FSRENAME_LOG")
        .stdout(closed_pipe())
        .output()
        .expect("run fsrename");
    assert_quiet_end("demo into a closed pipe", &out);
}

#[test]
fn an_error_into_a_closed_stderr_is_not_a_panic() {
    // The error message has nowhere to go; the exit code still says what happened.
    let out = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["--store", "mem", "fsck"])
        .env_remove("FSRENAME_STORE")
        .stdout(closed_pipe())
        .stderr(closed_pipe())
        .output()
        .expect("run fsrename");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_full_stdout_is_a_failure_that_says_so() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = work.path().join("tree.db");
    assert_eq!(with_db(&db, &["mkdir", "/a"]).status.code(), Some(0));
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let out = command(&db, &["ls", "/"])
        .stdout(full)
        .output()
        .expect("run fsrename");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("writing to standard output") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

#[test]
fn serve_goes_on_serving_when_its_stderr_reader_goes_away() {
    // With every request logged, the service writes to its stderr after the reader is gone.
    let mut child = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["--store", "mem", "serve", "--listen", "127.0.0.1:0"])
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_TOKEN")
        .env("FSRENAME_LOG", "info")
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fsrename serve");
    let mut stderr = BufReader::new(child.stderr.take().expect("its stderr"));
    let addr = loop {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).expect("read stderr");
        assert!(read > 0, "serve ended before it said where it listens");
        if let Some(rest) = line.split("serving on http://").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .expect("an address")
                .to_owned();
        }
    };
    drop(stderr);
    for _ in 0..3 {
        let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .expect("send");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(term.success());
    let status = child.wait().expect("serve ends");
    // SIGTERM is how a supervisor stops a service: its normal end (issue 70).
    assert_eq!(status.code(), Some(0), "stopped by SIGTERM: {status:?}");
}

/// The output of `fsrename ls -R PATH` on `db`, one path a line.
fn ls_r(db: &std::path::Path, path: &str) -> Vec<String> {
    let out = with_db(db, &["ls", "-R", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn cp_rm_and_consistent_reads() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = work.path().join("tree.db");
    for args in [
        &["mkdir", "-p", "/src/sub"][..],
        &["touch", "/src/sub/f"],
        &["touch", "/src/g"],
        &["mkdir", "/dst"],
    ] {
        let out = with_db(&db, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }

    // A directory needs -r, as with cp; nothing is copied.
    let out = with_db(&db, &["cp", "/src", "/dst/copy"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("`/src` is a directory") && stderr.contains("use -r"),
        "{stderr}"
    );
    assert!(ls_r(&db, "/dst").is_empty());

    let out = with_db(
        &db,
        &[
            "cp",
            "-r",
            "/src",
            "/dst/copy",
            "--json",
            "--progress",
            "none",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = json_of(&out);
    assert_eq!(
        (
            report["kind"].as_str(),
            report["report"]["rewritten"].as_u64()
        ),
        (Some("copy"), Some(4))
    );
    assert_eq!(
        ls_r(&db, "/dst"),
        [
            "/dst/copy/",
            "/dst/copy/g",
            "/dst/copy/sub/",
            "/dst/copy/sub/f"
        ]
    );
    // A file needs no -r.
    let out = with_db(&db, &["cp", "/src/g", "/dst/g2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("copied `/src/g` to `/dst/g2`: 1 document,"),
        "{}",
        text(&out.stdout)
    );
    // The library's checks come through with their own words.
    let out = with_db(&db, &["cp", "-r", "/src", "/src/sub/x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot copy `/src` into itself"),
        "{}",
        text(&out.stderr)
    );
    let out = with_db(&db, &["cp", "-r", "/src", "/dst/copy"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("`/dst/copy` already exists"),
        "{}",
        text(&out.stderr)
    );

    // ls and fsck under a shared lock; not on `/`.
    let out = with_db(&db, &["ls", "-R", "--consistent", "/dst/copy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "/dst/copy/g\n/dst/copy/sub/\n/dst/copy/sub/f\n"
    );
    let out = with_db(&db, &["ls", "--consistent", "/dst/g2"]);
    assert_eq!(text(&out.stdout), "/dst/g2\n", "{}", text(&out.stderr));
    // What can never be had is a usage error, as clap's (issue 47, item 6).
    let out = with_db(&db, &["ls", "-R", "--consistent", "/"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("writers take no lock on the root"),
        "{}",
        text(&out.stderr)
    );
    let out = with_db(&db, &["fsck", "/dst", "--consistent", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let fsck = json_of(&out);
    assert_eq!(fsck["documents"], 6);
    assert_eq!(
        fsck["locks_active"], 0,
        "its own lock is not counted: {fsck}"
    );
    let out = with_db(&db, &["fsck", "--consistent"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("`/` cannot be read consistently"),
        "{}",
        text(&out.stderr)
    );

    // rm: a directory with entries needs -r; the root never goes.
    let out = with_db(&db, &["rm", "/dst/copy"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("`/dst/copy` is a directory with 2 entries; use -r"),
        "{}",
        text(&out.stderr)
    );
    let out = with_db(&db, &["rm", "-r", "/"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("the root `/` cannot be removed"),
        "{}",
        text(&out.stderr)
    );
    let out = with_db(&db, &["rm", "/dst/g2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = with_db(&db, &["rm", "-r", "/dst/copy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("removed `/dst/copy`: 4 documents"),
        "{}",
        text(&out.stdout)
    );
    assert!(ls_r(&db, "/dst").is_empty());
    assert_eq!(ls_r(&db, "/src"), ["/src/g", "/src/sub/", "/src/sub/f"]);
    let out = with_db(&db, &["fsck"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = with_db(&db, &["locks"]);
    assert_eq!(text(&out.stdout).trim(), "no locks");
}

#[test]
fn locks_shows_each_grants_mode_and_the_waiters_in_order() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = work.path().join("tree.db");
    assert_eq!(with_db(&db, &["mkdir", "/clinton"]).status.code(), Some(0));
    // Locks as jobs leave them, written into the database itself: two writers below
    // `/clinton` hold IX there, a rename of `/clinton` and a copy wait their turn, and one
    // waiter's registration has run out (it died).
    let now = fs_locks::LeaseClock::new().now_ms();
    let doc = serde_json::json!({
        "lock_type": "shared", "lock_count": 2, "path": "/clinton", "expires_at": now + 30_000,
        "holders": {
            "p-a": {"mode": "IX", "holder": "mv /clinton/a /x", "acquired_at": now, "expires_at": now + 30_000},
            "p-b": {"mode": "IX", "holder": "mv /clinton/b /y", "acquired_at": now, "expires_at": now + 30_000},
        },
        "waiters": {
            "p-c": {"mode": "X", "since": now - 3_000, "expires_at": now + 2_000, "holder": "mv /clinton /gormley"},
            "p-d": {"mode": "S", "since": now - 1_000, "expires_at": now + 2_000, "holder": "cp -r /clinton /copy"},
            "p-e": {"mode": "X", "since": now - 9_000, "expires_at": now - 5_000, "holder": "rm -r /clinton"},
        },
    });
    let store = fs_store::SqliteStore::open(&db).expect("open the database");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        use fs_store::DocStore;
        store
            .create_index("fs-lock", &fs_model::lock_index_body())
            .await
            .expect("lock index");
        store
            .index("fs-lock", "/clinton", doc, None)
            .await
            .expect("write the lock");
    });
    let out = with_db(&db, &["locks"]);
    let listing = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{listing}");
    for line in [
        "IX shared    mv /clinton/a /x (process p-a)",
        "IX shared    mv /clinton/b /y (process p-b)",
        "waiting 1. X  rm -r /clinton (process p-e)",
        "waiting 2. X  mv /clinton /gormley (process p-c)",
        "waiting 3. S  cp -r /clinton /copy (process p-d)",
    ] {
        assert!(listing.contains(line), "missing `{line}` in:\n{listing}");
    }
    assert!(
        listing.contains("(gone: its registration expired)"),
        "{listing}"
    );
    let json = json_lines(&with_db(&db, &["locks", "--json"])).remove(0);
    assert_eq!(json["mode"], "IX", "{json}");
    assert_eq!(json["grants"].as_array().map(Vec::len), Some(2));
    let waiters = json["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 3);
    assert_eq!(waiters[1]["holder"], "mv /clinton /gormley");
    assert_eq!(waiters[1]["mode"], "X");
    assert!(waiters[1]["waiting_ms"]
        .as_i64()
        .is_some_and(|ms| ms >= 3_000));
    assert_eq!(waiters[0]["expired"], true);
}

/// Starts `mv /src /dst` on `store` (`index`; pages of 5, leased for `lease`) and returns it
/// once it has journaled.
fn mv_until_journaled(store: &std::path::Path, index: &str, lease: &str) -> std::process::Child {
    let mut child = command(
        store,
        &[
            "--index",
            index,
            "--lease",
            lease,
            "mv",
            "/src",
            "/dst",
            "--page-size",
            "5",
            "--progress",
            "json",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn mv");
    let stderr = child.stderr.take().expect("piped stderr");
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if event["event"] == "journaled" {
            break;
        }
    }
    child
}

/// A rename stopped after it journaled, by a holder that is not proven gone (here paused,
/// SIGSTOP: as a process on another machine, or one that may wake up), leaves its locks
/// leased: `recover` says for how long and that `--wait` waits; `recover --wait` waits for
/// the lease, then finishes the rename. One killed on this machine (SIGKILL) is finished at
/// once by `recover` (issue 47, item 3), with a lease of ten minutes.
#[test]
fn recover_says_when_a_leased_job_can_be_finished_and_waits_for_it() {
    let work = tempfile::tempdir().expect("temp dir");
    let top = work.path().join("gen");
    generate(&top, 3, 20);
    let db = work.path().join("tree.db");
    let top_arg = top.to_str().expect("utf-8 temp path");
    let out = with_db(&db, &["index", top_arg, "--as", "/src"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Killed on this machine: nothing to wait for.
    let mut child = mv_until_journaled(&db, "fs", "600s");
    let _ = child.kill();
    let _ = child.wait();
    let started = std::time::Instant::now();
    let at_once = command(&db, &["recover"]).output().expect("recover");
    assert_eq!(at_once.status.code(), Some(0), "{}", text(&at_once.stderr));
    let said = text(&at_once.stdout);
    assert!(said.contains("finished mv /src /dst"), "{said}");
    assert!(
        said.contains("lease(s) early: their holders ran on this machine and run no more"),
        "it says why it did not wait: {said}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(300));
    let fsck = command(&db, &["fsck"]).output().expect("fsck");
    assert_eq!(fsck.status.code(), Some(0), "{}", text(&fsck.stdout));

    // Paused: its process runs, so only its lease ends its locks. (Six seconds: its renewal
    // every two keeps it alive while it works, even on a busy machine.) On Elasticsearch: a
    // process paused inside a write transaction of the embedded store would keep everyone
    // out of the database file, lock or no lock.
    let proxy = fs_testkit::es_proxy().url().to_owned();
    let db = std::path::PathBuf::from(&proxy);
    let index = fs_testkit::unique_name("leased");
    let out = command(&db, &["--index", &index, "index", top_arg, "--as", "/src"])
        .output()
        .expect("index");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let command = |db: &std::path::Path, args: &[&str]| {
        let mut cmd = command(db, &["--index", &index]);
        cmd.args(args);
        cmd
    };
    let mut child = mv_until_journaled(&db, &index, "6s");
    let paused = Command::new("kill")
        .args(["-STOP", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(paused.success());

    let early = command(&db, &["recover"]).output().expect("recover");
    assert_eq!(early.status.code(), Some(0), "{}", text(&early.stderr));
    let said = text(&early.stdout);
    assert!(
        said.contains("mv /src /dst") && said.contains("leased for") && said.contains("--wait"),
        "it says which job, how long, and what to do: {said}"
    );

    let waited = command(&db, &["recover", "--wait"])
        .output()
        .expect("recover --wait");
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited.stderr));
    assert!(
        text(&waited.stderr).contains("waiting"),
        "it says that it waits: {}",
        text(&waited.stderr)
    );
    let finished = text(&waited.stdout);
    assert!(
        finished.contains("finished mv /src /dst") && !finished.contains("running:"),
        "{finished}"
    );
    let fsck = command(&db, &["fsck"]).output().expect("fsck");
    assert_eq!(fsck.status.code(), Some(0), "{}", text(&fsck.stdout));
    let ls = command(&db, &["ls", "/dst"]).output().expect("ls");
    assert_eq!(ls.status.code(), Some(0), "{}", text(&ls.stderr));
    assert_eq!(text(&ls.stdout).lines().count(), 3, "{}", text(&ls.stdout));
    // The paused job, woken, finds its locks gone and writes nothing.
    let _ = Command::new("kill")
        .args(["-CONT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let fsck = command(&db, &["fsck"]).output().expect("fsck");
    assert_eq!(fsck.status.code(), Some(0), "{}", text(&fsck.stdout));
}

/// Runs `fsrename` in `dir` with `args`, no store in the environment.
fn fsrename_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(args)
        .current_dir(dir)
        .env_remove("FSRENAME_STORE")
        .output()
        .expect("run fsrename")
}

/// The names in `dir`, sorted.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Issue 36: `--store 127.0.0.1:1` made a database file of that name; `garbage://x` was
/// taken for a file path.
#[test]
fn a_store_given_as_an_address_or_with_an_unknown_scheme_is_refused_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (store, says) in [
        ("127.0.0.1:1", "write `http://127.0.0.1:1`"),
        ("localhost:9200", "write `http://localhost:9200`"),
        ("garbage://x", "unknown scheme `garbage://`"),
    ] {
        for verb in [&["ls", "/"][..], &["mkdir", "/a"], &["index", "."]] {
            let args = [&["--store", store][..], verb].concat();
            let out = fsrename_in(dir.path(), &args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains(says), "{args:?}: {stderr}");
        }
    }
    assert_eq!(names_in(dir.path()), Vec::<String>::new(), "files created");
}

/// Issue 36: `ls`, `find`, `locks` and `fsck` (and the jobs on a tree that must be there)
/// created `fsrename.db` where none was; only the verbs that make a tree create one.
#[test]
fn verbs_on_a_missing_database_say_there_is_no_tree_and_create_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    for verb in [
        &["ls", "/"][..],
        &["ls", "-R", "--consistent", "/"],
        &["find", "/", "--name", "*.txt"],
        &["locks"],
        &["fsck", "/"],
        &["mv", "/a", "/b"],
        &["cp", "-r", "/a", "/b"],
        &["rm", "-r", "/a"],
        &["recover"],
    ] {
        let out = fsrename_in(dir.path(), verb);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{verb:?}: {stderr}");
        assert!(
            stderr.contains("there is no tree at `file:fsrename.db`: `fsrename.db` does not exist"),
            "{verb:?}: {stderr}"
        );
    }
    assert_eq!(names_in(dir.path()), Vec::<String>::new(), "files created");
    let out = fsrename_in(dir.path(), &["mkdir", "/a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = fsrename_in(dir.path(), &["ls", "/"]);
    assert_eq!(text(&out.stdout), "a/\n", "{}", text(&out.stderr));
}

/// Issue 47, item 2: a mistyped `--index` on Elasticsearch created the tree, lock and journal
/// indices and answered as if an empty tree were there (`ls /` printed nothing, exit 0; then
/// `fsck` found 0 documents, 0 problems). On both stores, every verb that needs a tree says
/// there is none in that index, and creates nothing.
#[test]
fn a_mistyped_index_is_named_and_nothing_is_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("t.db");
    let db = db.to_str().expect("utf-8 temp path").to_owned();
    let proxy = fs_testkit::es_proxy().url().to_owned();
    let real = fs_testkit::unique_name("real");
    let typo = fs_testkit::unique_name("typo");
    for store in [db.as_str(), proxy.as_str()] {
        let made = fsrename(&["--store", store, "--index", &real, "mkdir", "/a"]);
        assert_eq!(made.status.code(), Some(0), "{}", text(&made.stderr));
        for verb in [
            &["ls", "/"][..],
            &["ls", "-R", "--consistent", "/"],
            &["find", "/", "--name", "*.txt"],
            &["locks"],
            &["fsck", "/"],
            &["mv", "/a", "/b"],
            &["cp", "-r", "/a", "/b"],
            &["rm", "-r", "/a"],
            &["recover"],
        ] {
            let mut args = vec!["--store", store, "--index", &typo];
            args.extend_from_slice(verb);
            let out = fsrename(&args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{store} {verb:?}: {stderr}");
            assert!(
                stderr.contains(&format!("there is no tree in index `{typo}`"))
                    && stderr.contains("--index"),
                "{store} {verb:?}: {stderr}"
            );
        }
    }
    // Nothing was created: the server has no index of that name, nor its lock or journal.
    let server: fs_store::SharedStore = std::sync::Arc::new(fs_testkit::raw_osmem_store());
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    for index in [
        typo.clone(),
        format!("{typo}-lock"),
        format!("{typo}-journal"),
    ] {
        let there = runtime
            .block_on(server.indices_exist(&[index.as_str()]))
            .expect("ask the server");
        assert!(!there, "{index} was created");
    }
    // And the right index still answers.
    let out = fsrename(&["--store", &db, "--index", &real, "ls", "/"]);
    assert_eq!(text(&out.stdout), "a/\n", "{}", text(&out.stderr));
}

/// Issue 36: `--lease 0s` was taken, and the job then failed with "lost the lock"; `fsck /nope`
/// reported a clean empty subtree.
#[test]
fn a_lease_too_short_to_renew_and_a_check_of_nothing_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = fsrename_in(dir.path(), &["mkdir", "-p", "/a/b"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for lease in ["0s", "50ms"] {
        let out = fsrename_in(dir.path(), &["mv", "--lease", lease, "/a/b", "/a/c"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{lease}: {stderr}");
        assert!(stderr.contains("give at least 100ms"), "{lease}: {stderr}");
    }
    let out = fsrename_in(dir.path(), &["fsck", "/nope"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "`/nope` is not in the tree (index `fs` of file:fsrename.db): nothing to check"
        ),
        "{stderr}"
    );
    let out = fsrename_in(dir.path(), &["fsck", "/a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        fsrename_in(dir.path(), &["ls", "-R", "/"]).stdout,
        b"/a/\n/a/b/\n",
        "the refused mv changed nothing"
    );
}

/// Issue 36: `--store http://127.0.0.1:1 ls /` was silent for 29 s, then called the refusal
/// "transient". A server that refuses every connection from the first is not there: the
/// command says so after its first-contact deadline (1.5 s). The bound is loose, so that a
/// loaded machine cannot fail it, and far below the 30 s retry deadline it replaces.
#[test]
fn a_server_that_refuses_every_connection_is_named_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    for store in [
        "http://127.0.0.1:1",
        "http://127.0.0.1:1,http://127.0.0.1:2",
    ] {
        for verb in [&["ls", "/"][..], &["mv", "/a", "/b"]] {
            let started = std::time::Instant::now();
            let args = [&["--store", store][..], verb].concat();
            let out = fsrename_in(dir.path(), &args);
            let took = started.elapsed();
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(
                stderr.contains("cannot connect to http://127.0.0.1:1")
                    && stderr.contains("connection refused"),
                "{args:?}: {stderr}"
            );
            assert!(!stderr.contains("transient"), "{args:?}: {stderr}");
            // Written to a pipe: no colour codes.
            assert!(!stderr.contains('\u{1b}'), "{args:?}: {stderr:?}");
            assert!(
                took < std::time::Duration::from_secs(10),
                "{args:?} took {took:?}"
            );
        }
    }
}

/// The locks held now in `index` at `url`, as `fsrename locks` lists their grants.
fn grants_held(url: &str, index: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["--store", url, "--index", index, "locks"])
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_LOG")
        .output()
        .expect("run fsrename locks");
    assert_eq!(out.status.code(), Some(0), "locks: {}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .filter(|l| l.contains("(process ") && !l.trim_start().starts_with("waiting"))
        .map(str::to_owned)
        .collect()
}

/// Issue 36, bug 1: Ctrl-C on a verb that held a lock without a journal (`ls -R
/// --consistent`, `index`) ended the process before the release its dropped guard had started
/// was sent, leaving the lock for its whole lease. Each verb here runs through a proxy that
/// holds every request up to 300 ms, so that it is still at work, holding its lock, when it
/// is interrupted; afterwards no lock is left, or (a job interrupted after its journal entry)
/// the job says that `recover` finishes it, and `recover --wait` does. The interrupted `ls`
/// stops where it is (before, it was let run to its end for up to ten seconds, and a longer
/// one was cut off with its release unsent).
#[test]
fn ctrl_c_gives_back_every_lock_it_holds() {
    use fs_testkit::{start_es_proxy, unique_name, EsProxyOptions, NetFaults};
    let proxy = start_es_proxy(EsProxyOptions::default());
    let url = proxy.url().to_owned();
    let index = unique_name("ctrl-c");
    let work = tempfile::tempdir().expect("temp dir");
    let top = work.path().join("t");
    generate(&top, 20, 50);
    let top = top.to_str().expect("utf-8 temp path").to_owned();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_fsrename"))
            .args(["--store", &url, "--index", &index, "--lease", "5s"])
            .args(args)
            .env_remove("FSRENAME_STORE")
            .env_remove("FSRENAME_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fsrename")
    };
    // Polled straight at osmem, past the proxy's delays, to interrupt as soon as it holds.
    let held_now = || grants_held(fs_testkit::osmem_url(), &index);
    let out = run(&["index", &top, "--as", "/t"])
        .wait_with_output()
        .expect("index");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(&["ls", "-R", "/t"]).wait_with_output().expect("ls");
    let whole_listing = text(&out.stdout).lines().count();
    assert_eq!(whole_listing, 1_020, "{}", text(&out.stderr));
    let slow = NetFaults {
        delay: 1.0,
        max_delay: std::time::Duration::from_millis(300),
        ..NetFaults::none(36)
    };
    for verb in [
        &["ls", "-R", "--consistent", "/t"][..],
        &["index", &top, "--as", "/t"],
        &["mv", "/t/d000", "/t/moved"],
        &["cp", "-r", "/t/d001", "/t/copy"],
    ] {
        proxy.set_faults(slow.clone());
        let child = run(verb);
        let started = std::time::Instant::now();
        while held_now().is_empty() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "{verb:?} took no lock"
            );
        }
        let interrupt = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(interrupt.success());
        let out = child.wait_with_output().expect("fsrename ends");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{verb:?}: {stderr}");
        if verb[0] == "ls" {
            let listed = text(&out.stdout).lines().count();
            assert!(
                listed < whole_listing,
                "the interrupted ls listed all {listed}"
            );
        }
        proxy.set_faults(NetFaults::none(36));
        let held = grants_held(&url, &index);
        if !held.is_empty() {
            // Only a job interrupted after its journal entry keeps its locks, and says so.
            assert!(
                matches!(verb[0], "mv" | "cp") && stderr.contains("fsrename recover"),
                "{verb:?} left {held:?}: {stderr}"
            );
            let out = run(&["recover", "--wait"])
                .wait_with_output()
                .expect("recover");
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            assert_eq!(grants_held(&url, &index), Vec::<String>::new(), "{verb:?}");
        }
    }
    let out = run(&["fsck", "/"]).wait_with_output().expect("fsck");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Issue 36, bug 3: `demo` ignored `--store`, `--index`, `--lease` and `--replicas` (its
/// `--help` lists them, as global options): `--store file:demo.db demo` created no file.
#[test]
fn demo_refuses_the_store_options_it_cannot_honour() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (args, named) in [
        (
            &["--store", "file:demo.db", "demo", "--files", "10"][..],
            "--store",
        ),
        (&["demo", "--index", "x", "--files", "10"], "--index"),
        (
            &["demo", "--lease", "3s", "--replicas", "0"],
            "--lease, --replicas",
        ),
    ] {
        let out = fsrename_in(dir.path(), args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "`demo` runs on an in-memory store of its own, so {named} cannot be given to it"
            )),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(names_in(dir.path()), Vec::<String>::new(), "files created");
}

/// Issue 36, bug 2: indexing again after `fsrename mv` renamed the tree back (the disk is what
/// `index` follows) but said "moved on disk", though nothing moved there. And a summary with
/// nothing skipped said "skipped: 0 (0 symbolic links…)".
#[test]
fn index_after_a_rename_in_the_store_says_what_it_saw() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("src/a")).expect("mkdir");
    std::fs::write(dir.path().join("src/a/f"), "hi").expect("write");
    let ok = |args: &[&str]| {
        let out = fsrename_in(dir.path(), args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    ok(&["index", "src", "--as", "/p"]);
    ok(&["mv", "/p/a", "/p/b"]);
    let summary = ok(&["index", "src", "--as", "/p"]);
    assert!(
        summary.contains("renamed to match the disk: 1 rename (2 documents), ids kept")
            && summary.contains("    store /p/b → disk /p/a (2 documents)"),
        "{summary}"
    );
    assert!(!summary.contains("moved on disk:"), "{summary}");
    assert!(!summary.contains("skipped"), "{summary}");
    assert!(summary.contains("1 file, 2 directories"), "{summary}");
    assert_eq!(ok(&["ls", "-R", "/p"]), "/p/a/\n/p/a/f\n");
}

/// Issue 36, words: the top-level help gives each verb one line; the store and lock options are
/// set apart from a verb's own; `ls` of a missing path says so without calling it a
/// "source"; `find` says how many it shows.
#[test]
fn help_is_short_and_messages_name_what_they_mean() {
    let out = fsrename(&["-h"]);
    let help = text(&out.stdout);
    for line in help
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
    {
        assert!(
            line.chars().count() <= 110,
            "too long for a summary: {line}"
        );
    }
    let out = fsrename(&["find", "-h"]);
    let help = text(&out.stdout);
    let own = help.split("Store options:").next().unwrap_or_default();
    assert!(
        !own.contains("--lease") && !own.contains("--store"),
        "{help}"
    );
    assert!(help.contains("Lock options:"), "{help}");
    assert!(help.contains("1 to 10000"), "{help}");

    let dir = tempfile::tempdir().expect("tempdir");
    for n in 0..3 {
        let out = fsrename_in(dir.path(), &["mkdir", "-p", &format!("/d/x{n}")]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    for args in [&["ls", "/nope"][..], &["ls", "-R", "--consistent", "/nope"]] {
        let out = fsrename_in(dir.path(), args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("ls `/nope`: no such file or directory in the tree")
                && !stderr.contains("source"),
            "{stderr}"
        );
    }
    let out = fsrename_in(dir.path(), &["find", "/d", "--name", "x*", "--limit", "2"]);
    assert!(
        text(&out.stderr)
            .contains("more than 2 found; showing the first 2 (--limit shows up to 10000)"),
        "{}",
        text(&out.stderr)
    );
}

/// Issue 36: a database in a directory this user cannot write said only "attempt to write a
/// readonly database", even for `ls`. As root (CI) the test runs fsrename as `nobody`, for
/// whom the directory is read-only; as anyone else it takes the write permission away.
#[test]
fn a_database_in_a_read_only_directory_is_named_with_the_permission() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = fsrename_in(dir.path(), &["mkdir", "/a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let root = text(&Command::new("id").arg("-u").output().expect("id").stdout).trim() == "0";
    let mode = if root { 0o755 } else { 0o555 };
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).expect("chmod");
    let mut ls = if root {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_fsrename"));
        cmd
    } else {
        Command::new(env!("CARGO_BIN_EXE_fsrename"))
    };
    let out = ls
        .args(["ls", "/"])
        .current_dir(dir.path())
        .env_remove("FSRENAME_STORE")
        .output()
        .expect("run fsrename");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("directory `{}`", dir.path().display()))
            && stderr.contains("not writable by this user"),
        "{stderr}"
    );
}

/// Issue 47, item 6: the words a new user meets. Counts agree with their nouns; a name with a
/// newline is printed escaped, not as two lines; mkdir and touch say what is there and what
/// they accept; mv says, in its help and its error, that TO is the new path and not a
/// directory to move into; success lines quote paths as errors do.
#[test]
fn words_a_new_user_meets() {
    let work = tempfile::tempdir().expect("temp dir");
    let top = work.path().join("top");
    std::fs::create_dir_all(top.join("dir")).expect("mkdir");
    std::fs::write(top.join("one"), b"x").expect("a file");
    std::fs::write(top.join("two"), b"x").expect("a file");
    // A name the store cannot take (a path holds no control character): skipped, and named
    // on one line, its newline escaped.
    std::fs::write(top.join("new\nline"), b"x").expect("a file");
    let db = work.path().join("tree.db");
    let top_arg = top.to_str().expect("utf-8 temp path");

    let out = with_db(&db, &["index", top_arg, "--as", "/t"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(": 2 files, 2 directories,"), "{said}");
    assert!(said.contains("  skipped: 1 entry\n"), "{said}");
    assert!(
        said.lines().any(|l| l.contains(
            "/top/new\\nline`: path `/t/new\\nline` contains the control character U+000A"
        )),
        "{said}"
    );

    // One of the files goes from the disk: "1 document", not "1 documents".
    std::fs::remove_file(top.join("two")).expect("rm");
    let out = with_db(&db, &["index", top_arg, "--as", "/t"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("  1 document no longer on disk: kept (--prune deletes it)"),
        "{said}"
    );
    assert!(said.contains(": 1 file, 2 directories,"), "{said}");

    let out = with_db(&db, &["mkdir", "/t/dir"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "`/t/dir` already exists as a directory (mkdir -p accepts an existing directory)"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = with_db(&db, &["touch", "/t/dir"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("as a directory: touch makes or updates files"),
        "{}",
        text(&out.stderr)
    );
    let out = with_db(&db, &["mkdir", "-p", "/t/new/deeper"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "created directory `/t/new`\ncreated directory `/t/new/deeper`\n"
    );

    // mv into an existing directory: refused, and said how to do it.
    let out = with_db(&db, &["mv", "/t/new", "/t/dir"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("destination `/t/dir` already exists")
            && stderr.contains("`fsrename mv /t/new /t/dir/new`"),
        "{stderr}"
    );
    let help = text(&with_db(&db, &["mv", "--help"]).stdout);
    assert!(help.contains("never a directory to move into"), "{help}");
    let out = with_db(&db, &["mv", "/t/new", "/t/dir/new"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("`/t/new` to `/t/dir/new`"),
        "{}",
        text(&out.stdout)
    );
}
