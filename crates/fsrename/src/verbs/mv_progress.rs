//! How `fsrename mv`, `cp` and `rm` show a job while it runs: a bar on a terminal, a line now
//! and then in a log, or every event as a JSON line for scripts (and for the crash test, which
//! aims its kills at them).

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fs_rename::{JobKind, ProgressSink, RenameEvent};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::ProgressMode;
use crate::contract::Contract;
use crate::output::to_stderr;

/// How often the line mode reports progress.
const LINE_EVERY: Duration = Duration::from_secs(2);

/// What shows the progress: the sink to give the job, and the bar to clear at the end.
pub struct Progress {
    pub sink: Option<ProgressSink>,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Returns the display for `mode`, of a job of `kind`.
    pub fn new(mode: ProgressMode, kind: JobKind) -> Progress {
        match mode {
            ProgressMode::Auto if std::io::stderr().is_terminal() => bar(),
            ProgressMode::Auto | ProgressMode::Lines => lines(kind),
            ProgressMode::Json => Progress {
                sink: Some(Arc::new(|event: RenameEvent| {
                    // An event that cannot be serialised or shown (stderr closed) is not worth
                    // failing the rename for: stopping half-way would leave it unfinished.
                    if let Ok(line) = event.to_line() {
                        to_stderr(line);
                    }
                })),
                bar: None,
            },
            ProgressMode::None => Progress {
                sink: None,
                bar: None,
            },
        }
    }

    /// Clears the bar, if any, so the summary prints on a clean line.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn bar() -> Progress {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar.set_message("taking locks");
    let shown = bar.clone();
    let sink = Arc::new(move |event: RenameEvent| match event {
        RenameEvent::Waiting { blocker, attempts } => {
            shown.set_message(format!(
                "waiting (attempt {attempts}): blocked by the {blocker}"
            ));
        }
        RenameEvent::Locked { .. } => shown.set_message("locked; checking"),
        RenameEvent::Checked { total } => {
            shown.set_length(total);
            shown.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:40}] {pos}/{len} documents ({per_sec}, {eta} left) {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            shown.set_message("");
        }
        RenameEvent::Progress { done, total } => {
            shown.set_length(total);
            shown.set_position(done);
        }
        RenameEvent::Retrying { items } => shown.set_message(format!("resending {items}")),
        RenameEvent::Closed { .. } => shown.set_message("releasing locks"),
        RenameEvent::Journaled { .. } | RenameEvent::Released => {}
    });
    Progress {
        sink: Some(sink),
        bar: Some(bar),
    }
}

fn lines(kind: JobKind) -> Progress {
    let done_word = match kind {
        JobKind::Rename => "moved",
        JobKind::Copy => "copied",
        JobKind::Delete => "deleted",
    };
    let started = Instant::now();
    let last = Mutex::new(started);
    let sink = Arc::new(move |event: RenameEvent| match event {
        // The first refusal says why the job is not moving; later ones would only repeat it.
        RenameEvent::Waiting {
            blocker,
            attempts: 1,
        } => {
            to_stderr(format_args!(
                "fsrename: waiting for locks: blocked by the {blocker}"
            ));
        }
        RenameEvent::Progress { done, total } => {
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() >= LINE_EVERY {
                *last = Instant::now();
                to_stderr(format_args!(
                    "fsrename: {done} of {total} documents {done_word} ({:.0} s)",
                    started.elapsed().as_secs_f64()
                ));
            }
        }
        _ => {}
    });
    Progress {
        sink: Some(sink),
        bar: None,
    }
}
