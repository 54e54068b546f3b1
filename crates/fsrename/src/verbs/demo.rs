//! `fsrename demo`: the book's /clinton scenario, four ways, on an in-memory store; with
//! `--serve`, told on the live page as well (`demo_serve.rs`).

use std::sync::Arc;

use anyhow::Context;
use fs_rename::clinton::{Pace, Scenario, ScenarioOutcome, Stage, INDEX};
use fs_store::{SharedStore, SqliteOptions, SqliteStore};

use crate::contract::{DemoReport, DemoRun};
use crate::output::{to_stderr, Printer};
use crate::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};

/// Files under /clinton without `--serve`: enough for the mass rename to take a while.
pub const FILES: usize = 20_000;

/// Runs the four scenarios, printing each outcome as it comes (with `json`, as a line of JSON
/// each); stops (with the error of the write) as soon as nobody reads them any more.
///
/// Told to stop (Ctrl-C, SIGTERM: see `super::interrupted`), it drops the run under way,
/// waits until its two jobs are gone, says where it stopped, and returns
/// [`EXIT_INTERRUPTED`]: the runs printed before stand, and nothing outlives the in-memory
/// store.
pub async fn run(files: usize, slow: f64, json: bool) -> anyhow::Result<u8> {
    let stage = Stage::new(in_memory_store()?, INDEX).pace(Pace::watchable(slow));
    let mut runs = if json {
        Runs::json()
    } else {
        Runs::start(files)?
    };
    let stop = stopped(super::stop_requested());
    tokio::pin!(stop);
    for (n, scenario) in Scenario::ALL.into_iter().enumerate() {
        let outcome = tokio::select! {
            outcome = stage.run(scenario, files) => outcome?,
            () = &mut stop => {
                // The run is dropped, which aborts its jobs: gone before the process ends,
                // they give back what they hold while the runtime still runs.
                stage.jobs_gone().await;
                let all = Scenario::ALL.len();
                to_stderr(format_args!(
                    "fsrename: demo stopped during run {} of {all} ({}); {n} of {all} finished",
                    n + 1,
                    scenario.title(),
                ));
                return Ok(EXIT_INTERRUPTED);
            }
        };
        runs.record(&outcome)?;
    }
    runs.finish()
}

/// Resolves once `stop` turns true (see `super::stop_requested`).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|stop| *stop).await.is_err() {
        // No sender (it is a static, never dropped): no stop either.
        std::future::pending::<()>().await;
    }
}

/// A fresh in-memory store, near-real-time as Elasticsearch's search is, so that a job that
/// forgot to refresh shows it.
pub fn in_memory_store() -> anyhow::Result<SharedStore> {
    let store = SqliteStore::in_memory_with(SqliteOptions::new().near_real_time(true))
        .context("opening the in-memory store")?;
    Ok(Arc::new(store))
}

/// The runs printed so far, and the ones that did not show what they should.
pub struct Runs {
    out: Printer,
    failed: Vec<&'static str>,
    /// Runs recorded so far.
    runs: u64,
    /// Whether they are printed as lines of JSON.
    json: bool,
}

impl Runs {
    /// Prints what the demo does.
    pub fn start(files: usize) -> anyhow::Result<Runs> {
        let mut out = Printer::stdout();
        out.line(format_args!(
            "The scenario of Elasticsearch: The Definitive Guide (Gormley and Tong, O'Reilly 2015),\n\
             \"Solving Concurrency Issues\": job A renames /clinton ({files} files) to /gormley while\n\
             job B renames /clinton/projects/elasticsearch/README.txt to README.asciidoc. Four ways:\n\n\
             Every file and directory is one document, so the counts below are the files plus their\n\
             directories. Locks: X is exclusive (the path is the job's alone), IX is the book's shared\n\
             lock on an ancestor (it keeps others' X off the path while this job works below it).\n\
             A round trip is one request to the store, answered.\n"
        ))?;
        out.flush()?;
        Ok(Runs {
            out,
            failed: Vec::new(),
            runs: 0,
            json: false,
        })
    }

    /// Runs that print themselves as lines of JSON (`demo_run`, then `demo_report`).
    pub fn json() -> Runs {
        Runs {
            out: Printer::stdout(),
            failed: Vec::new(),
            runs: 0,
            json: true,
        }
    }

    /// Prints one run's outcome.
    pub fn record(&mut self, outcome: &ScenarioOutcome) -> anyhow::Result<()> {
        self.runs += 1;
        if self.json {
            self.out.record(&DemoRun {
                title: outcome.scenario.title().to_owned(),
                expectation: outcome.scenario.expectation().to_owned(),
                as_expected: outcome.as_expected,
                verdict: outcome.verdict.clone(),
                documents_before: outcome.documents.0,
                documents_after: outcome.documents.1,
                readme_at: outcome.readme_at.clone(),
                left_under_clinton: outcome.left_under_clinton,
                fsck: outcome.fsck.verdict,
            })?;
        } else {
            self.out.line(outcome)?;
        }
        // Each run takes a while: show it now, and find out now if the reader is gone.
        self.out.flush()?;
        if !outcome.as_expected {
            self.failed.push(outcome.scenario.title());
        }
        Ok(())
    }

    /// Whether every run so far showed what it should.
    pub fn all_as_expected(&self) -> bool {
        self.failed.is_empty()
    }

    /// The closing lines, and the exit code.
    pub fn summary(&self) -> String {
        if self.failed.is_empty() {
            "All four runs showed what they should: with tree locks nothing is lost; without them a\n\
             change is silently lost, and with version numbers alone the mass rename stops half-way."
                .to_owned()
        } else {
            format!("FAILED: not as expected: {}", self.failed.join("; "))
        }
    }

    /// The exit code: 0 only if every run showed what it should.
    pub fn code(&self) -> u8 {
        if self.all_as_expected() {
            EXIT_OK
        } else {
            EXIT_FAILED
        }
    }

    /// Prints the summary; returns the exit code.
    pub fn finish(mut self) -> anyhow::Result<u8> {
        if self.json {
            let report = DemoReport {
                runs: self.runs,
                as_expected: self.all_as_expected(),
                failed: self.failed.iter().map(|f| (*f).to_owned()).collect(),
            };
            self.out.report(&report)?;
            return Ok(self.code());
        }
        let summary = self.summary();
        self.out.line(summary)?;
        self.out.flush()?;
        Ok(self.code())
    }

    /// Prints a line of its own.
    pub fn say(&mut self, line: impl std::fmt::Display) -> anyhow::Result<()> {
        self.out.line(line)?;
        self.out.flush()
    }
}
