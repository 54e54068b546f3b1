//! `fsrename mv FROM TO`: renames under locks.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fs_model::FsPath;
use fs_rename::{Renamer, Strategy};

use super::mv_progress::{Progress, ProgressMode};
use super::open_tree;
use crate::cli::Cli;
use crate::output::Printer;
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
    // A rename whose release failed afterwards has still happened: it exits 0, and the
    // warning says which locks stay until their lease runs out. This process ends now, so it
    // cannot clear them itself; `fsrename recover` (or a running `fsrename serve`) does.
    for warning in &report.warnings {
        // A closed stderr loses the warning, not the exit code: the rename has happened.
        let _ = writeln!(std::io::stderr(), "warning: mv `{from}` `{to}`: {warning}");
    }
    // The rename is done and its locks released: a reader gone by now loses only the report.
    let mut out = Printer::stdout();
    if options.json {
        out.line(serde_json::to_string_pretty(&report)?)?;
    } else {
        let p = report.phases;
        out.line(format_args!(
            "renamed {from} to {to}: {} documents, {} round trips ({} strategy); locks {:.1} ms, rewrite {:.1} ms, total {:.1} ms",
            report.rewritten,
            report.round_trips,
            report.strategy,
            p.locking.as_secs_f64() * 1e3,
            p.rewriting.as_secs_f64() * 1e3,
            report.elapsed().as_secs_f64() * 1e3,
        ))?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}
