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
//! - two pages see the same live updates;
//! - the tree and the form work from the keyboard, and every text on the page is readable
//!   against its ground (WCAG's contrast ratio: 4.5:1, 3:1 for large text).
//!
//! And `fsrename demo --serve`, the binary itself: the page tells the four runs, shows job A
//! waiting for B's share of `/clinton`, and says what the runs without locks lost.

use std::io::{BufRead, BufReader};
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
        let mut options = json!({ "args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            format!("--window-size={width},{height}"),
        ] });
        // Chromium's windows are at least 500 pixels wide: a phone's width needs its
        // emulation.
        if width < 500 {
            options["mobileEmulation"] = json!({ "deviceMetrics": {
                "width": width, "height": height, "pixelRatio": 1.0, "touch": false,
            } });
        }
        capabilities.insert("goog:chromeOptions".to_owned(), options);
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
    see_within(page, what, Duration::from_secs(30), check).await
}

/// As [`see`], waiting up to `most`.
async fn see_within<T>(
    page: &Client,
    what: &str,
    most: Duration,
    check: impl AsyncFn(&Client) -> Option<T>,
) -> T {
    let deadline = Instant::now() + most;
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
    tree_shows(page, "clinton/").await;
}

/// Waits until the tree shows a directory named `dir` (`projects/`).
async fn tree_shows(page: &Client, dir: &str) {
    see(page, &format!("{dir} in the tree"), async |p: &Client| {
        texts(p, "#tree button")
            .await
            .iter()
            .any(|t| t.contains(dir))
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

/// Finds, in the page as shown, every text whose contrast with its ground is below WCAG's
/// AA level (4.5:1; 3:1 for large text); returns them, described.
const LOW_CONTRAST: &str = r#"
const channel = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
const parts = (c) => (c.match(/[\d.]+/g) || ["0", "0", "0", "0"]).map(Number);
const luminance = (c) => { const [r, g, b] = parts(c).map(channel); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
const opaque = (c) => { const p = parts(c); return p.length < 4 || p[3] > 0; };
const ground = (e) => {
  for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor; if (opaque(c)) return c; }
  return "rgb(255, 255, 255)";
};
const low = [];
for (const e of document.querySelectorAll("body *")) {
  const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  const box = e.getBoundingClientRect();
  const style = getComputedStyle(e);
  if (!own || !box.width || !box.height || style.visibility === "hidden") continue;
  const [a, b] = [luminance(style.color), luminance(ground(e))];
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  const size = parseFloat(style.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
  if (ratio < (large ? 3 : 4.5)) {
    low.push(`${e.tagName.toLowerCase()}.${e.className} "${e.textContent.trim().slice(0, 30)}": ${ratio.toFixed(2)}:1`);
  }
}
return low;
"#;

/// Checks that every text shown reads against its ground.
async fn assert_readable(page: &Client, when: &str) {
    let low = page
        .execute(LOW_CONTRAST, Vec::new())
        .await
        .expect("the contrast check runs");
    assert_eq!(low, json!([]), "texts below WCAG AA contrast {when}");
}

/// WebDriver's keys.
const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

/// Presses `key` where the keyboard's focus is; returns the focused element's text and its
/// `aria-expanded`, after.
async fn press(page: &Client, key: &str) -> (String, Option<String>) {
    let focused = page.active_element().await.expect("a focused element");
    focused.send_keys(key).await.expect("a key press");
    let now = page.active_element().await.expect("a focused element");
    let text = now.text().await.unwrap_or_default();
    let expanded = now.attr("aria-expanded").await.unwrap_or_default();
    (text, expanded)
}

/// Tabs forward until the focus is on an element whose text contains `text`; panics after
/// `most` presses.
async fn tab_to(page: &Client, text: &str, most: usize) -> Option<String> {
    for _ in 0..most {
        let (focused, expanded) = press(page, TAB).await;
        if focused.contains(text) {
            return expanded;
        }
    }
    panic!("{most} presses of Tab never reached `{text}`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_a_rename_and_shows_errors_next_to_fields() {
    let driver = Driver::start();
    let service = Service::start(None).await;
    let page = open(&driver, &service, 1280, 800).await;
    let other = open(&driver, &service, 390, 844).await;
    let width = other
        .execute("return window.innerWidth;", Vec::new())
        .await
        .expect("the width");
    assert_eq!(width, json!(390), "a phone's width");
    tree_top(&page).await;

    // The keyboard alone: Tab reaches the tree, Enter opens a directory and closes it, and
    // Tab goes on into what it opened, then on to the form.
    assert_eq!(
        tab_to(&page, "clinton/", 10).await.as_deref(),
        Some("false")
    );
    let (_, opened) = press(&page, ENTER).await;
    assert_eq!(opened.as_deref(), Some("true"), "Enter opens /clinton");
    tree_shows(&page, "projects/").await;
    tab_to(&page, "projects/", 1).await;
    press(&page, ENTER).await;
    tree_shows(&page, "elasticsearch/").await;

    // A directory of 3 000 files, 200 at a time from the service: the button brings the next
    // page (from the keyboard too), and the focus goes on to what it brought.
    tab_to(&page, "elasticsearch/", 1).await;
    press(&page, ENTER).await;
    let files =
        |n: usize| async move |p: &Client| (texts(p, "#tree .file").await.len() == n).then_some(());
    see(&page, "the first 200 files", files(200)).await;
    let (focused, _) = press(&page, TAB).await;
    assert_eq!(focused, "show the next 200");
    press(&page, ENTER).await;
    see(&page, "the next 200 files", files(400)).await;
    let files_shown = texts(&page, "#tree .file").await;
    assert_eq!(
        files_shown[199..201],
        ["f1177", "f1178"],
        "in path order, on from the first page's last"
    );
    // The focus lands on the first file added, and the next Tab on the next page's button.
    let focused = page.active_element().await.expect("focus");
    assert_eq!(focused.text().await.expect("its text"), "f1178");
    assert_eq!(press(&page, TAB).await.0, "show the next 200");
    // Closed again, so the rename below shows its locks on the directories.
    let toggle = page
        .find(Locator::Css(
            "#tree button[data-path='/clinton/projects/elasticsearch']",
        ))
        .await
        .expect("the toggle");
    toggle.click().await.expect("close it");
    let mut reached_form = false;
    for _ in 0..10 {
        press(&page, TAB).await;
        let focused = page.active_element().await.expect("focus");
        if focused.attr("id").await.ok().flatten().as_deref() == Some("kind") {
            reached_form = true;
            break;
        }
    }
    assert!(reached_form, "Tab never reached the form");
    assert_readable(&page, "at 1280x800").await;
    assert_readable(&other, "on a narrow screen").await;

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
        assert_readable(p, "with locks held").await;
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

/// A job that waited for a lock and then failed still showed "waiting for exclusive lock …
/// held by …" under it: the service kept the lock a job had once waited for. The wait shows
/// while the job waits, and goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_shows_no_lock_wait() {
    let driver = Driver::start();
    let service = Service::start(None).await;
    let holder = fs_locks::LockClient::builder(
        Arc::clone(&service.store),
        fs_model::lock_index_name(&service.index),
    )
    .holder("the test")
    .build();
    // Held until the job waits for it; then the job finds nothing there, and fails.
    let missing = FsPath::parse("/clinton/nope").expect("path");
    let guard = holder.lock_tree(&missing).await.expect("hold");
    let page = open(&driver, &service, 1280, 800).await;
    fill(&page, "from", "/clinton/nope").await;
    fill(&page, "to", "/clinton/gone").await;
    submit(&page).await;
    let waiting = see(
        &page,
        "the job waiting for the test's lock",
        async |p: &Client| {
            texts(p, "#jobs li[data-state=waiting_for_locks]")
                .await
                .into_iter()
                .find(|t| t.contains("waiting for"))
        },
    )
    .await;
    assert!(waiting.contains("/clinton/nope"), "{waiting}");
    guard.release().await.expect("release");
    let failed = see(&page, "the job failed", async |p: &Client| {
        texts(p, "#jobs li[data-state=failed]")
            .await
            .into_iter()
            .next()
    })
    .await;
    screenshot(&page, "failed").await;
    assert!(failed.contains("not found"), "{failed}");
    assert!(!failed.contains("waiting for"), "{failed}");
    page.close().await.expect("close");
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

/// `fsrename demo --serve`, started as a user would, with the page open in the browser.
struct Demo {
    child: Child,
    base: String,
}

impl Demo {
    /// Starts the demo on a free port, slowed by `slow`; waits for the address it prints.
    fn start(slow: &str) -> Demo {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fsrename"))
            .args([
                "demo",
                "--serve",
                "--listen",
                "127.0.0.1:0",
                "--files",
                "600",
            ])
            .args(["--slow", slow])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fsrename demo --serve");
        let stdout = child.stdout.take().expect("its output");
        let mut lines = BufReader::new(stdout).lines();
        let base = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| {
                line.strip_prefix("The live page: ")
                    .map(|url| url.trim_end_matches('/').to_owned())
            })
            .expect("the demo prints the page's address");
        // The rest of its output, read so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Demo { child, base }
    }

    /// Stops it as Ctrl-C would; returns its exit code.
    fn interrupt(mut self) -> Option<i32> {
        let sent = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success());
        self.child.wait().expect("the demo ends").code()
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of each run's "What was lost", in order.
async fn damages(page: &Client) -> Vec<String> {
    texts(page, "#story .damage").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_tells_its_runs_on_the_page() {
    let driver = Driver::start();
    let demo = Demo::start("1");
    // The runs start once the page is open.
    let page = driver.browser(1280, 800).await;
    page.goto(&format!("{}/", demo.base))
        .await
        .expect("open the page");
    live(&page).await;

    // Run 2: B holds its shares on /clinton's ancestors... and A waits behind B's share of
    // /clinton; the tree is open down to the locked file.
    // One script a poll, not a round trip per element: the wait lasts about 2.5 s.
    const A_WAITS: &str = r##"
        const runs = [...document.querySelectorAll("#story summary")];
        const second = runs.length > 0
          && runs[runs.length - 1].textContent.startsWith("2 of 4: tree locks, B first");
        const waiting = [...document.querySelectorAll("#locks tr")].some((row) => {
          const text = row.textContent;
          return row.cells[0].textContent === "/clinton" && text.includes("shared")
            && text.includes("job B") && text.includes("job A");
        });
        const badge = document.querySelector("#tree .badge.wait") !== null;
        return second && waiting && badge;
    "##;
    see(
        &page,
        "A waiting for B's share of /clinton",
        async |p: &Client| {
            let seen = p.execute(A_WAITS, Vec::new()).await.ok()?;
            (seen == json!(true)).then_some(())
        },
    )
    .await;
    screenshot(&page, "demo-waiting").await;
    let steps = texts(&page, "#story details[open] .steps li").await;
    assert!(
        steps
            .iter()
            .any(|s| s
                .contains("job A waits: blocked by the shared lock on `/clinton` held by job B")),
        "{steps:?}"
    );

    // The end: all four told, each saying what it lost.
    // The two runs left take about 10 s, the pauses between them included.
    let lost = see_within(
        &page,
        "the demo's end",
        Duration::from_secs(120),
        async |p: &Client| {
            let ended = !texts(p, "#story li.end").await.is_empty();
            ended.then_some(())?;
            Some(damages(p).await)
        },
    )
    .await;
    screenshot(&page, "demo-end").await;
    // Only the last run is open: the others' texts are inside closed <details>.
    let lost_in_source: Vec<String> = page
        .execute(
            "return [...document.querySelectorAll('#story .damage')].map((e) => e.textContent);",
            Vec::new(),
        )
        .await
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let expected = [
        "nothing was lost",
        "nothing was lost",
        "B's rename was lost",
        "the tree is broken",
    ];
    assert_eq!(lost_in_source.len(), expected.len(), "{lost_in_source:?}");
    for (told, what) in lost_in_source.iter().zip(expected) {
        assert!(told.contains(what), "{lost_in_source:?} (shown: {lost:?})");
    }
    let verdicts = texts(&page, "#story summary .verdict").await;
    assert_eq!(verdicts.len(), 4, "{verdicts:?}");
    assert_readable(&page, "at the demo's end").await;

    // A page opened late reads the whole story from its snapshot.
    let narrow = driver.browser(390, 844).await;
    narrow
        .goto(&format!("{}/", demo.base))
        .await
        .expect("open the page");
    see(
        &narrow,
        "the story in the narrow page",
        async |p: &Client| (texts(p, "#story summary").await.len() == 4).then_some(()),
    )
    .await;
    screenshot(&narrow, "demo-end-narrow").await;
    assert_readable(&narrow, "on a narrow screen at the demo's end").await;
    page.close().await.expect("close");
    narrow.close().await.expect("close");
    assert_eq!(demo.interrupt(), Some(0), "every run showed what it should");
}
