//! The `fsrename` binary: parses arguments, sets up logging and the shutdown signal, and hands
//! over to [`fsrename::run`].

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use fsrename::{Cli, Signal};

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FSRENAME_LOG")
                // notify warns that it cannot remove the watch of every directory deleted
                // under a watched tree (`rm -rf`): the kernel removed it already, and a
                // line a directory is noise, not news.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,notify=error")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: escape codes in a log file or a pipe are
        // noise (and NO_COLOR turns them off everywhere, as https://no-color.org asks).
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        // A log line that cannot be written (stderr closed) is dropped; the default would
        // report it with `eprintln!`, which panics on that same closed stderr.
        .log_internal_errors(false)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            // `eprintln!` would panic if stderr is closed.
            let _ = writeln!(
                std::io::stderr(),
                "fsrename: cannot start the async runtime: {e}"
            );
            return ExitCode::from(fsrename::EXIT_FAILED);
        }
    };
    // The signals are caught from here on, before the verb starts: one that comes while it
    // starts (a supervisor's SIGTERM a moment after `serve` said where it listens) stops it
    // gracefully, not by the signal's default action.
    let shutdown = {
        let _runtime = runtime.enter();
        shutdown_signal()
    };
    ExitCode::from(runtime.block_on(fsrename::run(cli, shutdown)))
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, with which of them came first. The handlers are
/// installed when this is called (in the runtime's context), not when it is first awaited.
#[cfg(unix)]
fn shutdown_signal() -> impl std::future::Future<Output = Signal> {
    use tokio::signal::unix::{signal, SignalKind};
    let interrupt = signal(SignalKind::interrupt()).ok();
    let terminate = signal(SignalKind::terminate()).ok();
    async move {
        // A signal that cannot be listened for never comes.
        let on = |stream: Option<tokio::signal::unix::Signal>| async move {
            match stream {
                Some(mut stream) => {
                    stream.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = on(interrupt) => Signal::Interrupt,
            () = on(terminate) => Signal::Terminate,
        }
    }
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> impl std::future::Future<Output = Signal> {
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        Signal::Interrupt
    }
}
