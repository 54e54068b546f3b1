//! Counters for `GET /metrics`, in Prometheus's text format. Every series carries the
//! instance's name (`instance="..."`): with several instances behind a load balancer, each
//! counts the jobs it ran, and the jobs it took over from an instance that died.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the service counts.
#[derive(Debug, Default)]
pub struct Metrics {
    pub submitted: AtomicU64,
    pub rejected_full: AtomicU64,
    pub done: AtomicU64,
    pub failed: AtomicU64,
    pub lock_waits: AtomicU64,
    pub conflicts: AtomicU64,
    pub retries: AtomicU64,
    pub documents: AtomicU64,
    pub adopted: AtomicU64,
    /// Open `GET /events` streams (a gauge).
    pub event_streams: AtomicU64,
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Renders the counters of `instance` and the current number of its jobs in each state.
    pub fn render(&self, instance: &str, states: &[(&str, u64)]) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let label = label_value(instance);
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{instance=\"{label}\"}} {value}"
            );
        };
        counter(
            "fsrename_jobs_submitted_total",
            "Rename jobs accepted.",
            get(&self.submitted),
        );
        counter(
            "fsrename_jobs_rejected_total",
            "Rename jobs refused because the queue was full.",
            get(&self.rejected_full),
        );
        counter(
            "fsrename_jobs_done_total",
            "Rename jobs that succeeded.",
            get(&self.done),
        );
        counter(
            "fsrename_jobs_failed_total",
            "Rename jobs that failed.",
            get(&self.failed),
        );
        counter(
            "fsrename_lock_waits_total",
            "Lock attempts refused (a job then waits and retries).",
            get(&self.lock_waits),
        );
        counter(
            "fsrename_conflicts_total",
            "Jobs stopped by a version conflict.",
            get(&self.conflicts),
        );
        counter(
            "fsrename_retries_total",
            "Bulk items sent again after a transient failure.",
            get(&self.retries),
        );
        counter(
            "fsrename_documents_rewritten_total",
            "Documents rewritten by rename jobs.",
            get(&self.documents),
        );
        counter(
            "fsrename_jobs_adopted_total",
            "Jobs taken over from an instance that died.",
            get(&self.adopted),
        );
        let _ = writeln!(
            out,
            "# HELP fsrename_event_streams Open event streams (live pages).\n# TYPE fsrename_event_streams gauge\nfsrename_event_streams{{instance=\"{label}\"}} {}",
            get(&self.event_streams)
        );
        let _ = writeln!(
            out,
            "# HELP fsrename_jobs Jobs of this instance by state.\n# TYPE fsrename_jobs gauge"
        );
        for (state, n) in states {
            let _ = writeln!(
                out,
                "fsrename_jobs{{instance=\"{label}\",state=\"{state}\"}} {n}"
            );
        }
        out
    }
}

/// `value` as a Prometheus label value: backslash, double quote and newline escaped.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
