//! The `fsrename` command line: parses arguments, sets up logging and hands over to a verb.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod demo;

/// Keeps a directory tree in a document store (embedded SQLite or Elasticsearch) and renames
/// files and directories in it safely while other jobs do the same.
#[derive(Debug, Parser)]
#[command(name = "fsrename", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// Shows, on an in-memory store, why renames need locks: racing jobs and who wins.
    Demo,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FSRENAME_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("fsrename: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.verb {
            Verb::Demo => demo::run().await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fsrename: {e:#}");
            ExitCode::FAILURE
        }
    }
}
