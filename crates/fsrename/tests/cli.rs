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

#[test]
fn every_verb_has_help() {
    for verb in ["demo", "fsck"] {
        let out = fsrename(&[verb, "--help"]);
        assert_eq!(out.status.code(), Some(0));
        assert!(text(&out.stdout).contains("Usage: fsrename"), "{verb}");
    }
}
