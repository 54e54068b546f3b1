//! `fsrename demo --serve`: the four runs on the store the live page shows, slowed to be
//! watched, and told on the page as they go.
//!
//! The service runs as `fsrename serve` would, on an in-memory store. Once a page is open the
//! scenarios run one after another in its tree index: the page sees their locks as it sees any
//! job's, and reads the story (`Story`, the feed's `note` events): which run, each job's
//! steps and progress, and what the run lost. The service stays up afterwards, the tree as
//! the last run left it, until Ctrl-C.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fs_rename::clinton::{
    Narration, Narrator, Pace, Scenario, ScenarioOutcome, Stage, CLINTON, GORMLEY, INDEX,
};
use serde_json::json;
use tokio::sync::watch;

use super::demo::{in_memory_store, Runs};
use crate::output::to_stderr;
use crate::serve::{ServeConfig, Server, Story};

/// Files under /clinton with `--serve`: a move of a few seconds at pace 1.
pub const FILES: usize = 2_000;

/// How often the demo looks whether a page is open yet.
const PAGE_POLL: Duration = Duration::from_millis(100);

/// The directories a page opens in each run, so that every lock of the two jobs is in view.
const OPEN: [&str; 2] = ["projects", "projects/elasticsearch"];

/// Serves the page on `listen`, waits for one to open, then runs the four scenarios with
/// `files` files at pace `slow`; serves on until `shutdown`. Returns the exit code of the
/// runs.
pub async fn run(
    files: usize,
    listen: SocketAddr,
    slow: f64,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<u8> {
    let store = in_memory_store()?;
    let mut config = ServeConfig::new(INDEX);
    config.listen = listen;
    config.token = ServeConfig::token_from_env();
    // Nothing outlives the process on an in-memory store: nothing to recover but at start.
    config.recover_every = None;
    config.validate()?;
    let (stop, stopping) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        stop.send_replace(true);
    });
    let server = Server::start(config, Arc::clone(&store), stopped(stopping.clone())).await?;
    let story = server.story().clone();
    let mut runs = Runs::start(files)?;
    runs.say(format_args!(
        "The live page: http://{}/\nThe runs start once a page is open there. Ctrl-C stops.\n",
        server.addr()
    ))?;
    let stage = Stage::new(store, INDEX)
        .pace(Pace::watchable(slow))
        .narrator(narrator(story.clone()));
    let told = tokio::select! {
        code = tell(&story, &mut runs, &stage, files, slow) => Some(code?),
        () = stopped(stopping.clone()) => None,
    };
    if told.is_some() {
        runs.say("The demo is over: the page stays up, with the tree as the last run left it, until Ctrl-C.")?;
    } else {
        // The run under way was dropped, which aborts its jobs: gone before the process
        // ends, they give back what they hold while the runtime still runs.
        stage.jobs_gone().await;
    }
    server.wait().await?;
    to_stderr(if told.is_some() {
        "fsrename: demo stopped; the page is closed"
    } else {
        "fsrename: demo stopped before its runs were over; the page is closed"
    });
    // Stopped before the story was told: 130, as any verb stopped by Ctrl-C.
    Ok(told.unwrap_or(crate::EXIT_INTERRUPTED))
}

/// Resolves once `stopping` turns true.
async fn stopped(mut stopping: watch::Receiver<bool>) {
    // A dropped sender is as good as a stop.
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// Waits for a page, then runs and tells the four scenarios; returns the exit code.
async fn tell(
    story: &Story,
    runs: &mut Runs,
    stage: &Stage,
    files: usize,
    slow: f64,
) -> anyhow::Result<u8> {
    while story.listeners() == 0 {
        tokio::time::sleep(PAGE_POLL).await;
    }
    let pace = Pace::watchable(slow);
    let open: Vec<String> = [CLINTON, GORMLEY]
        .into_iter()
        .flat_map(|top| {
            std::iter::once(top.to_owned()).chain(OPEN.iter().map(move |d| format!("{top}/{d}")))
        })
        .collect();
    for (n, scenario) in Scenario::ALL.into_iter().enumerate() {
        story.tell(json!({
            "kind": "scenario",
            "n": n + 1,
            "of": Scenario::ALL.len(),
            "title": scenario.title(),
            "expectation": scenario.expectation(),
            "open": open,
        }));
        let outcome = stage.run(scenario, files).await?;
        story.tell(verdict(n + 1, &outcome));
        runs.record(&outcome)?;
        // Time to read the verdict before the tree is built again.
        tokio::time::sleep(pace.hold * 2).await;
    }
    story.tell(json!({
        "kind": "end",
        "ok": runs.all_as_expected(),
        "summary": runs.summary(),
    }));
    Ok(runs.code())
}

/// Tells the page each step as a kept note, and each job's progress as a passing one.
fn narrator(story: Story) -> Narrator {
    Arc::new(move |narration| match narration {
        Narration::Ready { documents } => story.tell(json!({
            "kind": "ready",
            "documents": documents,
        })),
        Narration::Step(entry) => story.tell(json!({
            "kind": "step",
            "job": entry.job.to_string(),
            "what": entry.what,
            "ms": u64::try_from(entry.at.as_millis()).unwrap_or(u64::MAX),
        })),
        Narration::Progress { job, done, total } => story.update(json!({
            "kind": "progress",
            "job": job.to_string(),
            "done": done,
            "total": total,
        })),
    })
}

fn verdict(n: usize, outcome: &ScenarioOutcome) -> serde_json::Value {
    json!({
        "kind": "verdict",
        "n": n,
        "title": outcome.scenario.title(),
        "ok": outcome.as_expected,
        "verdict": outcome.verdict,
        "lost": outcome.damage().is_some(),
        "damage": outcome.damage().unwrap_or_else(|| "nothing was lost".to_owned()),
        "documents": [outcome.documents.0, outcome.documents.1],
        "fsck_problems": outcome.fsck.problem_count,
    })
}
