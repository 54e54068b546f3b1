//! Issue 47, item 1: `index --prune` and `index --watch` never delete what they could not
//! read, and say so with a non-zero exit.
//!
//! Before, a user who could not read `tree/secret` (mode 000) ran `index tree --as /t
//! --prune`: the walk listed `tree/secret` among the skipped, the documents under it had no
//! counterpart on disk, and the prune deleted them (ids and all), exit 0.
//!
//! A directory of mode 000 stops nobody when the tests run as root, as CI does: there the
//! indexer runs as the user `nobody` (`setpriv`, from util-linux), which is what the issue
//! describes (a tree indexed by one user, then by another). The binary is copied into the
//! test's directory, which every user may enter, with the store beside it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::*;

/// What the unreadable runs are made as: another user when the tests run as root.
fn effective_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|uid| uid.parse().ok())
        .expect("an effective uid in /proc/self/status")
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A test directory every user may enter, holding a copy of the binary, a tree `tree` (with
/// `secret/g` and `open/h`), and the store's place.
struct Setup {
    work: tempfile::TempDir,
    store: String,
    index: String,
}

impl Setup {
    fn new(store: Store) -> Setup {
        let work = tempfile::tempdir().expect("temp dir");
        chmod(work.path(), 0o777);
        // Copied by `cp`, not by this process: a file this process held open for writing
        // would be inherited by the children the other tests fork meanwhile, and running the
        // copy would fail with ETXTBSY until they exec (CI met it once).
        let copied = Command::new("cp")
            .arg(env!("CARGO_BIN_EXE_fsrename"))
            .arg(work.path().join("fsrename"))
            .status()
            .expect("run cp");
        assert!(copied.success(), "copy the binary: {copied}");
        let tree = work.path().join("tree");
        for dir in ["secret/deep", "open"] {
            std::fs::create_dir_all(tree.join(dir)).expect("mkdir");
        }
        std::fs::write(tree.join("secret/g"), b"g").expect("write");
        std::fs::write(tree.join("secret/deep/k"), b"k").expect("write");
        std::fs::write(tree.join("open/h"), b"h").expect("write");
        let store = match store {
            Store::Embedded => work.path().join("s.db").display().to_string(),
            Store::Http => fs_testkit::es_proxy().url().to_owned(),
        };
        Setup {
            work,
            store,
            index: fs_testkit::unique_name("unreadable"),
        }
    }

    fn tree(&self) -> PathBuf {
        self.work.path().join("tree")
    }

    /// `fsrename` as this test's own user.
    fn me(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.work.path().join("fsrename"));
        cmd.args(["--store", &self.store, "--index", &self.index])
            .args(args)
            .current_dir(self.work.path())
            .env_remove("FSRENAME_STORE")
            .env_remove("FSRENAME_LOG");
        cmd
    }

    /// `fsrename` as a user who cannot read a directory of mode 000: `nobody` when this test
    /// runs as root (who reads everything), else this test's own user.
    fn other(&self, args: &[&str]) -> Command {
        if effective_uid() != 0 {
            return self.me(args);
        }
        // The embedded store's files must be the other user's to write too.
        for entry in std::fs::read_dir(self.work.path()).expect("ls").flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("s.db") {
                chmod(&entry.path(), 0o666);
            }
        }
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(self.work.path().join("fsrename"))
            .args(["--store", &self.store, "--index", &self.index])
            .args(args)
            .current_dir(self.work.path())
            .env_remove("FSRENAME_STORE")
            .env_remove("FSRENAME_LOG");
        cmd
    }

    /// The paths under `/t`, by `ls -R`.
    fn listed(&self) -> Vec<String> {
        let out = run(self.me(&["ls", "-R", "/t"]));
        assert_eq!(out.status.code(), Some(0), "ls: {}", text(&out.stderr));
        text(&out.stdout).lines().map(str::to_owned).collect()
    }

    /// The id of the document at `path`, by `stat --json`.
    fn id_of(&self, path: &str) -> String {
        let out = run(self.me(&["ls", "--json", "-l", path]));
        assert_eq!(
            out.status.code(),
            Some(0),
            "ls {path}: {}",
            text(&out.stderr)
        );
        let stdout = text(&out.stdout);
        let listed = stdout.lines().next().unwrap_or_default();
        let first: serde_json::Value =
            serde_json::from_str(listed).expect("ls --json is JSON Lines");
        first["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id for {path}: {listed}"))
            .to_owned()
    }
}

#[derive(Debug, Clone, Copy)]
enum Store {
    Embedded,
    Http,
}

const EVERYTHING: [&str; 6] = [
    "/t/open/",
    "/t/open/h",
    "/t/secret/",
    "/t/secret/deep/",
    "/t/secret/deep/k",
    "/t/secret/g",
];

fn prune_keeps_what_it_could_not_read(store: Store) {
    let s = Setup::new(store);
    let tree = s.tree();
    let tree_arg = tree.to_str().expect("utf-8 temp path");
    let out = run(s.me(&["index", tree_arg, "--as", "/t"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(s.listed(), EVERYTHING);
    let id = s.id_of("/t/secret/g");

    // A directory the other user may not read.
    chmod(&tree.join("secret"), 0o000);
    let out = run(s.other(&["index", tree_arg, "--as", "/t", "--prune"]));
    chmod(&tree.join("secret"), 0o755);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("could not be read") && stderr.contains("tree/secret`"),
        "{stderr}"
    );
    assert!(
        stdout.contains("UNREADABLE: 1 entry could not be read")
            && stdout.contains("(3 documents), nothing of it was deleted")
            && stdout.contains("0 deleted"),
        "{stdout}"
    );
    assert_eq!(s.listed(), EVERYTHING, "{stdout}");
    assert_eq!(s.id_of("/t/secret/g"), id, "the document kept its id");

    // The top directory itself.
    chmod(&tree, 0o000);
    let out = run(s.other(&["index", tree_arg, "--as", "/t", "--prune"]));
    chmod(&tree, 0o755);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("`: Permission denied"), "{stderr}");
    assert_eq!(s.listed(), EVERYTHING, "{stdout}");

    // What is really gone still goes.
    std::fs::remove_dir_all(tree.join("secret/deep")).expect("rm -r");
    let out = run(s.other(&["index", tree_arg, "--as", "/t", "--prune"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        s.listed(),
        ["/t/open/", "/t/open/h", "/t/secret/", "/t/secret/g"]
    );
}

#[test]
fn prune_keeps_what_it_could_not_read_on_the_embedded_store() {
    prune_keeps_what_it_could_not_read(Store::Embedded);
}

#[test]
fn prune_keeps_what_it_could_not_read_on_elasticsearch() {
    prune_keeps_what_it_could_not_read(Store::Http);
}

fn interrupt(child: &Child) {
    signal(child, "-INT");
}

fn watch_keeps_what_it_could_not_read(store: Store) {
    let s = Setup::new(store);
    let tree = s.tree();
    let tree_arg = tree.to_str().expect("utf-8 temp path");

    // A watcher that cannot read part of the tree from the start refuses to start, naming it,
    // and removes nothing.
    let out = run(s.me(&["index", tree_arg, "--as", "/t"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    chmod(&tree.join("secret"), 0o000);
    let out = run(s.other(&["index", tree_arg, "--as", "/t", "--watch"]));
    chmod(&tree.join("secret"), 0o755);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tree/secret`: cannot watch it: Permission denied"),
        "{stderr}"
    );
    assert_eq!(s.listed(), EVERYTHING);

    // A directory whose mode changes while it is watched: kept, and said.
    let mut watcher = s
        .other(&[
            "index",
            tree_arg,
            "--as",
            "/t",
            "--watch",
            "--debounce",
            "100ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the watcher");
    let rx = lines_of(&mut watcher);
    wait_for(&rx, "watching for changes");
    chmod(&tree.join("secret"), 0o000);
    let mut seen = wait_for(&rx, "could not read");
    // The next batch indexes the directory again (as every directory a batch indexed): still
    // unreadable, it is neither said nor counted again.
    seen.extend(wait_for(&rx, "caught up"));
    chmod(&tree.join("secret"), 0o755);
    assert_eq!(
        seen.iter().filter(|l| l.contains("could not read")).count(),
        1,
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.contains("tree/secret") && l.contains("the store keeps what it holds")),
        "{seen:#?}"
    );
    assert_eq!(s.listed(), EVERYTHING);
    // Readable again, and a change in it is followed.
    std::fs::write(tree.join("secret/new"), b"n").expect("write");
    let mut everything: Vec<&str> = EVERYTHING.to_vec();
    everything.push("/t/secret/new");
    let deadline = Instant::now() + Duration::from_secs(120);
    while s.listed() != everything {
        assert!(Instant::now() < deadline, "{:?}", s.listed());
        std::thread::sleep(Duration::from_millis(100));
    }
    interrupt(&watcher);
    let out = watcher.wait_with_output().expect("the watcher ends");
    let stdout = text(&out.stdout);
    // It could not keep the store in step all along: 1, not 130.
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("1 unreadable"), "{stdout}");
    assert_eq!(s.listed(), everything);
}

#[test]
fn watch_keeps_what_it_could_not_read_on_the_embedded_store() {
    watch_keeps_what_it_could_not_read(Store::Embedded);
}

#[test]
fn watch_keeps_what_it_could_not_read_on_elasticsearch() {
    watch_keeps_what_it_could_not_read(Store::Http);
}
