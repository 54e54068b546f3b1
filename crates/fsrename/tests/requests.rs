//! What a one-file `fsrename mv` costs over HTTP: the requests it sends, counted at the
//! Elasticsearch-behaviour proxy in front of osmem, from the process's start to its end,
//! journal included.

use std::process::{Command, Output};

use fs_testkit::{start_es_proxy, EsProxyOptions};

/// The most requests a one-file rename may send (issue 16): about what the book's own
/// sequence costs for a file at depth 4, with a journal entry added.
const MOST_REQUESTS: usize = 8;

fn fsrename(url: &str, index: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(["--store", url, "--index", index])
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
    let proxy = start_es_proxy(EsProxyOptions::default());
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
            let out = fsrename(proxy.url(), &index, &["mv", from, to]);
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
            println!("depth {depth}, {round} mv: {} requests", requests.len());
            for r in &requests {
                println!("  {r}");
            }
            counted.push((depth, round, requests));
        }
    }
    for (depth, round, requests) in &counted {
        assert!(
            requests.len() <= MOST_REQUESTS,
            "the {round} one-file mv at depth {depth} sent {} requests, more than {MOST_REQUESTS}:\n{}",
            requests.len(),
            requests.join("\n")
        );
    }
}
