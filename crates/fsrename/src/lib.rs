//! The `fsrename` command line: its arguments ([`Cli`]), where the store lives
//! ([`StoreLocation`]), and [`run`], which carries out a verb and returns the exit code.
//!
//! Exit codes: [`EXIT_OK`] (0) done, [`EXIT_FAILED`] (1) failed, [`EXIT_USAGE`] (2) usage,
//! [`EXIT_LOCK_TIMEOUT`] (3) a lock was not granted in time. A reader that closes standard
//! output early (`fsrename ls -R / | head -1`) ends the output quietly; it does not change the
//! exit code.

#![deny(missing_docs)]
// Library code returns its errors; tests may unwrap (clippy.toml allows it in tests).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod cli;
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
/// The exit code of a verb interrupted (Ctrl-C, SIGTERM): 128 + SIGINT, as a shell reports it.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Runs the verb in `cli` until it ends or `shutdown` resolves (`serve` then shuts down
/// gracefully); returns the exit code.
pub async fn run(cli: Cli, shutdown: impl Future<Output = ()> + Send + 'static) -> u8 {
    verbs::run(cli, shutdown).await
}
