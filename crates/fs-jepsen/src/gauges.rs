//! What a long history must not see grow: the service instances' resident memory, the search
//! contexts open on the cluster, and the lock index's documents and bytes. Read at the
//! start, every so often while the clients run, and at the end (before and after recovery),
//! so that a leak shows as a trend rather than as one figure (issue 72: the hour-long
//! history).
//!
//! A gauge that cannot be read at that moment (a node down or cut off, an instance killed
//! and not yet started again) is `None`: the nemesis is at work while the gauges are read.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// The gauges at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// When, since the history's start.
    pub at: Duration,
    /// Which moment: `start`, `running`, `end` (clients stopped, instances still up) or
    /// `recovered` (instances stopped, recovery done).
    pub moment: &'static str,
    /// Each service instance up at that moment: its name and resident memory in KiB.
    pub instances: Vec<(String, Option<u64>)>,
    /// Search contexts open on every node of the cluster.
    pub open_contexts: Option<u64>,
    /// Documents in the lock index (locks and journal entries), primaries only.
    pub lock_docs: Option<u64>,
    /// Deleted documents the lock index's segments still hold, primaries only.
    pub lock_deleted: Option<u64>,
    /// The lock index's size on disk in bytes, primaries only.
    pub lock_bytes: Option<u64>,
    /// Entries in the rename journal (`<index>-journal`), primaries only.
    pub journal_docs: Option<u64>,
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
        let instances: Vec<String> = self
            .instances
            .iter()
            .map(|(name, rss)| format!("{name} {} KiB", show(*rss)))
            .collect();
        write!(
            f,
            "| {:.0} s | {} | {} | {} | {} / {} | {} | {} |",
            self.at.as_secs_f64(),
            self.moment,
            instances.join(", "),
            show(self.open_contexts),
            show(self.lock_docs),
            show(self.lock_deleted),
            show(self.lock_bytes),
            show(self.journal_docs),
        )
    }
}

/// The header of the table [`Sample`]'s `Display` makes rows of.
pub const TABLE_HEADER: &str = "| at | moment | instances (resident memory) | open contexts | lock index docs / deleted | lock index bytes | journal entries |\n| --- | --- | --- | --- | --- | --- | --- |";

/// Reads the gauges: `instances` (name, process id), and on the cluster at `es` the
/// contexts and the lock and journal indices of the tree index `index`.
pub async fn read(
    at: Duration,
    moment: &'static str,
    instances: Vec<(String, u32)>,
    es: Option<&str>,
    index: &str,
) -> Sample {
    let instances = instances
        .into_iter()
        .map(|(name, pid)| (name, resident_kib(pid)))
        .collect();
    let (mut open_contexts, mut lock_docs, mut lock_deleted, mut lock_bytes, mut journal_docs) =
        (None, None, None, None, None);
    if let Some(es) = es {
        if let Ok(http) = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
        {
            let get = |path: String| {
                let http = http.clone();
                async move {
                    match http.get(path).send().await {
                        Ok(answer) if answer.status().is_success() => {
                            answer.json::<Value>().await.ok()
                        }
                        _ => None,
                    }
                }
            };
            if let Some(stats) = get(format!("{es}/_nodes/stats/indices/search")).await {
                open_contexts = stats["nodes"].as_object().map(|nodes| {
                    nodes
                        .values()
                        .filter_map(|n| n["indices"]["search"]["open_contexts"].as_u64())
                        .sum()
                });
            }
            if let Some(stats) = get(format!("{es}/{index}-journal/_stats/docs")).await {
                journal_docs = stats["_all"]["primaries"]["docs"]["count"].as_u64();
            }
            if let Some(stats) = get(format!("{es}/{index}-lock/_stats/docs,store")).await {
                let primaries = &stats["_all"]["primaries"];
                lock_docs = primaries["docs"]["count"].as_u64();
                lock_deleted = primaries["docs"]["deleted"].as_u64();
                lock_bytes = primaries["store"]["size_in_bytes"].as_u64();
            }
        }
    }
    Sample {
        at,
        moment,
        instances,
        open_contexts,
        lock_docs,
        lock_deleted,
        lock_bytes,
        journal_docs,
    }
}

/// A process's resident memory in KiB (`VmRSS` of `/proc/<pid>/status`), if it runs.
pub fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_read_from_the_status_file() {
        let status = "Name:\tfsrename\nVmPeak:\t  90000 kB\nVmRSS:\t   12345 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss(status), Some(12345));
        assert_eq!(parse_vm_rss("Name:\tzombie\n"), None);
        let mine = resident_kib(std::process::id());
        assert!(mine.is_some_and(|kib| kib > 0), "{mine:?}");
    }

    #[tokio::test]
    async fn a_sample_without_a_cluster_has_only_the_instances() {
        let me = std::process::id();
        let sample = read(
            Duration::from_secs(3),
            "start",
            vec![("svc-0-1".into(), me)],
            None,
            "fs",
        )
        .await;
        assert_eq!(sample.instances.len(), 1);
        assert!(sample.instances[0].1.is_some());
        assert_eq!(sample.open_contexts, None);
        let row = sample.to_string();
        assert!(row.starts_with("| 3 s | start | svc-0-1 "), "{row}");
        assert!(row.ends_with("| ? | ? / ? | ? | ? |"), "{row}");
    }
}
