//! What `fsrename mv`, `cp` and `rm` share: a [`Renamer`] built from the global options and
//! the job's own, the progress display, and the report at the end.

use std::future::Future;
use std::io::Write;
use std::sync::Arc;

use fs_model::FsPath;
use fs_rename::{FsTree, JobKind, RenameError, RenameReport, Renamer, Strategy};

use super::mv_progress::Progress;
use crate::cli::{Cli, JobArgs};
use crate::output::{quoted, Printer};
use crate::EXIT_OK;

/// Runs the job `start` starts on a renamer configured by `cli` and `args`: a `kind` of job
/// from `from` to `to` (a delete's path twice, as its journal entry has it); `what` names it
/// in messages (``cp -r `/a` `/b` ``). Prints warnings on stderr and the report on stdout.
pub async fn run<F, Fut>(
    cli: &Cli,
    tree: &FsTree,
    args: &JobArgs,
    (kind, from, to): (JobKind, &FsPath, &FsPath),
    what: &str,
    start: F,
) -> anyhow::Result<u8>
where
    F: FnOnce(Renamer) -> Fut,
    Fut: Future<Output = fs_rename::Result<RenameReport>>,
{
    let progress = Progress::new(args.progress, kind);
    let mut builder = Renamer::builder(Arc::clone(tree.store()), tree.index())
        .strategy(args.strategy)
        .lease(cli.lease)
        .wait(args.wait)
        .page_size(args.page_size)
        .in_flight(args.in_flight)
        .lock_protocol(cli.lock_protocol)
        .rewrite(cli.rewrite)
        .cancel(super::stop_requested());
    let orphans = super::finish_orphans(cli, tree.store(), args.wait);
    builder = builder.orphans(Arc::clone(&orphans) as Arc<dyn fs_locks::Orphans>);
    if let Some(sink) = progress.sink.clone() {
        builder = builder.progress(sink);
    }
    let outcome = start(builder.build()).await;
    progress.finish();
    super::tell_finished(&orphans);
    // The very job asked for, stopped (Ctrl-C, a crash) in an earlier run and finished just
    // now by the recovery this one ran: done, not "not found" or "already exists".
    let finished_before = orphans
        .finished()
        .into_iter()
        .find(|done| done.kind == kind && done.from == from.as_str() && done.to == to.as_str());
    let report = match (outcome, finished_before) {
        (
            Err(RenameError::SourceNotFound { .. } | RenameError::DestinationExists { .. }),
            Some(done),
        ) => {
            let mut out = Printer::stdout();
            out.line(format_args!(
                "{}: the same job, stopped in an earlier run, is finished now (journal {})",
                done_line(kind, from, to),
                done.job_id
            ))?;
            out.flush()?;
            return Ok(EXIT_OK);
        }
        (outcome, _) => outcome,
    };
    let report = match report {
        Ok(report) => report,
        // A locked job stopped before its first write (its entry, if it had one, is closed):
        // the tree is as it was, and its locks are given back, not left for recovery.
        Err(RenameError::Cancelled { rewritten: 0, .. }) if args.strategy != Strategy::None => {
            anyhow::bail!(
                "{what}: stopped before its first write: nothing was changed, and its locks were given back"
            )
        }
        // Unix mv and cp move or copy into an existing directory; these never do (TO is the
        // new path itself), so the error says how to get that.
        Err(e @ RenameError::DestinationExists { .. }) if kind != JobKind::Delete => {
            let Ok(inside) = to.join(from.name()) else {
                return Err(anyhow::Error::new(e).context(what.to_owned()));
            };
            let (from_q, to_q) = (quoted(from.as_str()), quoted(to.as_str()));
            let hint = if kind == JobKind::Rename {
                format!("TO is the new path itself, not a directory to move into: `fsrename mv {from} {inside}` moves {from_q} into {to_q}")
            } else {
                format!(
                    "TO is the copy's own path, not a directory to copy into: {} puts the copy inside {to_q}",
                    quoted(inside.as_str())
                )
            };
            anyhow::bail!("{what}: {e} ({hint})");
        }
        Err(e) => return Err(anyhow::Error::new(e).context(what.to_owned())),
    };
    // A job whose release failed afterwards has still happened: it exits 0, and the warning
    // says which locks stay until their lease runs out. This process ends now, so it cannot
    // clear them itself; `fsrename recover` (or a running `fsrename serve`) does.
    for warning in &report.warnings {
        // A closed stderr loses the warning, not the exit code: the job has happened.
        let _ = writeln!(std::io::stderr(), "warning: {what}: {warning}");
    }
    // The job is done and its locks released: a reader gone by now loses only the report.
    let mut out = Printer::stdout();
    if args.json {
        out.line(serde_json::to_string_pretty(&report)?)?;
    } else {
        let p = report.phases;
        let done = done_line(report.kind, &report.from, &report.to);
        out.line(format_args!(
            "{done}: {}, {} ({} strategy); locks {:.1} ms, writes {:.1} ms, total {:.1} ms",
            fs_model::plural(report.rewritten, "document", "documents"),
            fs_model::plural(report.round_trips, "round trip", "round trips"),
            report.strategy,
            p.locking.as_secs_f64() * 1e3,
            p.rewriting.as_secs_f64() * 1e3,
            report.elapsed().as_secs_f64() * 1e3,
        ))?;
        // This process ran one job: what its store handle resent is the job's.
        let resent = tree.store().items_resent();
        if report.retries > 0 || resent > 0 {
            out.line(format_args!(
                "  {} items sent again after transient failures, {} of them had landed the first time (their answer lost); {} items rejected by a busy server (429) and sent again",
                report.retries, report.ambiguous_resolved, resent,
            ))?;
        }
    }
    out.flush()?;
    Ok(EXIT_OK)
}

/// What a job that is done did, for the first line of its report.
fn done_line(kind: JobKind, from: &impl std::fmt::Display, to: &impl std::fmt::Display) -> String {
    let (from, to) = (quoted(&from.to_string()), quoted(&to.to_string()));
    match kind {
        JobKind::Rename => format!("renamed {from} to {to}"),
        JobKind::Copy => format!("copied {from} to {to}"),
        JobKind::Delete => format!("removed {from}"),
    }
}
