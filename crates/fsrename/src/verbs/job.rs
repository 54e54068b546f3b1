//! What `fsrename mv`, `cp` and `rm` share: a [`Renamer`] built from the global options and
//! the job's own, the progress display, and the report at the end (with `--json`, the job as
//! the service shows it: `crate::contract::Job`).

use std::future::Future;
use std::io::Write;
use std::sync::Arc;

use fs_model::{DocKind, FsPath};
use fs_rename::{FsTree, JobKind, RenameError, RenameOutcome, RenameReport, Renamer, Strategy};

use super::mv_progress::Progress;
use crate::cli::{Cli, JobArgs};
use crate::contract::job::now_ms;
use crate::contract::{Job, Work};
use crate::output::{quoted, Printer};
use crate::EXIT_OK;

/// Runs the job `start` starts on a renamer configured by `cli` and `args`: `work` (a rename,
/// copy or delete); `what` names it in messages (``cp -r `/a` `/b` ``). Prints warnings on
/// stderr and the report on stdout.
pub async fn run<F, Fut>(
    cli: &Cli,
    tree: &FsTree,
    args: &JobArgs,
    work: Work,
    what: &str,
    start: F,
) -> anyhow::Result<u8>
where
    F: FnOnce(Renamer) -> Fut,
    Fut: Future<Output = RenameOutcome>,
{
    let (kind, from, to) = paths_of(&work);
    let progress = Progress::new(args.progress, kind);
    let journal = fs_model::entropy::uuid();
    let mut builder = Renamer::builder(Arc::clone(tree.store()), tree.index())
        .strategy(args.strategy)
        .lease(cli.lease)
        .wait(args.wait)
        .page_size(args.page_size)
        .in_flight(args.in_flight)
        .lock_protocol(cli.lock_protocol)
        .rewrite(cli.rewrite)
        .first_journal_id(journal.clone())
        .cancel(super::stop_requested());
    let orphans = super::finish_orphans(cli, tree.store(), args.wait);
    builder = builder.orphans(Arc::clone(&orphans) as Arc<dyn fs_locks::Orphans>);
    if let Some(sink) = progress.sink.clone() {
        builder = builder.progress(sink);
    }
    let started_at = now_ms();
    let outcome = start(builder.build()).await;
    progress.finish();
    super::tell_finished(&orphans);
    let ended = Ended {
        args,
        work: &work,
        what,
        journal: (Some(journal), started_at),
    };
    // The very job asked for, stopped (Ctrl-C, a crash) in an earlier run and finished just
    // now by the recovery this one ran: done, not "not found" or "already exists".
    let finished_before = orphans
        .finished()
        .into_iter()
        .find(|done| done.kind == kind && done.from == from.as_str() && done.to == to.as_str());
    let RenameOutcome { report, result } = outcome;
    let error = match (result, finished_before) {
        (Ok(()), _) => return ended.done(tree, report),
        (
            Err(RenameError::SourceNotFound { .. } | RenameError::DestinationExists { .. }),
            Some(done),
        ) => {
            let line = format!(
                "{}: the same job, stopped in an earlier run, is finished now (journal {})",
                done_line(kind, from, to),
                done.job_id
            );
            let mut out = Printer::stdout();
            if args.json {
                let mut job = Job::ran_here(
                    work.clone(),
                    args.strategy,
                    (Some(done.job_id), ended.journal.1),
                    None,
                    None,
                );
                job.warnings.push(line);
                out.report(&job)?;
            } else {
                out.line(line)?;
                out.flush()?;
            }
            return Ok(EXIT_OK);
        }
        (Err(e), _) => e,
    };
    let error = match error {
        // A locked job stopped before its first write (its entry, if it had one, is closed):
        // the tree is as it was, and its locks are given back, not left for recovery.
        RenameError::Cancelled { rewritten: 0, .. } if args.strategy != Strategy::None => {
            anyhow::anyhow!(
                "{what}: stopped before its first write: nothing was changed, and its locks were given back"
            )
        }
        // Unix mv and cp move or copy into an existing directory; these never do (TO is the
        // new path itself), so the error says how to get that, where it can work.
        e @ RenameError::DestinationExists { .. } if kind != JobKind::Delete => {
            let into = match tree.kind_of(to).await {
                Ok(Some(DocKind::Dir)) => to.join(from.name()).ok(),
                _ => None,
            };
            anyhow::anyhow!(
                "{what}: {e} ({})",
                exists_hint(kind, from, to, into.as_ref())
            )
        }
        e => anyhow::Error::new(e).context(what.to_owned()),
    };
    ended.failed(report, error)
}

/// A job that has run, to report.
struct Ended<'a> {
    args: &'a JobArgs,
    work: &'a Work,
    what: &'a str,
    /// Its first journal id, and when it started (epoch ms).
    journal: (Option<String>, i64),
}

impl Ended<'_> {
    /// Reports a job that is done: its warnings on stderr, the report on stdout.
    fn done(self, tree: &FsTree, report: RenameReport) -> anyhow::Result<u8> {
        // A job whose release failed afterwards has still happened: it exits 0, and the
        // warning says which locks stay until their lease runs out. This process ends now, so
        // it cannot clear them itself; `fsrename recover` (or a running `fsrename serve`) does.
        for warning in &report.warnings {
            // A closed stderr loses the warning, not the exit code: the job has happened.
            let _ = writeln!(std::io::stderr(), "warning: {}: {warning}", self.what);
        }
        // The job is done and its locks released: a reader gone by now loses only the report.
        let mut out = Printer::stdout();
        if self.args.json {
            let job = Job::ran_here(
                self.work.clone(),
                self.args.strategy,
                self.journal,
                Some(report),
                None,
            );
            out.report(&job)?;
            return Ok(EXIT_OK);
        }
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
        out.flush()?;
        Ok(EXIT_OK)
    }

    /// Reports a job that failed: with `--json` the job, `failed`, as its last line; the
    /// error goes back to the caller, which says it on stderr and ends with its exit code.
    fn failed(self, report: RenameReport, error: anyhow::Error) -> anyhow::Result<u8> {
        if self.args.json {
            let job = Job::ran_here(
                self.work.clone(),
                self.args.strategy,
                self.journal,
                Some(report),
                Some(format!("{error:#}")),
            );
            // A reader gone by now changes nothing: the error is what the caller reports.
            let _ = Printer::stdout().report(&job);
        }
        Err(error)
    }
}

/// The kind and paths of `work` (a delete's path twice, as its journal entry has it).
fn paths_of(work: &Work) -> (JobKind, &FsPath, &FsPath) {
    match work {
        Work::Rename { from, to } => (JobKind::Rename, from, to),
        Work::Copy { from, to } => (JobKind::Copy, from, to),
        Work::Delete { path, .. } => (JobKind::Delete, path, path),
    }
}

/// What to say when TO exists: how to move (copy) into it if it is a directory (`into`, the
/// path inside it), else that nothing existing is replaced.
fn exists_hint(kind: JobKind, from: &FsPath, to: &FsPath, into: Option<&FsPath>) -> String {
    let to_q = quoted(to.as_str());
    match (kind, into) {
        (JobKind::Rename, Some(inside)) => format!(
            "TO is the new path itself, not a directory to move into: `fsrename mv {from} {inside}` moves {} into {to_q}",
            quoted(from.as_str())
        ),
        (_, Some(inside)) => format!(
            "TO is the copy's own path, not a directory to copy into: {} puts the copy inside {to_q}",
            quoted(inside.as_str())
        ),
        (_, None) => format!(
            "nothing existing is ever replaced: remove {to_q} first with `fsrename rm {to}`, or choose another path"
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_to_move_into_a_path_is_given_only_for_a_directory() {
        let p = |s: &str| FsPath::parse(s).expect("path");
        let (from, to) = (p("/t/f1.txt"), p("/t/f2.txt"));
        let hint = exists_hint(JobKind::Rename, &from, &to, None);
        assert!(!hint.contains("into"), "{hint}");
        assert!(hint.contains("nothing existing is ever replaced"), "{hint}");
        let dir = p("/t/d");
        let inside = p("/t/d/f1.txt");
        let hint = exists_hint(JobKind::Rename, &from, &dir, Some(&inside));
        assert!(hint.contains("fsrename mv /t/f1.txt /t/d/f1.txt"), "{hint}");
    }
}
