//! The `fsrename` binary against a secured cluster: a real TLS and authentication front
//! (Debian's nginx, [`SecureFront`]) in front of osmem behind the Elasticsearch-behaviour
//! proxy. The verbs work with the right CA and credentials; every way it can go wrong says
//! what is wrong, within a second or two, with rc 1, and never shows a secret.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fs_testkit::{es_proxy, unique_name, SecureFront};

/// Starts a front before the test's proxy; the index the reader may not touch is `denied`.
fn front(denied: &str) -> SecureFront {
    SecureFront::start(es_proxy().url(), denied)
}

fn fsrename(store: &str, index: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fsrename"));
    cmd.args(["--store", store, "--index", index, "--lease", "5s"])
        .args(args)
        .stdin(Stdio::null());
    // Nothing from the shell that runs the tests may lend credentials or a CA.
    for var in [
        "FSRENAME_STORE",
        "FSRENAME_ES_USER",
        "FSRENAME_ES_PASSWORD",
        "FSRENAME_ES_PASSWORD_FILE",
        "FSRENAME_ES_API_KEY",
        "FSRENAME_ES_API_KEY_FILE",
        "FSRENAME_ES_CA",
        "FSRENAME_ES_CA_FINGERPRINT",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run fsrename")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(what: &str, out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A small tree on disk: `/top/a/f0..f4`, `/top/b/g`.
fn tree(dir: &Path) -> std::path::PathBuf {
    let top = dir.join("top");
    std::fs::create_dir_all(top.join("a")).expect("mkdir");
    std::fs::create_dir_all(top.join("b")).expect("mkdir");
    for i in 0..5 {
        std::fs::write(top.join("a").join(format!("f{i}")), format!("{i}")).expect("write");
    }
    std::fs::write(top.join("b").join("g"), "g").expect("write");
    top
}

/// Runs every verb of a life cycle through the front with `flags` for the CA and
/// credentials.
fn life_cycle(store: &str, flags: &[&str], env: &[(&str, &str)]) {
    let index = unique_name("secured");
    let work = tempfile::tempdir().expect("tempdir");
    let top = tree(work.path());
    let run = |args: &[&str]| {
        let all: Vec<&str> = flags.iter().chain(args).copied().collect();
        fsrename(store, &index, &all, env)
    };
    let top = top.to_str().expect("utf-8");
    ok("index", &run(&["index", top, "--as", "/top"]));
    ok("mv", &run(&["mv", "/top/a", "/top/c"]));
    ok("cp", &run(&["cp", "-r", "/top/c", "/top/d"]));
    ok("rm", &run(&["rm", "-r", "/top/b"]));
    let listed = ok("ls", &run(&["ls", "-R", "/top"]));
    for path in ["/top/c/f0", "/top/d/f4"] {
        assert!(listed.contains(path), "{path} missing: {listed}");
    }
    assert!(!listed.contains("/top/a"), "{listed}");
    assert!(!listed.contains("/top/b"), "{listed}");
    ok("fsck", &run(&["fsck"]));
    ok("recover", &run(&["recover"]));
}

#[test]
fn every_verb_works_through_tls_with_a_password_an_api_key_or_a_fingerprint() {
    let front = front("nothing-denied");
    let ca = front.ca_file();
    let ca = ca.to_str().expect("utf-8");
    let password = front.secret_file("password", SecureFront::PASSWORD);
    let password = password.to_str().expect("utf-8");
    let key = front.secret_file("key", SecureFront::API_KEY);
    let key = key.to_str().expect("utf-8");
    let url = front.url();
    life_cycle(
        &url,
        &[
            "--ca-cert",
            ca,
            "--user",
            SecureFront::USER,
            "--password-file",
            password,
        ],
        &[],
    );
    life_cycle(&url, &["--ca-cert", ca, "--api-key-file", key], &[]);
    // The fingerprint as Elasticsearch 8 prints it, and the settings from the environment.
    life_cycle(
        &url,
        &[],
        &[
            ("FSRENAME_ES_CA_FINGERPRINT", front.ca_fingerprint()),
            ("FSRENAME_ES_USER", SecureFront::USER),
            ("FSRENAME_ES_PASSWORD_FILE", password),
        ],
    );
    // The plain port of the same front, for the record: credentials without TLS.
    life_cycle(&front.plain_url(), &["--api-key-file", key], &[]);
}

#[test]
fn serve_runs_jobs_through_tls_with_an_api_key() {
    let front = front("nothing-denied");
    let index = unique_name("secured-serve");
    let work = tempfile::tempdir().expect("tempdir");
    let top = tree(work.path());
    let ca = front.ca_file();
    let key = front.secret_file("key", SecureFront::API_KEY);
    let flags = [
        "--ca-cert",
        ca.to_str().expect("utf-8"),
        "--api-key-file",
        key.to_str().expect("utf-8"),
    ];
    let indexed = fsrename(
        &front.url(),
        &index,
        &[
            &flags[..],
            &["index", top.to_str().expect("utf-8"), "--as", "/top"],
        ]
        .concat(),
        &[],
    );
    ok("index", &indexed);

    let mut serve = Command::new(env!("CARGO_BIN_EXE_fsrename"));
    serve
        .args(["--store", &front.url(), "--index", &index])
        .args(flags)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_ES_API_KEY")
        .env_remove("FSRENAME_ES_USER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = serve.spawn().expect("start serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("serving on ").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("serve said where it serves");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let outcome = runtime.block_on(async {
        let http = reqwest::Client::new();
        let answer = http
            .post(format!("{base}/renames"))
            .json(&serde_json::json!({"from": "/top/a", "to": "/top/z"}))
            .send()
            .await
            .expect("POST");
        assert_eq!(answer.status().as_u16(), 202);
        let job: serde_json::Value = answer.json().await.expect("json");
        let id = job["id"].as_str().expect("id").to_owned();
        let deadline = Instant::now() + Duration::from_secs(60);
        fs_testkit::rename_ended(&http, &base, &id, deadline).await
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(outcome["state"], "done", "{outcome}");
    let listed = ok(
        "ls",
        &fsrename(
            &front.url(),
            &index,
            &[&flags[..], &["ls", "/top"]].concat(),
            &[],
        ),
    );
    assert!(listed.lines().any(|l| l == "z/"), "{listed}");
}

/// Runs `ls /` with `args` and returns its standard error, after checking that it failed
/// with rc 1 soon and showed none of `secrets`.
fn refused(store: &str, index: &str, args: &[&str], secrets: &[&str]) -> String {
    let started = Instant::now();
    let all: Vec<&str> = args.iter().copied().chain(["ls", "/"]).collect();
    let out = fsrename(store, index, &all, &[]);
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    // "Within a second or two"; the bound is loose, so that a loaded machine cannot fail it.
    assert!(took < Duration::from_secs(10), "took {took:?}: {stderr}");
    for secret in secrets {
        assert!(
            !stderr.contains(secret) && !stdout.contains(secret),
            "shows `{secret}`: {stderr}"
        );
    }
    stderr
}

#[test]
fn a_certificate_that_cannot_be_trusted_says_why() {
    let front = front("nothing-denied");
    let key = front.secret_file("key", SecureFront::API_KEY);
    let key = key.to_str().expect("utf-8");
    let ca = front.ca_file();
    let ca = ca.to_str().expect("utf-8");
    let other = front.other_ca_file();
    let other = other.to_str().expect("utf-8");
    let index = unique_name("secured");

    let e = refused(&front.url(), &index, &["--api-key-file", key], &[]);
    assert!(
        e.contains(&format!(
            "the certificate of {} is not signed by any CA this machine trusts",
            front.url()
        )) && e.contains("--ca-cert"),
        "{e}"
    );
    let e = refused(
        &front.url(),
        &index,
        &["--ca-cert", other, "--api-key-file", key],
        &[],
    );
    assert!(
        e.contains(&format!("is not signed by the CA in `{other}`")),
        "{e}"
    );
    let e = refused(
        &front.wrong_name_url(),
        &index,
        &["--ca-cert", ca, "--api-key-file", key],
        &[],
    );
    assert!(
        e.contains("is not for `127.0.0.1`: it names elsewhere.invalid"),
        "{e}"
    );
    let e = refused(
        &front.expired_url(),
        &index,
        &["--ca-cert", ca, "--api-key-file", key],
        &[],
    );
    assert!(e.contains("expired on 2021-01-01"), "{e}");
    let wrong = "AB:".repeat(31) + "AB";
    let e = refused(
        &front.url(),
        &index,
        &["--ca-fingerprint", &wrong, "--api-key-file", key],
        &[],
    );
    assert!(
        e.contains("no certificate") && e.contains(&"ab".repeat(32)),
        "{e}"
    );
}

#[test]
fn tls_to_a_plain_port_and_plain_http_to_a_tls_port_say_which_to_use() {
    let front = front("nothing-denied");
    let key = front.secret_file("key", SecureFront::API_KEY);
    let key = key.to_str().expect("utf-8");
    let index = unique_name("secured");
    let plain_port = front
        .plain_url()
        .rsplit(':')
        .next()
        .unwrap_or("")
        .to_owned();
    let e = refused(
        &format!("https://127.0.0.1:{plain_port}"),
        &index,
        &["--api-key-file", key],
        &[],
    );
    assert!(
        e.contains("does not answer in TLS") && e.contains("http://"),
        "{e}"
    );
    let e = refused(
        &format!("http://127.0.0.1:{}", front.tls_port()),
        &index,
        &["--api-key-file", key],
        &[],
    );
    assert!(
        e.contains(&format!(
            "speaks TLS on that port: use https://127.0.0.1:{}",
            front.tls_port()
        )),
        "{e}"
    );
}

#[test]
fn refused_credentials_are_named_without_their_secret() {
    let front = front("nothing-denied");
    let ca = front.ca_file();
    let ca = ca.to_str().expect("utf-8");
    let index = unique_name("secured");
    let url = front.url();

    let wrong = front.secret_file("wrong", "not-the-password");
    let e = refused(
        &url,
        &index,
        &[
            "--ca-cert",
            ca,
            "--user",
            SecureFront::USER,
            "--password-file",
            wrong.to_str().expect("utf-8"),
        ],
        &["not-the-password"],
    );
    assert!(
        e.contains(&format!(
            "{url} refused user `{}` with a password (HTTP 401)",
            SecureFront::USER
        )),
        "{e}"
    );
    for (key, id) in [
        (SecureFront::REVOKED_API_KEY, "revoked-key-id"),
        ("made-up-id:made-up-secret", "made-up-id"),
    ] {
        let file = front.secret_file("bad-key", key);
        let secret = key.split(':').nth(1).unwrap_or(key);
        let e = refused(
            &url,
            &index,
            &[
                "--ca-cert",
                ca,
                "--api-key-file",
                file.to_str().expect("utf-8"),
            ],
            &[secret],
        );
        assert!(
            e.contains(&format!("refused the API key with id `{id}` (HTTP 401)")),
            "{e}"
        );
    }
    let e = refused(&url, &index, &["--ca-cert", ca], &[]);
    assert!(
        e.contains("asks for credentials and none were given"),
        "{e}"
    );
}

#[test]
fn a_missing_privilege_names_the_index_and_the_action() {
    let index = unique_name("secured-denied");
    let front = front(&index);
    let ca = front.ca_file();
    let password = front.secret_file("reader", SecureFront::READER_PASSWORD);
    // The tree exists (made by the user who may), so that the reader gets past looking for
    // it: a HEAD request's refusal has no body to name the action by.
    let admin = front.secret_file("password", SecureFront::PASSWORD);
    let made = fsrename(
        &front.url(),
        &index,
        &[
            "--ca-cert",
            ca.to_str().expect("utf-8"),
            "--user",
            SecureFront::USER,
            "--password-file",
            admin.to_str().expect("utf-8"),
            "mkdir",
            "/a",
        ],
        &[],
    );
    assert_eq!(made.status.code(), Some(0), "{}", text(&made.stderr));
    let e = refused(
        &front.url(),
        &index,
        &[
            "--ca-cert",
            ca.to_str().expect("utf-8"),
            "--user",
            SecureFront::READER,
            "--password-file",
            password.to_str().expect("utf-8"),
        ],
        &[SecureFront::READER_PASSWORD],
    );
    assert!(
        e.contains("user `reader` may not `indices:") && e.contains(&format!("on index `{index}`")),
        "{e}"
    );
}

#[test]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL=http://127.0.0.1:9200"]
fn real_elasticsearch_behind_the_front_runs_every_verb() {
    let upstream = std::env::var(fs_testkit::REAL_ES_VAR)
        .unwrap_or_else(|_| panic!("{} is not set", fs_testkit::REAL_ES_VAR));
    let front = SecureFront::start(&upstream, "nothing-denied");
    let key = front.secret_file("key", SecureFront::API_KEY);
    let key = key.to_str().expect("utf-8");
    life_cycle(
        &front.url(),
        &["--api-key-file", key, "--replicas", "0"],
        &[("FSRENAME_ES_CA_FINGERPRINT", front.ca_fingerprint())],
    );
    let e = refused(
        &front.expired_url(),
        &unique_name("secured"),
        &[
            "--api-key-file",
            key,
            "--ca-fingerprint",
            front.ca_fingerprint(),
        ],
        &[],
    );
    assert!(e.contains("expired on 2021-01-01"), "{e}");
}
