//! `fsrename index DIR [--as PATH]`: indexes a local directory tree.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use fs_model::{plural, FsPath};
use fs_rename::{
    index_dir, watch_dir, IndexOptions, IndexProgress, IndexReport, WatchEvent, WatchOptions,
};
use indicatif::{ProgressBar, ProgressStyle};

use super::{lock_settings, open_tree, print_verdict};
use crate::cli::Cli;
use crate::contract::{CaughtUp, Contract};
use crate::output::{quoted, to_stderr, Printer};
use crate::{EXIT_INTERRUPTED, EXIT_OK};

/// How often progress is printed when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(2);

/// What `index` was asked to do, besides where.
pub struct Options {
    pub batch_size: usize,
    pub prune: bool,
    /// The largest file whose text is stored (`--content`), if any.
    pub content: Option<u64>,
}

pub async fn run(
    cli: &Cli,
    dir: &Path,
    at: Option<&FsPath>,
    options: &Options,
    json: bool,
) -> anyhow::Result<u8> {
    let at = match at {
        Some(at) => at.clone(),
        None => default_target(dir)?,
    };
    check_dir(cli, dir, &at)?;
    let tree = open_tree(cli).await?;
    let options = IndexOptions {
        batch_size: options.batch_size,
        prune: options.prune,
        locks: lock_settings(cli, tree.store(), cli.lease),
        content: options.content,
        stop: None,
    };
    let (sink, bar) = progress();
    let report = index_dir(&tree, dir, &at, &options, Some(sink))
        .await
        .with_context(|| format!("indexing `{}` as `{at}` in {}", dir.display(), cli.store));
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report?;
    warn_unread(&report.unread, report.unreadable, report.kept_unread);
    let clean = report.failed == 0 && report.unreadable == 0;
    print_verdict(&report, clean, json, print_summary)
}

/// Says on stderr what could not be read, and that nothing of it was deleted: a run that
/// could not see everything fails (exit 1), so that a script or a supervisor notices.
fn warn_unread(unread: &[fs_rename::Skipped], count: u64, kept: u64) {
    let Some(first) = unread.first() else {
        return;
    };
    to_stderr(format_args!(
        "fsrename: {} could not be read (`{}`: {}{}); the store keeps what it holds there ({}), nothing of it was deleted",
        plural(count, "entry", "entries"),
        first.path,
        first.reason.trim_start_matches("unreadable: "),
        if count > 1 { ", and others listed below" } else { "" },
        plural(kept, "document", "documents"),
    ));
}

/// Says on stderr that the watcher skipped an entry (not indexed), as `index` lists it.
fn warn_skipped(skipped: &fs_rename::Skipped) {
    to_stderr(format_args!(
        "fsrename: skipped {}: {} (not indexed)",
        quoted(&skipped.path),
        skipped.reason
    ));
}

/// `index --watch`: indexes, then follows the directory until `shutdown`; prints each batch
/// of changes on stderr and the totals at the end.
pub async fn watch(
    cli: &Cli,
    dir: &Path,
    at: Option<&FsPath>,
    (batch_size, debounce): (usize, Duration),
    content: Option<u64>,
    json: bool,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<u8> {
    let at = match at {
        Some(at) => at.clone(),
        None => default_target(dir)?,
    };
    check_dir(cli, dir, &at)?;
    let tree = open_tree(cli).await?;
    // A watcher killed outright left its locks and a journaled change: they are in the way of
    // the first run, which finishes that change first (its holder proven gone on this
    // machine, or its lease run out), and says so.
    let (locks, orphans) = super::lock_settings_telling(cli, tree.store(), cli.lease);
    let options = WatchOptions {
        index: IndexOptions {
            batch_size,
            prune: true,
            locks,
            content,
            // The watch sets its own, from `shutdown`.
            stop: None,
        },
        debounce,
        ..WatchOptions::default()
    };
    // Whether a line was printed since the watcher last said it caught up: reads of the tree
    // make batches that change nothing, and a caught-up line after each would be noise.
    let said = std::sync::atomic::AtomicBool::new(true);
    let sink = Arc::new(move |event: WatchEvent<'_>| {
        if json {
            json_event(&event);
        }
        let quiet_batch = matches!(&event, WatchEvent::Batch(b) if b.changed_nothing());
        if matches!(event, WatchEvent::Ready(_) | WatchEvent::Batch(_)) && !quiet_batch {
            said.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        match event {
            WatchEvent::CaughtUp => {
                if said.swap(false, std::sync::atomic::Ordering::Relaxed) {
                    to_stderr("fsrename: caught up: the store is in step with every change seen");
                }
            }
            WatchEvent::Ready(r) => {
                super::tell_finished(&orphans);
                warn_unread(&r.unread, r.unreadable, r.kept_unread);
                for skipped in r.skipped.iter().filter(|s| !s.is_symlink()) {
                    warn_skipped(skipped);
                }
                to_stderr(format_args!(
                "fsrename: indexed {} and {} ({} created, {} updated, {}, {} deleted); watching for changes (Ctrl-C stops)",
                plural(r.files, "file", "files"),
                plural(r.dirs, "directory", "directories"),
                r.created,
                r.updated,
                plural(r.moves, "move", "moves"),
                r.pruned
            ))
            }
            WatchEvent::Gathering | WatchEvent::Applying { .. } => {}
            WatchEvent::Batch(b) if b.rescan => to_stderr(format_args!(
                "fsrename: events were lost; rescanned the whole tree ({}, {} deleted)",
                plural(b.renames, "move", "moves"),
                b.removed
            )),
            // A batch that changed nothing says nothing: reads of the tree (`find`, an editor
            // opening files, the first run's own walk) make events but no change, and the
            // wake-up for removals that turned out to have been renamed makes none at all.
            WatchEvent::Batch(_) if quiet_batch => {}
            WatchEvent::Batch(b) => {
                // A batch whose only news is a name skipped or an entry unreadable says that
                // alone.
                if b.changed() || !b.failures.is_empty() {
                    // A batch of no events of its own applies what earlier ones left (a
                    // removal is applied one batch after it is seen, once no rename explains
                    // it): it says so, not "0 events".
                    let cause = if b.events == 0 {
                        "from earlier events".to_owned()
                    } else {
                        plural(b.events, "event", "events")
                    };
                    to_stderr(format_args!(
                        "fsrename: {cause}: {}, {} indexed, {}, {} removed{}",
                        plural(b.renames, "rename", "renames"),
                        plural(b.indexed, "directory", "directories"),
                        plural(b.files, "file", "files"),
                        b.removed,
                        if b.failures.is_empty() {
                            String::new()
                        } else {
                            format!(", {} not applied (see the log)", b.failures.len())
                        }
                    ));
                }
                for unread in &b.unreadable {
                    to_stderr(format_args!(
                        "fsrename: could not read {unread}: the store keeps what it holds there"
                    ));
                }
                for skipped in &b.skipped {
                    warn_skipped(skipped);
                }
            }
        }
    });
    let report = watch_dir(&tree, dir, &at, &options, shutdown, Some(sink))
        .await
        .with_context(|| format!("watching `{}` as `{at}` in {}", dir.display(), cli.store))?;
    let unread = report.initial.unreadable + report.unreadable;
    let clean = report.failures == 0 && report.initial.failed == 0 && unread == 0;
    // The watch ends only when it is told to stop (Ctrl-C, SIGTERM): 130, as the shell reports
    // an interrupted command (0 for SIGTERM, as a service's end), or 1 if it could not keep
    // the store in step with the disk.
    let code = print_verdict(&report, clean, json, |out, report| {
        print_summary(out, &report.initial)?;
        out.line(format_args!(
            "  watched: {}, {}, {} indexed, {}, {} removed, {}, {} not applied, {} unreadable, {} skipped",
            plural(report.batches, "batch", "batches"),
            plural(report.renames, "rename", "renames"),
            plural(report.indexed, "directory", "directories"),
            plural(report.files, "file", "files"),
            report.removed,
            plural(report.rescans, "rescan", "rescans"),
            plural(report.failures, "change", "changes"),
            report.unreadable,
            report.skipped
        ))
    })?;
    Ok(if code == EXIT_OK {
        EXIT_INTERRUPTED
    } else {
        code
    })
}

/// Prints a watch event as one line of JSON on standard output (`--watch --json`): the first
/// run's `index_report`, each `watch_batch`, `watch_caught_up`; the totals come last, as
/// `watch_report`. A line that cannot be written is dropped: the watch goes on.
fn json_event(event: &WatchEvent<'_>) {
    use std::io::Write;
    let line = match event {
        WatchEvent::Ready(r) => r.to_line(),
        WatchEvent::Gathering | WatchEvent::Applying { .. } => return,
        WatchEvent::Batch(b) => b.to_line(),
        WatchEvent::CaughtUp => CaughtUp::default().to_line(),
    };
    if let Ok(line) = line {
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    }
}

/// Refuses a `dir` that is not a directory (missing, or a file) before the store is
/// opened: a first run would otherwise leave an empty database behind, after which every verb
/// answers as for an empty tree.
fn check_dir(cli: &Cli, dir: &Path, at: &FsPath) -> anyhow::Result<()> {
    let failed = || format!("indexing `{}` as `{at}` in {}", dir.display(), cli.store);
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("`{}`", dir.display()))
        .with_context(failed)?;
    if !meta.is_dir() {
        return Err(anyhow::anyhow!(
            "`{}` is not a directory: index a directory (its files and subdirectories)",
            dir.display()
        ))
        .with_context(failed);
    }
    Ok(())
}

/// `/` followed by the directory's own name (`/home/me/photos` → `/photos`).
fn default_target(dir: &Path) -> anyhow::Result<FsPath> {
    let absolute = std::fs::canonicalize(dir).with_context(|| format!("`{}`", dir.display()))?;
    let name = absolute
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| {
            format!(
                "`{}` has no UTF-8 name to index it under; give one with --as",
                dir.display()
            )
        })?;
    Ok(FsPath::root().join(name)?)
}

/// A progress bar when stderr is a terminal, plain periodic lines otherwise.
fn progress() -> (
    Arc<dyn Fn(IndexProgress) + Send + Sync>,
    Option<ProgressBar>,
) {
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new_spinner();
        let style = ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(120));
        let shown = bar.clone();
        let sink = Arc::new(move |p: IndexProgress| {
            shown.set_message(format!(
                "{} entries walked, {} documents written",
                p.walked, p.written
            ));
        });
        return (sink, Some(bar));
    }
    let last = Mutex::new(Instant::now());
    let sink = Arc::new(move |p: IndexProgress| {
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= PLAIN_EVERY {
            *last = Instant::now();
            to_stderr(format_args!(
                "fsrename: {} entries walked, {} documents written",
                p.walked, p.written
            ));
        }
    });
    (sink, None)
}

fn print_summary(out: &mut Printer, r: &IndexReport) -> anyhow::Result<()> {
    out.line(format_args!(
        "indexed `{}` as `{}`: {}, {}, {}",
        r.dir.display(),
        r.at,
        plural(r.files, "file", "files"),
        plural(r.dirs, "directory", "directories"),
        human_bytes(r.bytes)
    ))?;
    out.line(format_args!(
        "  documents: {} created, {} updated, {} unchanged, {} deleted",
        r.created, r.updated, r.unchanged, r.pruned
    ))?;
    if r.texts > 0 {
        out.line(format_args!(
            "  text stored for {} (fsrename find --text searches it)",
            plural(r.texts, "file", "files")
        ))?;
    }
    if r.moves > 0 {
        // The walk cannot tell a move on disk from a rename in the store since the last run
        // (`fsrename mv`): both leave a file at one path on disk and another in the store. The
        // disk is what `index` follows, so either way the store is renamed to match it.
        out.line(format_args!(
            "  renamed to match the disk: {} ({}), ids kept; the store had {} at another path (moved on disk, or renamed in the store since the last index)",
            plural(r.moves, "rename", "renames"),
            plural(r.moved, "document", "documents"),
            if r.moves == 1 { "it" } else { "them" }
        ))?;
        for m in &r.move_list {
            out.line(format_args!(
                "    store {} → disk {} ({})",
                m.from,
                m.to,
                plural(m.documents, "document", "documents")
            ))?;
        }
    }
    for failed in &r.moves_failed {
        out.line(format_args!("  move not applied: {failed}"))?;
    }
    if r.stale > 0 {
        if r.pruned > 0 {
            out.line(format_args!(
                "  {} no longer on disk: {} deleted (under the tree lock on the target, deepest first)",
                plural(r.stale, "document", "documents"),
                r.pruned
            ))?;
        } else {
            out.line(format_args!(
                "  {} no longer on disk: kept (--prune deletes {})",
                plural(r.stale, "document", "documents"),
                if r.stale == 1 { "it" } else { "them" }
            ))?;
        }
    }
    if r.unreadable > 0 {
        out.line(format_args!(
            "  UNREADABLE: {} could not be read; the store keeps what it holds there ({}), nothing of it was deleted",
            plural(r.unreadable, "entry", "entries"),
            plural(r.kept_unread, "document", "documents"),
        ))?;
        for s in &r.unread {
            out.line(format_args!("    {}: {}", quoted(&s.path), s.reason))?;
        }
        if r.unreadable > r.unread.len() as u64 {
            out.line(format_args!(
                "    ... and {} more",
                r.unreadable - r.unread.len() as u64
            ))?;
        }
    }
    if r.skipped_count > 0 {
        let links = if r.symlinks > 0 {
            format!(
                " ({} not followed)",
                plural(r.symlinks, "symbolic link", "symbolic links")
            )
        } else {
            String::new()
        };
        out.line(format_args!(
            "  skipped: {}{links}",
            plural(r.skipped_count, "entry", "entries"),
        ))?;
    }
    for s in &r.skipped {
        out.line(format_args!("    {}: {}", quoted(&s.path), s.reason))?;
    }
    if r.skipped_count > r.skipped.len() as u64 {
        out.line(format_args!(
            "    ... and {} more",
            r.skipped_count - r.skipped.len() as u64
        ))?;
    }
    if r.failed > 0 {
        out.line(format_args!(
            "  FAILED: the store refused {} (listed above)",
            plural(r.failed, "document", "documents")
        ))?;
    }
    out.line(format_args!(
        "  {:.2} s, {:.0} entries/s",
        r.elapsed.as_secs_f64(),
        r.docs_per_second()
    ))?;
    Ok(())
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
