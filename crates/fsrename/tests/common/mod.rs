//! Helpers shared by the tests that run the binary as a user would: its output, the lines
//! of a running child's stderr as they come, signals.
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

/// Sends `which` (`-INT`, `-KILL`) to `child`.
pub fn signal(child: &Child, which: &str) {
    let status = Command::new("kill")
        .args([which, &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}
