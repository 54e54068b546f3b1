//! The watcher idle: a tree of many entries watched, nothing changing; the CPU time the
//! process spends meanwhile and its memory, before the watch and while it watches.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fs_model::FsPath;
use fs_rename::FsTree;
use fs_store::{CountingStore, SharedStore};

use super::watcher::Watch;
use super::workloads;

/// Files a directory of the idle tree holds: a tree of 100 000 entries is then about 1 000
/// directories, 1 000 inotify watches.
const PER_DIR: usize = 100;

/// What the idle watch measured.
#[derive(Debug, Clone)]
pub struct Idle {
    /// The store it ran on.
    pub backend: String,
    /// Entries watched, the top included.
    pub entries: usize,
    /// How long the first run (an index of the whole tree) took.
    pub first_run_s: f64,
    /// The idle window.
    pub seconds: f64,
    /// CPU time (user and system) the whole process used in the window, in milliseconds.
    pub cpu_ms: f64,
    /// Store requests in the window.
    pub requests: u64,
    /// The process's memory, before the watch started and while it watches.
    pub before: Memory,
    pub watching: Memory,
}

/// A process's memory, from `/proc/self/status`, in kB.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_kb: u64,
    /// `VmHWM`: the most resident since the process started, or since [`reset_peak`].
    pub peak_kb: u64,
}

impl Memory {
    /// Reads it now; zeros where `/proc` cannot tell (not Linux).
    pub fn now() -> Memory {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Memory {
            rss_kb: field("VmRSS:"),
            peak_kb: field("VmHWM:"),
        }
    }
}

/// Resets `VmHWM` to the resident size now (Linux 4.0 and later; ignored elsewhere), so that
/// the peak read later is that of what ran since.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Builds a tree of `entries` entries, watches it on `store` (named `backend`), and once the
/// first run is done measures `seconds` of idle.
///
/// # Errors
/// If the tree cannot be built or the watch fails.
pub async fn idle(
    store: SharedStore,
    backend: &str,
    entries: usize,
    seconds: f64,
    timeout: Duration,
) -> anyhow::Result<Idle> {
    let work = tempfile::tempdir().context("creating a temporary directory")?;
    let root = work.path().join("idle");
    let built = root.clone();
    tokio::task::spawn_blocking(move || workloads::tree(&built, entries, PER_DIR))
        .await
        .context("building the idle tree")??;
    let counting = CountingStore::new(store);
    let shared: SharedStore = Arc::new(counting.clone());
    let tree = FsTree::new(shared, fs_testkit::unique_name("bench-watch-idle"));
    reset_peak();
    let before = Memory::now();
    let watch = Watch::start(
        tree.clone(),
        root,
        FsPath::parse("/idle")?,
        counting.clone(),
        timeout,
    )
    .await?;
    let first_run_s = watch.first_run.as_secs_f64();
    // The caught-up after the first run, and anything the runtime does after a burst of work.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (cpu, requests, started) = (
        crate::cpu::CpuMark::now(),
        counting.round_trips(),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let cpu_ms = match (cpu, crate::cpu::CpuMark::now()) {
        (Some(before), Some(after)) => before.to(after).own_ms,
        _ => f64::NAN,
    };
    let (requests, seconds) = (
        counting.round_trips() - requests,
        started.elapsed().as_secs_f64(),
    );
    let watching = Memory::now();
    watch.stop().await?;
    crate::measure::drop_tree(&tree).await?;
    Ok(Idle {
        backend: backend.to_owned(),
        entries,
        first_run_s,
        seconds,
        cpu_ms,
        requests,
        before,
        watching,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_proc() {
        let memory = Memory::now();
        assert!(
            memory.rss_kb > 0 && memory.peak_kb >= memory.rss_kb,
            "{memory:?}"
        );
    }
}
