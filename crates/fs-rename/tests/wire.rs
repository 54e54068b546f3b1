//! Wire compatibility with the book: raw HTTP requests written exactly as the text writes
//! them (with ES 7+ paths), sent over a plain socket to the Elasticsearch-behaviour proxy in
//! front of osmem-server (the server fsrename's own requests go to) while fsrename works.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use fs_locks::{LockClient, LockError, SharedIntentions};
use fs_rename::{Entry, RenameError, RenameHooks, Renamer, RenamerBuilder};
use fs_testkit::Backend;

const README: &str = "/clinton/projects/elasticsearch/README.txt";

/// Sends one raw HTTP/1.1 request; returns the status code and the body.
fn raw(method: &str, path: &str, body: &str) -> (u16, String) {
    let address = fs_testkit::es_proxy()
        .url()
        .trim_start_matches("http://")
        .to_owned();
    let mut stream = TcpStream::connect(&address).expect("connect to the proxy");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

async fn tree() -> Env {
    let env = Env::new(Backend::Osmem);
    tree_with(
        &env,
        &[
            ("/clinton", true),
            ("/clinton/projects", true),
            ("/clinton/projects/elasticsearch", true),
            (README, false),
        ],
    )
    .await;
    env
}

/// Tries the book's requests while the rename holds its locks.
struct BookClient {
    lock_index: String,
    answers: Mutex<Vec<(String, u16)>>,
}

#[async_trait]
impl RenameHooks for BookClient {
    async fn before_write(&self, _page: &[Entry]) {
        let index = &self.lock_index;
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        // Someone wants to rename /clinton: the book's exclusive lock request.
        let (status, _) = raw(
            "PUT",
            &format!("/{index}/_create/%2Fclinton"),
            r#"{"lock_type":"exclusive"}"#,
        );
        answers.push(("exclusive on /clinton".into(), status));
        // Someone wants the README itself.
        let readme = "%2Fclinton%2Fprojects%2Felasticsearch%2FREADME.txt";
        let (status, _) = raw(
            "PUT",
            &format!("/{index}/_create/{readme}"),
            r#"{"lock_type":"exclusive"}"#,
        );
        answers.push(("exclusive on README.txt".into(), status));
    }
}

/// A renamer on `env`, its jobs borrowing their intention locks from their process's holds
/// if `share` (`serve --share-intentions`): a hold is one more holder entry, so the book's
/// clients meet it as they meet a job's own.
fn renamer(env: &Env, share: bool) -> RenamerBuilder {
    let builder = Renamer::builder(Arc::clone(&env.store), env.index.clone());
    if !share {
        return builder;
    }
    // No linger: the tests look for what fsrename left the moment its job is done.
    let holds = SharedIntentions::new(LockClient::builder(
        Arc::clone(&env.store),
        env.lock_index(),
    ))
    .linger(Duration::ZERO);
    builder.share_intentions(holds)
}

#[tokio::test]
async fn the_books_exclusive_request_gets_409_while_fsrename_renames() {
    the_books_exclusive_request_gets_409(false).await;
}

#[tokio::test]
async fn the_books_exclusive_request_gets_409_while_fsrename_renames_sharing_intentions() {
    the_books_exclusive_request_gets_409(true).await;
}

async fn the_books_exclusive_request_gets_409(share: bool) {
    let env = tree().await;
    let book = Arc::new(BookClient {
        lock_index: env.lock_index(),
        answers: Mutex::default(),
    });
    let renamer = renamer(&env, share)
        .hooks(Arc::clone(&book) as Arc<dyn RenameHooks>)
        .build();
    renamer
        .rename(
            &p(README),
            &p("/clinton/projects/elasticsearch/README.asciidoc"),
        )
        .await
        .expect("rename");
    let answers = book
        .answers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    assert_eq!(
        answers,
        vec![
            ("exclusive on /clinton".to_owned(), 409),
            ("exclusive on README.txt".to_owned(), 409)
        ]
    );
    assert_eq!(locks_left(&env).await, 0, "fsrename released everything");
    // And afterwards the book's request goes through, and its release too.
    let index = env.lock_index();
    assert_eq!(
        raw(
            "PUT",
            &format!("/{index}/_create/%2Fclinton"),
            r#"{"lock_type":"exclusive"}"#
        )
        .0,
        201
    );
    assert_eq!(
        raw("DELETE", &format!("/{index}/_doc/%2Fclinton"), "").0,
        200
    );
}

#[tokio::test]
async fn fsrename_waits_for_the_books_exclusive_lock_and_names_it() {
    waits_for_the_books_exclusive_lock(false).await;
}

#[tokio::test]
async fn fsrename_sharing_intentions_waits_for_the_books_exclusive_lock_and_names_it() {
    waits_for_the_books_exclusive_lock(true).await;
}

async fn waits_for_the_books_exclusive_lock(share: bool) {
    let env = tree().await;
    let index = env.lock_index();
    // The lock index exists once the tree does; the book's client takes /clinton/projects.
    let (status, body) = raw(
        "PUT",
        &format!("/{index}/_create/%2Fclinton%2Fprojects"),
        r#"{"lock_type":"exclusive"}"#,
    );
    assert_eq!(status, 201, "{body}");
    let renamer = renamer(&env, share)
        .wait(Duration::from_millis(300))
        .build();
    let to = p("/clinton/projects/elasticsearch/README.asciidoc");
    let err = renamer.rename(&p(README), &to).await.expect_err("blocked");
    match &err {
        RenameError::Lock(LockError::Timeout {
            blocker, attempts, ..
        }) => {
            assert_eq!(blocker.path, "/clinton/projects");
            assert!(*attempts > 1, "it waited and retried");
        }
        other => panic!("expected a lock timeout, got {other:?}"),
    }
    assert!(err.to_string().contains("`/clinton/projects`"), "{err}");
    // The book's client releases; fsrename now succeeds.
    assert_eq!(
        raw(
            "DELETE",
            &format!("/{index}/_doc/%2Fclinton%2Fprojects"),
            ""
        )
        .0,
        200
    );
    renamer
        .rename(&p(README), &to)
        .await
        .expect("rename after the release");
    assert_eq!(locks_left(&env).await, 0);
}
