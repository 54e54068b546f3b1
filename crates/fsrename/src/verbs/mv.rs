//! `fsrename mv FROM TO`: renames under locks.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fs_model::FsPath;
use fs_rename::{Renamer, Strategy};

use super::open_tree;
use crate::cli::Cli;
use crate::EXIT_OK;

pub async fn run(
    cli: &Cli,
    from: &FsPath,
    to: &FsPath,
    strategy: Strategy,
    wait: Duration,
    page_size: usize,
    json: bool,
) -> anyhow::Result<u8> {
    let tree = open_tree(cli).await?;
    let renamer = Renamer::builder(Arc::clone(tree.store()), tree.index())
        .strategy(strategy)
        .lease(cli.lease)
        .wait(wait)
        .page_size(page_size)
        .lock_protocol(cli.lock_protocol)
        .build();
    let report = renamer
        .rename(from, to)
        .await
        .with_context(|| format!("mv `{from}` `{to}`"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let p = report.phases;
        println!(
            "renamed {from} to {to}: {} documents, {} round trips ({} strategy); locks {:.1} ms, rewrite {:.1} ms, total {:.1} ms",
            report.rewritten,
            report.round_trips,
            report.strategy,
            p.locking.as_secs_f64() * 1e3,
            p.rewriting.as_secs_f64() * 1e3,
            report.elapsed().as_secs_f64() * 1e3,
        );
    }
    Ok(EXIT_OK)
}
