//! The `fsrename` command line: its arguments ([`Cli`]), where the store lives
//! ([`StoreLocation`]), the JSON every verb prints with `--json` ([`contract`]), and [`run`],
//! which carries out a verb and returns the exit code.
//!
//! Exit codes: [`EXIT_OK`] (0) done, [`EXIT_FAILED`] (1) failed (or a broken tree),
//! [`EXIT_USAGE`] (2) usage, [`EXIT_LOCK_TIMEOUT`] (3) a lock was not granted in time,
//! [`EXIT_UNFINISHED`] (4) `fsck` found jobs unfinished but nothing broken,
//! [`EXIT_INTERRUPTED`] (130) stopped by SIGINT, [`EXIT_TERMINATED`] (143) stopped by
//! SIGTERM (a service, `serve` or `index --watch`, exits 0 then: stopping is its end). A
//! reader that closes standard output early (`fsrename ls -R / | head -1`) ends the output
//! quietly; it does not change the exit code.

#![deny(missing_docs)]
// Library code returns its errors; tests may unwrap (clippy.toml allows it in tests).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod cli;
pub mod contract;
mod output;
pub mod serve;
mod store_location;
mod verbs;

use std::future::Future;

pub use cli::{Cli, Verb};
pub use store_location::StoreLocation;

/// The exit code of a verb that did its work.
pub const EXIT_OK: u8 = 0;
/// The exit code of a verb that failed (or found a broken tree).
pub const EXIT_FAILED: u8 = 1;
/// The exit code of a command that can never succeed as written: bad arguments (clap's own
/// exit code), or a request for what cannot be had (a consistent read of `/`).
pub const EXIT_USAGE: u8 = 2;
/// The exit code of a verb whose locks were not granted within `--wait`.
pub const EXIT_LOCK_TIMEOUT: u8 = 3;
/// The exit code of `fsck` on a tree that is not broken but not finished either: jobs
/// journaled and not done (at work, or left by a job that died, which `fsrename recover`
/// finishes), or locks left by jobs that died. Nothing is wrong that recovery (or the job at
/// work) does not mend.
pub const EXIT_UNFINISHED: u8 = 4;
/// The exit code of a verb interrupted by SIGINT (Ctrl-C): 128 + 2, as a shell reports it.
pub const EXIT_INTERRUPTED: u8 = 130;
/// The exit code of a verb stopped by SIGTERM before it was done: 128 + 15, as a shell
/// reports it. A service (`serve`, `index --watch`) stopped so exits 0.
pub const EXIT_TERMINATED: u8 = 143;

/// The signal that tells the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT: Ctrl-C at a terminal.
    Interrupt,
    /// SIGTERM: a supervisor's (systemd, `docker stop`, Kubernetes) request to stop.
    Terminate,
}

/// Runs the verb in `cli` until it ends or `shutdown` resolves with the signal that stops it
/// (`serve` then shuts down gracefully); returns the exit code.
pub async fn run(cli: Cli, shutdown: impl Future<Output = Signal> + Send + 'static) -> u8 {
    verbs::run(cli, shutdown).await
}
