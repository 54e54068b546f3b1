//! The JSON contract (issue 70): every verb run with `--json` (done, finding nothing, refused,
//! stopped) prints JSON Lines that `fsrename schema` describes, its report (or an `error`) last;
//! `mv --progress json` events on stderr too; and the service's job resources are the same
//! `job` as `mv --json` prints. On the embedded store and through the Elasticsearch proxy.
//!
//! Every line is validated against the schema made stricter than the published one: no field
//! the schema does not name (`unevaluatedProperties: false` on each line and each plain
//! object it holds), so that a field printed but not described fails here. The published
//! schema leaves that open, as readers must ignore fields a later version adds.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{signal, text};

/// The published schema, made strict, and a validator of any line.
struct Contract {
    validator: jsonschema::Validator,
    /// Every type it names.
    types: BTreeSet<String>,
}

impl Contract {
    fn load() -> Contract {
        let out = Command::new(env!("CARGO_BIN_EXE_fsrename"))
            .arg("schema")
            .output()
            .expect("run fsrename schema");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let mut schema: Value = serde_json::from_slice(&out.stdout).expect("the schema is JSON");
        assert_eq!(schema["version"], 1, "contract version");
        let types: BTreeSet<String> = schema["oneOf"]
            .as_array()
            .expect("oneOf")
            .iter()
            .map(|r| {
                r["$ref"]
                    .as_str()
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                    .expect("a reference to a type")
                    .to_owned()
            })
            .collect();
        strict(&mut schema);
        let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
        Contract { validator, types }
    }

    /// Validates every line of `output` (as a verb printed it), and returns them.
    fn lines(&self, output: &str, what: &str) -> Vec<Value> {
        output
            .lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{what}: not a line of JSON ({e}): {line}"));
                let errors: Vec<String> = self
                    .validator
                    .iter_errors(&value)
                    .map(|e| format!("{e} at {}", e.instance_path()))
                    .collect();
                assert!(
                    errors.is_empty(),
                    "{what}: `{line}` breaks the contract: {errors:#?}"
                );
                value
            })
            .collect()
    }
}

/// Forbids, in each type's schema and in each plain object it refers to, the fields the
/// schema does not name. Not inside `oneOf`/`anyOf` branches, whose fields are evaluated with
/// the object that holds them.
fn strict(schema: &mut Value) {
    let Some(defs) = schema["$defs"].as_object_mut() else {
        return;
    };
    for def in defs.values_mut() {
        let Some(object) = def.as_object_mut() else {
            continue;
        };
        let combined = ["oneOf", "anyOf", "allOf"]
            .iter()
            .any(|k| object.contains_key(*k));
        if object.contains_key("properties") || combined {
            object.insert("unevaluatedProperties".to_owned(), Value::Bool(false));
        }
    }
}

/// What the runs printed: every line's type.
#[derive(Default)]
struct Seen(BTreeSet<String>);

impl Seen {
    fn note(&mut self, lines: &[Value]) {
        for line in lines {
            self.0
                .insert(line["type"].as_str().expect("a type").to_owned());
        }
    }
}

/// The command line on one store.
struct Cli<'a> {
    store: &'a str,
    index: &'a str,
    contract: &'a Contract,
}

impl Cli<'_> {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fsrename"));
        cmd.args([
            "--store", self.store, "--index", self.index, "--lease", "600s",
        ])
        .args(args)
        .env_remove("FSRENAME_STORE")
        .stdin(Stdio::null());
        cmd
    }

    /// Runs `args`, checks the exit code and that the last line is a `last`; returns the
    /// lines.
    fn run(&self, seen: &mut Seen, args: &[&str], code: i32, last: &str) -> Vec<Value> {
        let out = self.command(args).output().expect("run fsrename");
        self.ended(seen, args, &out, code, last)
    }

    /// Waits until a request of `verb` waits its turn for a lock (`locks` lists it).
    fn wait_for_a_waiter(&self, verb: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let out = self.command(&["locks", "--json"]).output().expect("locks");
            let waiting = text(&out.stdout).lines().any(|line| {
                serde_json::from_str::<Value>(line).is_ok_and(|lock| {
                    lock["waiters"].as_array().is_some_and(|waiters| {
                        waiters.iter().any(|w| {
                            w["holder"]
                                .as_str()
                                .is_some_and(|h| h.starts_with(&format!("{verb} ")))
                        })
                    })
                })
            });
            if waiting {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no `{verb}` waits for a lock");
    }

    fn ended(
        &self,
        seen: &mut Seen,
        args: &[&str],
        out: &Output,
        code: i32,
        last: &str,
    ) -> Vec<Value> {
        let what = args.join(" ");
        let lines = self.contract.lines(&text(&out.stdout), &what);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{what}: {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let end = lines.last().unwrap_or_else(|| panic!("{what}: no line"));
        assert_eq!(end["type"], last, "{what}: the last line: {end}");
        for line in &lines[..lines.len() - 1] {
            assert!(
                !line["type"]
                    .as_str()
                    .is_some_and(|t| t.ends_with("_report") || t == "error"),
                "{what}: a report before the last line: {line}"
            );
        }
        if last == "error" {
            assert_eq!(end["exit_code"], code, "{what}: {end}");
        }
        seen.note(&lines);
        lines
    }
}

/// Waits for a line of `rx` that contains `what`; returns the lines until it, it included,
/// each followed by a newline.
fn line_with(rx: &mpsc::Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = String::new();
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(what) {
                return seen;
            }
        }
    }
    panic!("no line with {what:?} in {seen}");
}

/// The lines of a reader, as they come.
fn lines_of(reader: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for `child` and returns what it printed (its stdout all, as lines kept by `rx`).
fn finish(mut child: Child, rx: &mpsc::Receiver<String>) -> (i32, String) {
    let status = child.wait().expect("wait");
    let mut out = String::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        out.push_str(&line);
        out.push('\n');
    }
    (status.code().unwrap_or(-1), out)
}

/// A local directory to index: files with text, a subdirectory, an empty directory.
fn disk(work: &Path) {
    let top = work.join("disk");
    std::fs::create_dir_all(top.join("a/sub")).expect("mkdir");
    std::fs::create_dir_all(top.join("b")).expect("mkdir");
    std::fs::write(top.join("a/x.txt"), "hello tree locks").expect("write");
    std::fs::write(top.join("a/sub/y.md"), "a quick brown fox").expect("write");
    std::fs::create_dir_all(work.join("empty")).expect("mkdir");
    // Enough documents that a rename of `/big` with pages of 2 takes a while.
    for d in 0..4 {
        let dir = work.join(format!("big/d{d}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}")), "x").expect("write");
        }
    }
}

/// Every verb, on the store `store`: what it prints is the contract's. Returns the types seen.
fn every_verb(store: &str, index: &str, contract: &Contract, work: &Path) -> Seen {
    let cli = Cli {
        store,
        index,
        contract,
    };
    let mut seen = Seen::default();
    let seen = &mut seen;
    disk(work);
    let dir = |name: &str| work.join(name).to_str().expect("utf-8").to_owned();
    let (top, empty, big) = (dir("disk"), dir("empty"), dir("big"));

    // index: done, done again with text, nothing to index, refused.
    let r = cli.run(
        seen,
        &["index", &top, "--as", "/t", "--json"],
        0,
        "index_report",
    );
    assert_eq!(r[0]["created"], 6, "{}", r[0]);
    let r = cli.run(
        seen,
        &["index", &top, "--as", "/t", "--content", "--json"],
        0,
        "index_report",
    );
    assert_eq!(r[0]["texts"], 2, "{}", r[0]);
    cli.run(
        seen,
        &["index", &empty, "--as", "/empty", "--json"],
        0,
        "index_report",
    );
    cli.run(
        seen,
        &["index", &big, "--as", "/big", "--json"],
        0,
        "index_report",
    );
    cli.run(
        seen,
        &["index", &dir("missing"), "--as", "/m", "--json"],
        1,
        "error",
    );

    // mkdir, touch: done, nothing to do, refused.
    let r = cli.run(
        seen,
        &["mkdir", "-p", "/t/new/deep", "--json"],
        0,
        "mkdir_report",
    );
    assert_eq!(
        r[0]["created"],
        serde_json::json!(["/t/new", "/t/new/deep"])
    );
    let r = cli.run(
        seen,
        &["mkdir", "-p", "/t/new/", "--json"],
        0,
        "mkdir_report",
    );
    assert_eq!(r[0]["created"], serde_json::json!([]));
    cli.run(seen, &["mkdir", "/t/no/such", "--json"], 1, "error");
    cli.run(seen, &["touch", "/t/new/f", "--json"], 0, "touch_report");
    cli.run(seen, &["touch", "/t/new/g/", "--json"], 1, "error");

    // ls, find, locks, fsck, recover: done and finding nothing, refused.
    let r = cli.run(seen, &["ls", "/t/", "--json"], 0, "ls_report");
    assert_eq!(r.len(), 4, "a, b, new, and the report: {r:?}");
    assert_eq!(r[3]["entries"], 3);
    let r = cli.run(seen, &["ls", "/empty", "--json"], 0, "ls_report");
    assert_eq!((r.len(), &r[0]["entries"]), (1, &serde_json::json!(0)));
    cli.run(
        seen,
        &["ls", "-R", "--consistent", "/t", "--json"],
        0,
        "ls_report",
    );
    cli.run(seen, &["ls", "/t/nope", "--json"], 1, "error");
    cli.run(seen, &["ls", "/t/a//x", "--json"], 2, "error");
    let r = cli.run(
        seen,
        &["find", "/t", "--name", "*.md", "--json"],
        0,
        "find_report",
    );
    assert_eq!(r[0]["path"], "/t/a/sub/y.md");
    let r = cli.run(
        seen,
        &["find", "--text", "brown fox", "--json"],
        0,
        "find_report",
    );
    assert_eq!(
        (r.len(), &r[1]["text_stored"]),
        (2, &serde_json::json!(true))
    );
    let r = cli.run(
        seen,
        &["find", "/big", "--text", "x", "--json"],
        0,
        "find_report",
    );
    assert_eq!(r[0]["text_stored"], false, "indexed without --content");
    cli.run(seen, &["find", "--limit", "0", "--json"], 2, "error");
    let r = cli.run(seen, &["locks", "--json"], 0, "locks_report");
    assert_eq!(r[0]["locks"], 0);
    let r = cli.run(seen, &["fsck", "--json"], 0, "fsck_report");
    assert_eq!(r[0]["verdict"], "clean");
    cli.run(seen, &["fsck", "/nope", "--json"], 1, "error");
    cli.run(seen, &["recover", "--json"], 0, "recover_report");

    // mv, cp, rm: done (with their events on stderr), and refused.
    let args = ["mv", "/t/a", "/t/a2", "--json", "--progress", "json"];
    let out = cli.command(&args).output().expect("mv");
    let r = cli.ended(seen, &args, &out, 0, "job");
    assert_eq!(
        (&r[0]["state"], &r[0]["kind"], &r[0]["report"]["rewritten"]),
        (
            &serde_json::json!("done"),
            &serde_json::json!("rename"),
            &serde_json::json!(4)
        )
    );
    let events = contract.lines(&text(&out.stderr), "mv --progress json");
    assert!(
        events.iter().all(|e| e["type"] == "job_event") && events.len() > 3,
        "{events:?}"
    );
    seen.note(&events);
    cli.run(seen, &["cp", "-r", "/t/a2", "/t/c", "--json"], 0, "job");
    cli.run(seen, &["rm", "-r", "/t/c/", "--json"], 0, "job");
    let r = cli.run(seen, &["mv", "/t/nope", "/t/x", "--json"], 1, "job");
    assert_eq!(r[0]["state"], "failed");
    assert!(r[0]["error"]
        .as_str()
        .is_some_and(|e| e.contains("not found")));
    cli.run(seen, &["rm", "/t/b", "/t/x", "--json"], 2, "error");

    // A rename held half-way (stopped with SIGSTOP after its journal entry): others are
    // refused by its locks, or wait for them and are stopped.
    let mut held = cli
        .command(&[
            "--rewrite",
            "client",
            "mv",
            "/big",
            "/big2",
            "--page-size",
            "2",
            "--in-flight",
            "1",
            "--json",
            "--progress",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mv");
    let held_out = lines_of(held.stdout.take().expect("stdout"));
    // Held after its entry: stopped, and in any case waiting for the test to read its events
    // (read only once it is told to stop), however fast it is.
    let held_err = held.stderr.take().expect("stderr");
    common::small_pipe(&held_err);
    let held_pipe = held_err.as_fd().try_clone_to_owned().expect("dup stderr");
    let mut held_err = BufReader::new(held_err).lines().map_while(Result::ok);
    assert!(
        held_err.by_ref().any(|l| l.contains("\"journaled\"")),
        "the rename journals itself"
    );
    common::wait_until_held_by(&held_pipe);
    signal(&held, "-STOP");
    let r = cli.run(
        seen,
        &["mv", "/big", "/x", "--wait", "0s", "--json"],
        3,
        "job",
    );
    assert_eq!(r[0]["state"], "failed");
    cli.run(
        seen,
        &["ls", "--consistent", "/big", "--wait", "0s", "--json"],
        3,
        "error",
    );
    let r = cli.run(seen, &["locks", "--json"], 0, "locks_report");
    assert!(
        r.len() > 1 && r.iter().rev().skip(1).all(|l| l["type"] == "lock"),
        "{r:?}"
    );
    let r = cli.run(seen, &["fsck", "--json"], 4, "fsck_report");
    assert_eq!(
        (&r[0]["verdict"], &r[0]["unfinished"][0]["state"]),
        (&serde_json::json!("unfinished"), &serde_json::json!("live"))
    );
    let r = cli.run(seen, &["recover", "--json"], 0, "recover_report");
    assert_eq!(
        r[0]["running"].as_array().map(Vec::len),
        Some(1),
        "left alone"
    );
    // Waiting for the locks, stopped.
    for args in [
        &["ls", "-R", "--consistent", "/big", "--json"][..],
        &["mkdir", "/big/d0/new", "--json"][..],
        &["cp", "-r", "/big", "/c", "--json"][..],
    ] {
        let mut child = cli
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let rx = lines_of(child.stdout.take().expect("stdout"));
        // Stopped once it waits, as its registration in the lock's queue shows.
        cli.wait_for_a_waiter(args[0]);
        signal(&child, "-INT");
        let (code, out) = finish(child, &rx);
        let last = if args[0] == "cp" { "job" } else { "error" };
        let lines = cli.contract.lines(&out, &args.join(" "));
        assert_eq!(code, 130, "{args:?}: {out}");
        assert_eq!(
            lines.last().map(|l| &l["type"]),
            Some(&serde_json::json!(last))
        );
        seen.note(&lines);
    }
    // The rename itself, stopped after its first write: the job, failed, last; `recover`
    // finishes it.
    signal(&held, "-CONT");
    signal(&held, "-INT");
    held_err.for_each(drop);
    let (code, out) = finish(held, &held_out);
    let lines = cli.contract.lines(&out, "mv stopped");
    assert_eq!(code, 130, "{out}");
    let job = lines.last().expect("the job");
    assert_eq!(
        (&job["type"], &job["state"]),
        (&serde_json::json!("job"), &serde_json::json!("failed"))
    );
    assert!(
        job["error"]
            .as_str()
            .is_some_and(|e| e.contains("cancelled after moving")),
        "{job}"
    );
    seen.note(&lines);
    let r = cli.run(seen, &["fsck", "--json"], 4, "fsck_report");
    assert_eq!(r[0]["unfinished"][0]["state"], "holder_gone", "{}", r[0]);
    let r = cli.run(seen, &["recover", "--json"], 0, "recover_report");
    assert_eq!(
        r[0]["finished"].as_array().map(Vec::len),
        Some(1),
        "{}",
        r[0]
    );
    cli.run(seen, &["fsck", "--json"], 0, "fsck_report");

    // The watcher: its first run, a batch, caught up, and its totals last; SIGTERM is its
    // normal end (0), SIGINT 130.
    for (stop, code) in [("-TERM", 0), ("-INT", 130)] {
        let mut child = cli
            .command(&["index", &top, "--as", "/w", "--watch", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the watcher");
        let rx = lines_of(child.stdout.take().expect("stdout"));
        let mut out = line_with(&rx, "\"index_report\"");
        std::fs::write(work.join(format!("disk/new{code}.txt")), "new").expect("write");
        out += &line_with(&rx, "\"watch_batch\"");
        signal(&child, stop);
        let (exit, rest) = finish(child, &rx);
        out += &rest;
        let lines = cli.contract.lines(&out, "index --watch");
        assert_eq!(exit, code, "{stop}: {out}");
        assert_eq!(
            lines.last().map(|l| &l["type"]),
            Some(&serde_json::json!("watch_report"))
        );
        seen.note(&lines);
    }
    std::mem::take(seen)
}

/// `serve`'s job resources are the `job` of the contract: a rename submitted, followed to its
/// end, and the list of jobs.
fn service_jobs(store: &str, index: &str, contract: &Contract, seen: &mut Seen) {
    let (mut serve, addr) = common::serve(&["--store", store, "--index", index], "0");
    assert!(
        addr.starts_with("127.0.0.1:"),
        "`--listen 0` is a port on 127.0.0.1: {addr}"
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (job, list) = runtime.block_on(async {
        let http = reqwest::Client::new();
        let accepted: Value = http
            .post(format!("http://{addr}/renames"))
            .json(&serde_json::json!({"from": "/t/a2/", "to": "/t/a3"}))
            .send()
            .await
            .expect("POST /renames")
            .json()
            .await
            .expect("JSON");
        let id = accepted["id"].as_str().expect("an id").to_owned();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let job: Value = http
                .get(format!("http://{addr}/jobs/{id}"))
                .send()
                .await
                .expect("GET /jobs/{id}")
                .json()
                .await
                .expect("JSON");
            if job["state"] == "done" || Instant::now() > deadline {
                let list: Value = http
                    .get(format!("http://{addr}/jobs"))
                    .send()
                    .await
                    .expect("GET /jobs")
                    .json()
                    .await
                    .expect("JSON");
                break (job, list);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    signal(&serve, "-TERM");
    let status = serve.wait().expect("serve ends");
    assert_eq!(status.code(), Some(0), "SIGTERM is a service's normal end");
    assert_eq!(job["state"], "done", "{job}");
    let lines = contract.lines(&job.to_string(), "GET /jobs/{id}");
    seen.note(&lines);
    for listed in list["jobs"].as_array().expect("jobs") {
        contract.lines(&listed.to_string(), "GET /jobs");
    }
}

#[test]
fn every_verb_prints_the_contract_on_the_embedded_store() {
    let contract = Contract::load();
    let work = tempfile::tempdir().expect("temp dir");
    let db = work.path().join("tree.db");
    let store = format!("file:{}", db.display());
    let mut seen = every_verb(&store, "fs", &contract, work.path());
    service_jobs(&store, "fs", &contract, &mut seen);
    // The demo, on a store of its own: its runs and report; stopped, an error.
    let cli = Cli {
        store: &store,
        index: "fs",
        contract: &contract,
    };
    let mut demo = Command::new(env!("CARGO_BIN_EXE_fsrename"));
    demo.args(["demo", "--files", "200", "--json"]);
    let out = demo.output().expect("demo");
    let r = cli.ended(&mut seen, &["demo"], &out, 0, "demo_report");
    assert_eq!(r.len(), 5, "four runs and the report");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["demo", "--files", "20000", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn demo");
    let rx = lines_of(child.stdout.take().expect("stdout"));
    let err = lines_of(child.stderr.take().expect("stderr"));
    // Stopped during its second run, once the first has said it is done.
    let mut out = line_with(&rx, "\"demo_run\"");
    signal(&child, "-INT");
    let (code, rest) = finish(child, &rx);
    out += &rest;
    let lines = contract.lines(&out, "demo stopped");
    assert_eq!(code, 130, "{out}");
    assert_eq!(
        lines.last().map(|l| &l["type"]),
        Some(&serde_json::json!("error"))
    );
    seen.note(&lines);
    let said: Vec<String> = err.try_iter().collect();
    assert!(
        said.iter().any(|l| l.contains("demo stopped during run")),
        "a stopped demo says so: {said:#?}"
    );
    assert!(
        !said.iter().any(|l| l.contains("WARN")),
        "no log line when the demo stops: {said:#?}"
    );
    let missing: Vec<&String> = contract.types.difference(&seen.0).collect();
    assert!(
        missing.is_empty(),
        "types no verb printed here: {missing:?}"
    );
}

/// Every verb but the demo (which runs on a store of its own) on the Elasticsearch at `store`,
/// and the service's jobs: every type of the contract but the demo's is printed.
fn every_verb_on_elasticsearch(store: &str) {
    let contract = Contract::load();
    let work = tempfile::tempdir().expect("temp dir");
    let index = fs_testkit::unique_name("contract");
    let mut seen = every_verb(store, &index, &contract, work.path());
    service_jobs(store, &index, &contract, &mut seen);
    let missing: Vec<&String> = contract
        .types
        .difference(&seen.0)
        .filter(|t| !t.starts_with("demo_"))
        .collect();
    assert!(
        missing.is_empty(),
        "types no verb printed here: {missing:?}"
    );
}

#[test]
fn every_verb_prints_the_contract_through_the_proxy() {
    every_verb_on_elasticsearch(fs_testkit::es_proxy().url());
}

#[test]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL"]
fn real_elasticsearch_every_verb_prints_the_contract() {
    let store = std::env::var(fs_testkit::REAL_ES_VAR).expect("FSRENAME_TEST_ES_URL");
    every_verb_on_elasticsearch(&store);
}
