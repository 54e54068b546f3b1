//! `fsrename serve` fuzzed from its own description (`GET /openapi.json`) by schemathesis, as
//! a client would meet it: the built binary, on a database file, on loopback, with a token
//! file of two tokens: one that may do everything, and one granted `/clinton` (every verb)
//! and `/gormley` (read only), so that the fuzzer meets the answers of a scoped caller too
//! (403s, and reads filtered to its grants).
//!
//! Schemathesis (installed by `.ci/run`, pinned) sends what the description allows and what it
//! does not, and checks every answer against it: no 5xx, each status and content type and body
//! as described, invalid input refused (`tests/schemathesis.toml` says which checks are left
//! out and why). Then the service must not have panicked, `fsrename fsck` must pass, and the
//! tree must be what it was but for the jobs the service accepted and reports `done`: each is
//! applied in the order they finished to a model of the tree as it was, and the model must be
//! the tree as it is. A job that failed must have changed nothing.
//!
//! Bounded: a fixed number of examples per operation (`FSRENAME_FUZZ_EXAMPLES`, default 100)
//! and a deadline on each run; the seed is fixed (`FSRENAME_FUZZ_SEED` to change it), so
//! that a failure in CI replays. The scoped token's run has a third of the examples: it
//! goes through the same code as the first, but for the checks of grants.
//!
//! Then the audit file must hold every job the service accepted, with the token that sent
//! it, and every job the scoped token sent must lie within its grants.

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

const BIN: &str = env!("CARGO_BIN_EXE_fsrename");
/// The token that may do everything: `admin` and every other capability on `/`.
const TOKEN: &str = "fuzz-token";
/// The token granted `/clinton` (every verb but `admin`) and `/gormley` (`read`).
const SCOPED: &str = "fuzz-scoped";

/// The token file: the two tokens above, by the SHA-256 of their secrets.
fn token_file(dir: &Path) -> std::path::PathBuf {
    let sha = |secret: &str| -> String {
        Sha256::digest(secret.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let text = format!(
        r#"[[token]]
name = "admin"
sha256 = "{}"
grants = [{{ path = "/", can = ["read", "rename", "copy", "delete", "admin"] }}]

[[token]]
name = "scoped"
sha256 = "{}"
grants = [
  {{ path = "/clinton", can = ["read", "rename", "copy", "delete"] }},
  {{ path = "/gormley", can = ["read"] }},
]
"#,
        sha(TOKEN),
        sha(SCOPED)
    );
    let file = dir.join("tokens.toml");
    std::fs::write(&file, text).expect("write the token file");
    file
}

/// Whether the scoped token may have sent `job`: a rename within `/clinton`, a copy from
/// `/clinton` or `/gormley` into `/clinton`, a delete within `/clinton`.
fn within_scoped_grants(job: &Value) -> bool {
    let text = |key: &str| job[key].as_str().unwrap_or_default().to_owned();
    match job["kind"].as_str() {
        Some("rename") => under(&text("from"), "/clinton") && under(&text("to"), "/clinton"),
        Some("copy") => {
            (under(&text("from"), "/clinton") || under(&text("from"), "/gormley"))
                && under(&text("to"), "/clinton")
        }
        Some("delete") => under(&text("path"), "/clinton"),
        _ => false,
    }
}

/// How long schemathesis may go without a request answered before the test takes it for
/// hung: a guard on progress, not on the run's length, which follows the machine's load. The
/// fuzzer's own computing is most of a run: with two busy processes beside the (niced) test,
/// a run took 21 min, of which the service spent 14 s answering; a limit of 150 s on the
/// whole run failed there.
const STALLED: Duration = Duration::from_secs(300);

/// `fsrename --store STORE ARGS...`, which must succeed; its standard output.
fn fsrename(store: &str, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("FSRENAME_STORE")
        .output()
        .expect("run fsrename");
    assert!(
        out.status.success(),
        "fsrename {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One entry of the model: its kind, and its id where it must have kept it (not a copy's).
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    kind: String,
    id: Option<String>,
}

/// The tree as `fsrename ls -R --json /` lists it: path to entry.
fn listing(store: &str) -> BTreeMap<String, Entry> {
    fsrename(store, &["ls", "-R", "--json", "/"])
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
        .filter(|v| v["type"] == "entry")
        .map(|v| {
            let path = v["path"].as_str().expect("path").to_owned();
            let entry = Entry {
                kind: v["kind"].as_str().expect("kind").to_owned(),
                id: v["id"].as_str().map(str::to_owned),
            };
            (path, entry)
        })
        .collect()
}

/// Whether `path` is `top` or under it.
fn under(path: &str, top: &str) -> bool {
    path == top || path.starts_with(&format!("{top}/"))
}

/// What a job that is `done` did to the tree, applied to `model`.
fn apply(model: &mut BTreeMap<String, Entry>, job: &Value) {
    let text = |key: &str| job[key].as_str().unwrap_or_default().to_owned();
    match job["kind"].as_str() {
        Some("rename") => {
            let (from, to) = (text("from"), text("to"));
            let moved: Vec<(String, Entry)> = model
                .iter()
                .filter(|(p, _)| under(p, &from))
                .map(|(p, e)| (format!("{to}{}", &p[from.len()..]), e.clone()))
                .collect();
            model.retain(|p, _| !under(p, &from));
            model.extend(moved);
        }
        Some("copy") => {
            let (from, to) = (text("from"), text("to"));
            let copied: Vec<(String, Entry)> = model
                .iter()
                .filter(|(p, _)| under(p, &from))
                .map(|(p, e)| {
                    let copy = Entry {
                        kind: e.kind.clone(),
                        id: None,
                    };
                    (format!("{to}{}", &p[from.len()..]), copy)
                })
                .collect();
            model.extend(copied);
        }
        Some("delete") => {
            let path = text("path");
            model.retain(|p, _| !under(p, &path));
        }
        other => panic!("a job of an unknown kind {other:?}: {job}"),
    }
}

/// Whether `actual` is `expected`, where an id the model does not know (a copy's) is any id.
fn same_tree(expected: &BTreeMap<String, Entry>, actual: &BTreeMap<String, Entry>) -> bool {
    expected.len() == actual.len()
        && expected.iter().zip(actual).all(|((pe, ee), (pa, ea))| {
            pe == pa && ee.kind == ea.kind && (ee.id.is_none() || ee.id == ea.id)
        })
}

/// The jobs this instance knows, once none is unfinished. Waits out a 429: the fuzzer's
/// wrong tokens (`POST /session`) spend this address's budget of guesses, and the right token
/// is refused too until it grows back.
fn finished_jobs(base: &str) -> Vec<Value> {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, answer): (u16, Value) = runtime
            .block_on(async {
                let answer = http
                    .get(format!("{base}/jobs?limit=1000000"))
                    .bearer_auth(TOKEN)
                    .send()
                    .await?;
                let status = answer.status().as_u16();
                Ok::<_, reqwest::Error>((status, answer.json().await?))
            })
            .expect("GET /jobs");
        assert!(Instant::now() < deadline, "GET /jobs: {status} {answer}");
        if status == 429 {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        assert_eq!(status, 200, "GET /jobs: {answer}");
        let jobs = answer["jobs"].as_array().cloned().expect("a list of jobs");
        let unfinished = jobs
            .iter()
            .filter(|j| j["state"] != "done" && j["state"] != "failed")
            .count();
        if unfinished == 0 {
            return jobs;
        }
        assert!(
            Instant::now() < deadline,
            "{unfinished} jobs never finished: {jobs:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The schemathesis command: `FSRENAME_SCHEMATHESIS_BIN` (`.ci/run` sets it), else
/// `schemathesis` on the PATH, which must be the version `.ci/run` pins.
fn schemathesis() -> Command {
    let bin = std::env::var("FSRENAME_SCHEMATHESIS_BIN").unwrap_or_else(|_| "schemathesis".into());
    let version = Command::new(&bin).arg("--version").output();
    match version {
        Ok(out) if out.status.success() => {}
        _ => panic!(
            "schemathesis is not installed (`{bin}` does not run): install it as .ci/run does, \
             `python3 -m pip install schemathesis==4.32.5`, or point FSRENAME_SCHEMATHESIS_BIN \
             at it"
        ),
    }
    Command::new(bin)
}

/// Runs `command` (a schemathesis run) to its end, as long as the service goes on answering
/// (`answered` counts its requests): its exit status, and what it printed.
fn fuzz(mut command: Command, answered: impl Fn() -> usize) -> (std::process::ExitStatus, String) {
    let (mut seen, mut progressed) = (answered(), Instant::now());
    let mut fuzzer = command
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run schemathesis");
    let mut out = fuzzer.stdout.take().expect("stdout");
    let mut err = fuzzer.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        let _ = err.read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = fuzzer.try_wait().expect("wait for schemathesis") {
            break status;
        }
        let now_answered = answered();
        if now_answered != seen {
            (seen, progressed) = (now_answered, Instant::now());
        } else if progressed.elapsed() > STALLED {
            let _ = fuzzer.kill();
            let _ = fuzzer.wait();
            panic!("schemathesis sent no request for {STALLED:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, reader.join().expect("schemathesis output"))
}

/// Builds the tree the fuzzer works on: the description's examples name `/clinton/projects`,
/// `/gormley` and `/clinton/notes`, so that some of the fuzzer's jobs find what they name.
fn build_tree(dir: &Path, store: &str) {
    let disk = dir.join("clinton");
    for (file, text) in [
        ("projects/elasticsearch/README.txt", "tree locks"),
        ("projects/elasticsearch/README.asciidoc", "= README"),
        ("projects/notes.txt", "notes"),
        ("notes/a.txt", "a"),
        ("notes/b.txt", "b"),
    ] {
        let path = disk.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let disk = disk.to_str().expect("a UTF-8 temporary path");
    fsrename(store, &["index", disk, "--as", "/clinton"]);
    fsrename(store, &["mkdir", "-p", "/gormley/old"]);
}

#[test]
fn schemathesis_finds_nothing_wrong_and_the_tree_changes_only_by_done_jobs() {
    // Fails at once, saying how to install it, if it is not there.
    drop(schemathesis());
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("file:{}", dir.path().join("fuzz.db").display());
    build_tree(dir.path(), &store);
    let before = listing(&store);
    let tokens = token_file(dir.path());
    let audit = dir.path().join("audit.jsonl");

    let mut service = Command::new(BIN)
        .arg("--store")
        .arg(&store)
        // A short lock wait, so that a job stuck behind another fails soon rather than holding
        // the test; recovery at start only.
        .args(["serve", "--listen", "127.0.0.1:0", "--wait", "2s"])
        .args(["--recover-every", "0s"])
        .arg("--tokens")
        .arg(&tokens)
        .arg("--audit")
        .arg(&audit)
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_TOKEN")
        .env("FSRENAME_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fsrename serve");
    let stderr = service.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (url_tx, url_rx) = mpsc::channel();
    let lines = Arc::clone(&log);
    // Drains standard error to the end, so that the service never blocks on it.
    let drain = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("serving on ").nth(1) {
                let url = rest.split_whitespace().next().unwrap_or("").to_owned();
                let _ = url_tx.send(url);
            }
            lines.lock().expect("log").push(line);
        }
    });
    let base = url_rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the service did not start: {:?}", log.lock().expect("log")));

    let examples = std::env::var("FSRENAME_FUZZ_EXAMPLES").unwrap_or_else(|_| "100".into());
    let seed = std::env::var("FSRENAME_FUZZ_SEED").unwrap_or_else(|_| "37".into());
    let scoped_examples = examples
        .parse::<u32>()
        .map_or_else(|_| examples.clone(), |n| (n / 3).max(1).to_string());
    let run = |token: &str, examples: &str, scope: &[&str]| {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis.toml");
        let mut command = schemathesis();
        command
            .args(["--config-file", config, "run"])
            .arg(format!("{base}/openapi.json"))
            .args(["--header", &format!("Authorization: Bearer {token}")])
            .args(["--max-examples", examples, "--seed", &seed])
            .args(["--request-timeout", "10", "--workers", "1"])
            .args(["--suppress-health-check", "all"])
            .args(scope)
            // Its database of examples (`.hypothesis`) goes to the temporary directory.
            .current_dir(dir.path());
        let started = Instant::now();
        let (status, report) = fuzz(command, || log.lock().map_or(0, |lines| lines.len()));
        let summary: Vec<&str> = report
            .lines()
            .filter(|l| l.contains(" generated, ") || l.starts_with("Seed:"))
            .map(str::trim)
            .collect();
        eprintln!(
            "schemathesis as {token} {scope:?}: {status} in {:.1?}, {examples} examples an \
             operation: {summary:?}",
            started.elapsed()
        );
        assert!(status.success(), "schemathesis found problems:\n{report}");
    };
    // Every route but `POST /session` first. Its wrong tokens count against this address's
    // budget of guesses, and once that is spent every request from here gets 429, the right
    // token's too (docs/service.md): so it goes last, alone, where its 429s are what the
    // description says, and a run that is mostly 429s is no failure (`--warnings off`).
    // The scoped token's run goes first, on the whole tree (the admin's run deletes most of
    // it). It is refused (403) on most of what it sends, and on every request of the admin
    // routes: answers the description gives, but which the warnings would take for untested
    // operations; its checks of every answer stay.
    run(
        SCOPED,
        &scoped_examples,
        &["--exclude-path", "/session", "--warnings", "off"],
    );
    run(TOKEN, &examples, &["--exclude-path", "/session"]);
    run(
        TOKEN,
        &examples,
        &["--include-path", "/session", "--warnings", "off"],
    );

    // The jobs the fuzzer submitted end (done or failed) before the service stops.
    let jobs = finished_jobs(&base);
    let sent = Command::new("kill")
        .args(["-TERM", &service.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(sent.success());
    let stopped = service.wait().expect("wait for the service");
    let _ = drain.join();
    let log = log.lock().expect("log").join("\n");
    // Stopped by SIGTERM, as a supervisor stops it: its normal end, 0.
    assert_eq!(
        stopped.code(),
        Some(0),
        "the service stopped with {stopped}:\n{log}"
    );
    assert!(!log.contains("panicked"), "the service panicked:\n{log}");
    let statuses: Vec<u16> = log
        .lines()
        .filter_map(|l| l.split("status=").nth(1))
        .filter_map(|s| s.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(
        statuses.iter().all(|s| *s < 500),
        "the service answered 5xx:\n{log}"
    );

    // The trail: a line for every job, naming the token that sent it; and what the scoped
    // token sent lies within its grants.
    let trail: BTreeMap<String, Value> = std::fs::read_to_string(&audit)
        .expect("the audit file")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("an audit line is JSON"))
        .filter_map(|l| Some((l["job"].as_str()?.to_owned(), l)))
        .collect();
    let mut scoped_jobs = 0;
    for job in &jobs {
        let id = job["id"].as_str().expect("a job's id");
        let line = trail
            .get(id)
            .unwrap_or_else(|| panic!("job {id} is not in the audit file: {job}"));
        assert_eq!(line["outcome"], "accepted", "{line}");
        assert_eq!(line["token"], job["submitted_by"], "{line} {job}");
        if job["submitted_by"] == "scoped" {
            scoped_jobs += 1;
            assert!(
                within_scoped_grants(job),
                "outside the scoped token's grants: {job}"
            );
        }
    }
    let refused_scoped = std::fs::read_to_string(&audit)
        .expect("the audit file")
        .lines()
        .filter(|l| l.contains(r#""token":"scoped""#) && l.contains(r#""status":403"#))
        .count();

    fsrename(&store, &["fsck"]);
    let mut done: Vec<&Value> = jobs.iter().filter(|j| j["state"] == "done").collect();
    done.sort_by_key(|j| (j["finished_at"].as_i64(), j["started_at"].as_i64()));
    let mut model = before.clone();
    for job in &done {
        apply(&mut model, job);
    }
    let after = listing(&store);
    assert!(
        same_tree(&model, &after),
        "the tree changed otherwise than by the {} done jobs {done:?}:\nexpected {model:#?}\nfound {after:#?}",
        done.len()
    );
    eprintln!(
        "{} requests answered ({} of them 429), {} jobs ({} done, {} of the scoped token), {} \
         requests of the scoped token refused 403, {} entries before, {} after",
        statuses.len(),
        statuses.iter().filter(|s| **s == 429).count(),
        jobs.len(),
        done.len(),
        scoped_jobs,
        refused_scoped,
        before.len(),
        after.len()
    );
}
