//! The verbs, one file each, and what they share.

mod cp;
mod demo;
mod demo_serve;
mod find;
mod fsck;
mod index;
mod job;
mod locks;
mod ls;
mod make;
mod mv;
mod mv_progress;
mod recover;
mod rm;
mod serve;

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use anyhow::Context;
use fs_rename::{FinishOrphans, FsTree, LockSettings};
use fs_store::SharedStore;

use crate::cli::{Cli, ConsistentArgs, Verb};
use crate::output::{self, Printer};
use crate::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_LOCK_TIMEOUT, EXIT_OK, EXIT_USAGE};

/// Turns true when the process is told to stop (Ctrl-C, SIGTERM). A job told so winds down
/// before the process ends: before its journal entry it gives back its locks; after it, it
/// stops its writes (and its task on the server) and leaves its locks and entry to `recover`,
/// saying so.
static STOP: LazyLock<tokio::sync::watch::Sender<bool>> =
    LazyLock::new(|| tokio::sync::watch::channel(false).0);

/// How long a verb told to stop may take to wind down before the process ends regardless.
const WIND_DOWN: Duration = Duration::from_secs(10);

/// A receiver that turns true when the process is told to stop (see [`STOP`]).
pub(crate) fn stop_requested() -> tokio::sync::watch::Receiver<bool> {
    STOP.subscribe()
}

/// Runs the verb until it ends or `shutdown` resolves (the service instead shuts down
/// gracefully); prints its errors; returns the exit code (0 if the verb stopped because
/// standard output lost its reader).
pub async fn run(cli: Cli, shutdown: impl Future<Output = ()> + Send + 'static) -> u8 {
    let result = if let Verb::Serve { .. } = &cli.verb {
        serve::run(&cli, shutdown).await
    } else if let Verb::Demo {
        serve: true,
        files,
        listen,
        slow,
    } = &cli.verb
    {
        let files = files.unwrap_or(demo_serve::FILES);
        demo_serve::run(files, *listen, slow.unwrap_or(1.0), shutdown).await
    } else if let Verb::Index {
        watch: true,
        dir,
        at,
        batch_size,
        debounce,
        json,
        content,
        content_max,
        ..
    } = &cli.verb
    {
        // Stops between two batches of changes, never in the middle of one.
        index::watch(
            &cli,
            dir,
            at.as_ref(),
            (*batch_size, *debounce),
            content.then_some(*content_max),
            *json,
            shutdown,
        )
        .await
    } else {
        let mut verb = Box::pin(run_verb(&cli));
        tokio::select! {
            result = &mut verb => result,
            () = shutdown => return interrupted(&cli, verb).await,
        }
    };
    match result {
        Ok(code) => code,
        // The reader has what it wanted (`| head`): a normal end. The verb has already
        // unwound, releasing what it held, on its way here.
        Err(e) if output::is_stdout_closed(&e) => EXIT_OK,
        Err(e) => {
            output::to_stderr(format_args!("fsrename: {e:#}"));
            exit_code_of(&e)
        }
    }
}

/// Ends `verb` on Ctrl-C or SIGTERM, giving back what it holds: a job (`mv`, `cp`, `rm`) is
/// told to stop and winds down (see [`STOP`]); any other verb is dropped at once, its locks
/// released in the background, and the process waits for those releases before it ends, or
/// they would die with it and leave the locks for their whole lease.
async fn interrupted(
    cli: &Cli,
    mut verb: std::pin::Pin<Box<impl Future<Output = anyhow::Result<u8>>>>,
) -> u8 {
    STOP.send_replace(true);
    if matches!(
        cli.verb,
        Verb::Mv { .. } | Verb::Cp { .. } | Verb::Rm { .. }
    ) {
        if let Ok(Err(e)) = tokio::time::timeout(WIND_DOWN, &mut verb).await {
            if !output::is_stdout_closed(&e) {
                output::to_stderr(format_args!("fsrename: {e:#}"));
            }
        }
    }
    drop(verb);
    if !fs_locks::settle_background_releases(GIVE_BACK).await {
        output::to_stderr(format_args!(
            "fsrename: stopped before every lock was given back; their lease ends the rest within {}",
            fs_model::short_duration(cli.lease)
        ));
    }
    let kept = fs_locks::guards_kept_for_recovery();
    if kept > 0
        && !matches!(
            cli.verb,
            Verb::Mv { .. } | Verb::Cp { .. } | Verb::Rm { .. }
        )
    {
        // A job of this verb (`index --prune`'s removals) had journaled itself: its tree stays
        // locked for recovery, as a job's own wind-down says.
        output::to_stderr(format_args!(
            "fsrename: stopped {} after its journal entry: `fsrename recover` finishes it once its locks' lease runs out, within {} (`fsrename recover --wait` waits for that)",
            if kept == 1 { "a job" } else { "jobs" },
            fs_model::short_duration(cli.lease)
        ));
    }
    EXIT_INTERRUPTED
}

/// How long a stopped verb's locks may take to be given back before the process ends.
const GIVE_BACK: Duration = Duration::from_secs(5);

async fn run_verb(cli: &Cli) -> anyhow::Result<u8> {
    match &cli.verb {
        Verb::Demo { files, slow, .. } => {
            demo::run(files.unwrap_or(demo::FILES), slow.unwrap_or(0.0)).await
        }
        Verb::Fsck {
            path,
            json,
            consistent,
        } => fsck::run(cli, path, *json, consistent_wait(*consistent)).await,
        Verb::Index {
            dir,
            at,
            batch_size,
            prune,
            json,
            content,
            content_max,
            ..
        } => {
            let options = index::Options {
                batch_size: *batch_size,
                prune: *prune,
                content: content.then_some(*content_max),
            };
            index::run(cli, dir, at.as_ref(), &options, *json).await
        }
        Verb::Find {
            path,
            name,
            text,
            limit,
            long,
            json,
        } => {
            let options = find::FindOptions {
                name: name.clone(),
                text: text.clone(),
                limit: *limit,
                long: *long,
                json: *json,
            };
            find::run(cli, path, &options).await
        }
        Verb::Mkdir { parents, path } => make::mkdir(cli, path, *parents).await,
        Verb::Touch { path } => make::touch(cli, path).await,
        Verb::Mv { from, to, job } => mv::run(cli, from, to, job).await,
        Verb::Cp {
            recursive,
            from,
            to,
            job,
        } => cp::run(cli, from, to, *recursive, job).await,
        Verb::Rm {
            recursive,
            path,
            job,
        } => rm::run(cli, path, *recursive, job).await,
        Verb::Recover {
            dry_run,
            wait,
            foreign_lease,
            json,
        } => recover::run(cli, *dry_run, (*wait, *foreign_lease), *json).await,
        Verb::Ls {
            path,
            recursive,
            long,
            json,
            consistent,
        } => {
            let options = ls::LsOptions {
                recursive: *recursive,
                long: *long,
                json: *json,
                consistent: consistent_wait(*consistent),
            };
            ls::run(cli, path, &options).await
        }
        Verb::Locks { json } => locks::run(cli, *json).await,
        Verb::Serve { .. } => serve::run(cli, std::future::pending()).await,
    }
}

/// Prints a verb's report on standard output (pretty JSON with `json`, else as `text` writes
/// it) and returns its verdict, settled before printing: [`EXIT_OK`] if `clean`, else
/// [`EXIT_FAILED`], whether or not the reader stays to the end ([`output::keep_verdict`]).
fn print_verdict<R: serde::Serialize>(
    report: &R,
    clean: bool,
    json: bool,
    text: impl FnOnce(&mut Printer, &R) -> anyhow::Result<()>,
) -> anyhow::Result<u8> {
    let code = if clean { EXIT_OK } else { EXIT_FAILED };
    let mut out = Printer::stdout();
    let printed = if json {
        out.line(serde_json::to_string_pretty(report)?)
    } else {
        text(&mut out, report)
    };
    output::keep_verdict(printed.and_then(|()| out.flush()), code)
}

/// Opens the store and its tree, creating the store and the indices if they are missing: for
/// the verbs that make a tree (`index`, `mkdir`, `touch`).
async fn open_tree(cli: &Cli) -> anyhow::Result<FsTree> {
    tree_of(cli, cli.store.open(&cli.store_options())?).await
}

/// Opens the tree of a store that must be there already, in an index that must be there
/// already: a database file that does not exist, or a tree index that does not (a mistyped
/// `--index`), is an error naming it, not a new empty tree. The lock and journal indices
/// beside it are made if they are missing. For the verbs that read a tree or change what is
/// in it.
async fn open_existing_tree(cli: &Cli) -> anyhow::Result<FsTree> {
    let store = cli.store.open_existing(&cli.store_options())?;
    let tree = FsTree::new(Arc::clone(&store), cli.index.clone()).with_layout(cli.layout()?);
    let journal = fs_model::journal_index_name(&cli.index);
    let all = [cli.index.as_str(), &tree.lock_index(), &journal];
    // The tree and its lock and journal indices, in one request (a verb's usual case costs
    // no more than before); only if one is missing, the tree's alone.
    let looking = || format!("looking for index `{}` in {}", cli.index, cli.store);
    if store.indices_exist(&all).await.with_context(looking)? {
        return Ok(tree);
    }
    if !store
        .indices_exist(&[cli.index.as_str()])
        .await
        .with_context(looking)?
    {
        anyhow::bail!("{}", no_tree(cli));
    }
    tree_of(cli, store).await
}

/// What a verb that needs a tree says when its index does not exist.
fn no_tree(cli: &Cli) -> String {
    format!(
        "there is no tree in index `{}` of {}: nothing has been stored there yet (make one with `fsrename index DIR` or `fsrename mkdir PATH`, or name the right one with --index)",
        cli.index, cli.store
    )
}

/// The tree of `store`, its indices made if they are missing, with the shards and replicas
/// of `--shards` and `--replicas`.
async fn tree_of(cli: &Cli, store: fs_store::SharedStore) -> anyhow::Result<FsTree> {
    let tree = FsTree::new(store, cli.index.clone()).with_layout(cli.layout()?);
    tree.ensure_indices()
        .await
        .with_context(|| format!("preparing index `{}` in {}", cli.index, cli.store))?;
    Ok(tree)
}

/// The lock settings of the global options for work on `store`, waiting `wait`. A lock in
/// the way whose holder died (its lease over, or its process proven gone on this machine) is
/// not waited out: what its job left is finished first, by a recovery run
/// ([`finish_orphans`]).
fn lock_settings(cli: &Cli, store: &SharedStore, wait: Duration) -> LockSettings {
    lock_settings_telling(cli, store, wait).0
}

/// [`lock_settings`], with the finisher of orphans in them, for a verb that says what it
/// finished ([`tell_finished`]).
fn lock_settings_telling(
    cli: &Cli,
    store: &SharedStore,
    wait: Duration,
) -> (LockSettings, Arc<FinishOrphans>) {
    let orphans = finish_orphans(cli, store, wait);
    let settings = LockSettings {
        lease: cli.lease,
        wait,
        protocol: cli.lock_protocol,
        orphans: Some(Arc::clone(&orphans) as Arc<dyn fs_locks::Orphans>),
    };
    (settings, orphans)
}

/// What finishes the jobs that died in the way of a verb's locks: a recovery with the verb's
/// lease, waiting for the dead job's locks no longer than `wait` (and 10 s at most, recovery's
/// own default).
fn finish_orphans(cli: &Cli, store: &SharedStore, wait: Duration) -> Arc<FinishOrphans> {
    FinishOrphans::new(
        Arc::clone(store),
        &cli.index,
        cli.lease,
        wait.min(Duration::from_secs(10)),
    )
}

/// Says on stderr which jobs that died `orphans` finished before the verb could go on.
fn tell_finished(orphans: &FinishOrphans) {
    for done in orphans.finished() {
        output::to_stderr(format_args!(
            "fsrename: first finished `{}` (journal {}), left unfinished by a job that died or was stopped",
            done.kind.describe(&done.from, &done.to),
            done.job_id
        ));
    }
}

/// How long `--consistent` waits for its lock, if it was given.
fn consistent_wait(args: ConsistentArgs) -> Option<Duration> {
    args.consistent.then_some(args.wait)
}

/// Exit 3 for a lock that was not granted in time, else 1.
fn exit_code_of(e: &anyhow::Error) -> u8 {
    let timed_out = e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<fs_locks::LockError>(),
            Some(fs_locks::LockError::Timeout { .. })
        ) || matches!(
            cause.downcast_ref::<fs_rename::RenameError>(),
            Some(fs_rename::RenameError::Lock(
                fs_locks::LockError::Timeout { .. }
            ))
        )
    });
    // Asking for what cannot be had (a consistent read, or a lock, of `/`) is a usage error,
    // as clap's own are: the same command will never succeed.
    let misused = e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<fs_rename::RenameError>(),
            Some(
                fs_rename::RenameError::RootNotLockable
                    | fs_rename::RenameError::Lock(fs_locks::LockError::RootLock)
            )
        ) || matches!(
            cause.downcast_ref::<fs_locks::LockError>(),
            Some(fs_locks::LockError::RootLock)
        )
    });
    if timed_out {
        EXIT_LOCK_TIMEOUT
    } else if misused {
        EXIT_USAGE
    } else {
        EXIT_FAILED
    }
}
