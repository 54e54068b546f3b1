//! A Jepsen-style test of fsrename: clients that record a history, a nemesis, a checker.
//!
//! - [`history`]: the values of a history: calls ([`Op`], [`Outcome`], invocation and
//!   completion times), faults, and the tree at the start and the end.
//! - [`model`]: the tree as the checker models it, and what each operation does to it.
//! - [`check`]: the checker: ids (none lost, none duplicated, none unexplained) and
//!   linearizability (the end is what the acknowledged calls, and some of the unknown ones,
//!   make in an order that respects real time), exhaustive with memoization (Wing & Gong,
//!   as Knossos and Porcupine do it).
//! - [`generate`]: the random operations on a small shared tree.
//! - [`cli_client`] and [`service`]: a call through a `fsrename` process, or as a job of
//!   `fsrename serve`, and how its end becomes an outcome.
//! - [`processes`]: the clients' running processes, for the nemesis.
//! - [`nemesis`]: faults, one at a time, on a real cluster, the proxy, or the clients.
//! - [`clock_faults`]: the clients' clocks set off and stepped, with libfaketime.
//! - [`finish`]: recovery, the final read, what must not be left behind.
//! - [`gauges`]: what a long history must not see grow (memory, contexts, lock index).
//! - [`workload`]: one history from start to end.
//!
//! `docs/reliability.md` says what is promised and how this tests it.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod check;
pub mod cli_client;
pub mod clock;
pub mod clock_faults;
pub mod finish;
pub mod gauges;
pub mod generate;
pub mod history;
pub mod model;
pub mod nemesis;
pub mod processes;
pub mod service;
pub mod workload;

pub use check::{check, Anomaly, Verdict};
pub use cli_client::Fsrename;
pub use clock_faults::ClockFaults;
pub use gauges::Sample;
pub use history::{Call, Entry, Fault, FaultKind, History, Kind, Op, Outcome, Via};
pub use nemesis::{Plan, Stage};
pub use workload::{Run, Workload};
