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
    ExitCode::from(runtime.block_on(fsrename::run(cli, shutdown_signal())))
}

/// Resolves on Ctrl-C or SIGTERM, with which of them came first.
async fn shutdown_signal() -> Signal {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => Signal::Interrupt,
        () = terminate => Signal::Terminate,
    }
}
