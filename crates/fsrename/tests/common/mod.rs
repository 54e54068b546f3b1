//! Helpers shared by the tests that run the binary as a user would: its output, the lines
//! of a running child's stderr as they come, signals, token files.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub fn run(mut cmd: Command) -> Output {
    cmd.output().expect("run fsrename")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Lines of a child's stderr, as they come.
pub fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line of `rx` that contains `what`; returns every line seen until then.
pub fn wait_for(rx: &mpsc::Receiver<String>, what: &str) -> Vec<String> {
    let mut seen = Vec::new();
    // Generous: what is awaited comes in under a second on a quiet machine; the bound only
    // ends a test that would otherwise hang.
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            let found = line.contains(what);
            seen.push(line);
            if found {
                return seen;
            }
        }
    }
    panic!("no line with {what:?} in {seen:#?}");
}

/// Makes the pipe of `stderr` as small as the kernel allows (a page): a child that writes
/// more than that while the test does not read waits, half-way through its work, until the test
/// reads on. A job that reports every page of writes (`--progress json`) is so held after a
/// few dozen pages, on a fast machine as on a slow one.
pub fn small_pipe(stderr: &std::process::ChildStderr) {
    rustix::pipe::fcntl_setpipe_size(stderr, 4096).expect("F_SETPIPE_SZ");
}

/// Waits until the child writing into `pipe` (a [`small_pipe`] the test has stopped reading)
/// waits for the test: the bytes in the pipe are most of its page and stop growing. A child
/// stopped (SIGSTOP) before then may be stopped inside a write transaction of the embedded
/// store, which would keep every other process out of the database file; once it waits on
/// the pipe it is between two pages, holding no transaction.
pub fn wait_until_held_by(pipe: &impl std::os::fd::AsFd) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut last, mut since) = (u64::MAX, Instant::now());
    loop {
        let waiting = rustix::io::ioctl_fionread(pipe).expect("FIONREAD");
        if waiting != last {
            (last, since) = (waiting, Instant::now());
        } else if waiting >= 2048 && since.elapsed() >= Duration::from_millis(300) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the child never filled its pipe: {waiting} bytes in it"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `fsrename GLOBAL... serve --listen LISTEN` (no token); returns it and the address
/// it says it serves on. Its stderr is read on, and dropped, by a thread of its own.
pub fn serve(global: &[&str], listen: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(global)
        .args(["serve", "--listen", listen])
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_TOKEN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
    let addr = lines
        .find_map(|l| {
            l.split("serving on http://")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_owned)
        })
        .expect("serve says where it serves");
    std::thread::spawn(move || lines.for_each(drop));
    (child, addr)
}

/// Sends `which` (`-INT`, `-KILL`) to `child`.
pub fn signal(child: &Child, which: &str) {
    let status = Command::new("kill")
        .args([which, &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// A token of a token file: `(name, secret, grants)`, each grant `(path, capabilities)`.
pub type Token<'a> = (&'a str, &'a str, &'a [(&'a str, &'a [&'a str])]);

/// Writes a token file (`serve --tokens`) of `tokens` at `path`: each by the SHA-256 of its
/// secret, as an operator writes one.
pub fn write_tokens(path: &std::path::Path, tokens: &[Token<'_>]) {
    use sha2::{Digest, Sha256};
    let mut text = String::new();
    for (name, secret, grants) in tokens {
        let hash: String = Sha256::digest(secret.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        text += &format!("[[token]]\nname = \"{name}\"\nsha256 = \"{hash}\"\ngrants = [\n");
        for (path, can) in *grants {
            let can: Vec<String> = can.iter().map(|c| format!("\"{c}\"")).collect();
            text += &format!("  {{ path = \"{path}\", can = [{}] }},\n", can.join(", "));
        }
        text += "]\n\n";
    }
    std::fs::write(path, text).expect("write the token file");
}
