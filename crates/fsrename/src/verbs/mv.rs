//! `fsrename mv FROM TO`: renames under locks.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fs_model::FsPath;
use fs_rename::{Renamer, Strategy};

use super::mv_progress::{Progress, ProgressMode};
use super::open_tree;
use crate::cli::Cli;
use crate::EXIT_OK;

/// The options of `fsrename mv` besides the paths.
pub struct MvOptions {
    pub strategy: Strategy,
    pub wait: Duration,
    pub page_size: usize,
    pub progress: ProgressMode,
    pub json: bool,
}

pub async fn run(cli: &Cli, from: &FsPath, to: &FsPath, options: MvOptions) -> anyhow::Result<u8> {
    let tree = open_tree(cli).await?;
    let progress = Progress::new(options.progress);
    let mut builder = Renamer::builder(Arc::clone(tree.store()), tree.index())
        .strategy(options.strategy)
        .lease(cli.lease)
        .wait(options.wait)
        .page_size(options.page_size)
        .lock_protocol(cli.lock_protocol);
    if let Some(sink) = progress.sink.clone() {
        builder = builder.progress(sink);
    }
    let renamer = builder.build();
    let outcome = renamer.rename(from, to).await;
    progress.finish();
    let report = outcome.with_context(|| format!("mv `{from}` `{to}`"))?;
    if options.json {
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
