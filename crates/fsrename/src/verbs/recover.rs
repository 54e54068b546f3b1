//! `fsrename recover`: finishes the renames of jobs that died and sweeps expired locks.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fs_rename::Recovery;

use super::open_tree;
use crate::cli::Cli;
use crate::output::{self, Printer};
use crate::{EXIT_FAILED, EXIT_OK};

/// `(wait, foreign_lease)`: see the options of `fsrename recover`.
pub async fn run(
    cli: &Cli,
    dry_run: bool,
    (wait, foreign_lease): (Duration, Duration),
    json: bool,
) -> anyhow::Result<u8> {
    let tree = open_tree(cli).await?;
    let report = Recovery::new(Arc::clone(tree.store()), tree.index())
        .lease(cli.lease)
        .wait(wait)
        .foreign_lease(foreign_lease)
        .dry_run(dry_run)
        .run()
        .await
        .with_context(|| format!("recovering `{}` in {}", cli.index, cli.store))?;
    let code = if report.failed.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED
    };
    let mut out = Printer::stdout();
    let printed = if json {
        out.line(serde_json::to_string_pretty(&report)?)
    } else {
        out.line(&report)
    };
    output::keep_verdict(printed.and_then(|()| out.flush()), code)
}
