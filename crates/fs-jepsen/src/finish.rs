//! The end of a history: recovery run until nothing is left for it, the tree read, and what
//! must be left behind by nothing checked (fsck clean, no lock, no journal entry, no by-query
//! task, no search context).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli_client::Fsrename;
use crate::history::{Entry, Kind};

/// The root's entry: the store has no document for it, the model has the directory.
pub fn root() -> Entry {
    Entry {
        path: "/".into(),
        id: "(root)".into(),
        kind: Kind::Dir,
    }
}

/// Runs `fsrename` with `args`; (exit code, stdout, stderr).
///
/// # Errors
/// If it cannot be started.
pub async fn run(fsrename: &Fsrename, args: &[&str]) -> Result<(i32, String, String), String> {
    let output = fsrename
        .command()
        .args(args)
        .output()
        .await
        .map_err(|e| format!("fsrename {}: {e}", args.join(" ")))?;
    Ok((
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// Reads the whole tree (`ls -R / --json`), the root added.
///
/// # Errors
/// If `ls` fails or prints what is not an entry.
pub async fn read_tree(fsrename: &Fsrename) -> Result<Vec<Entry>, String> {
    // As fsck in `leftovers`: a cluster just healed may refuse a moment.
    let mut tries = 0;
    let out = loop {
        let (code, out, err) = run(fsrename, &["ls", "-R", "/", "--json"]).await?;
        if code == 0 {
            break out;
        }
        if tries >= 15 {
            return Err(format!("ls -R / exited {code}: {err}"));
        }
        tries += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let mut entries = vec![root()];
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("ls line {line}: {e}"))?;
        match v["type"].as_str() {
            Some("entry") => {}
            Some("ls_report") => continue,
            other => return Err(format!("ls line {line}: type {other:?}")),
        }
        let kind = match v["kind"].as_str() {
            Some("dir") => Kind::Dir,
            Some("file") => Kind::File,
            other => return Err(format!("ls line {line}: kind {other:?}")),
        };
        match (v["path"].as_str(), v["id"].as_str()) {
            (Some(path), Some(id)) => entries.push(Entry {
                path: path.to_owned(),
                id: id.to_owned(),
                kind,
            }),
            _ => return Err(format!("ls line {line}: no path or id")),
        }
    }
    entries.sort();
    Ok(entries)
}

/// Runs `recover --wait` until it has nothing left to do and no lock is left (at most
/// `patience`).
///
/// # Errors
/// If it still fails at the end, with its output.
pub async fn recover(fsrename: &Fsrename, patience: Duration) -> Result<(), String> {
    let until = Instant::now() + patience;
    loop {
        let (code, out, err) = run(fsrename, &["recover", "--wait", "--json"]).await?;
        if code == 0 {
            // Another round only if this one still reported jobs it left.
            let report: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
            let left = ["running", "failed"]
                .iter()
                .any(|k| report[k].as_array().is_some_and(|a| !a.is_empty()));
            // Locks of a client killed before it journaled are only swept once their lease
            // has run out: recovery runs again until fsck sees none.
            if !left && !locks_left(fsrename).await {
                return Ok(());
            }
        }
        if Instant::now() >= until {
            return Err(format!("recover --wait exited {code}: {out}\n{err}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Whether fsck sees locks, active or expired (its report unreadable counts as yes).
async fn locks_left(fsrename: &Fsrename) -> bool {
    let Ok((_, out, _)) = run(fsrename, &["fsck", "--json"]).await else {
        return true;
    };
    let report: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    ["locks_active", "locks_gone", "locks_expired"]
        .iter()
        .any(|field| report[field].as_u64() != Some(0))
}

/// What was left behind that must not be: fsck's problems, locks, open journal entries, and
/// on Elasticsearch (at `es`) by-query tasks and search contexts (waiting up to
/// `contexts_patience` for those of killed clients to expire).
///
/// # Errors
/// If fsck cannot run.
pub async fn leftovers(
    fsrename: &Fsrename,
    es: Option<&str>,
    contexts_patience: Duration,
) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    // A cluster just healed may still refuse a moment (a refresh answered 500, "primary term
    // too old", while a promoted primary settles): fsck is run again then, for up to 30 s,
    // and a failure that lasts is what was found, not the end of the history.
    let mut tries = 0;
    let report: Value = loop {
        let (code, out, err) = run(fsrename, &["fsck", "--json"]).await?;
        match serde_json::from_str(&out) {
            Ok(report) => break report,
            Err(e) if tries >= 15 => {
                found.push(format!("fsck exited {code}: {e}: {out}{err}"));
                return Ok(found);
            }
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    for problem in report["problems"].as_array().into_iter().flatten() {
        found.push(format!("fsck: {problem}"));
    }
    for field in ["locks_active", "locks_gone", "locks_expired"] {
        let n = report[field].as_u64().unwrap_or(u64::MAX);
        if n != 0 {
            found.push(format!("fsck: {field} {n}"));
        }
    }
    for job in report["unfinished"].as_array().into_iter().flatten() {
        found.push(format!("fsck: unfinished job {job}"));
    }
    if !report["unfinished"].is_array() {
        found.push(format!("fsck: no `unfinished` in its report: {report}"));
    }
    let Some(es) = es else { return Ok(found) };
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let get = |path: String| {
        let http = http.clone();
        async move {
            match http.get(path).send().await {
                Ok(answer) => answer.json::<Value>().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            }
        }
    };
    let tasks = get(format!("{es}/_tasks?actions=*byquery&detailed")).await;
    let running: usize = tasks["nodes"]
        .as_object()
        .map(|nodes| {
            nodes
                .values()
                .map(|n| n["tasks"].as_object().map_or(0, |t| t.len()))
                .sum()
        })
        .unwrap_or(0);
    if running != 0 {
        found.push(format!("{running} by-query task(s) running: {tasks}"));
    }
    let until = Instant::now() + contexts_patience;
    loop {
        let stats = get(format!("{es}/_nodes/stats/indices/search")).await;
        let open: u64 = stats["nodes"]
            .as_object()
            .map(|nodes| {
                nodes
                    .values()
                    .map(|n| {
                        n["indices"]["search"]["open_contexts"]
                            .as_u64()
                            .unwrap_or(0)
                    })
                    .sum()
            })
            .unwrap_or(u64::MAX);
        if open == 0 {
            break;
        }
        if Instant::now() >= until {
            found.push(format!(
                "{open} search context(s) open after {contexts_patience:?}"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(found)
}
