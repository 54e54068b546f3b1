//! What a one-file `fsrename mv` costs over HTTP: the requests it sends, counted at the
//! Elasticsearch-behaviour proxy in front of osmem, from the process's start to its end,
//! journal included.

use std::process::{Command, Output};

use fs_testkit::{start_es_proxy, EsProxy, EsProxyOptions};

/// The most requests a one-file rename may send (issue 16): about what the book's own
/// sequence costs for a file at depth 4, with a journal entry added.
const MOST_REQUESTS: usize = 8;

fn fsrename(url: &str, index: &str, args: &[&str]) -> Output {
    fsrename_with(url, index, "auto", args)
}

fn fsrename_with(url: &str, index: &str, lock_protocol: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["--store", url, "--index", index])
        .args(["--lock-protocol", lock_protocol])
        .args(args)
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_LOG")
        .output()
        .expect("run fsrename")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Builds `/d1/d2/…/file.txt` at `depth` (the file's depth: `/file.txt` is 1) in a fresh index
/// through the CLI, and returns the file's path.
fn tree_of_depth(url: &str, index: &str, depth: usize) -> String {
    let dir: String = (1..depth).map(|level| format!("/d{level}")).collect();
    if !dir.is_empty() {
        let out = fsrename(url, index, &["mkdir", "-p", &dir]);
        assert_eq!(out.status.code(), Some(0), "mkdir: {}", text(&out.stderr));
    }
    let file = format!("{dir}/file.txt");
    let out = fsrename(url, index, &["touch", &file]);
    assert_eq!(out.status.code(), Some(0), "touch: {}", text(&out.stderr));
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_file_mv_sends_at_most_eight_requests_at_any_depth() {
    one_file_mvs_send_at_most_eight_requests(EsProxyOptions::default(), "auto");
}

/// The same on a server that runs no scripts (osmem, or Elasticsearch with scripting off),
/// with the default `--lock-protocol auto` (which takes its locks by compare-and-set there)
/// and with `--lock-protocol cas`. Issue 35: this was ten requests (a `GET` of a stored script
/// and a refused `PUT` to decide the protocol, an `_mget` of the lock documents before their
/// `bulk`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_file_mv_by_compare_and_set_sends_at_most_eight_requests_at_any_depth() {
    for lock_protocol in ["auto", "cas"] {
        one_file_mvs_send_at_most_eight_requests(
            EsProxyOptions {
                scripts: false,
                ..EsProxyOptions::default()
            },
            lock_protocol,
        );
    }
}

/// The same on a real Elasticsearch (scripts on, so `--lock-protocol auto` takes its locks by
/// scripted updates), counted by a proxy that passes every request on as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch: FSRENAME_TEST_ES_URL=http://127.0.0.1:9200"]
async fn real_elasticsearch_a_one_file_mv_sends_at_most_eight_requests_at_any_depth() {
    let url = std::env::var(fs_testkit::REAL_ES_VAR).unwrap_or_else(|_| {
        panic!(
            "{} is not set: point it at an Elasticsearch 7.x/8.x (see docs/elasticsearch.md)",
            fs_testkit::REAL_ES_VAR
        )
    });
    let proxy = EsProxy::start(
        &url,
        EsProxyOptions {
            pass_through: true,
            ..EsProxyOptions::default()
        },
    );
    one_file_mvs_through(&proxy, "auto");
}

/// Renames a file at depths 1, 2, 4 and 8 there and back through a proxy started with
/// `options`, with `--lock-protocol lock_protocol`, prints every request each `mv` sent and
/// asserts that none sent more than [`MOST_REQUESTS`].
fn one_file_mvs_send_at_most_eight_requests(options: EsProxyOptions, lock_protocol: &str) {
    one_file_mvs_through(&start_es_proxy(options), lock_protocol);
}

/// What [`one_file_mvs_send_at_most_eight_requests`] does, through `proxy`.
fn one_file_mvs_through(proxy: &EsProxy, lock_protocol: &str) {
    let mut counted = Vec::new();
    for depth in [1, 2, 4, 8] {
        let index = fs_testkit::unique_name("fs-requests");
        let file = tree_of_depth(proxy.url(), &index, depth);
        let target = format!("{}-renamed.txt", file.trim_end_matches(".txt"));
        for round in ["first", "second"] {
            let (from, to) = match round {
                "first" => (file.as_str(), target.as_str()),
                _ => (target.as_str(), file.as_str()),
            };
            proxy.take_requests();
            let started = std::time::Instant::now();
            let out = fsrename_with(proxy.url(), &index, lock_protocol, &["mv", from, to]);
            let took = started.elapsed();
            let requests = proxy.take_requests();
            assert_eq!(
                out.status.code(),
                Some(0),
                "mv {from} {to}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            // The rename happened, and is searchable at once.
            let listed = fsrename(proxy.url(), &index, &["ls", "-R", "/"]);
            let listed = text(&listed.stdout);
            assert!(
                listed.contains(to) && !listed.lines().any(|l| l.ends_with(from)),
                "after mv {from} {to}, ls -R / says:\n{listed}"
            );
            println!(
                "--lock-protocol {lock_protocol}, depth {depth}, {round} mv: {} requests, {} ms with the process's start",
                requests.len(),
                took.as_millis()
            );
            for r in &requests {
                println!("  {r}");
            }
            counted.push((depth, round, requests));
        }
    }
    for (depth, round, requests) in &counted {
        assert!(
            requests.len() <= MOST_REQUESTS,
            "with --lock-protocol {lock_protocol}, the {round} one-file mv at depth {depth} sent {} requests, more than {MOST_REQUESTS}:\n{}",
            requests.len(),
            requests.join("\n")
        );
    }
}
