//! Issue 19's load target: with 200 pages open on the live feed (`GET /events`) while renames
//! run, the store's request rate is the same, within 10 %, as with no page open.
//!
//! Each round serves `fsrename serve` in process on an embedded store behind a
//! [`CountingStore`], twice: once with no event stream open, once with `streams` of them (the
//! order alternating from round to round). Each time, `workers` clients keep renames going
//! through the HTTP API for `seconds` (each renames its own directory back and forth, and
//! polls the job until it is done), after a warm-up; what is counted is the store's requests
//! and the renames finished. The rounds are paired, so that the machine's drift cancels out
//! in each round's ratio: requests a second with the streams open over requests a second
//! without.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fs_model::{FsDoc, FsPath};
use fs_rename::FsTree;
use fs_store::{CountingStore, SharedStore};
use fsrename::serve::{ServeConfig, Server};
use serde_json::{json, Value};

use crate::measure::{embedded, Embedded, LockWriteCounts, LockWrites};

/// Files in each renamed directory.
const FILES: usize = 20;

/// Before counting: the streams connected, the first renames done.
const WARM_UP: Duration = Duration::from_secs(1);

/// What one run (one half of a round) measured.
#[derive(Debug, Clone, Copy)]
struct Run {
    requests: u64,
    renames: u64,
    seconds: f64,
    /// Streams that were sent at least one event after their first snapshot.
    heard: usize,
}

impl Run {
    fn rate(self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

/// What [`feed_load`] measured.
pub struct FeedLoad {
    streams: usize,
    seconds: f64,
    workers: usize,
    /// Each round: (no stream, `streams` streams).
    rounds: Vec<(Run, Run)>,
}

impl FeedLoad {
    /// Each round's ratio of request rates, sorted.
    fn ratios(&self) -> Vec<f64> {
        let mut ratios: Vec<f64> = self
            .rounds
            .iter()
            .map(|(alone, watched)| watched.rate() / alone.rate())
            .collect();
        ratios.sort_by(f64::total_cmp);
        ratios
    }

    /// The median ratio: the target wants it within 0.9 to 1.1.
    pub fn median_ratio(&self) -> f64 {
        let ratios = self.ratios();
        ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

impl std::fmt::Display for FeedLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "store requests a second while {} clients rename for {:.0} s, with no page open and with {} event streams open:",
            self.workers, self.seconds, self.streams
        )?;
        writeln!(
            f,
            "  round  requests/s alone  with streams  ratio  renames/s alone  with streams  requests/rename alone  with streams"
        )?;
        for (i, (alone, watched)) in self.rounds.iter().enumerate() {
            let per = |r: &Run| r.requests as f64 / r.renames.max(1) as f64;
            writeln!(
                f,
                "  {:>5}  {:>16.0}  {:>12.0}  {:>5.3}  {:>15.1}  {:>12.1}  {:>21.2}  {:>12.2}",
                i + 1,
                alone.rate(),
                watched.rate(),
                watched.rate() / alone.rate(),
                alone.renames as f64 / alone.seconds,
                watched.renames as f64 / watched.seconds,
                per(alone),
                per(watched),
            )?;
        }
        let heard: Vec<usize> = self.rounds.iter().map(|(_, w)| w.heard).collect();
        writeln!(f, "  streams that heard the renames, each round: {heard:?}")?;
        let median = self.median_ratio();
        let met = (0.9..=1.1).contains(&median);
        write!(
            f,
            "median ratio {median:.3}: target (within 10 %) {}",
            if met { "met" } else { "MISSED" }
        )
    }
}

/// Runs `rounds` paired rounds of `seconds` each.
///
/// # Errors
/// If the service cannot start or a request fails.
pub async fn feed_load(
    streams: usize,
    seconds: f64,
    rounds: usize,
    workers: usize,
    kind: Embedded,
) -> anyhow::Result<FeedLoad> {
    let mut measured = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Alternating which half goes first cancels what the first run of a pair pays.
        let (alone, watched) = if round % 2 == 0 {
            let alone = run(0, seconds, workers, kind).await?;
            (alone, run(streams, seconds, workers, kind).await?)
        } else {
            let watched = run(streams, seconds, workers, kind).await?;
            (run(0, seconds, workers, kind).await?, watched)
        };
        eprintln!(
            "round {}: {:.0} requests/s alone, {:.0} with {streams} streams",
            round + 1,
            alone.rate(),
            watched.rate()
        );
        measured.push((alone, watched));
    }
    Ok(FeedLoad {
        streams,
        seconds,
        workers,
        rounds: measured,
    })
}

/// One service, `streams` streams, `workers` renaming clients for `seconds` after the warm-up.
async fn run(streams: usize, seconds: f64, workers: usize, kind: Embedded) -> anyhow::Result<Run> {
    let (inner, _dir) = embedded(kind)?;
    let counting = CountingStore::new(inner);
    let store: SharedStore = Arc::new(counting.clone());
    let index = "bench-feed";
    let tree = FsTree::new(Arc::clone(&store), index);
    tree.ensure_indices().await?;
    let mut docs = Vec::new();
    for w in 0..workers {
        let dir = FsPath::parse(&format!("/a{w}"))?;
        docs.push(FsDoc::dir(dir.clone(), 0));
        for f in 0..FILES {
            docs.push(FsDoc::file(dir.join(&format!("f{f}"))?, 1, 0));
        }
    }
    tree.insert_all(docs).await?;
    tree.refresh().await?;

    let (stop, server, base) = serve(&store, index, workers).await?;
    let http = reqwest::Client::new();

    let mut pages = Vec::with_capacity(streams);
    for _ in 0..streams {
        let mut answer = http
            .get(format!("{base}/events"))
            .send()
            .await
            .context("GET /events")?;
        pages.push(tokio::spawn(async move {
            // Chunks after the first (the snapshot): what the page heard of the renames.
            let mut chunks = 0u64;
            while let Ok(Some(_)) = answer.chunk().await {
                chunks += 1;
            }
            chunks > 1
        }));
    }

    let window = renaming_window(
        &http,
        std::slice::from_ref(&base),
        &counting,
        None,
        None,
        workers,
        |w| [format!("/a{w}"), format!("/b{w}")],
        WARM_UP,
        seconds,
    )
    .await?;
    let _ = stop.send(());
    server.wait().await?;
    // A rename of its own directory never meets another's: a failure is a fault to report.
    if let Some(failure) = window.first_failure {
        anyhow::bail!(
            "{} rename(s) failed in the window; the first: {failure}",
            window.failed
        );
    }
    let mut heard = 0;
    for page in pages {
        heard += usize::from(page.await.unwrap_or(false));
    }
    Ok(Run {
        requests: window.requests,
        renames: window.latencies_ms.len() as u64,
        seconds: window.seconds,
        heard,
    })
}

/// Serves `fsrename serve` in process on `store` over the tree `index`, running up to
/// `workers` jobs at once, with no recovery; returns its stop, the server and its base URL.
async fn serve(
    store: &SharedStore,
    index: &str,
    workers: usize,
) -> anyhow::Result<(tokio::sync::oneshot::Sender<()>, Server, String)> {
    let mut config = ServeConfig::new(index);
    config.listen = "127.0.0.1:0".parse()?;
    config.max_jobs = workers;
    config.recover_every = None;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = Server::start(config, Arc::clone(store), async {
        let _ = stopped.await;
    })
    .await?;
    let base = format!("http://{}", server.addr());
    Ok((stop, server, base))
}

/// What [`renaming_window`] counted.
pub(crate) struct Window {
    /// The store's requests in the window.
    pub(crate) requests: u64,
    /// The lock-index writes in the window, if they were counted.
    pub(crate) lock_writes: LockWriteCounts,
    /// How long the window lasted, in seconds.
    pub(crate) seconds: f64,
    /// The submit-to-done time of each rename finished in the window, in milliseconds.
    pub(crate) latencies_ms: Vec<f64>,
    /// The renames that ended failed (the service's answer for one of them), not among
    /// `latencies_ms`: a client whose job failed stops, and the others go on, so that one
    /// refusal does not end the measurement.
    pub(crate) failed: usize,
    pub(crate) first_failure: Option<String>,
    /// The job of each of those renames as the service showed it done (its report's phases,
    /// its timestamps), in the same order.
    pub(crate) jobs: Vec<Value>,
    /// The CPU the machine used in the window.
    pub(crate) cpu: crate::cpu::CpuUse,
    /// What the calls in the window held the SQLite connection for, where one was given.
    pub(crate) connection: Option<fs_store::ConnectionUse>,
}

/// Keeps `clients` clients renaming through the service at `bases` (client `i` through
/// instance `i` modulo their number), client `i` its own pair of paths (`pair(i)`) there and
/// back; after `warm_up`, counts for `seconds` the store's requests (through `counting`), its
/// lock-index writes (through `lock_writes`, if given), what its SQLite connection was held
/// for (`connection`, if given) and the renames finished with their latencies; then stops the
/// clients and waits for them.
#[allow(clippy::too_many_arguments)] // Each is one knob of the window; a struct would only rename them.
pub(crate) async fn renaming_window(
    http: &reqwest::Client,
    bases: &[String],
    counting: &CountingStore,
    lock_writes: Option<&LockWrites>,
    connection: Option<&fs_store::SqliteStore>,
    clients: usize,
    pair: impl Fn(usize) -> [String; 2],
    warm_up: Duration,
    seconds: f64,
) -> anyhow::Result<Window> {
    let counting_on = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let mut running = Vec::with_capacity(clients);
    anyhow::ensure!(!bases.is_empty(), "no service to rename through");
    for i in 0..clients {
        let (http, base, names) = (http.clone(), bases[i % bases.len()].clone(), pair(i));
        let (counting_on, done) = (Arc::clone(&counting_on), Arc::clone(&done));
        running.push(tokio::spawn(async move {
            let mut latencies_ms = Vec::new();
            let mut jobs = Vec::new();
            let (mut failed, mut first_failure) = (0, None);
            let mut turn = 0;
            while !done.load(Ordering::Relaxed) {
                let (from, to) = (&names[turn % 2], &names[(turn + 1) % 2]);
                let started = Instant::now();
                match rename(&http, &base, from, to).await? {
                    Ended::Done(job) => {
                        if counting_on.load(Ordering::Relaxed) {
                            latencies_ms.push(started.elapsed().as_secs_f64() * 1e3);
                            jobs.push(job);
                        }
                        turn += 1;
                    }
                    // Where its directory is now is not known for sure (a failure after
                    // journaling is finished by recovery): this client stops here.
                    Ended::Failed(job) => {
                        failed += 1;
                        first_failure = Some(format!("rename {from} → {to} failed: {job}"));
                        break;
                    }
                }
            }
            anyhow::Ok((latencies_ms, jobs, failed, first_failure))
        }));
    }
    tokio::time::sleep(warm_up).await;
    let before = counting.round_trips();
    let locks_before = lock_writes.map(LockWrites::counts).unwrap_or_default();
    let connection_before = connection.map(fs_store::SqliteStore::connection_use);
    let cpu_before = crate::cpu::CpuMark::now();
    counting_on.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let requests = counting.round_trips() - before;
    let locks = lock_writes
        .map(|l| l.counts().since(locks_before))
        .unwrap_or_default();
    let connection = connection
        .zip(connection_before)
        .map(|(store, before)| store.connection_use().since(&before));
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = match (cpu_before, crate::cpu::CpuMark::now()) {
        (Some(before), Some(after)) => before.to(after),
        _ => crate::cpu::CpuUse::default(),
    };
    counting_on.store(false, Ordering::Relaxed);
    done.store(true, Ordering::Relaxed);
    let (mut latencies_ms, mut jobs) = (Vec::new(), Vec::new());
    let (mut failed, mut first_failure) = (0, None);
    for client in running {
        let (latencies, done, failures, first) = client.await.context("a renaming client")??;
        latencies_ms.extend(latencies);
        jobs.extend(done);
        failed += failures;
        first_failure = first_failure.or(first);
    }
    Ok(Window {
        requests,
        lock_writes: locks,
        seconds: elapsed,
        latencies_ms,
        failed,
        first_failure,
        jobs,
        cpu,
        connection,
    })
}

/// How a job asked of the service ended: as the service showed it.
pub(crate) enum Ended {
    Done(Value),
    Failed(Value),
}

/// Renames `from` to `to` through the API, naming no strategy (the service's default), and
/// polls the job every 2 ms until it is done or failed; returns the job as shown then. The
/// service measurement's clients too.
pub(crate) async fn rename(
    http: &reqwest::Client,
    base: &str,
    from: &str,
    to: &str,
) -> anyhow::Result<Ended> {
    let answer: Value = http
        .post(format!("{base}/renames"))
        .json(&json!({ "from": from, "to": to }))
        .send()
        .await
        .context("POST /renames")?
        .json()
        .await?;
    let id = answer["id"]
        .as_str()
        .with_context(|| format!("no job id in {answer}"))?
        .to_owned();
    loop {
        let job: Value = http
            .get(format!("{base}/renames/{id}"))
            .send()
            .await?
            .json()
            .await?;
        match job["state"].as_str() {
            Some("done") => return Ok(Ended::Done(job)),
            Some("failed") => return Ok(Ended::Failed(job)),
            _ => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that fails is counted, its client stops, and the window still ends with what the
    /// others did: one refusal (a lock not granted in time at K = 64) no longer ends the
    /// whole measurement.
    #[tokio::test]
    async fn a_failed_rename_is_counted_and_the_window_goes_on() -> anyhow::Result<()> {
        let (inner, _dir) = embedded(Embedded::Memory)?;
        let counting = CountingStore::new(inner);
        let store: SharedStore = Arc::new(counting.clone());
        let tree = FsTree::new(Arc::clone(&store), "bench-failed");
        tree.ensure_indices().await?;
        tree.insert_all(vec![FsDoc::dir(FsPath::parse("/a0")?, 0)])
            .await?;
        tree.refresh().await?;
        let (stop, server, base) = serve(&store, "bench-failed", 2).await?;
        // Client 0 renames `/a0` back and forth; client 1's `/a1` does not exist.
        let window = renaming_window(
            &reqwest::Client::new(),
            std::slice::from_ref(&base),
            &counting,
            None,
            None,
            2,
            |w| [format!("/a{w}"), format!("/b{w}")],
            Duration::ZERO,
            0.3,
        )
        .await?;
        let _ = stop.send(());
        server.wait().await?;
        assert_eq!(window.failed, 1, "client 1's one rename");
        let failure = window.first_failure.unwrap_or_default();
        assert!(
            failure.contains("rename /a1 → /b1 failed") && failure.contains("not found"),
            "{failure}"
        );
        assert!(!window.latencies_ms.is_empty(), "client 0 went on renaming");
        Ok(())
    }
}
