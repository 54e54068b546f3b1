//! `fsrename locks`: what is locked, how, by whom, until when.

use std::sync::Arc;

use anyhow::Context;
use fs_locks::{LeaseClock, LockClient, LockInfo};

use super::open_tree;
use crate::cli::Cli;
use crate::output::Printer;
use crate::EXIT_OK;

pub async fn run(cli: &Cli, json: bool) -> anyhow::Result<u8> {
    let tree = open_tree(cli).await?;
    let client = LockClient::builder(Arc::clone(tree.store()), tree.lock_index()).build();
    let locks = client
        .list_locks()
        .await
        .with_context(|| format!("listing locks in {}", cli.store))?;
    let now = LeaseClock::new().now_ms();
    let mut out = Printer::stdout();
    if json {
        for lock in &locks {
            let line = serde_json::json!({
                "id": lock.id,
                "path": lock.path,
                "lock_type": lock_type(lock),
                "holders": lock.observed.describe_holders(),
                "journal": lock.observed.jobs(),
                "expires_at": lock.expires_at,
                "expired": lock.expires_at.is_some_and(|at| at < now),
            });
            out.line(line)?;
        }
        out.flush()?;
        return Ok(EXIT_OK);
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
        out.line(format_args!(
            "{:<9} {what}  held by {}  ({expiry}){journal}",
            lock_type(lock),
            lock.observed.describe_holders()
        ))?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

fn lock_type(lock: &LockInfo) -> &'static str {
    match lock.observed.mode() {
        fs_locks::LockMode::Exclusive => "exclusive",
        _ => "shared",
    }
}
