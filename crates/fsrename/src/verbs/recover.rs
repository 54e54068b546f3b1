//! `fsrename recover`: finishes the renames of jobs that died and sweeps expired locks.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fs_locks::LeaseClock;
use fs_rename::{short_duration, Recovery};

use super::{open_existing_tree, print_verdict};
use crate::cli::Cli;
use crate::output;

/// How long a lock take-over may wait when `--wait` names no duration.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How long `--wait` with no duration waits for leases at the most: far more than any lease
/// fsrename takes by default (30 s), and a bound for a job whose lease is huge.
const LEASE_WAIT: Duration = Duration::from_secs(3_600);

/// `(wait, foreign_lease)`: see the options of `fsrename recover`.
pub async fn run(
    cli: &Cli,
    dry_run: bool,
    (wait, foreign_lease): (Option<Option<Duration>>, Duration),
    json: bool,
) -> anyhow::Result<u8> {
    let tree = open_existing_tree(cli).await?;
    let lock_wait = wait.flatten().unwrap_or(LOCK_WAIT);
    let recovery = Recovery::new(Arc::clone(tree.store()), tree.index())
        .lease(cli.lease)
        .wait(lock_wait)
        .foreign_lease(foreign_lease)
        .dry_run(dry_run);
    let context = || format!("recovering `{}` in {}", cli.index, cli.store);
    let mut report = recovery.run().await.with_context(context)?;
    if let Some(limit) = wait.map(|d| d.unwrap_or(LEASE_WAIT)) {
        let deadline = tokio::time::Instant::now() + limit;
        let mut waited_for: Option<i64> = None;
        // Each round waits for the last lease of the jobs left, then runs again. A job whose
        // lease moved on since the last round has a live owner renewing it: left running.
        while let Some(until) = report.running_until() {
            if dry_run || waited_for.is_some_and(|w| until > w) {
                break;
            }
            let now = LeaseClock::new().now_ms();
            // A little past the lease, for the clocks' skew that the lease checks allow.
            let left = Duration::from_millis(u64::try_from(until - now).unwrap_or(0))
                + Duration::from_millis(500);
            if tokio::time::Instant::now() + left > deadline {
                break;
            }
            let jobs: Vec<String> = report.running.iter().map(|r| r.job.clone()).collect();
            output::to_stderr(format!(
                "waiting {} for the lease of {} to run out, then finishing it",
                short_duration(left),
                jobs.join(", ")
            ));
            tokio::time::sleep(left).await;
            report.absorb(recovery.run().await.with_context(context)?);
            waited_for = Some(until);
        }
    }
    let clean = report.failed.is_empty();
    print_verdict(&report, clean, json, |out, report| out.line(report))
}
