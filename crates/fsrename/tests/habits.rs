//! Unix and Rust command-line habits (issue 70): what a user types as they would for any tool
//! works, hints are given only where they work, a failed first run leaves nothing behind,
//! signals end a service as supervisors expect, and the tool describes itself (completions,
//! manual page, version).

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{signal, text};

fn fsrename(store: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("FSRENAME_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("run fsrename")
}

/// A store with `/t/a/` (holding `f.txt`), `/t/b/` and `/t/g.txt`.
fn tree(work: &Path) -> std::path::PathBuf {
    let db = work.join("tree.db");
    for args in [
        &["mkdir", "-p", "/t/a"][..],
        &["mkdir", "/t/b"],
        &["touch", "/t/a/f.txt"],
        &["touch", "/t/g.txt"],
    ] {
        let out = fsrename(&db, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    db
}

#[test]
fn a_directory_may_be_named_with_a_trailing_slash_a_file_may_not() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = tree(work.path());
    // As shells complete a directory, and as `ls -R` prints one.
    let out = fsrename(&db, &["ls", "/t/a/"]);
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "f.txt\n".to_owned())
    );
    let out = fsrename(&db, &["ls", "-R", "/t/"]);
    assert!(
        text(&out.stdout).contains("/t/a/\n"),
        "{}",
        text(&out.stdout)
    );
    for args in [
        &["fsck", "/t/"][..],
        &["find", "/t/a/", "--name", "*.txt"],
        &["mv", "/t/b/", "/t/c/"],
        &["cp", "-r", "/t/c/", "/t/d"],
        &["rm", "-r", "/t/d/"],
        &["mkdir", "-p", "/t/e/"],
    ] {
        let out = fsrename(&db, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // A file's path names no directory, as for Unix's `ls f.txt/`.
    for (args, said) in [
        (&["ls", "/t/g.txt/"][..], "`/t/g.txt/`: not a directory"),
        (&["fsck", "/t/g.txt/"], "`/t/g.txt/`: not a directory"),
        (&["find", "/t/g.txt/"], "`/t/g.txt/`: not a directory"),
        (
            &["mv", "/t/g.txt/", "/t/h.txt"],
            "`/t/g.txt/` is not a directory",
        ),
        (
            &["mv", "/t/g.txt", "/t/h/"],
            "`/t/h/` names a directory, but `/t/g.txt` is a file",
        ),
        (&["rm", "/t/g.txt/"], "`/t/g.txt/` is not a directory"),
        (
            &["touch", "/t/i.txt/"],
            "names a directory, and touch makes files",
        ),
    ] {
        let out = fsrename(&db, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains(said),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = fsrename(&db, &["ls", "/t/g.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn moving_onto_an_existing_path_hints_only_what_works() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = tree(work.path());
    // Onto a file: nothing suggests moving into it, which could not work.
    let out = fsrename(&db, &["mv", "/t/g.txt", "/t/a/f.txt"]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(!said.contains("into"), "{said}");
    assert!(said.contains("nothing existing is ever replaced"), "{said}");
    let out = fsrename(&db, &["cp", "/t/g.txt", "/t/a/f.txt"]);
    assert!(
        !text(&out.stderr).contains("inside"),
        "{}",
        text(&out.stderr)
    );
    // Onto a directory: the hint's command does what it says.
    let out = fsrename(&db, &["mv", "/t/g.txt", "/t/b"]);
    let said = text(&out.stderr);
    let hint = said
        .split('`')
        .find(|part| part.starts_with("fsrename mv "))
        .unwrap_or_else(|| panic!("no command in {said}"));
    assert_eq!(hint, "fsrename mv /t/g.txt /t/b/g.txt");
    let args: Vec<&str> = hint.split(' ').skip(1).collect();
    let out = fsrename(&db, &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = fsrename(&db, &["ls", "/t/b"]);
    assert_eq!(text(&out.stdout), "g.txt\n");
}

#[test]
fn a_first_run_that_fails_before_it_writes_leaves_no_database() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = work.path().join("new.db");
    let missing = work.path().join("missing");
    for (args, said) in [
        (
            &["index", missing.to_str().expect("utf-8"), "--as", "/x"][..],
            "No such file or directory",
        ),
        (&["mkdir", "/a/b"], "`/a` does not exist"),
        (&["touch", "/a/f"], "`/a` does not exist"),
        (&["mkdir", "/"], "the root"),
    ] {
        let out = fsrename(&db, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains(said),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let left: Vec<_> = std::fs::read_dir(work.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert!(left.is_empty(), "{args:?} left {left:?}");
        // So the next verb still says there is no tree, not that it is empty.
        let out = fsrename(&db, &["ls", "/"]);
        assert!(
            text(&out.stderr).contains("there is no tree"),
            "{}",
            text(&out.stderr)
        );
    }
    // What succeeds makes it.
    let out = fsrename(&db, &["mkdir", "/a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(db.exists());
}

#[test]
fn find_by_words_says_when_no_text_is_stored() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = tree(work.path());
    let out = fsrename(&db, &["find", "--text", "hello"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains("no document under `/` stores text"),
        "{}",
        text(&out.stderr)
    );
    // Text stored, no match: nothing to say beyond the empty answer.
    let disk = work.path().join("disk");
    std::fs::create_dir_all(&disk).expect("mkdir");
    std::fs::write(disk.join("n.txt"), "tree locks").expect("write");
    let out = fsrename(
        &db,
        &[
            "index",
            disk.to_str().expect("utf-8"),
            "--as",
            "/n",
            "--content",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = fsrename(&db, &["find", "--text", "hello"]);
    assert_eq!(
        (text(&out.stdout), text(&out.stderr)),
        (String::new(), String::new())
    );
    let out = fsrename(&db, &["find", "/t", "--text", "hello"]);
    assert!(text(&out.stderr).contains("no document under `/t` stores text"));
}

/// Starts `serve` on `store` at `listen`; returns it and the address it says it serves on.
fn serve(store: &Path, listen: &str) -> (std::process::Child, String) {
    let store = store.to_str().expect("utf-8 temp path");
    common::serve(&["--store", store], listen)
}

#[test]
fn serve_listens_on_a_port_alone_and_ends_as_supervisors_expect() {
    let work = tempfile::tempdir().expect("temp dir");
    let db = tree(work.path());
    // A free port, given alone: that port on loopback (it was once read as 0.0.x.y).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let (mut child, addr) = serve(&db, &port.to_string());
    assert_eq!(addr, format!("127.0.0.1:{port}"));
    // A bad strategy is refused with what is accepted, and only that.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (status, body) = runtime.block_on(async {
        let answer = reqwest::Client::new()
            .post(format!("http://{addr}/renames"))
            .json(&serde_json::json!({"from": "/t/a", "to": "/t/z", "strategy": "bogus"}))
            .send()
            .await
            .expect("POST /renames");
        let status = answer.status().as_u16();
        (
            status,
            answer.json::<serde_json::Value>().await.expect("JSON"),
        )
    });
    assert_eq!(
        (status, &body["field"]),
        (400, &serde_json::json!("strategy")),
        "{body}"
    );
    let error = body["error"].as_str().expect("error");
    assert!(
        error.contains("expected tree, global or document"),
        "{error}"
    );
    assert!(
        !error.contains("none"),
        "`none` is not accepted, so not offered: {error}"
    );
    // Ctrl-C: 130, as any command so stopped.
    signal(&child, "-INT");
    assert_eq!(child.wait().expect("serve ends").code(), Some(130));
    // SIGTERM (systemd, docker stop): its normal end, 0.
    let (mut child, _) = serve(&db, "0");
    signal(&child, "-TERM");
    assert_eq!(child.wait().expect("serve ends").code(), Some(0));
}

#[test]
fn a_demo_stopped_says_so_and_nothing_else() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["demo", "--files", "50000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn demo");
    // Stopped once it has begun: its first words are out.
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).expect("the demo's first line");
    signal(&child, "-INT");
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut said)
        .expect("read stderr");
    assert_eq!(child.wait().expect("demo ends").code(), Some(130), "{said}");
    assert!(said.contains("fsrename: demo stopped during run"), "{said}");
    assert_eq!(said.lines().count(), 1, "one line, no log lines: {said}");
}

#[test]
fn completions_manual_and_version_come_from_the_arguments() {
    let work = tempfile::tempdir().expect("temp dir");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_fsrename"))
            .args(args)
            .output()
            .expect("run fsrename");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    for (shell, mark) in [
        ("bash", "complete -F _fsrename"),
        ("zsh", "#compdef fsrename"),
        ("fish", "complete -c fsrename"),
    ] {
        let script = run(&["completions", shell]);
        assert!(script.contains(mark), "{shell}: {script}");
        for verb in ["mv", "recover", "schema", "consistent", "strategy"] {
            assert!(script.contains(verb), "{shell} does not complete {verb}");
        }
    }
    let page = run(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH fsrename 1"),
        "{page}"
    );
    assert!(
        page.contains("Exit status") && page.contains("fsrename\\-mv"),
        "{page}"
    );
    let dir = work.path().join("man1");
    std::fs::create_dir(&dir).expect("mkdir");
    run(&["man", "--dir", dir.to_str().expect("utf-8")]);
    for page in [
        "fsrename.1",
        "fsrename-mv.1",
        "fsrename-fsck.1",
        "fsrename-schema.1",
    ] {
        assert!(dir.join(page).is_file(), "no {page}");
    }
    let fsck = std::fs::read_to_string(dir.join("fsrename-fsck.1")).expect("read");
    assert!(fsck.contains("recover"), "{fsck}");
    // The version names the commit it was built from (or says it is unknown).
    let version = run(&["--version"]);
    assert!(
        version.starts_with(&format!("fsrename {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
}
