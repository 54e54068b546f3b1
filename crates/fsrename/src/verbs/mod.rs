//! The verbs, one file each, and what they share.

mod cp;
mod demo;
mod demo_serve;
mod ending;
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
mod schema;
mod serve;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fs_model::DocKind;
use fs_rename::{FinishOrphans, FsTree, LockSettings};
use fs_store::SharedStore;

use crate::cli::{Cli, ConsistentArgs, PathArg, Verb};
use crate::contract::Contract;
use crate::output::{self, Printer};
use crate::{Signal, EXIT_FAILED, EXIT_OK};
pub(crate) use ending::stop_requested;

/// Runs the verb until it ends or `shutdown` resolves (the service instead shuts down
/// gracefully); prints its errors; returns the exit code (0 if the verb stopped because
/// standard output lost its reader).
pub async fn run(cli: Cli, shutdown: impl Future<Output = Signal> + Send + 'static) -> u8 {
    let shutdown = async move { ending::note_signal(shutdown.await) };
    let code = run_until(&cli, shutdown).await;
    ending::stopped(&cli, code)
}

/// [`run`], without the last word on the exit code.
async fn run_until(cli: &Cli, shutdown: impl Future<Output = ()> + Send + 'static) -> u8 {
    let result = if let Verb::Serve { .. } = &cli.verb {
        serve::run(cli, shutdown).await
    } else if let Verb::Demo {
        serve: true,
        files,
        listen,
        slow,
        ..
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
            cli,
            dir,
            at.as_ref().map(PathArg::path),
            (*batch_size, *debounce),
            content.then_some(*content_max),
            *json,
            shutdown,
        )
        .await
    } else {
        let mut verb = Box::pin(run_verb(cli));
        tokio::select! {
            result = &mut verb => result,
            () = shutdown => return ending::interrupted(cli, verb).await,
        }
    };
    match result {
        Ok(code) => code,
        // The reader has what it wanted (`| head`): a normal end. The verb has already
        // unwound, releasing what it held, on its way here.
        Err(e) if output::is_stdout_closed(&e) => EXIT_OK,
        Err(e) => {
            let code = ending::exit_code_of(&e);
            ending::report_error(cli, &e, code);
            code
        }
    }
}

async fn run_verb(cli: &Cli) -> anyhow::Result<u8> {
    match &cli.verb {
        Verb::Demo {
            files, slow, json, ..
        } => demo::run(files.unwrap_or(demo::FILES), slow.unwrap_or(0.0), *json).await,
        Verb::Fsck {
            path,
            json,
            consistent,
        } => fsck::run(cli, path, *json, consistent_wait(*consistent)).await,
        Verb::Schema { name } => schema::run(name.as_deref()),
        Verb::Completions { shell } => schema::completions(*shell),
        Verb::Man { dir } => schema::man(dir.as_deref()),
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
            index::run(cli, dir, at.as_ref().map(PathArg::path), &options, *json).await
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
        Verb::Mkdir {
            parents,
            path,
            json,
        } => make::mkdir(cli, path.path(), *parents, *json).await,
        Verb::Touch { path, json } => make::touch(cli, path, *json).await,
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

/// Prints a verb's report on standard output (its line of the JSON contract with `json`,
/// else as `text` writes it) and returns its verdict, settled before printing: [`EXIT_OK`] if
/// `clean`, else [`EXIT_FAILED`], whether or not the reader stays to the end
/// ([`output::keep_verdict`]).
fn print_verdict<R: Contract>(
    report: &R,
    clean: bool,
    json: bool,
    text: impl FnOnce(&mut Printer, &R) -> anyhow::Result<()>,
) -> anyhow::Result<u8> {
    let code = if clean { EXIT_OK } else { EXIT_FAILED };
    print_report(&mut Printer::stdout(), report, code, json, text)
}

/// [`print_verdict`] on `out` (after what the verb printed there before), with the exit code
/// `code` whatever the report says.
fn print_report<R: Contract>(
    out: &mut Printer,
    report: &R,
    code: u8,
    json: bool,
    text: impl FnOnce(&mut Printer, &R) -> anyhow::Result<()>,
) -> anyhow::Result<u8> {
    let printed = if json {
        out.report(report)
    } else {
        text(out, report).and_then(|()| out.flush())
    };
    output::keep_verdict(printed, code)
}

/// Refuses a path given with a trailing `/` (a directory's, as shells complete it) where a
/// file is: `path`, and `to` if `path` is a file. One lookup, and only when a `/` was given:
/// a guard against a slip of the hand, as Unix's "Not a directory", not against a race.
async fn refuse_file_as_dir(
    tree: &FsTree,
    what: &str,
    path: &PathArg,
    to: Option<&PathArg>,
) -> anyhow::Result<()> {
    let to_dir = to.is_some_and(PathArg::names_dir);
    if !path.names_dir() && !to_dir {
        return Ok(());
    }
    let kind = tree
        .kind_of(path.path())
        .await
        .with_context(|| what.to_owned())?;
    if kind != Some(DocKind::File) {
        return Ok(());
    }
    if path.names_dir() {
        anyhow::bail!(
            "{what}: `{}` is not a directory (`{}` is a file)",
            path.as_given(),
            path.path()
        );
    }
    let to = to.map(PathArg::as_given).unwrap_or_default();
    anyhow::bail!(
        "{what}: `{to}` names a directory, but `{}` is a file",
        path.path()
    )
}

/// Opens the store and its tree, creating the store and the indices if they are missing: for
/// the verbs that make a tree (`index`, `mkdir`, `touch`).
async fn open_tree(cli: &Cli) -> anyhow::Result<FsTree> {
    tree_of(cli, cli.store.open(&cli.store_options())?).await
}

/// Runs `op` first on an empty tree in memory when the store is a database file that does not
/// exist yet: a new file would hold that same empty tree, so what fails there would fail on
/// it too, and is refused before the file is made. A verb that fails before it writes leaves
/// no empty database behind, after which every verb would answer as for an empty tree.
async fn rehearse_on_new_file<F, Fut>(cli: &Cli, op: F) -> anyhow::Result<()>
where
    F: FnOnce(FsTree) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let crate::StoreLocation::File(path) = &cli.store else {
        return Ok(());
    };
    // An error (a directory that cannot be read) is left to the real open to name.
    if path.try_exists().unwrap_or(true) {
        return Ok(());
    }
    let store: SharedStore = Arc::new(fs_store::SqliteStore::in_memory()?);
    op(tree_of(cli, store).await?).await
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
