//! The live page in a real browser: Debian's headless Chromium, driven through chromedriver
//! (WebDriver) with fantoccini. `.ci/run` installs both; the binaries are found on `PATH`, or
//! through `FSRENAME_CHROMEDRIVER`. Screenshots go to `target/page-tests/`.
//!
//! On the embedded store, behind a store that answers every call 100 ms late, so that a rename
//! lasts long enough to be watched:
//!
//! - a rename submitted through the page's form shows its exclusive lock and its ancestors'
//!   shares, then they go, and the job reaches `done`;
//! - a rename with a bad path shows the service's error next to the field;
//! - two pages see the same live updates.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use fs_model::{FsDoc, FsPath};
use fs_rename::FsTree;
use fs_store::SharedStore;
use fsrename::serve::{ServeConfig, Server};
use serde_json::json;
use tokio::sync::oneshot;

/// chromedriver on a free loopback port, stopped with the test.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let binary =
            std::env::var("FSRENAME_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_owned());
        let child = Command::new(&binary)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start `{binary}` ({e}): install Debian's chromium and chromium-driver (.ci/run does)")
            });
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A new headless browser window.
    async fn browser(&self, width: u32, height: u32) -> Client {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({ "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                format!("--window-size={width},{height}"),
            ] }),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&self.url)
                .await
            {
                Ok(client) => return client,
                // chromedriver may not listen yet.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no browser session from chromedriver: {e}"),
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The service on the embedded store behind 100 ms of latency, with a tree to rename.
struct Service {
    base: String,
    store: SharedStore,
    index: String,
    stop: Option<oneshot::Sender<()>>,
    server: Option<Server>,
}

impl Service {
    async fn start(token: Option<&str>) -> Service {
        let inner = fs_testkit::Backend::Embedded.store();
        let index = fs_testkit::unique_name("fs");
        let tree = FsTree::new(Arc::clone(&inner), index.clone());
        tree.ensure_indices().await.expect("indices");
        let mut docs = vec![
            FsDoc::dir(FsPath::parse("/clinton").expect("path"), 0),
            FsDoc::dir(FsPath::parse("/clinton/projects").expect("path"), 0),
        ];
        let top = FsPath::parse("/clinton/projects/elasticsearch").expect("path");
        docs.push(FsDoc::dir(top.clone(), 0));
        for f in 0..3_000 {
            docs.push(FsDoc::file(top.join(&format!("f{f}")).expect("join"), 1, 0));
        }
        tree.insert_all(docs).await.expect("insert");
        tree.refresh().await.expect("refresh");
        let store: SharedStore = Arc::new(fs_testkit::LatencyStore::new(
            inner,
            Duration::from_millis(100),
        ));
        let mut config = ServeConfig::new(index.clone());
        config.listen = "127.0.0.1:0".parse().expect("addr");
        config.token = token.map(str::to_owned);
        let (stop, stopped) = oneshot::channel::<()>();
        let server = Server::start(config, Arc::clone(&store), async {
            let _ = stopped.await;
        })
        .await
        .expect("start the service");
        Service {
            base: format!("http://{}", server.addr()),
            store,
            index,
            stop: Some(stop),
            server: Some(server),
        }
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

/// Waits until `check` finds what it looks for in the page (it answers `Some`), polling;
/// panics with `what` and a screenshot after 30 s.
async fn see<T>(page: &Client, what: &str, check: impl AsyncFn(&Client) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = check(page).await {
            return found;
        }
        if Instant::now() > deadline {
            screenshot(page, "failed").await;
            let source = page.source().await.unwrap_or_default();
            panic!("never saw {what} in the page:\n{source}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of every element `css` selects.
async fn texts(page: &Client, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for element in page.find_all(Locator::Css(css)).await.unwrap_or_default() {
        out.push(element.text().await.unwrap_or_default());
    }
    out
}

/// The locks table's rows, as text.
async fn lock_rows(page: &Client) -> Vec<String> {
    texts(page, "#locks tr").await
}

async fn screenshot(page: &Client, name: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/page-tests");
    if std::fs::create_dir_all(&dir).is_ok() {
        if let Ok(png) = page.screenshot().await {
            let _ = std::fs::write(dir.join(format!("{name}.png")), png);
        }
    }
}

async fn open(driver: &Driver, service: &Service, width: u32, height: u32) -> Client {
    let page = driver.browser(width, height).await;
    page.goto(&format!("{}/", service.base))
        .await
        .expect("open the page");
    live(&page).await;
    page
}

async fn live(page: &Client) {
    see(page, "the live status", async |p: &Client| {
        (texts(p, "#status").await.first()? == "live").then_some(())
    })
    .await;
}

async fn click(page: &Client, css: &str) {
    page.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("cannot click {css}: {e}"));
}

/// Submits the job form.
async fn submit(page: &Client) {
    click(page, "#rename-form button[type=submit]").await;
}

/// The message that appears in `#{id}`.
async fn message_in(page: &Client, id: &str) -> String {
    let css = format!("#{id}");
    see(page, &format!("a message in {css}"), async |p: &Client| {
        texts(p, &css).await.into_iter().find(|t| !t.is_empty())
    })
    .await
}

/// Waits for the top of the tree, `/clinton`.
async fn tree_top(page: &Client) {
    see(page, "the tree's top", async |p: &Client| {
        texts(p, "#tree button")
            .await
            .iter()
            .any(|t| t.contains("clinton/"))
            .then_some(())
    })
    .await;
}

async fn fill(page: &Client, id: &str, text: &str) {
    let field = page
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("no #{id}: {e}"));
    field.clear().await.expect("clear");
    field.send_keys(text).await.expect("type");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_a_rename_and_shows_errors_next_to_fields() {
    let driver = Driver::start();
    let service = Service::start(None).await;
    let page = open(&driver, &service, 1280, 800).await;
    let other = open(&driver, &service, 390, 844).await;
    tree_top(&page).await;

    // A bad path: the service's message next to the field it names, nothing submitted.
    fill(&page, "from", "clinton/projects").await;
    fill(&page, "to", "/archive").await;
    submit(&page).await;
    let error = message_in(&page, "from-error").await;
    assert!(error.contains("not absolute"), "{error}");
    screenshot(&page, "bad-path").await;

    // A rename through the form: its exclusive lock and the shares above it, in both pages.
    fill(&page, "from", "/clinton/projects/elasticsearch").await;
    fill(&page, "to", "/clinton/projects/opensearch").await;
    submit(&page).await;
    for (name, p) in [("page", &page), ("other", &other)] {
        see(p, "the rename's locks", async |p: &Client| {
            let rows = lock_rows(p).await;
            let exclusive = rows.iter().any(|r| {
                r.contains("/clinton/projects/elasticsearch") && r.contains("X (exclusive)")
            });
            let shared = rows
                .iter()
                .any(|r| r.split_whitespace().next() == Some("/clinton") && r.contains("(shared)"));
            (exclusive && shared).then_some(())
        })
        .await;
        screenshot(p, &format!("locked-{name}")).await;
    }
    for (name, p) in [("page", &page), ("other", &other)] {
        see(p, "the job done and no lock left", async |p: &Client| {
            let done = !texts(p, "#jobs li[data-state=done]").await.is_empty();
            (done && lock_rows(p).await.is_empty()).then_some(())
        })
        .await;
        screenshot(p, &format!("done-{name}")).await;
    }
    assert!(
        error.contains("clinton/projects"),
        "the error names the bad path: {error}"
    );

    // A delete of `/` is refused next to its path field; a copy through the same form runs.
    let kind = page.find(Locator::Id("kind")).await.expect("the kind");
    kind.select_by_value("delete").await.expect("choose delete");
    fill(&page, "from", "/").await;
    submit(&page).await;
    let refused = message_in(&page, "from-error").await;
    assert!(refused.contains('/'), "{refused}");
    kind.select_by_value("copy").await.expect("choose copy");
    fill(&page, "from", "/clinton/projects/opensearch").await;
    fill(&page, "to", "/clinton/copy").await;
    submit(&page).await;
    see(&other, "the copy done", async |p: &Client| {
        let done = texts(p, "#jobs li[data-state=done]").await;
        done.iter()
            .any(|t| t.starts_with("cp /clinton/projects/opensearch"))
            .then_some(())
    })
    .await;
    screenshot(&other, "copied-other").await;

    let tree = FsTree::new(Arc::clone(&service.store), service.index.clone());
    tree.refresh().await.expect("refresh");
    let moved = tree
        .count_under(&FsPath::parse("/clinton/projects/opensearch").expect("path"))
        .await
        .expect("count");
    assert_eq!(moved, 3_001);
    let copied = tree
        .count_under(&FsPath::parse("/clinton/copy").expect("path"))
        .await
        .expect("count");
    assert_eq!(copied, 3_001);
    page.close().await.expect("close");
    other.close().await.expect("close");
    service.stop().await;
}

/// Behind a token: the page asks for it, says so next to the field when it is wrong, and
/// goes live with the right one; the token never appears in the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_token_the_page_asks_for_it_and_never_shows_it() {
    const TOKEN: &str = "page-s3cret";
    let driver = Driver::start();
    let service = Service::start(Some(TOKEN)).await;
    let page = driver.browser(1280, 800).await;
    page.goto(&format!("{}/", service.base))
        .await
        .expect("open the page");
    see(&page, "the token form", async |p: &Client| {
        let form = p.find(Locator::Id("token-form")).await.ok()?;
        form.is_displayed().await.ok()?.then_some(())
    })
    .await;
    for (attempt, token) in [("wrong", "guess"), ("right", TOKEN)] {
        fill(&page, "token", token).await;
        click(&page, "#token-form button").await;
        if attempt == "wrong" {
            assert_eq!(message_in(&page, "token-error").await, "wrong token");
        }
    }
    live(&page).await;
    tree_top(&page).await;
    screenshot(&page, "token").await;
    let source = page.source().await.expect("the page's source");
    assert!(!source.contains(TOKEN), "the token is in the page");
    let typed = page
        .find(Locator::Id("token"))
        .await
        .expect("the token field")
        .prop("value")
        .await
        .expect("its value");
    assert_eq!(typed.as_deref(), Some(""), "the token stays in its field");
    page.close().await.expect("close");
    service.stop().await;
}
