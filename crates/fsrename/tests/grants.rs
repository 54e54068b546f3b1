//! Tokens scoped to subtrees and verbs (issue 71), on the embedded store and through the
//! proxy: every route with its capability granted, not granted, and granted elsewhere; a
//! rename into a subtree not granted refused, changing nothing; and nothing a token may not
//! read ever named in what it is answered (every answer, error, event and page scanned for
//! names planted outside its grants).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs_model::{FsDoc, FsPath};
use fs_rename::FsTree;
use fs_store::SharedStore;
use fs_testkit::Backend;
use fsrename::serve::{AuditTo, ServeConfig, Server};
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// Names planted where alice may not read: none may reach her.
const SECRETS: [&str; 2] = ["secret-plan-7f3a", "q9z-classified"];

/// A token: `(name, secret, grants)`, each grant `(path, capabilities)`.
type Token = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static [&'static str])],
);

/// The tokens.
const TOKENS: [Token; 5] = [
    (
        "alice",
        "alice-secret",
        &[
            ("/home/alice", &["read", "rename", "copy", "delete"]),
            ("/shared", &["read"]),
        ],
    ),
    (
        "bob",
        "bob-secret",
        &[("/home/bob", &["read", "rename", "copy", "delete"])],
    ),
    ("reader", "reader-secret", &[("/shared", &["read"])]),
    (
        "ops",
        "ops-secret",
        &[("/", &["read", "rename", "copy", "delete", "admin"])],
    ),
    ("mover", "mover-secret", &[("/home/alice", &["rename"])]),
];

/// Writes the token file of `tokens` into `dir`.
pub fn token_file(dir: &Path, tokens: &[Token]) -> PathBuf {
    let path = dir.join("tokens.toml");
    common::write_tokens(&path, tokens);
    path
}

struct Service {
    base: String,
    http: reqwest::Client,
    store: SharedStore,
    index: String,
    audit: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    server: Option<Server>,
    _dir: tempfile::TempDir,
}

impl Service {
    async fn start(backend: Backend) -> Service {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = backend.store();
        let index = fs_testkit::unique_name("grants");
        let mut config = ServeConfig::new(index.clone());
        config.listen = "127.0.0.1:0".parse().expect("addr");
        config.tokens = Some(token_file(dir.path(), &TOKENS));
        let audit = dir.path().join("audit.jsonl");
        config.audit = AuditTo::File(audit.clone());
        config.wait = Duration::from_secs(2);
        let (stop, stopped) = oneshot::channel::<()>();
        let server = Server::start(config, Arc::clone(&store), async {
            let _ = stopped.await;
        })
        .await
        .expect("start the service");
        let service = Service {
            base: format!("http://{}", server.addr()),
            http: reqwest::Client::new(),
            store,
            index,
            audit,
            stop: Some(stop),
            server: Some(server),
            _dir: dir,
        };
        service.build().await;
        service
    }

    /// The tree: alice's, bob's (with a planted name), a shared one, and one at the top
    /// nobody but ops may read.
    async fn build(&self) {
        let p = |s: &str| FsPath::parse(s).expect("path");
        let mut docs = Vec::new();
        for dir in [
            "/home",
            "/home/alice",
            "/home/alice/a",
            "/home/bob",
            "/home/bob/secret-plan-7f3a",
            "/shared",
            "/q9z-classified",
        ] {
            docs.push(FsDoc::dir(p(dir), 0));
        }
        for file in [
            "/home/alice/a/f",
            "/home/bob/secret-plan-7f3a/x",
            "/shared/doc",
            "/q9z-classified/y",
        ] {
            docs.push(FsDoc::file(p(file), 1, 0));
        }
        let tree = FsTree::new(Arc::clone(&self.store), self.index.clone());
        tree.insert_all(docs).await.expect("insert");
        tree.refresh().await.expect("refresh");
    }

    fn tree(&self) -> FsTree {
        FsTree::new(Arc::clone(&self.store), self.index.clone())
    }

    async fn paths(&self) -> Vec<String> {
        let tree = self.tree();
        tree.refresh().await.expect("refresh");
        let mut paths = Vec::new();
        fs_rename::list(tree.store(), tree.index(), &FsPath::root(), true, |e| {
            paths.push(e.doc.path.to_string());
            Ok(())
        })
        .await
        .expect("list");
        paths
    }

    /// A request as `token` (none for `None`); its status and body, as text.
    async fn call(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, String) {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "POST" => self.http.post(url),
            _ => self.http.get(url),
        };
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.expect("send");
        let status = answer.status().as_u16();
        (status, answer.text().await.unwrap_or_default())
    }

    async fn json(&self, token: &str, path: &str) -> (u16, Value) {
        let (status, text) = self.call(Some(token), "GET", path, None).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        let (status, text) = self.call(Some(token), "POST", path, Some(body)).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Waits until job `id` is done or failed (as ops, who sees every job).
    async fn finished(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, job) = self.json("ops-secret", &format!("/jobs/{id}")).await;
            assert_eq!(status, 200, "{job}");
            if job["state"] == "done" || job["state"] == "failed" {
                return job;
            }
            assert!(Instant::now() < deadline, "job {id} never finished: {job}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn audit_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
            .collect()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.wait().await.expect("clean shutdown");
        }
    }
}

macro_rules! on_every_backend {
    ($($case:ident),+ $(,)?) => {
        mod embedded {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $case() { super::$case(fs_testkit::Backend::Embedded).await } )+
        }
        mod osmem {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $case() { super::$case(fs_testkit::Backend::Osmem).await } )+
        }
    };
}

on_every_backend!(
    every_job_route_checks_its_capability_before_anything_else,
    reads_show_only_what_the_token_may_read,
    a_token_never_learns_a_name_outside_its_grants,
);

/// `POST /renames`, `/copies`, `/deletes`: granted, not granted, granted elsewhere; refused
/// whatever exists; a refusal changes nothing; every one in the audit trail.
async fn every_job_route_checks_its_capability_before_anything_else(backend: Backend) {
    let s = Service::start(backend).await;
    let before = s.paths().await;
    for (token, route, body, status) in [
        // Not granted at all: reader may only read.
        (
            "reader-secret",
            "/renames",
            json!({"from": "/shared/doc", "to": "/shared/doc2"}),
            403,
        ),
        (
            "reader-secret",
            "/copies",
            json!({"from": "/shared/doc", "to": "/shared/doc3"}),
            403,
        ),
        (
            "reader-secret",
            "/deletes",
            json!({"path": "/shared/doc"}),
            403,
        ),
        // Granted elsewhere: alice's grants are her home and a read of /shared.
        (
            "alice-secret",
            "/renames",
            json!({"from": "/home/bob/secret-plan-7f3a", "to": "/home/alice/z"}),
            403,
        ),
        (
            "alice-secret",
            "/renames",
            json!({"from": "/home/alice/a", "to": "/home/bob/a"}),
            403,
        ),
        (
            "alice-secret",
            "/deletes",
            json!({"path": "/home/bob/secret-plan-7f3a"}),
            403,
        ),
        (
            "bob-secret",
            "/copies",
            json!({"from": "/home/alice/a", "to": "/home/bob/a"}),
            403,
        ),
        // Granted `rename` only: no read, so no copy from there; no delete.
        (
            "mover-secret",
            "/copies",
            json!({"from": "/home/alice/a", "to": "/home/alice/c"}),
            403,
        ),
        (
            "mover-secret",
            "/deletes",
            json!({"path": "/home/alice/a"}),
            403,
        ),
        // Whatever exists: what is not there is refused the same way.
        (
            "alice-secret",
            "/deletes",
            json!({"path": "/home/bob/nothing-here"}),
            403,
        ),
        (
            "alice-secret",
            "/renames",
            json!({"from": "/nothing", "to": "/home/alice/n"}),
            403,
        ),
    ] {
        let (got, answer) = s.post(token, route, body.clone()).await;
        assert_eq!(got, status, "{token} {route} {body}: {answer}");
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("not granted: `")),
            "{answer}"
        );
    }
    assert_eq!(s.paths().await, before, "refusals changed nothing");
    // Granted: the jobs run.
    for (token, route, body) in [
        (
            "alice-secret",
            "/renames",
            json!({"from": "/home/alice/a", "to": "/home/alice/b"}),
        ),
        (
            "alice-secret",
            "/copies",
            json!({"from": "/shared/doc", "to": "/home/alice/doc"}),
        ),
        (
            "mover-secret",
            "/renames",
            json!({"from": "/home/alice/b", "to": "/home/alice/c/"}),
        ),
        (
            "alice-secret",
            "/deletes",
            json!({"path": "/home/alice/doc"}),
        ),
        (
            "ops-secret",
            "/renames",
            json!({"from": "/q9z-classified", "to": "/archive"}),
        ),
    ] {
        let (got, answer) = s.post(token, route, body.clone()).await;
        assert_eq!(got, 202, "{token} {route} {body}: {answer}");
        let job = s.finished(answer["id"].as_str().expect("id")).await;
        assert_eq!(job["state"], "done", "{job}");
        let name = token.trim_end_matches("-secret");
        assert_eq!(job["submitted_by"], name, "{job}");
    }
    // No token, a wrong one: 401.
    let (got, _) = s
        .call(None, "POST", "/deletes", Some(json!({"path": "/shared"})))
        .await;
    assert_eq!(got, 401);
    let (got, _) = s.call(Some("nope"), "GET", "/jobs", None).await;
    assert_eq!(got, 401);
    // The trail: every change and every refusal, by token name, never a secret.
    let lines = s.audit_lines();
    let count = |outcome: &str| {
        lines
            .iter()
            .filter(|l| {
                l["outcome"]
                    .as_str()
                    .is_some_and(|o| o.starts_with(outcome))
            })
            .count()
    };
    assert_eq!(count("refused: not granted"), 11, "{lines:#?}");
    assert_eq!(count("accepted"), 5, "{lines:#?}");
    assert_eq!(count("refused: missing bearer token"), 1, "{lines:#?}");
    assert_eq!(count("refused: wrong bearer token"), 1, "{lines:#?}");
    let text = std::fs::read_to_string(&s.audit).expect("audit");
    for (_, secret, _) in TOKENS {
        assert!(!text.contains(secret), "a secret in the trail: {secret}");
    }
    let accepted = lines
        .iter()
        .find(|l| l["outcome"] == "accepted")
        .expect("one");
    assert_eq!(
        (
            &accepted["token"],
            &accepted["request"],
            &accepted["paths"]["from"]
        ),
        (
            &json!("alice"),
            &json!("POST /renames"),
            &json!("/home/alice/a")
        )
    );
    assert!(
        accepted["job"].is_string()
            && accepted["client"]
                .as_str()
                .is_some_and(|c| c.starts_with("127.0.0.1:"))
    );
    s.stop().await;
}

/// `GET /tree`, `/jobs`, `/jobs/{id}`, `/locks`, `/metrics`, `/healthz`, `/events`: what the
/// token may read, the way down to it, and nothing else.
async fn reads_show_only_what_the_token_may_read(backend: Backend) {
    let s = Service::start(backend).await;
    let names = |page: &Value| -> Vec<String> {
        page["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["doc"]["path"].as_str().expect("path").to_owned())
            .collect()
    };
    // The way down: alice sees /home and /shared from the root, /home/alice under /home.
    let (status, root) = s.json("alice-secret", "/tree?path=/").await;
    assert_eq!(status, 200, "{root}");
    assert_eq!(names(&root), ["/home", "/shared"]);
    let (_, home) = s.json("alice-secret", "/tree?path=/home/").await;
    assert_eq!(names(&home), ["/home/alice"]);
    let (_, deep) = s.json("alice-secret", "/tree?path=/&depth=3").await;
    assert_eq!(
        names(&deep),
        [
            "/home",
            "/home/alice",
            "/home/alice/a",
            "/shared",
            "/shared/doc"
        ]
    );
    let (status, own) = s
        .json("alice-secret", "/tree?path=/home/alice&depth=2")
        .await;
    assert_eq!(
        (status, names(&own)),
        (
            200,
            vec!["/home/alice/a".to_owned(), "/home/alice/a/f".into()]
        )
    );
    // Not granted, or granted elsewhere: 403, whether or not there is anything there.
    for (token, path) in [
        ("alice-secret", "/home/bob"),
        ("alice-secret", "/home/bob/nothing"),
        ("reader-secret", "/home/alice"),
        ("mover-secret", "/home/alice"),
    ] {
        let (status, answer) = s.json(token, &format!("/tree?path={path}")).await;
        assert_eq!(status, 403, "{token} {path}: {answer}");
    }
    // Jobs: one's own; others' with `admin` over them.
    let (_, bobs) = s
        .post(
            "bob-secret",
            "/renames",
            json!({"from": "/home/bob/secret-plan-7f3a", "to": "/home/bob/p"}),
        )
        .await;
    let bobs = bobs["id"].as_str().expect("id").to_owned();
    s.finished(&bobs).await;
    let (_, alices) = s
        .post(
            "alice-secret",
            "/renames",
            json!({"from": "/home/alice/a", "to": "/home/alice/b"}),
        )
        .await;
    let alices = alices["id"].as_str().expect("id").to_owned();
    s.finished(&alices).await;
    let ids = |list: &Value, key: &str| -> Vec<String> {
        list[key]
            .as_array()
            .expect("a list")
            .iter()
            .map(|j| j["id"].as_str().expect("id").to_owned())
            .collect()
    };
    let (_, list) = s.json("alice-secret", "/jobs").await;
    assert_eq!(ids(&list, "jobs"), std::slice::from_ref(&alices));
    let (_, list) = s.json("alice-secret", "/renames").await;
    assert_eq!(ids(&list, "renames"), std::slice::from_ref(&alices));
    let (_, list) = s.json("ops-secret", "/jobs").await;
    assert_eq!(ids(&list, "jobs").len(), 2);
    let (status, _) = s.json("alice-secret", &format!("/jobs/{bobs}")).await;
    assert_eq!(status, 404, "another's job is absent");
    let (status, _) = s.json("alice-secret", &format!("/renames/{alices}")).await;
    assert_eq!(status, 200);
    // Locks: a lock in bob's tree is bob's to see, and ops's; not alice's. First the
    // intention locks the service lent the jobs above are given back (they linger 250 ms
    // after their last job, `fs_locks::DEFAULT_LINGER`), so that only the lock below is left.
    let lingering = Instant::now();
    loop {
        let (_, all) = s.json("ops-secret", "/locks").await;
        if all["locks"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(
            lingering.elapsed() < Duration::from_secs(10),
            "the service's intention locks were never given back: {all}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let locks =
        fs_locks::LockClient::builder(Arc::clone(&s.store), fs_model::lock_index_name(&s.index))
            .holder("rm -r /home/bob/p")
            .lease(Duration::from_secs(600))
            .build();
    let guard = locks
        .lock_tree(&FsPath::parse("/home/bob/p").expect("path"))
        .await
        .expect("lock");
    // Sorted: the listing's order is the store's, which differs between backends.
    let lock_paths = |list: &Value| -> Vec<String> {
        list["locks"]
            .as_array()
            .expect("locks")
            .iter()
            .filter_map(|l| l["path"].as_str().map(str::to_owned))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    };
    let (_, alice_sees) = s.json("alice-secret", "/locks").await;
    assert_eq!(
        lock_paths(&alice_sees),
        Vec::<String>::new(),
        "{alice_sees}"
    );
    let (_, bob_sees) = s.json("bob-secret", "/locks").await;
    assert_eq!(
        lock_paths(&bob_sees),
        ["/home/bob", "/home/bob/p"],
        "{bob_sees}"
    );
    let (_, ops_sees) = s.json("ops-secret", "/locks").await;
    assert_eq!(
        lock_paths(&ops_sees).len(),
        3,
        "/home, /home/bob, /home/bob/p: {ops_sees}"
    );
    // The live feed: what the token may see, as the routes show it.
    let snapshot = |token: &str| {
        let s = &s;
        let token = token.to_owned();
        async move {
            let mut answer = s
                .http
                .get(format!("{}/events", s.base))
                .bearer_auth(token)
                .send()
                .await
                .expect("GET /events");
            let mut text = String::new();
            while !text.contains("\n\n") {
                let chunk = answer.chunk().await.expect("a chunk").expect("more");
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            let data = text
                .lines()
                .find_map(|l| l.strip_prefix("data:"))
                .expect("data");
            serde_json::from_str::<Value>(data.trim()).expect("JSON")
        }
    };
    let alice_feed = snapshot("alice-secret").await;
    assert_eq!(
        lock_paths(&alice_feed),
        Vec::<String>::new(),
        "{alice_feed}"
    );
    assert_eq!(ids(&alice_feed, "jobs"), std::slice::from_ref(&alices));
    let bob_feed = snapshot("bob-secret").await;
    assert_eq!(lock_paths(&bob_feed), ["/home/bob", "/home/bob/p"]);
    guard.release().await.expect("release");
    // The metrics are `admin` on `/`; health, any token.
    let (status, _) = s.call(Some("alice-secret"), "GET", "/metrics", None).await;
    assert_eq!(status, 403);
    let (status, _) = s.call(Some("ops-secret"), "GET", "/metrics", None).await;
    assert_eq!(status, 200);
    let (status, _) = s.call(Some("reader-secret"), "GET", "/healthz", None).await;
    assert_eq!(status, 200);
    // Refused reads are in the trail; granted ones are not.
    let lines = s.audit_lines();
    let reads: Vec<&Value> = lines
        .iter()
        .filter(|l| l["request"].as_str().is_some_and(|r| r.starts_with("GET ")))
        .collect();
    assert_eq!(
        reads.len(),
        5,
        "4 trees and the metrics, refused: {reads:#?}"
    );
    assert!(reads.iter().all(|l| l["status"] == 403), "{reads:#?}");
    s.stop().await;
}

/// Every answer to alice, its errors, her events and her page, scanned for the names planted
/// where she may not read, while other tokens work there, a lock there blocks her job, and her
/// job fails on it.
async fn a_token_never_learns_a_name_outside_its_grants(backend: Backend) {
    let s = Service::start(backend).await;
    let mut said = String::new();
    // Bob works in his tree; ops holds a lock above alice's, labelled with the secret names,
    // so that her job waits for it and fails on it.
    let (_, bobs) = s
        .post(
            "bob-secret",
            "/renames",
            json!({"from": "/home/bob/secret-plan-7f3a", "to": "/home/bob/secret-plan-7f3a-2"}),
        )
        .await;
    let bobs = bobs["id"].as_str().expect("id").to_owned();
    s.finished(&bobs).await;
    let locks =
        fs_locks::LockClient::builder(Arc::clone(&s.store), fs_model::lock_index_name(&s.index))
            .holder("mv /home/bob/secret-plan-7f3a-2 /q9z-classified/z")
            .lease(Duration::from_secs(600))
            .build();
    let guard = locks
        .lock_tree(&FsPath::parse("/home").expect("path"))
        .await
        .expect("lock");
    // Her feed, open while all this happens.
    let mut feed = s
        .http
        .get(format!("{}/events", s.base))
        .bearer_auth("alice-secret")
        .send()
        .await
        .expect("GET /events");
    let (status, answer) = s
        .call(
            Some("alice-secret"),
            "POST",
            "/renames",
            Some(json!({"from": "/home/alice/a", "to": "/home/alice/b"})),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    said += &answer;
    let id = serde_json::from_str::<Value>(&answer).expect("JSON")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    // While it waits: the lock it waits for, named for her without what she may not read.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, text) = s
            .call(Some("alice-secret"), "GET", &format!("/jobs/{id}"), None)
            .await;
        said += &text;
        let job: Value = serde_json::from_str(&text).expect("JSON");
        if job["state"] == "waiting_for_locks" && job["waiting_for"].is_string() {
            assert!(
                job["waiting_for"]
                    .as_str()
                    .is_some_and(|w| w.contains("(outside your grants)")),
                "{job}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never waited: {job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let job = s.finished(&id).await;
    assert_eq!(
        job["state"], "failed",
        "her job gives up after --wait: {job}"
    );
    // Everything she may ask, and what she may not.
    for path in [
        format!("/jobs/{id}"),
        format!("/renames/{id}"),
        format!("/jobs/{bobs}"),
        "/jobs".to_owned(),
        "/renames".to_owned(),
        "/locks".to_owned(),
        "/tree?path=/&depth=9".to_owned(),
        "/tree?path=/home&depth=9".to_owned(),
        "/tree?path=/home/alice&depth=9".to_owned(),
        "/tree?path=/home/bob".to_owned(),
        "/tree?path=/elsewhere".to_owned(),
        "/tree?path=/&after=/home/bob".to_owned(),
        "/metrics".to_owned(),
        "/healthz".to_owned(),
        "/openapi.json".to_owned(),
        "/".to_owned(),
        "/page.js".to_owned(),
    ] {
        let (_, text) = s.call(Some("alice-secret"), "GET", &path, None).await;
        said += &text;
    }
    for (route, body) in [
        (
            "/renames",
            json!({"from": "/home/alice/a", "to": "/home/bob/a"}),
        ),
        (
            "/renames",
            json!({"from": "/home/alice/a", "to": "/home/alice/a/inside"}),
        ),
        (
            "/copies",
            json!({"from": "/home/bob", "to": "/home/alice/bob"}),
        ),
        ("/deletes", json!({"path": "/"})),
        ("/deletes", json!({"path": "/home"})),
    ] {
        let (_, text) = s
            .call(Some("alice-secret"), "POST", route, Some(body))
            .await;
        said += &text;
    }
    // Her feed: what it sent while all this happened.
    let read_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < read_until {
        if let Ok(Ok(Some(chunk))) =
            tokio::time::timeout(Duration::from_millis(300), feed.chunk()).await
        {
            said += &String::from_utf8_lossy(&chunk);
        }
    }
    assert!(
        said.contains("snapshot"),
        "the feed sent its snapshot: {said}"
    );
    guard.release().await.expect("release");
    for secret in SECRETS {
        assert!(
            !said.contains(secret),
            "`{secret}` reached alice:\n{}",
            said.lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    s.stop().await;
}
