//! `fsrename locks`: what is locked, how, by whom, until when.

use std::sync::Arc;

use anyhow::Context;
use fs_locks::{LeaseClock, LockClient};

use super::{open_existing_tree, print_report};
use crate::cli::Cli;
use crate::contract::{LockView, LocksReport};
use crate::output::Printer;
use crate::EXIT_OK;

pub async fn run(cli: &Cli, json: bool) -> anyhow::Result<u8> {
    let tree = open_existing_tree(cli).await?;
    let client = LockClient::builder(Arc::clone(tree.store()), tree.lock_index()).build();
    let locks = client
        .list_locks()
        .await
        .with_context(|| format!("listing locks in {}", cli.store))?;
    let now = LeaseClock::new().now_ms();
    let mut out = Printer::stdout();
    if json {
        for lock in &locks {
            out.record(&LockView::new(lock, now))?;
        }
        let report = LocksReport {
            locks: locks.len() as u64,
        };
        return print_report(&mut out, &report, EXIT_OK, json, |_, _| Ok(()));
    }
    if locks.is_empty() {
        out.line("no locks")?;
    }
    for lock in &locks {
        let expiry = match lock.expires_at {
            Some(at) if at < now => format!("EXPIRED {:.0} s ago", (now - at) as f64 / 1e3),
            Some(at) => format!("expires in {:.0} s", (at - now) as f64 / 1e3),
            None => "no lease".to_owned(),
        };
        let what = lock.path.clone().unwrap_or_else(|| lock.id.clone());
        let jobs = lock.observed.jobs();
        let journal = if jobs.is_empty() {
            String::new()
        } else {
            format!("  for journal {}", jobs.join(", "))
        };
        let grants = lock.grants();
        if grants.is_empty() {
            out.line(format_args!("{what}  held by nobody ({expiry})"))?;
        } else {
            out.line(format_args!("{what}  ({expiry}){journal}"))?;
        }
        for (pid, mode, holder, expires_at) in grants {
            let lease = match expires_at {
                Some(at) if at < now => format!("EXPIRED {:.0} s ago", (now - at) as f64 / 1e3),
                Some(at) => format!("expires in {:.0} s", (at - now) as f64 / 1e3),
                None => "no lease".to_owned(),
            };
            let process = if pid.is_empty() {
                String::new()
            } else {
                format!(" (process {pid})")
            };
            out.line(format_args!(
                "  {:<2} {:<9} {holder}{process}  {lease}",
                mode.as_str(),
                lock_word(mode)
            ))?;
        }
        for (place, (pid, waiter)) in lock.observed.queue().into_iter().enumerate() {
            let state = if waiter.expires_at < now {
                "  (gone: its registration expired)"
            } else {
                ""
            };
            out.line(format_args!(
                "  waiting {}. {:<2} {} (process {pid}) for {:.1} s{state}",
                place + 1,
                waiter.mode.as_str(),
                waiter.holder,
                (now - waiter.since).max(0) as f64 / 1e3
            ))?;
        }
    }
    out.flush()?;
    Ok(EXIT_OK)
}

/// The word beside a mode's letters: the book's names for IX and X.
fn lock_word(mode: fs_locks::LockMode) -> &'static str {
    match mode {
        fs_locks::LockMode::Exclusive => "exclusive",
        fs_locks::LockMode::IntentExclusive => "shared",
        fs_locks::LockMode::Shared => "read",
        fs_locks::LockMode::IntentShared => "intent",
    }
}
