//! How a verb ends: the exit code of its error or of the signal that stopped it, what it says
//! then (on stderr, and with `--json` as the contract's error line), and how a verb told to
//! stop winds down.

use std::future::Future;
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use crate::cli::{Cli, Verb};
use crate::contract::{Contract, ErrorLine};
use crate::output::{self, Printer};
use crate::{
    Signal, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_LOCK_TIMEOUT, EXIT_OK, EXIT_TERMINATED, EXIT_USAGE,
};

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

/// The signal that told the process to stop, once one did.
static SIGNAL: OnceLock<Signal> = OnceLock::new();

/// Notes that `signal` told the process to stop.
pub(super) fn note_signal(signal: Signal) {
    let _ = SIGNAL.set(signal);
}

/// The exit code of a verb that ended with `code`, told by which signal it stopped: a
/// service (`serve`, `demo --serve`, `index --watch`) stopped by SIGTERM (systemd, `docker
/// stop`, Kubernetes) did what it is for and exits 0; any other verb so stopped did not finish
/// and exits 143 (128 + SIGTERM, as a shell reports it); SIGINT (Ctrl-C) is 130 for all.
pub(super) fn stopped(cli: &Cli, code: u8) -> u8 {
    if code != EXIT_INTERRUPTED || SIGNAL.get() != Some(&Signal::Terminate) {
        return code;
    }
    if cli.verb.is_service() {
        EXIT_OK
    } else {
        EXIT_TERMINATED
    }
}

/// Says on stderr why the verb failed; with `--json`, also on stdout, as the verb's last line
/// (an [`ErrorLine`]), unless it printed its report already.
pub(super) fn report_error(cli: &Cli, e: &anyhow::Error, code: u8) {
    output::to_stderr(format_args!("fsrename: {e:#}"));
    if cli.verb.json() && !output::reported() {
        let journal = e.chain().find_map(|cause| match cause.downcast_ref() {
            Some(fs_rename::RenameError::Unfinished { job, .. }) => Some(job.clone()),
            _ => None,
        });
        error_line(cli, format!("{e:#}"), code, journal);
    }
}

/// Prints an [`ErrorLine`] on stdout (a reader gone by now changes nothing).
fn error_line(cli: &Cli, error: String, exit_code: u8, journal: Option<String>) {
    let line = ErrorLine {
        verb: cli.verb.name().to_owned(),
        error,
        exit_code,
        journal,
    };
    if let Ok(text) = line.to_line() {
        let mut out = Printer::stdout();
        let _ = out.line(text).and_then(|()| out.flush());
    }
}

/// Ends `verb` on Ctrl-C or SIGTERM, giving back what it holds: a job (`mv`, `cp`, `rm`) is
/// told to stop and winds down (see [`STOP`]), and so is `demo` (it stops its jobs, waits for
/// them, and says where it stopped); any other verb is dropped at once, its locks released in
/// the background, and the process waits for those releases before it ends, or they would die
/// with it and leave the locks for their whole lease.
pub(super) async fn interrupted(
    cli: &Cli,
    mut verb: std::pin::Pin<Box<impl Future<Output = anyhow::Result<u8>>>>,
) -> u8 {
    STOP.send_replace(true);
    // The demo's store is in memory: nothing it leaves there outlives the process, and there
    // is nothing to say about its locks or journal.
    let in_memory = matches!(cli.verb, Verb::Demo { .. });
    if in_memory
        || matches!(
            cli.verb,
            Verb::Mv { .. } | Verb::Cp { .. } | Verb::Rm { .. }
        )
    {
        if let Ok(Err(e)) = tokio::time::timeout(WIND_DOWN, &mut verb).await {
            if !output::is_stdout_closed(&e) {
                output::to_stderr(format_args!("fsrename: {e:#}"));
            }
        }
    }
    drop(verb);
    let code = stopped(cli, EXIT_INTERRUPTED);
    if cli.verb.json() && !output::reported() {
        let signal = match SIGNAL.get() {
            Some(Signal::Terminate) => "SIGTERM",
            _ => "SIGINT (Ctrl-C)",
        };
        error_line(cli, format!("stopped by {signal}"), code, None);
    }
    if !fs_locks::settle_background_releases(GIVE_BACK).await && !in_memory {
        output::to_stderr(format_args!(
            "fsrename: stopped before every lock was given back; their lease ends the rest within {}",
            fs_model::short_duration(cli.lease)
        ));
    }
    let kept = fs_locks::guards_kept_for_recovery();
    if kept > 0
        && !in_memory
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

/// Exit 3 for a lock that was not granted in time, else 1.
pub(super) fn exit_code_of(e: &anyhow::Error) -> u8 {
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
