//! `serve --tokens FILE` and `--audit FILE` as a process (issue 71): a token file refused at
//! start names its line; SIGHUP reads it again (a revoked token is refused from its next
//! request while its running job finishes; a file refused then leaves the tokens in force) and
//! reopens the audit file; the audit trail holds a line for every request of sixteen clients
//! that changes something or is refused, and after `kill -9` of the service, every job it had
//! accepted or stored; and a job the trail cannot record is refused.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::FsPath;
use fs_store::{Scan, Scope, SharedStore, SqliteStore};
use serde_json::{json, Value};

use common::{signal, text, write_tokens, Token};

const ALL: &[&str] = &["read", "rename", "copy", "delete", "admin"];
const OWN: &[&str] = &["read", "rename", "copy", "delete"];

fn fsrename(db: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .arg("--store")
        .arg(db)
        .args(args)
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_TOKEN")
        .output()
        .expect("run fsrename")
}

/// `serve` on `db` with `--tokens tokens --audit audit`; returns it, its address, and the
/// lines of its stderr as they come.
fn serve(
    db: &Path,
    tokens: &Path,
    audit: &Path,
    extra: &[&str],
) -> (Child, String, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .arg("--store")
        .arg(db)
        .args(["serve", "--listen", "0", "--tokens"])
        .arg(tokens)
        .arg("--audit")
        .arg(audit)
        .args(extra)
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let rx = common::lines_of(&mut child);
    let said = common::wait_for(&rx, "serving on http://");
    let addr = said
        .last()
        .and_then(|l| l.split("serving on http://").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("an address")
        .to_owned();
    (child, format!("http://{addr}"), rx)
}

/// A request as `token`, with `request_id`: its status and JSON answer.
async fn call(
    http: &reqwest::Client,
    base: &str,
    (token, request_id): (&str, &str),
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("{base}{path}");
    let mut request = if method == "POST" {
        http.post(url)
    } else {
        http.get(url)
    };
    request = request
        .bearer_auth(token)
        .header("x-request-id", request_id);
    if let Some(body) = body {
        request = request.json(&body);
    }
    match request.send().await {
        Ok(answer) => {
            let status = answer.status().as_u16();
            (status, answer.json().await.unwrap_or(Value::Null))
        }
        // The service was killed meanwhile.
        Err(_) => (0, Value::Null),
    }
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn a_token_file_refused_at_start_names_its_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("tree.db");
    assert_eq!(fsrename(&db, &["mkdir", "/a"]).status.code(), Some(0));
    let file = dir.path().join("tokens.toml");
    for (body, said) in [
        ("[[token]]\nname = \"a\"\nsha256 = \"abc\"\n", "line 3: token `a`: `sha256` must be 64 hex digits"),
        (
            &*format!(
                "[[token]]\nname = \"a\"\nsha256 = \"{}\"\ngrants = [{{ path = \"a/b\", can = [\"read\"] }}]\n",
                "0".repeat(64)
            ),
            "line 4: token `a`: path `a/b` is not absolute",
        ),
        (
            &*format!(
                "[[token]]\nname = \"a\"\nsha256 = \"{}\"\ngrants = [{{ path = \"/\", can = [\"rename\", \"own\"] }}]\n",
                "0".repeat(64)
            ),
            "line 4: token `a`: unknown capability `own`",
        ),
        ("[[token]\n", "line 1"),
    ] {
        std::fs::write(&file, body).expect("write");
        let out = Command::new(env!("CARGO_BIN_EXE_fsrename"))
            .arg("--store")
            .arg(&db)
            .args(["serve", "--listen", "0", "--tokens"])
            .arg(&file)
            .env_remove("FSRENAME_TOKEN")
            .output()
            .expect("run serve");
        assert_eq!(out.status.code(), Some(1), "{body}: {}", text(&out.stderr));
        let stderr = text(&out.stderr);
        assert!(stderr.contains("token file") && stderr.contains(said), "{body}: {stderr}");
    }
    // And not beside FSRENAME_TOKEN: which would it be?
    write_tokens(&file, &[("a", "s", &[("/", ALL)])]);
    let out = Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .arg("--store")
        .arg(&db)
        .args(["serve", "--listen", "0", "--tokens"])
        .arg(&file)
        .env("FSRENAME_TOKEN", "x")
        .output()
        .expect("run serve");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("give one"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sighup_reads_the_tokens_again_revokes_and_reopens_the_trail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("tree.db");
    for args in [
        &["mkdir", "-p", "/home/alice/a"][..],
        &["mkdir", "-p", "/home/bob"],
    ] {
        assert_eq!(fsrename(&db, args).status.code(), Some(0));
    }
    let (tokens, audit) = (
        dir.path().join("tokens.toml"),
        dir.path().join("audit.jsonl"),
    );
    let alice: Token<'_> = ("alice", "alice-secret", &[("/home/alice", OWN)]);
    let bob: Token<'_> = ("bob", "bob-secret", &[("/home/bob", OWN)]);
    let ops: Token<'_> = ("ops", "ops-secret", &[("/", ALL)]);
    write_tokens(&tokens, &[alice, bob, ops]);
    let (mut service, base, stderr) = serve(&db, &tokens, &audit, &["--wait", "60s"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let http = reqwest::Client::new();
    let get = |token: &str, path: &str| {
        runtime.block_on(call(&http, &base, (token, "r"), "GET", path, None))
    };
    // A lock above alice's tree, taken by this test on the same database: her job waits for it.
    let store: SharedStore = Arc::new(SqliteStore::open(&db).expect("open the database"));
    let locks = fs_locks::LockClient::builder(Arc::clone(&store), "fs-lock")
        .holder("the test")
        .lease(Duration::from_secs(600))
        .build();
    let guard = runtime
        .block_on(locks.lock_tree(&FsPath::parse("/home").expect("path")))
        .expect("lock");
    let (status, accepted) = runtime.block_on(call(
        &http,
        &base,
        ("alice-secret", "r"),
        "POST",
        "/renames",
        Some(json!({"from": "/home/alice/a", "to": "/home/alice/b"})),
    ));
    assert_eq!(status, 202, "{accepted}");
    let job = accepted["id"].as_str().expect("id").to_owned();
    // Revoked: the file without alice, read again on SIGHUP.
    write_tokens(&tokens, &[bob, ops]);
    signal(&service, "-HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    while get("alice-secret", "/jobs").0 != 401 {
        assert!(Instant::now() < deadline, "alice's token still works");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get("bob-secret", "/jobs").0, 200);
    // Her job, accepted before, still runs: it finishes once the lock is gone.
    runtime.block_on(guard.release()).expect("release");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, state) = get("ops-secret", &format!("/jobs/{job}"));
        assert_eq!(status, 200, "{state}");
        if state["state"] == "done" {
            break;
        }
        assert_ne!(state["state"], "failed", "{state}");
        assert!(Instant::now() < deadline, "{state}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A file refused on SIGHUP: the tokens in force stay, and the service says why. The audit
    // file, moved away meanwhile (a rotation), is opened again at its path.
    let rotated = dir.path().join("audit.jsonl.1");
    std::fs::rename(&audit, &rotated).expect("rotate");
    std::fs::write(&tokens, "[[token]]\nname = \"broken\"\nsha256 = \"xyz\"\n").expect("write");
    signal(&service, "-HUP");
    let said = common::wait_for(&stderr, "the token file is refused");
    assert!(said.iter().any(|l| l.contains("line 3")), "{said:#?}");
    assert_eq!(get("ops-secret", "/jobs").0, 200);
    assert_eq!(get("alice-secret", "/jobs").0, 401);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !audit.exists() {
        assert!(
            Instant::now() < deadline,
            "the audit file was not opened again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, _) = runtime.block_on(call(
        &http,
        &base,
        ("bob-secret", "after-rotation"),
        "POST",
        "/deletes",
        Some(json!({"path": "/home/alice"})),
    ));
    assert_eq!(status, 403);
    let new = audit_lines(&audit);
    assert!(
        new.iter().any(|l| l["request_id"] == "after-rotation"),
        "{new:#?}"
    );
    let old = audit_lines(&rotated);
    assert!(
        old.iter()
            .any(|l| l["job"] == job.as_str() && l["token"] == "alice"),
        "{old:#?}"
    );
    signal(&service, "-TERM");
    assert_eq!(service.wait().expect("serve ends").code(), Some(0));
}

/// Sixteen clients, each with its own token and home: renames there (accepted), into another
/// home (403), with a wrong token (401), reads (not audited) and refused reads (403).
#[test]
fn the_trail_holds_every_change_and_refusal_of_sixteen_clients_even_after_kill_9() {
    const CLIENTS: usize = 16;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("tree.db");
    let names: Vec<String> = (0..CLIENTS).map(|c| format!("c{c:02}")).collect();
    for name in &names {
        let out = fsrename(&db, &["mkdir", "-p", &format!("/home/{name}/a")]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let secrets: Vec<String> = names.iter().map(|n| format!("{n}-secret")).collect();
    let homes: Vec<String> = names.iter().map(|n| format!("/home/{n}")).collect();
    let grants: Vec<[(&str, &[&str]); 1]> = homes.iter().map(|h| [(h.as_str(), OWN)]).collect();
    let tokens_list: Vec<Token<'_>> = names
        .iter()
        .zip(&secrets)
        .zip(&grants)
        .map(|((n, s), g)| (n.as_str(), s.as_str(), &g[..]))
        .collect();
    let (tokens, audit) = (
        dir.path().join("tokens.toml"),
        dir.path().join("audit.jsonl"),
    );
    write_tokens(&tokens, &tokens_list);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");

    // Round 1: every request answered; the trail holds exactly those it must.
    let (mut service, base, _stderr) = serve(&db, &tokens, &audit, &[]);
    let expected: BTreeSet<String> = runtime.block_on(async {
        let mut clients = tokio::task::JoinSet::new();
        for c in 0..CLIENTS {
            let (base, me) = (base.clone(), names[c].clone());
            let other = names[(c + 1) % CLIENTS].clone();
            clients.spawn(async move {
                let http = reqwest::Client::new();
                let secret = format!("{me}-secret");
                let mut audited = Vec::new();
                for round in 0..6 {
                    let id = |what: &str| format!("{me}-{round}-{what}");
                    let (from, to) = if round % 2 == 0 { ("a", "b") } else { ("b", "a") };
                    let body = json!({"from": format!("/home/{me}/{from}"), "to": format!("/home/{me}/{to}")});
                    let (status, job) = call(&http, &base, (&secret, &id("mv")), "POST", "/renames", Some(body)).await;
                    assert_eq!(status, 202, "{job}");
                    audited.push(id("mv"));
                    // Waits for it, so that the next rename finds its source.
                    let job = job["id"].as_str().expect("id").to_owned();
                    loop {
                        let (_, state) = call(&http, &base, (&secret, &id("poll")), "GET", &format!("/jobs/{job}"), None).await;
                        if state["state"] == "done" || state["state"] == "failed" {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let into = json!({"from": format!("/home/{me}/x"), "to": format!("/home/{other}/x")});
                    let (status, _) = call(&http, &base, (&secret, &id("into")), "POST", "/renames", Some(into)).await;
                    assert_eq!(status, 403);
                    audited.push(id("into"));
                    let (status, _) = call(&http, &base, (&secret, &id("peek")), "GET", &format!("/tree?path=/home/{other}"), None).await;
                    assert_eq!(status, 403);
                    audited.push(id("peek"));
                }
                // A wrong token, from five of them: more from this one address would spend
                // its budget of guesses, and every client's next request would be refused.
                if c < 5 {
                    let (status, _) = call(&http, &base, ("wrong", &format!("{me}-wrong")), "GET", "/jobs", None).await;
                    assert_eq!(status, 401);
                    audited.push(format!("{me}-wrong"));
                }
                audited
            });
        }
        let mut all = BTreeSet::new();
        while let Some(done) = clients.join_next().await {
            all.extend(done.expect("a client"));
        }
        all
    });
    let lines = audit_lines(&audit);
    let mut by_id: BTreeMap<String, usize> = BTreeMap::new();
    for line in &lines {
        *by_id
            .entry(line["request_id"].as_str().unwrap_or_default().to_owned())
            .or_default() += 1;
    }
    let missing: Vec<&String> = expected
        .iter()
        .filter(|id| !by_id.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "no line for {missing:?}");
    let twice: Vec<(&String, &usize)> = by_id.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "more than one line: {twice:?}");
    let unexpected: Vec<&String> = by_id.keys().filter(|id| !expected.contains(*id)).collect();
    assert!(
        unexpected.is_empty(),
        "lines for requests that neither change nor were refused: {unexpected:?}"
    );
    assert_eq!(lines.len(), CLIENTS * 6 * 3 + 5);
    signal(&service, "-TERM");
    service.wait().expect("serve ends");

    // Round 2: submissions under way when the service is killed. Every job it answered 202,
    // and every job in its jobs index (stored, so another instance could run it), is in the
    // trail.
    let (mut service, base, _stderr) = serve(&db, &tokens, &audit, &[]);
    let accepted: Vec<String> = runtime.block_on(async {
        let mut clients = tokio::task::JoinSet::new();
        for me in &names {
            let (base, me) = (base.clone(), me.clone());
            clients.spawn(async move {
                let http = reqwest::Client::new();
                let secret = format!("{me}-secret");
                let mut accepted = Vec::new();
                for round in 0..200 {
                    let body = json!({"from": format!("/home/{me}/missing{round}"), "to": format!("/home/{me}/z{round}")});
                    let (status, job) = call(&http, &base, (&secret, &format!("{me}-k{round}")), "POST", "/renames", Some(body)).await;
                    match status {
                        202 => accepted.push(job["id"].as_str().expect("id").to_owned()),
                        0 => break,
                        _ => {}
                    }
                }
                accepted
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        signal(&service, "-KILL");
        let mut all = Vec::new();
        while let Some(done) = clients.join_next().await {
            all.extend(done.expect("a client"));
        }
        all
    });
    let _ = service.wait();
    assert!(!accepted.is_empty(), "no job was accepted before the kill");
    let in_trail: BTreeSet<String> = audit_lines(&audit)
        .iter()
        .filter(|l| l["outcome"] == "accepted")
        .filter_map(|l| l["job"].as_str().map(str::to_owned))
        .collect();
    let missing: Vec<&String> = accepted.iter().filter(|j| !in_trail.contains(*j)).collect();
    assert!(
        missing.is_empty(),
        "accepted but not in the trail: {missing:?}"
    );
    let store: SharedStore = Arc::new(SqliteStore::open(&db).expect("open the database"));
    let stored: Vec<Value> = runtime
        .block_on(
            Scan::new(
                Arc::clone(&store),
                fs_model::jobs_index_name("fs"),
                Scope::All,
                1_000,
            )
            .read_all(),
        )
        .expect("the jobs index")
        .into_iter()
        .map(|d| d.source)
        .filter(|s| s["type"] == "job")
        .collect();
    let started = stored.iter().filter(|j| !j["started_at"].is_null()).count();
    let unknown: Vec<&str> = stored
        .iter()
        .filter_map(|j| j["id"].as_str())
        .filter(|id| !in_trail.contains(*id))
        .collect();
    assert!(
        unknown.is_empty(),
        "stored (so runnable) but not in the trail: {unknown:?}"
    );
    eprintln!(
        "{} requests audited in round 1; round 2: {} jobs answered 202, {} stored ({} started) before the kill, all in the trail",
        expected.len(),
        accepted.len(),
        stored.len(),
        started
    );
}

/// A trail that cannot be written (`/dev/full`: every write fails, "no space left"): a job is
/// refused with 503, not run unrecorded, and the tree is as it was.
#[test]
fn a_job_the_trail_cannot_record_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("tree.db");
    assert_eq!(
        fsrename(&db, &["mkdir", "-p", "/home/alice/a"])
            .status
            .code(),
        Some(0)
    );
    let tokens = dir.path().join("tokens.toml");
    write_tokens(
        &tokens,
        &[("alice", "alice-secret", &[("/home/alice", OWN)])],
    );
    let (mut service, base, _stderr) = serve(&db, &tokens, Path::new("/dev/full"), &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let http = reqwest::Client::new();
    let (status, answer) = runtime.block_on(call(
        &http,
        &base,
        ("alice-secret", "r"),
        "POST",
        "/renames",
        Some(json!({"from": "/home/alice/a", "to": "/home/alice/b"})),
    ));
    assert_eq!(status, 503, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("audit trail")),
        "{answer}"
    );
    let (status, jobs) = runtime.block_on(call(
        &http,
        &base,
        ("alice-secret", "r"),
        "GET",
        "/jobs",
        None,
    ));
    assert_eq!(status, 200);
    assert_eq!(jobs["jobs"], json!([]), "{jobs}");
    signal(&service, "-TERM");
    service.wait().expect("serve ends");
    let listed = fsrename(&db, &["ls", "/home/alice"]);
    assert_eq!(text(&listed.stdout).trim(), "a/", "the tree is as it was");
}
