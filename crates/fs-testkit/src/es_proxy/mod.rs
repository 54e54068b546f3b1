//! [`EsProxy`]: a loopback HTTP proxy in front of osmem-server that adds what osmem forgives and
//! Elasticsearch does not, so that the HTTP backend of the tests behaves like Elasticsearch.
//!
//! - **Scripted updates** ([`scripted`]): the stored lock scripts run here, with
//!   Elasticsearch's update semantics: read the document, run the script (the Rust twin of the
//!   painless, from [`fs_model::lock_scripts`]), write conditionally on the version read. Two
//!   updates of one document at once race: the loser is retried up to `retry_on_conflict`
//!   times, then answered 409 `version_conflict_engine_exception`; an upsert racing an upsert
//!   likewise. A script's refusal is 400 `painless_explain_error`, as Elasticsearch answers it.
//!   The update items of one bulk request run as a shard runs them ([`update_run`]): one after
//!   the other, with no race between them, one read and one write a document.
//! - **Search contexts** ([`contexts`]): open scrolls and points in time are counted, expire
//!   with their keep-alive, and are capped (default 500, Elasticsearch's
//!   `search.max_open_scroll_context`); past the cap a search that would open one fails with
//!   HTTP 500, as on Elasticsearch.
//! - **The result window** ([`window`]): a search asking past `from + size` 10 000 is
//!   refused with 400, as Elasticsearch refuses it; osmem answers it.
//! - **Near-real-time search** ([`nrt`]): a write becomes visible to search and count only after
//!   a refresh of its index. Reads by id stay realtime.
//!
//! - **Network faults** ([`faults`], off unless asked for): a seeded schedule of refused
//!   connections, delays, 429 and 503 answers, bulk items rejected with 429, and connections
//!   cut before a request reaches the server or after it was carried out but before its
//!   answer is back ([`NetFaults`]). [`EsProxy::kill`] stops a proxy at once, as a node that
//!   dies.
//! - **Failover** ([`failover`], off unless asked for), as a real cluster showed it: a bulk
//!   request carried out twice with the second answer given (its own writes answered 409),
//!   reads by id served by a copy that lags, and paged searches whose context died with its
//!   node ([`NetFaults::failover`]).
//! - **Partial answers** ([`partial`], off unless asked for): a search or count of an index of
//!   several shards answered 200 with one shard's part missing and `_shards.failed` 1, as a
//!   real cluster answers when a shard's node is lost mid-search
//!   ([`NetFaults::partial_shards`]), or with `_shards.successful` one short and nothing
//!   failed, as it answers while a shard has no active copy
//!   ([`NetFaults::unassigned_shards`]).
//!
//! - **Renames by query** ([`by_query`], off unless asked for): `_update_by_query` with
//!   fsrename's rename script, and `_delete_by_query` of a subtree's files, run as tasks, and
//!   the tasks API that follows, cancels and lists them, as on a server that runs painless.
//!
//! - **The server's clock**: node statistics (`GET _nodes/stats`, `_nodes/_master/stats`,
//!   `_nodes/_local/stats`) carry the node's `timestamp`, the proxy's clock moved by
//!   [`EsProxy::set_server_clock_offset`]: a server whose clock differs from its clients'
//!   (which on one machine share one), for the lease clock's tests (osmem has no node
//!   statistics).
//!
//! - **`filter_path` on bulk answers** ([`filter_path`]): the proxy makes a bulk request's
//!   answer from the whole answer of the server behind, then leaves out what the request's
//!   `filter_path` does not name, as Elasticsearch does.
//!
//! - **A trap** ([`trap`], off unless set): 503 for the requests matching one pattern once a
//!   request matching another has come ([`EsProxy::trap`]), to fail one step of a protocol.
//!
//! Everything else is forwarded as it is. The proxy runs on a thread of its own, with its own
//! runtime, so that it outlives the runtime of any one test.

mod bulk;
mod by_query;
mod contexts;
mod cut_off;
mod failover;
mod faults;
mod filter_path;
mod nrt;
mod partial;
mod scripted;
mod trap;
mod update_run;
mod upstream;
mod window;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use contexts::Contexts;
pub use contexts::{ContextKind, OpenContext};
use faults::{Fault, Schedule};
pub use faults::{NetFaults, FAULT_SEED_VAR};
use nrt::Nrt;
use upstream::Upstream;

/// How an [`EsProxy`] behaves.
#[derive(Debug, Clone)]
pub struct EsProxyOptions {
    /// The most scroll contexts and points in time open at once; default 500, as
    /// Elasticsearch's `search.max_open_scroll_context`.
    pub max_open_contexts: usize,
    /// The longest pause between the read and the conditional write of a scripted update,
    /// chosen at random per update; default 2 ms. Elasticsearch has such a window too; a
    /// wider one makes races between concurrent updates of one document frequent.
    pub race_window: Duration,
    /// Whether writes are searchable only after a refresh; default true.
    pub near_real_time: bool,
    /// Whether stored scripts are accepted and run; default true. Off, the proxy refuses to
    /// store them, as a server with scripting disabled does.
    pub scripts: bool,
    /// Whether `_update_by_query` with fsrename's rename script (and `_delete_by_query` of a
    /// subtree's files) runs here, as a task, with the tasks API ([`by_query`]); default false (osmem refuses it, as a server without painless
    /// would).
    pub update_by_query: bool,
    /// A pause before each part (500 documents) such a task writes; default none. A longer one stretches a task
    /// out, for a test to kill its client in the middle.
    pub update_by_query_pause: Duration,
    /// Fails each such task after it wrote this many parts (of 500), as a task whose shard's
    /// node died fails (a `search_phase_execution_exception`); default never.
    pub update_by_query_fails_after: Option<usize>,
    /// The network faults; default none ([`EsProxy::set_faults`] changes them while it runs).
    pub faults: NetFaults,
    /// Whether every request goes to the server behind as it came, with none of the proxy's
    /// own behaviour (scripts, search contexts, near-real-time search, tasks); default
    /// false. In front of a real Elasticsearch, this counts what a client sends it
    /// ([`EsProxy::take_requests`]) and changes nothing else.
    pub pass_through: bool,
}

impl Default for EsProxyOptions {
    fn default() -> EsProxyOptions {
        EsProxyOptions {
            max_open_contexts: 500,
            race_window: Duration::from_millis(2),
            near_real_time: true,
            scripts: true,
            update_by_query: false,
            update_by_query_pause: Duration::ZERO,
            update_by_query_fails_after: None,
            faults: NetFaults::none(0),
            pass_through: false,
        }
    }
}

/// What the proxy has seen, for tests to print and assert.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Scripted updates run.
    pub updates: u64,
    /// Conditional writes of scripted updates that lost a race with another write.
    pub races: u64,
    /// Of those, the ones retried inside the update (`retry_on_conflict`).
    pub races_retried: u64,
    /// Updates answered 409 because they lost every race they were allowed.
    pub conflicts_returned: u64,
    /// Updates a script refused (`painless_explain_error`).
    pub refusals: u64,
    /// Scroll contexts and points in time opened.
    pub contexts_opened: u64,
    /// Searches refused because the context limit was reached.
    pub contexts_refused: u64,
    /// Contexts that ran out their keep-alive without being closed.
    pub contexts_expired: u64,
    /// Refreshes that made pending writes searchable.
    pub refreshes: u64,
    /// Faults: connections refused at accept.
    pub refused: u64,
    /// Faults: requests cut before they reached the server behind.
    pub cut_before: u64,
    /// Faults: requests carried out, then cut before their answer was sent.
    pub cut_after: u64,
    /// Faults: requests answered 429 without being carried out.
    pub too_many: u64,
    /// Faults: requests answered 503 without being carried out.
    pub unavailable: u64,
    /// Faults: requests held back before they were carried out.
    pub delayed: u64,
    /// Faults: bulk items answered 429 without being carried out.
    pub items_too_many: u64,
    /// Faults: bulk requests carried out twice, the second answer given (a failover).
    pub replayed: u64,
    /// Faults: documents read by id as a lagging copy had them.
    pub lagging_reads: u64,
    /// Faults: continuations of paged searches whose context was lost.
    pub contexts_lost: u64,
    /// Faults: searches and counts answered without one shard's part.
    pub partial_answers: u64,
}

#[derive(Default)]
struct Counters {
    updates: AtomicU64,
    races: AtomicU64,
    races_retried: AtomicU64,
    conflicts_returned: AtomicU64,
    refusals: AtomicU64,
    contexts_opened: AtomicU64,
    contexts_refused: AtomicU64,
    contexts_expired: AtomicU64,
    refreshes: AtomicU64,
    refused: AtomicU64,
    cut_before: AtomicU64,
    cut_after: AtomicU64,
    too_many: AtomicU64,
    unavailable: AtomicU64,
    delayed: AtomicU64,
    items_too_many: AtomicU64,
    replayed: AtomicU64,
    lagging_reads: AtomicU64,
    contexts_lost: AtomicU64,
    partial_answers: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The shared state of one proxy.
struct Proxy {
    options: EsProxyOptions,
    upstream: Upstream,
    /// The server behind, as a document store: scripted updates read and write through it.
    docs: fs_store::ElasticStore,
    /// Stored scripts, by id: the lock scripts whose painless source was stored.
    scripts: fs_store::StoredLockScripts,
    /// The tasks of `_update_by_query` ([`by_query`]).
    tasks: by_query::Tasks,
    trap: trap::Trap,
    contexts: Contexts,
    nrt: Arc<Nrt>,
    faults: Schedule,
    /// Documents a lagging copy still has as they were ([`NetFaults::lagging_reads`]).
    lagging: failover::Lagging,
    counters: Counters,
    /// Every request received, as `METHOD /path?query`, in order of arrival.
    log: std::sync::Mutex<Vec<String>>,
    /// How far the server's clock is ahead of the machine's, in milliseconds.
    clock_offset_ms: std::sync::atomic::AtomicI64,
    /// The node cut off from the others, if one is ([`EsProxy::cut_off`]).
    cut_off: cut_off::CutOff,
}

impl Proxy {
    /// The server's clock in epoch milliseconds: the machine's, moved by the offset set.
    fn server_time_ms(&self) -> i64 {
        let machine = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        machine.saturating_add(self.clock_offset_ms.load(Ordering::Relaxed))
    }
}

/// A running proxy. Dropping it stops it.
pub struct EsProxy {
    url: String,
    proxy: Arc<Proxy>,
    stop_tx: Option<tokio::sync::oneshot::Sender<()>>,
    kill_tx: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for EsProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EsProxy")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl EsProxy {
    /// Starts a proxy on `127.0.0.1:0` in front of the server at `upstream`.
    ///
    /// # Panics
    /// If it cannot bind or start its runtime: a test cannot go on without it.
    pub fn start(upstream: &str, options: EsProxyOptions) -> EsProxy {
        let faults = Schedule::new(options.faults.clone());
        let proxy = Arc::new(Proxy {
            options,
            upstream: Upstream::new(upstream),
            docs: fs_store::ElasticStore::connect(
                fs_store::ElasticConfig::new(upstream).expect("the upstream URL"),
            )
            .expect("a client of the upstream server"),
            scripts: fs_store::StoredLockScripts::default(),
            tasks: by_query::Tasks::default(),
            trap: trap::Trap::default(),
            contexts: Contexts::default(),
            nrt: Arc::default(),
            faults,
            lagging: failover::Lagging::default(),
            counters: Counters::default(),
            log: std::sync::Mutex::default(),
            clock_offset_ms: std::sync::atomic::AtomicI64::new(0),
            cut_off: cut_off::CutOff::default(),
        });
        EsProxy::serve(proxy)
    }

    /// Starts another node of the same cluster: its own port (and its own [`EsProxy::kill`]),
    /// the same state behind it (scripts, search contexts, what a refresh makes searchable,
    /// fault schedule and counters), as two nodes of one Elasticsearch cluster share it.
    pub fn another_node(&self) -> EsProxy {
        EsProxy::serve(Arc::clone(&self.proxy))
    }

    /// Serves `proxy` on a port of its own, from a thread of its own.
    fn serve(proxy: Arc<Proxy>) -> EsProxy {
        let (url_tx, url_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
        let shared = Arc::clone(&proxy);
        let thread = std::thread::Builder::new()
            .name("es-proxy".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("proxy runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                        .await
                        .expect("proxy listener on loopback");
                    let addr = listener.local_addr().expect("proxy address");
                    url_tx.send(format!("http://{addr}")).expect("proxy url");
                    let listener = faults::Refusing {
                        listener,
                        proxy: Arc::clone(&shared),
                    };
                    // Elasticsearch takes request bodies up to `http.max_content_length`,
                    // 100 MB by default; axum's default of 2 MB would refuse what it takes
                    // (a lock request for ten thousand documents, say).
                    let app = axum::Router::new()
                        .fallback(handle)
                        .layer(axum::Extension(cut_off::Node(addr.port())))
                        .layer(axum::extract::DefaultBodyLimit::max(100 * 1024 * 1024))
                        .with_state(shared);
                    let stopped = async {
                        let _ = stop_rx.await;
                    };
                    let served = axum::serve(listener, app).with_graceful_shutdown(stopped);
                    // A kill ends the runtime with everything in it: the listener closes (new
                    // connections are refused) and open connections are cut mid-request.
                    tokio::select! {
                        result = served => {
                            if let Err(e) = result {
                                eprintln!("es-proxy stopped: {e}");
                            }
                        }
                        _ = kill_rx => {}
                    }
                });
                runtime.shutdown_background();
            })
            .expect("proxy thread");
        let url = url_rx.recv().expect("the proxy starts");
        EsProxy {
            url,
            proxy,
            stop_tx: Some(stop_tx),
            kill_tx: Some(kill_tx),
            thread: Some(thread),
        }
    }

    /// Stops the proxy at once, as a node that dies: requests under way are cut, and from the
    /// moment this returns its port refuses connections.
    pub fn kill(&mut self) {
        if let Some(kill_tx) = self.kill_tx.take() {
            let _ = kill_tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Cuts this node off from the others of its cluster ([`EsProxy::another_node`]), as a
    /// node is before it learns it (`cut_off.rs`): writes through it, and questions for the
    /// master, are refused as a node with no master refuses them, and reads through it miss
    /// every document written through the other nodes from now on. One node at a time.
    pub fn cut_off(&self) {
        self.proxy
            .cut_off
            .cut(cut_off::Node(self.port()), true, false);
    }

    /// Cuts this node off as OpenSearch's nodes are cut off (`cluster.no_master_block:
    /// metadata_write`, its default): as [`EsProxy::cut_off`], but writes through it are
    /// carried out.
    pub fn cut_off_opensearch(&self) {
        self.proxy
            .cut_off
            .cut(cut_off::Node(self.port()), true, true);
    }

    /// Cuts this node off as [`EsProxy::cut_off`] does, but as it is before it learns it
    /// (anomaly 12): it still carries out writes, its reads miss every document written
    /// from now on (through it as well), and only its cluster state's version
    /// (`GET _cluster/state/version?local=true`) stays behind the master's.
    pub fn cut_off_unaware(&self) {
        self.proxy
            .cut_off
            .cut(cut_off::Node(self.port()), false, true);
    }

    /// Ends the cut: the node has rejoined its cluster.
    pub fn rejoin(&self) {
        self.proxy.cut_off.heal();
    }

    /// The port this node listens on.
    fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_default()
    }

    /// Replaces the network faults (their schedule starts over from their seed): a storm
    /// for a while, then calm again with [`NetFaults::none`].
    pub fn set_faults(&self, faults: NetFaults) {
        self.proxy.faults.set(faults);
    }

    /// Sets a trap: once a request whose `METHOD /path?query` contains `after` has come, the
    /// next `count` requests containing `then` are answered 503 `unavailable_shards_exception`
    /// without being carried out ([`trap`]).
    pub fn trap(&self, after: &str, then: &str, count: usize) {
        self.proxy
            .trap
            .set(after, then, count, trap::Action::Refuse);
    }

    /// Sets a trap as [`EsProxy::trap`] does, but the requests it catches are carried out and
    /// their connection cut before the answer: writes that landed, their client not told.
    pub fn trap_cut_after(&self, after: &str, then: &str, count: usize) {
        self.proxy
            .trap
            .set(after, then, count, trap::Action::CutAfter);
    }

    /// Sets the server's clock `offset_ms` ahead of the machine's (behind if negative), as its
    /// node statistics tell it; 0 to start with.
    pub fn set_server_clock_offset(&self, offset_ms: i64) {
        self.proxy
            .clock_offset_ms
            .store(offset_ms, Ordering::Relaxed);
    }

    /// Clears the trap.
    pub fn clear_trap(&self) {
        self.proxy.trap.clear();
    }

    /// Returns the proxy's URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Returns what the proxy has counted so far.
    pub fn stats(&self) -> ProxyStats {
        self.proxy.stats()
    }

    /// Returns and forgets the requests received since the last call, each as
    /// `METHOD /path?query`, in order of arrival: for a test that counts what a command sends.
    pub fn take_requests(&self) -> Vec<String> {
        std::mem::take(&mut *self.proxy.log.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Returns the scroll contexts and points in time open now (expired ones are dropped
    /// first, as the server would).
    pub fn open_contexts(&self) -> Vec<OpenContext> {
        self.proxy.expire_contexts();
        self.proxy.contexts.open()
    }

    /// Returns how many update-by-query tasks run now ([`by_query`]).
    pub fn running_tasks(&self) -> usize {
        self.proxy.tasks.running()
    }

    /// Returns how many documents the update-by-query tasks running now have written: more
    /// than 0 once a task has read its snapshot and written its first part.
    pub fn running_tasks_updated(&self) -> u64 {
        self.proxy.tasks.running_updated()
    }

    /// Returns the contexts open now on any of `indices`.
    pub fn open_contexts_on(&self, indices: &[&str]) -> Vec<OpenContext> {
        self.open_contexts()
            .into_iter()
            .filter(|c| indices.iter().any(|i| *i == c.index))
            .collect()
    }
}

impl Drop for EsProxy {
    fn drop(&mut self) {
        if let Some(stop_tx) = self.stop_tx.take() {
            let _ = stop_tx.send(());
        }
    }
}

impl Proxy {
    fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProxyStats {
            updates: get(&c.updates),
            races: get(&c.races),
            races_retried: get(&c.races_retried),
            conflicts_returned: get(&c.conflicts_returned),
            refusals: get(&c.refusals),
            contexts_opened: get(&c.contexts_opened),
            contexts_refused: get(&c.contexts_refused),
            contexts_expired: get(&c.contexts_expired),
            refreshes: get(&c.refreshes),
            refused: get(&c.refused),
            cut_before: get(&c.cut_before),
            cut_after: get(&c.cut_after),
            too_many: get(&c.too_many),
            unavailable: get(&c.unavailable),
            delayed: get(&c.delayed),
            items_too_many: get(&c.items_too_many),
            replayed: get(&c.replayed),
            lagging_reads: get(&c.lagging_reads),
            contexts_lost: get(&c.contexts_lost),
            partial_answers: get(&c.partial_answers),
        }
    }

    fn expire_contexts(&self) {
        let expired = self.contexts.expire();
        Counters::add(&self.counters.contexts_expired, expired as u64);
    }
}

/// One request as the proxy sees it.
pub(crate) struct Request {
    method: Method,
    /// The path, split on `/`, without empty segments (still percent-encoded).
    segments: Vec<String>,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
}

impl Request {
    fn param(&self, name: &str) -> Option<String> {
        let query = self.query.as_deref()?;
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then(|| decode(v))
        })
    }

    fn json_body(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn path_and_query(&self) -> String {
        match &self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.clone(),
        }
    }
}

/// Decodes a percent-encoded path segment or query value.
pub(crate) fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Encodes a document id for a path segment.
pub(crate) fn encode(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).to_string()
}

async fn handle(
    State(proxy): State<Arc<Proxy>>,
    axum::Extension(node): axum::Extension<cut_off::Node>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = Request {
        segments: uri
            .path()
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        method,
        headers,
        body,
    };
    proxy
        .log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{} {}", request.method, request.path_and_query()));
    proxy.expire_contexts();
    // The cluster state's version is the proxy's to say: the store behind has no cluster.
    if request.method == Method::GET
        && request.segments.first().map(String::as_str) == Some("_cluster")
        && request.segments.get(1).map(String::as_str) == Some("state")
    {
        let local = request
            .query
            .as_deref()
            .is_some_and(|q| q.split('&').any(|kv| kv == "local=true"));
        return proxy.cut_off.state_version(node, local);
    }
    let kind = cut_off::Kind::of(&request.method, &request.segments);
    if let Some(refused) = proxy.cut_off.refusal(node, kind) {
        return refused;
    }
    let line = format!("{} {}", request.method, request.path_and_query());
    let caught = proxy.trap.catches(&line);
    if caught == Some(trap::Action::Refuse) {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": {"type": "unavailable_shards_exception", "reason": "node unavailable (the proxy's trap)"}, "status": 503}),
        );
    }
    let fault = match caught {
        Some(trap::Action::CutAfter) => Some(Fault::CutAfter),
        _ => proxy.faults.next_request(),
    };
    let count = |counter: &AtomicU64| Counters::add(counter, 1);
    match fault {
        Some(Fault::CutBefore) => {
            count(&proxy.counters.cut_before);
            return faults::cut(StatusCode::OK, Bytes::new());
        }
        Some(Fault::TooMany) => {
            count(&proxy.counters.too_many);
            return answer(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"error": {"type": "es_rejected_execution_exception", "reason": "rejected execution (the proxy's fault schedule)"}, "status": 429}),
            );
        }
        Some(Fault::Unavailable) => {
            count(&proxy.counters.unavailable);
            return answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": {"type": "unavailable_shards_exception", "reason": "node unavailable (the proxy's fault schedule)"}, "status": 503}),
            );
        }
        Some(Fault::Delay(pause)) => {
            count(&proxy.counters.delayed);
            tokio::time::sleep(pause).await;
        }
        Some(Fault::CutAfter) | None => {}
    }
    // A request runs to its end even when its client goes away (a killed process): a server
    // applies what it received, and a write the server behind applied must be noted for the
    // next refresh, or search would never see it.
    // Only when partial answers are asked for: otherwise every search answer would be read
    // and parsed for nothing.
    let searching = proxy.faults.partial_enabled() && partial::is_search(&request);
    // A bulk answer is the proxy's own, made from the whole answer of the server behind:
    // filtered last, as the server would have.
    let bulk_filter = is_bulk(&request)
        .then(|| request.param("filter_path"))
        .flatten();
    let shared = Arc::clone(&proxy);
    let handled = tokio::spawn(async move {
        let seg: Vec<&str> = request.segments.iter().map(String::as_str).collect();
        match is_bulk(&request).then(|| shared.faults.replay()).flatten() {
            Some(reads) => failover::replay(&shared, &request, &seg, reads).await,
            None => route(&shared, &request).await,
        }
    })
    .await;
    if fault == Some(Fault::CutAfter) {
        count(&proxy.counters.cut_after);
        return match handled {
            Ok(Ok(response)) => faults::cut_answer(response).await,
            _ => faults::cut(StatusCode::OK, Bytes::new()),
        };
    }
    let handled = match handled {
        Ok(Ok(response)) => Ok(Ok(proxy.cut_off.passed(node, kind, response).await)),
        other => other,
    };
    let response = match handled {
        Ok(Ok(response)) if searching => partial::strike(&proxy, response).await,
        Ok(Ok(response)) => response,
        Ok(Err(e)) => answer(
            StatusCode::BAD_GATEWAY,
            json!({"error": {"type": "proxy_exception", "reason": e}, "status": 502}),
        ),
        Err(e) => answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": {"type": "proxy_exception", "reason": e.to_string()}, "status": 500}),
        ),
    };
    match bulk_filter {
        Some(filter) => filter_path::answer(response, &filter).await,
        None => response,
    }
}

/// Whether `r` is a bulk request.
fn is_bulk(r: &Request) -> bool {
    let seg: Vec<&str> = r.segments.iter().map(String::as_str).collect();
    matches!(seg.as_slice(), [_, "_bulk"] | ["_bulk"])
        && (r.method == Method::POST || r.method == Method::PUT)
}

/// Sends each request where it belongs: the proxy's own handling, or upstream as it is.
async fn route(proxy: &Arc<Proxy>, r: &Request) -> Result<Response, String> {
    if proxy.options.pass_through {
        let (status, body) = nrt::forward(proxy, r).await?;
        return Ok(passed_on(status, body));
    }
    let seg: Vec<&str> = r.segments.iter().map(String::as_str).collect();
    let m = &r.method;
    match seg.as_slice() {
        ["_scripts", id] if m == Method::PUT || m == Method::POST => {
            Ok(scripted::put_script(proxy, &decode(id), &r.json_body()))
        }
        ["_scripts", id] if m == Method::GET => Ok(scripted::get_script(proxy, &decode(id))),
        [index, "_update", id] if m == Method::POST => {
            scripted::update_one(proxy, &decode(index), &decode(id), r).await
        }
        [index, "_bulk"] if m == Method::POST || m == Method::PUT => {
            bulk::bulk(proxy, Some(&decode(index)), r).await
        }
        ["_bulk"] if m == Method::POST || m == Method::PUT => bulk::bulk(proxy, None, r).await,
        ["_nodes", "stats", ..] | ["_nodes", "_master" | "_local", "stats", ..] => {
            Ok(contexts::node_stats(proxy))
        }
        [index, "_update_by_query"] if m == Method::POST && proxy.options.update_by_query => {
            match by_query::start(proxy, &decode(index), r).await {
                Some(answered) => answered,
                None => nrt::route(proxy, r, &seg).await,
            }
        }
        [index, "_delete_by_query"] if m == Method::POST && proxy.options.update_by_query => {
            match by_query::start_delete(proxy, &decode(index), r).await {
                Some(answered) => answered,
                None => nrt::route(proxy, r, &seg).await,
            }
        }
        ["_tasks"] if m == Method::GET && proxy.options.update_by_query => {
            Ok(by_query::list(proxy))
        }
        ["_tasks", id] if m == Method::GET && proxy.options.update_by_query => {
            Ok(by_query::get(proxy, &decode(id)))
        }
        ["_tasks", id, "_cancel"] if m == Method::POST && proxy.options.update_by_query => {
            Ok(by_query::cancel(proxy, &decode(id)))
        }
        [_, "_doc", _] | [_, "_mget"]
            if (m == Method::GET || (m == Method::POST && seg[1] == "_mget"))
                && !proxy.lagging.is_empty() =>
        {
            failover::read(proxy, r, &seg).await
        }
        _ => {
            if let Some(refused) = window::refuse(r, &seg) {
                return Ok(refused);
            }
            if let Some(response) = contexts::route(proxy, r, &seg).await? {
                return Ok(response);
            }
            nrt::route(proxy, r, &seg).await
        }
    }
}

/// A JSON answer with a status.
pub(crate) fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// An upstream answer passed on as it is.
pub(crate) fn passed_on(status: u16, body: Bytes) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
