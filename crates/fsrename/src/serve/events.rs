//! `GET /events`: one live feed (Server-Sent Events) of what the live page shows, the locks
//! and this instance's jobs, shared by every open page.
//!
//! One task, the sampler, reads the state every [`SAMPLE_EVERY`] while at least one client
//! listens: the locks with one listing of the lock index, the jobs from this instance's table
//! (no store call). What changed since the last sample goes out to every client on one
//! bounded broadcast channel, so the store sees one reader however many pages are open, and
//! none when no page is.
//!
//! A client that connects wakes the sampler, whose next sample makes its snapshot: the state
//! as read after it connected, never one kept from an earlier sample (an idle feed's last
//! sample may be minutes old, or never taken). Clients that connect together share that
//! sample: an opening page costs the store at most one listing of the lock index.
//!
//! What a client receives, each an SSE event whose data is one JSON object:
//!
//! - `snapshot` `{at, locks, jobs, story}`: the whole state, first on connecting (read after
//!   the client connected), again whenever the client fell behind (see below);
//! - `locks` `{at, locks}`: the lock list, when it changed;
//! - `jobs` `{at, jobs}`: the jobs whose state, progress or lock wait changed since the last
//!   sample, all in one event;
//! - `error` `{at, error}`: the locks could not be read (the last list still stands);
//! - `note` `{at, kind, ...}`: a line of the story `fsrename demo --serve` tells (see
//!   [`Story`]). The story so far is in every snapshot (`story`), so a page opened half-way
//!   reads it from the start.
//!
//! `at` is the server's clock (epoch ms) when the sample was taken, for the page to count a
//! lease down (`expires_at - at`) without trusting the browser's clock.
//!
//! A slow client is never waited for: each holds at most [`BUFFER`] updates, and one that
//! falls further behind skips them and gets a fresh snapshot instead. A client that goes
//! away drops its receiver with its stream.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use fs_locks::{LeaseClock, LockClient};
use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{broadcast, oneshot, watch, Notify};

use super::grants::Caller;
use super::jobs::Jobs;
use crate::contract::{Job, LockView};

/// How often the sampler reads the state while a client listens.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Updates held for each client; one further behind gets a snapshot instead.
pub const BUFFER: usize = 256;

/// The jobs the feed shows: the most recent.
const JOBS_SHOWN: usize = 100;

/// The story's notes kept for the pages that open later: the most recent.
const STORY_KEPT: usize = 500;

/// One thing a client is sent: the SSE event's name and its JSON data, written out once for
/// every client (200 pages cost one serialization, not 200).
#[derive(Debug, Clone)]
pub struct Out {
    pub event: &'static str,
    pub data: Value,
    text: String,
}

impl Out {
    pub fn new(event: &'static str, data: Value) -> Out {
        let text = data.to_string();
        Out { event, data, text }
    }
}

impl PartialEq for Out {
    fn eq(&self, other: &Out) -> bool {
        (self.event, &self.data) == (other.event, &other.data)
    }
}

/// The feed. Cheap to clone.
#[derive(Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Jobs,
    locks: LockClient,
    updates: broadcast::Sender<Arc<Out>>,
    last: Mutex<Sampled>,
    /// Woken when a client connects: an idle feed reads nothing, and wakes for a newcomer.
    listening: Notify,
    /// True once the service shuts down: the streams end (a graceful shutdown waits for
    /// every connection to close, and an event stream would never close by itself).
    closing: watch::Receiver<bool>,
}

/// The state as last sampled.
#[derive(Default)]
struct Sampled {
    at: i64,
    locks: Value,
    /// The locks as compared: without what moves with the clock (waiting times, expiry).
    locks_key: Option<Value>,
    jobs: Vec<Value>,
    job_keys: HashMap<String, Value>,
    /// The story told so far (notes that are kept), oldest first.
    story: std::collections::VecDeque<Value>,
    /// The clients that connected since the last sample: the next one gives each its snapshot
    /// and its receiver.
    newcomers: Vec<oneshot::Sender<Joined>>,
}

/// What a newcomer is handed at the sample after it connected: its snapshot, and the receiver
/// of every update sent after it.
struct Joined {
    snapshot: Arc<Out>,
    updates: broadcast::Receiver<Arc<Out>>,
}

impl Sampled {
    fn snapshot(&self) -> Out {
        Out::new(
            "snapshot",
            json!({
                "at": self.at,
                "locks": self.locks,
                "jobs": self.jobs,
                "story": self.story,
            }),
        )
    }
}

/// The story `fsrename demo --serve` tells on the feed, beside the locks: which scenario runs,
/// what each job does, and what was lost. Cheap to clone.
#[derive(Clone)]
pub struct Story {
    feed: Feed,
}

impl Story {
    /// Tells every page `note` (a JSON object; `at` is added), and keeps it for the pages that
    /// open later.
    pub fn tell(&self, note: Value) {
        self.feed.note(note, true);
    }

    /// Tells every page open now `note`, and keeps nothing: for what the next note replaces
    /// (a job's progress).
    pub fn update(&self, note: Value) {
        self.feed.note(note, false);
    }

    /// How many pages listen now.
    pub fn listeners(&self) -> usize {
        self.feed.listeners()
    }
}

impl Feed {
    /// A feed of `jobs`' locks and jobs; its sampler runs until `closing` turns true.
    pub fn start(jobs: Jobs, mut closing: watch::Receiver<bool>) -> Feed {
        let lock_index = fs_model::lock_index_name(&jobs.config().index);
        let locks = LockClient::builder(Arc::clone(jobs.store()), lock_index).build();
        let feed = Feed {
            inner: Arc::new(Inner {
                jobs,
                locks,
                updates: broadcast::channel(BUFFER).0,
                last: Mutex::new(Sampled {
                    locks: json!([]),
                    ..Sampled::default()
                }),
                listening: Notify::new(),
                closing: closing.clone(),
            }),
        };
        let sampler = feed.clone();
        tokio::spawn(async move {
            loop {
                if *closing.borrow() {
                    return;
                }
                if sampler.listeners() == 0 {
                    tokio::select! {
                        // Counted again: a wake-up may be left from a client that has gone.
                        () = sampler.inner.listening.notified() => continue,
                        _ = closing.changed() => return,
                    }
                }
                sampler.sample().await;
                // Until the next period, or sooner for a client that connects: its snapshot
                // is read now, not kept from before it came.
                let next = tokio::time::Instant::now() + SAMPLE_EVERY;
                loop {
                    tokio::select! {
                        () = tokio::time::sleep_until(next) => break,
                        // A wake-up may be left from a client the last sample served.
                        () = sampler.inner.listening.notified() => {
                            if sampler.newcomers() > 0 {
                                break;
                            }
                        }
                        _ = closing.changed() => return,
                    }
                }
            }
        });
        feed
    }

    /// How many clients wait for their snapshot (those gone meanwhile left out).
    fn newcomers(&self) -> usize {
        self.last()
            .newcomers
            .iter()
            .filter(|joined_tx| !joined_tx.is_closed())
            .count()
    }

    /// How many clients listen now: those that receive the updates, and those waiting for
    /// their snapshot.
    pub fn listeners(&self) -> usize {
        self.inner.updates.receiver_count() + self.newcomers()
    }

    /// The story told on this feed.
    pub fn story(&self) -> Story {
        Story { feed: self.clone() }
    }

    /// Sends a `note` at once, not at the next sample; `keep` adds it to the snapshot.
    fn note(&self, mut note: Value, keep: bool) {
        let at = LeaseClock::new().now_ms();
        if let Value::Object(fields) = &mut note {
            fields.insert("at".to_owned(), json!(at));
        }
        let mut last = self.last();
        if keep {
            if last.story.len() >= STORY_KEPT {
                last.story.pop_front();
            }
            last.story.push_back(note.clone());
        }
        // Sent while the state is held (see `sample`).
        let _ = self.inner.updates.send(Arc::new(Out::new("note", note)));
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Sampled> {
        self.inner.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the state, sends what changed to the clients, and hands each newcomer its
    /// snapshot.
    async fn sample(&self) {
        let listed = self.inner.locks.list_locks().await;
        let at = LeaseClock::new().now_ms();
        let jobs: Vec<Value> = self
            .inner
            .jobs
            .recent(None, JOBS_SHOWN)
            .iter()
            .filter_map(|job| serde_json::to_value(job).ok())
            .collect();
        let mut out = Vec::new();
        {
            let mut last = self.last();
            last.at = at;
            match listed {
                Ok(locks) => {
                    let view = |now| {
                        let views: Vec<LockView> =
                            locks.iter().map(|l| LockView::new(l, now)).collect();
                        serde_json::to_value(views).unwrap_or_default()
                    };
                    let (key, now) = (view(0), view(at));
                    if last.locks_key.as_ref() != Some(&key) {
                        out.push(Out::new("locks", json!({ "at": at, "locks": now })));
                        last.locks_key = Some(key);
                    }
                    last.locks = now;
                }
                Err(e) => out.push(Out::new(
                    "error",
                    json!({ "at": at, "error": format!("reading the locks: {e}") }),
                )),
            }
            let mut keys = HashMap::with_capacity(jobs.len());
            let mut changed = Vec::new();
            for job in &jobs {
                let id = job["id"].as_str().unwrap_or_default().to_owned();
                let key = json!([
                    job["state"],
                    job["progress"],
                    job["waiting_for"],
                    job["error"]
                ]);
                if last.job_keys.get(&id) != Some(&key) {
                    changed.push(job.clone());
                }
                keys.insert(id, key);
            }
            // One event for every job that changed: a page is sent one frame a sample, not
            // one a job (at hundreds of renames a second, that is most of a stream's cost).
            if !changed.is_empty() {
                out.push(Out::new("jobs", json!({ "at": at, "jobs": changed })));
            }
            last.job_keys = keys;
            last.jobs = jobs;
            // Sent while the state is held, as every update is, and before the newcomers get
            // their receivers: each client has each update either in its snapshot or on its
            // receiver, never both, never neither (a story note told meanwhile would otherwise
            // arrive before a snapshot that lacks it).
            for update in out {
                // No receiver: nobody to tell.
                let _ = self.inner.updates.send(Arc::new(update));
            }
            let newcomers = std::mem::take(&mut last.newcomers);
            if !newcomers.is_empty() {
                // Written out once for all of them.
                let snapshot = Arc::new(last.snapshot());
                for joined_tx in newcomers {
                    // A client gone before its snapshot: nothing to hand it.
                    let _ = joined_tx.send(Joined {
                        snapshot: Arc::clone(&snapshot),
                        updates: self.inner.updates.subscribe(),
                    });
                }
            }
        }
    }

    /// A client's stream: a snapshot read after it connected (at the next sample), then the
    /// updates; a fresh snapshot whenever it fell more than [`BUFFER`] updates behind. It
    /// ends when the service shuts down.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<Out>> + Send + 'static {
        let (joined_tx, joined_rx) = oneshot::channel();
        self.last().newcomers.push(joined_tx);
        let reader = Reader {
            feed: self.clone(),
            closing: self.inner.closing.clone(),
            _counted: Counted::new(&self.inner.jobs),
        };
        self.inner.listening.notify_one();
        futures::stream::unfold(
            (reader, Stage::Joining(joined_rx)),
            |(mut reader, stage)| async move {
                match stage {
                    Stage::Joining(joined_rx) => {
                        let joined = tokio::select! {
                            joined = joined_rx => joined.ok()?,
                            _ = reader.closing.wait_for(|closing| *closing) => return None,
                        };
                        let next = Stage::Following(joined.updates);
                        Some((joined.snapshot, (reader, next)))
                    }
                    Stage::Following(mut rx) => {
                        let out = reader.next(&mut rx).await?;
                        Some((out, (reader, Stage::Following(rx))))
                    }
                }
            },
        )
    }

    /// The route: `GET /events`, for `caller`, who is sent only what it may see (see
    /// [`seen_by`]).
    pub async fn route(State(feed): State<Feed>, caller: Caller) -> impl IntoResponse {
        let mut last_locks = None;
        let stream = feed
            .subscribe()
            .filter_map(move |out| futures::future::ready(seen_by(out, &caller, &mut last_locks)))
            .map(|out| Ok::<_, Infallible>(Event::default().event(out.event).data(&out.text)));
        Sse::new(stream).keep_alive(KeepAlive::default())
    }

    /// Sends `out` to every client, as the sampler does (tests).
    #[cfg(test)]
    fn publish(&self, out: Out) {
        let _ = self.inner.updates.send(Arc::new(out));
    }
}

/// `out` as `caller` may see it (`last_locks`: the locks it was sent last), or nothing: the
/// locks on paths it may read (their holders' labels redacted), the jobs it sees (its own, and
/// others' under its `admin` grants), an error without its words, no story (the demo's). A
/// change of locks it does not see sends it nothing. A caller who may do everything is sent
/// `out` as it is, written out once for all.
fn seen_by(out: Arc<Out>, caller: &Caller, last_locks: &mut Option<Value>) -> Option<Arc<Out>> {
    if caller.is_unrestricted() {
        return Some(out);
    }
    let data = &out.data;
    let locks_seen = |locks: &Value| -> Value {
        let views: Vec<LockView> = serde_json::from_value(locks.clone()).unwrap_or_default();
        let seen: Vec<LockView> = views
            .into_iter()
            .filter(|view| caller.sees_lock(view))
            .map(|view| caller.redacted_lock(view))
            .collect();
        serde_json::to_value(seen).unwrap_or_default()
    };
    let jobs_seen = |jobs: &Value| -> Vec<Value> {
        let jobs: Vec<Job> = serde_json::from_value(jobs.clone()).unwrap_or_default();
        jobs.into_iter()
            .filter(|job| caller.sees_job(job))
            .filter_map(|job| serde_json::to_value(caller.redacted_job(job)).ok())
            .collect()
    };
    let seen = match out.event {
        "snapshot" => {
            let locks = locks_seen(&data["locks"]);
            *last_locks = Some(without_the_clock(&locks));
            json!({ "at": data["at"], "locks": locks, "jobs": jobs_seen(&data["jobs"]), "story": [] })
        }
        "locks" => {
            let locks = locks_seen(&data["locks"]);
            // What changed is not the caller's to see: nothing.
            let key = without_the_clock(&locks);
            if last_locks.as_ref() == Some(&key) {
                return None;
            }
            *last_locks = Some(key);
            json!({ "at": data["at"], "locks": locks })
        }
        "jobs" => {
            let jobs = jobs_seen(&data["jobs"]);
            if jobs.is_empty() {
                return None;
            }
            json!({ "at": data["at"], "jobs": jobs })
        }
        "error" => json!({ "at": data["at"], "error": "the locks could not be read" }),
        _ => return None,
    };
    Some(Arc::new(Out::new(out.event, seen)))
}

/// `locks` (lock views) without what moves with the clock (expiries, waiting times), as the
/// sampler compares them.
fn without_the_clock(locks: &Value) -> Value {
    let mut locks = locks.clone();
    let strip = |object: &mut Value| {
        if let Value::Object(fields) = object {
            for moving in ["expires_at", "expired", "waiting_ms"] {
                fields.remove(moving);
            }
        }
    };
    if let Value::Array(locks) = &mut locks {
        for lock in locks {
            strip(lock);
            for part in ["grants", "waiters"] {
                if let Some(Value::Array(entries)) = lock.get_mut(part) {
                    entries.iter_mut().for_each(strip);
                }
            }
        }
    }
    locks
}

/// Where a client's stream is: waiting for its snapshot, or following the updates.
enum Stage {
    Joining(oneshot::Receiver<Joined>),
    Following(broadcast::Receiver<Arc<Out>>),
}

/// What a client's stream holds while it lives.
struct Reader {
    feed: Feed,
    closing: watch::Receiver<bool>,
    _counted: Counted,
}

impl Reader {
    /// The next update `rx` receives, or a fresh snapshot in place of those the client fell
    /// too far behind to receive; `None` once the service shuts down.
    async fn next(&mut self, rx: &mut broadcast::Receiver<Arc<Out>>) -> Option<Arc<Out>> {
        let received = tokio::select! {
            received = rx.recv() => received,
            _ = self.closing.wait_for(|closing| *closing) => return None,
        };
        match received {
            Ok(update) => Some(update),
            // What it still holds is older than the snapshot: skipped too. The new receiver
            // and the snapshot are taken under the state, as the sampler hands them out.
            Err(broadcast::error::RecvError::Lagged(_)) => {
                let last = self.feed.last();
                *rx = rx.resubscribe();
                Some(Arc::new(last.snapshot()))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// One open stream, counted in the service's metrics while it lives.
struct Counted(Jobs);

impl Counted {
    fn new(jobs: &Jobs) -> Counted {
        jobs.metrics().event_streams.fetch_add(1, Ordering::Relaxed);
        Counted(jobs.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0
            .metrics()
            .event_streams
            .fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed() -> (Feed, watch::Sender<bool>) {
        let store: fs_store::SharedStore =
            Arc::new(fs_store::SqliteStore::in_memory().expect("store"));
        let jobs = Jobs::new(store, super::super::ServeConfig::new("fs"));
        let (close, closing) = watch::channel(false);
        (Feed::start(jobs, closing), close)
    }

    fn numbered(n: usize) -> Out {
        Out::new("jobs", json!({ "n": n }))
    }

    #[tokio::test]
    async fn a_client_that_falls_behind_gets_a_snapshot_and_then_the_updates() {
        let (feed, _close) = feed();
        let mut slow = Box::pin(feed.subscribe());
        let first = slow.next().await.expect("the first event");
        assert_eq!(first.event, "snapshot");
        // Far more than it holds, while it reads nothing: the sender never waits for it.
        for n in 0..BUFFER * 4 {
            feed.publish(numbered(n));
        }
        let next = slow.next().await.expect("an event");
        assert_eq!(next.event, "snapshot", "{next:?}");
        // Caught up: the next update comes as it is sent.
        feed.publish(numbered(99_999));
        let mut seen = Vec::new();
        while let Some(out) = slow.next().await {
            if *out == numbered(99_999) {
                break;
            }
            seen.push(out);
        }
        assert!(
            seen.iter()
                .all(|o| o.event != "jobs" || o.data["n"].is_null()),
            "updates skipped by the snapshot came after it: {seen:?}"
        );
    }

    #[tokio::test]
    async fn a_page_that_opens_late_reads_the_story_from_the_start() {
        let (feed, _close) = feed();
        let story = feed.story();
        let mut early = Box::pin(feed.subscribe());
        assert_eq!(early.next().await.map(|o| o.event), Some("snapshot"));
        story.tell(json!({ "kind": "scenario", "title": "one" }));
        story.update(json!({ "kind": "progress", "done": 1 }));
        let told = early.next().await.expect("the note");
        assert_eq!((told.event, &told.data["title"]), ("note", &json!("one")));
        assert!(
            told.data["at"].as_i64().is_some_and(|at| at > 0),
            "{told:?}"
        );
        let updated = early.next().await.expect("the progress");
        assert_eq!(updated.data["kind"], "progress");

        let mut late = Box::pin(feed.subscribe());
        let snapshot = late.next().await.expect("the snapshot");
        assert_eq!(snapshot.event, "snapshot");
        let kinds: Vec<&Value> = snapshot.data["story"]
            .as_array()
            .expect("a story")
            .iter()
            .map(|n| &n["kind"])
            .collect();
        assert_eq!(kinds, [&json!("scenario")], "progress is not kept");
    }

    #[tokio::test]
    async fn a_client_that_goes_away_stops_counting() {
        let (feed, _close) = feed();
        let a = feed.subscribe();
        let b = feed.subscribe();
        assert_eq!(feed.listeners(), 2);
        drop(a);
        assert_eq!(feed.listeners(), 1);
        drop(b);
        assert_eq!(feed.listeners(), 0);
    }

    #[tokio::test]
    async fn the_feed_ends_its_streams_when_it_closes() {
        let (feed, close) = feed();
        let mut stream = Box::pin(feed.subscribe());
        assert_eq!(stream.next().await.map(|o| o.event), Some("snapshot"));
        close.send_replace(true);
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            while stream.next().await.is_some() {}
        })
        .await;
        assert!(ended.is_ok(), "the stream did not end");
    }
}
