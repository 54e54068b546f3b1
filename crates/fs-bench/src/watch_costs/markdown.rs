//! The watcher's section of `docs/benchmarks.md`: rendered from [`WatchCosts`] between the
//! markers of [`crate::report`], and put in place of the one the file holds (or at its end).

use std::fmt::Write as _;
use std::path::Path;

use super::workloads::{thousands, Workload};
use super::{BackendCosts, Outcome, WatchCosts};
use crate::report::{WATCH_COSTS_END, WATCH_COSTS_START};

/// Issue 48's target: `rsync` into a new directory caught up within this many times `cp -a`
/// of the same tree.
const RSYNC_OVER_CP: f64 = 3.0;

/// The section, markers included: `command` is how it was run, `stamp` when and at which
/// commit, `machine` on what.
pub fn render(costs: &WatchCosts, command: &str, stamp: &str, machine: &str) -> String {
    let plan = &costs.plan;
    let mut s = String::new();
    let _ = writeln!(s, "{WATCH_COSTS_START}");
    let _ = writeln!(s, "## 7. The watcher (`index --watch`)\n");
    let _ = writeln!(
        s,
        "Written by `{command}` on {stamp}, on {machine}; a full run carries this section over.\n"
    );
    let _ = writeln!(s, "What following a directory costs (issue 48). On each backend, a fresh tree index and a fresh temporary directory, watched in this process by `watch_dir` with the options of `fsrename index --watch` (debounce 250 ms) on the backend's store behind a request counter; after its first run, each workload runs in turn on the watched directory, the watcher following it. *Changed* counts the entries the workload created, moved, removed or wrote, from the workload itself (an entry made then moved by the same workload counts once; git's own writes in `.git` do not count). *Tool s* is how long its commands took; *caught up s* is from their return to the watcher saying it is caught up after a batch that followed (0 if it said so before they returned); *requests* counts every store request from the workload's start to then, and *batches* the batches applied meanwhile. A workload not caught up within {} s is reported as such, and the backend's later workloads are not run.\n", plan.timeout.as_secs());
    for backend in &costs.backends {
        workloads(&mut s, backend);
    }
    match &costs.idle {
        Ok(idle) => {
            let mib = |kb: u64| kb as f64 / 1024.0;
            let _ = writeln!(s, "**Idle.** A tree of {} entries (directories of 100 files) watched on the {} store: its first run took {:.1} s. Then, a second later, what the whole bench process used over {:.0} s with nothing changing: CPU time (user + system, `/proc/self/stat`, 10 ms ticks), store requests, and memory (`VmRSS`, `VmHWM` of `/proc/self/status`) before the watch started (the tree on disk, the store open) and while it watches. The peak was reset as the watch started: it is the first run's. It is the whole process, so the embedded store, which runs in it, counts too (its page cache).\n",
                thousands(idle.entries as u64), idle.backend, idle.first_run_s, idle.seconds);
            let _ = writeln!(
                s,
                "| CPU ms over the window | CPU, share of a core | store requests | RSS before MiB | RSS watching MiB | watcher's share MiB | peak MiB |\n| --- | --- | --- | --- | --- | --- | --- |"
            );
            let _ = writeln!(
                s,
                "| {:.0} | {:.2} % | {} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                idle.cpu_ms,
                idle.cpu_ms / (idle.seconds * 1e3) * 100.0,
                idle.requests,
                mib(idle.before.rss_kb),
                mib(idle.watching.rss_kb),
                mib(idle.watching.rss_kb) - mib(idle.before.rss_kb),
                mib(idle.watching.peak_kb),
            );
        }
        Err(e) => {
            let _ = writeln!(s, "**Idle**: failed: {e}\n");
        }
    }
    let _ = write!(s, "{WATCH_COSTS_END}");
    s
}

/// The table of one backend, and the target of `rsync` against `cp -a`.
fn workloads(s: &mut String, backend: &BackendCosts) {
    let _ = write!(s, "**{}**: {}.", backend.name, backend.about);
    if let Some((entries, seconds, requests)) = backend.first_run {
        let _ = write!(
            s,
            " The first run, an index of the {} entries the directory held (a git repository with its `.git`, the editor's file), took {seconds:.2} s and {requests} requests.",
            thousands(entries)
        );
    }
    let _ = writeln!(
        s,
        "\n\n| workload | changed | tool s | caught up s | batches | requests | requests / change |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for row in &backend.rows {
        let (caught, requests, per) = match &row.outcome {
            Outcome::CaughtUp { seconds, requests } => (
                format!("{seconds:.2}"),
                requests.to_string(),
                format!("{:.3}", *requests as f64 / row.changes.max(1) as f64),
            ),
            Outcome::TimedOut { requests } => (
                "**timed out**".to_owned(),
                format!("{requests} by then"),
                "-".to_owned(),
            ),
            Outcome::NotRun(why) => {
                let _ = writeln!(
                    s,
                    "| {} | {} | not run: {why} | | | | |",
                    row.label, row.changes
                );
                continue;
            }
        };
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {caught} | {} | {requests} | {per} |",
            row.label,
            thousands(row.changes),
            row.tool_s,
            row.batches
        );
    }
    let _ = writeln!(s);
    let caught = |w: Workload| {
        backend.rows.iter().find_map(|r| match r.outcome {
            Outcome::CaughtUp { seconds, .. } if r.workload == w => Some((seconds, r.tool_s)),
            _ => None,
        })
    };
    if let (Some((rsync, rsync_tool)), Some((cp, cp_tool))) =
        (caught(Workload::Rsync), caught(Workload::CopyA))
    {
        let ratio = rsync / cp;
        let _ = writeln!(
            s,
            "`rsync` caught up {rsync:.2} s after it returned, `cp -a` of the same tree {cp:.2} s: {ratio:.2} × (target: at most {RSYNC_OVER_CP:.0} ×: {}). From the tool's start: {:.2} s against {:.2} s.\n",
            if ratio <= RSYNC_OVER_CP { "met" } else { "**missed**" },
            rsync_tool + rsync,
            cp_tool + cp
        );
    }
    for row in &backend.rows {
        if row.rescans > 0 {
            let _ = writeln!(s, "- {}: {} rescan(s).", row.label, row.rescans);
        }
        if let Some(first) = row.failures.first() {
            let _ = writeln!(
                s,
                "- {}: {} change(s) not applied, first: {first}",
                row.label,
                row.failures.len(),
            );
        }
    }
    if let Some(failure) = &backend.failure {
        let _ = writeln!(s, "- **failed**: {failure}\n");
    }
}

/// When, and at which commit: `2024-05-01, commit abc1234` (`with uncommitted changes` where
/// the work tree differs from it).
pub async fn stamp() -> String {
    let git = |args: &'static [&'static str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let found = tokio::task::spawn_blocking(move || {
        (
            git(&["rev-parse", "--short", "HEAD"]),
            git(&["status", "--porcelain", "--untracked-files=no"]),
        )
    })
    .await
    .unwrap_or((None, None));
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let date = date.get(..10).unwrap_or(&date).to_owned();
    match found {
        (Some(commit), Some(status)) if !status.is_empty() => {
            format!("{date}, commit {commit} with uncommitted changes")
        }
        (Some(commit), _) => format!("{date}, commit {commit}"),
        (None, _) => date,
    }
}

/// Puts `section` in place of the watcher's section of `dir/benchmarks.md`, or at its end if
/// it has none (or there is no file yet); returns the file's path.
///
/// # Errors
/// If the file cannot be read or written.
pub fn write_into(dir: &Path, section: &str) -> anyhow::Result<std::path::PathBuf> {
    let markers = (
        crate::report::WATCH_COSTS_START,
        crate::report::WATCH_COSTS_END,
    );
    crate::report::write_section(dir, markers, section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_replaced_in_place_or_appended() {
        let section = format!("{WATCH_COSTS_START}\nnew\n{WATCH_COSTS_END}");
        let old = format!("# B\n\ntext\n\n{WATCH_COSTS_START}\nold\n{WATCH_COSTS_END}\n\nafter\n");
        let splice = |doc: &str, section: &str| {
            crate::report::splice(doc, (WATCH_COSTS_START, WATCH_COSTS_END), section)
        };
        assert_eq!(
            splice(&old, &section),
            format!("# B\n\ntext\n\n{section}\n\nafter\n")
        );
        assert_eq!(
            splice("# B\n\ntext\n", &section),
            format!("# B\n\ntext\n\n{section}\n")
        );
        assert_eq!(splice("", &section), format!("{section}\n"));
    }
}
