//! The checker: is a history one that fsrename may produce?
//!
//! Two kinds of check, both on the whole history:
//!
//! - `ids.rs`: quick checks of the document ids at the end against those at the start:
//!   none at two paths, none new where nothing could make one, none gone where nothing
//!   could remove one. They name the documents, where the search below can only say
//!   "no order".
//! - `linear.rs`: linearizability: an order of the acknowledged calls (and of some of the
//!   unknown ones) that respects real time, in which each call's precondition holds where
//!   it is placed and which makes the end tree. Exhaustive, with memoization (Wing & Gong,
//!   as Knossos and Porcupine do it), helped by `dead_end.rs` (states from which no order
//!   can succeed) and `commute.rs` (where an unknown call can matter). If there is no
//!   order, a second search takes the failed calls as unknown: if an order is found then,
//!   failed calls took effect.

mod commute;
mod dead_end;
mod ids;
mod linear;
mod part;
#[cfg(test)]
mod tests;

use std::fmt;

use serde::Serialize;

use crate::history::{Call, History, Outcome};
use linear::{Failed, Finding, Search};

/// The states [`check`] explores in its search for an order before it gives up with
/// [`Anomaly::Inconclusive`].
pub const DEFAULT_BUDGET: u64 = 2_000_000;

/// The least budget of the second search (see [`check_with_budget`]).
const SECOND_BUDGET_FLOOR: u64 = 100_000;

/// The second search's budget, in times the states the first one explored.
const SECOND_BUDGET_FACTOR: u64 = 10;

/// Something the history shows that fsrename must not do (or that the checker could not
/// decide).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "anomaly", rename_all = "snake_case")]
pub enum Anomaly {
    /// One id at two paths or more at the end: a document duplicated (a rename applied as
    /// a copy, or a move half undone).
    DuplicateId {
        /// The id.
        id: String,
        /// Its paths at the end, in order.
        paths: Vec<String>,
    },
    /// A new id at the end, while no call that could make a document (mkdir, touch, cp)
    /// was acknowledged or left unknown.
    UnexplainedId {
        /// The id.
        id: String,
        /// Its path at the end.
        path: String,
    },
    /// A start id missing at the end, while no delete was acknowledged or left unknown.
    LostId {
        /// The id.
        id: String,
        /// Its path at the start.
        path: String,
    },
    /// No order of the calls explains the end (nor the calls' preconditions).
    NotLinearizable {
        /// The most acknowledged calls any order placed.
        placed: usize,
        /// The acknowledged calls that could not be placed next at that deepest point
        /// (indices into `History::calls`); empty if all were placed but the end differs.
        stuck: Vec<usize>,
        /// What went wrong there: how the tree differs from the end, or why the stuck
        /// calls did not fit.
        detail: String,
    },
    /// No order explains the history as reported, but one does if these calls, reported
    /// failed, took effect.
    FailedTookEffect {
        /// The failed calls that order placed (indices into `History::calls`).
        calls: Vec<usize>,
    },
    /// The search gave up: it explored its budget of states without a verdict.
    Inconclusive {
        /// The states it explored.
        explored: u64,
    },
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::DuplicateId { id, paths } => {
                write!(f, "duplicate id {id} at {}", paths.join(", "))
            }
            Anomaly::UnexplainedId { id, path } => write!(
                f,
                "unexplained new id {id} at {path} (no call that creates documents)"
            ),
            Anomaly::LostId { id, path } => {
                write!(f, "lost id {id} (at {path} at the start; no delete)")
            }
            Anomaly::NotLinearizable {
                placed,
                stuck,
                detail,
            } => {
                let stuck: Vec<String> = stuck.iter().map(|c| format!("#{c}")).collect();
                write!(
                    f,
                    "not linearizable: at most {placed} acknowledged calls placed; stuck: [{}]; {detail}",
                    stuck.join(", ")
                )
            }
            Anomaly::FailedTookEffect { calls } => {
                let calls: Vec<String> = calls.iter().map(|c| format!("#{c}")).collect();
                write!(
                    f,
                    "calls reported failed took effect: {} (only then is the history linearizable)",
                    calls.join(", ")
                )
            }
            Anomaly::Inconclusive { explored } => write!(
                f,
                "inconclusive: {explored} states explored without a verdict"
            ),
        }
    }
}

/// What the checker found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Everything wrong; none if the history passed.
    pub anomalies: Vec<Anomaly>,
    /// The states the searches explored.
    pub explored: u64,
    /// The order found (indices into `History::calls`, the unknown calls it placed
    /// included): of the history as reported, or, with [`Anomaly::FailedTookEffect`], the
    /// one with those failed calls. None if no order was found.
    pub linearization: Option<Vec<usize>>,
}

impl Verdict {
    /// Whether the history passed: no anomaly.
    pub fn passed(&self) -> bool {
        self.anomalies.is_empty()
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            return write!(f, "passed ({} states explored)", self.explored);
        }
        for (i, anomaly) in self.anomalies.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{anomaly}")?;
        }
        Ok(())
    }
}

/// Checks `history` with the default budget ([`DEFAULT_BUDGET`] states).
pub fn check(history: &History) -> Verdict {
    check_with_budget(history, DEFAULT_BUDGET)
}

/// Checks `history`: the id checks, then the search for an order, exploring at most
/// `max_states` states.
///
/// If there is none, a second search takes the failed calls as unknown, to tell
/// [`Anomaly::FailedTookEffect`] from [`Anomaly::NotLinearizable`]: first as having maybe
/// taken effect before they completed (a quick search, since few are in flight at a time,
/// and the likely case: a call carried out and reported failed), then at any time after
/// their invocation. With every failed call optional that search is far larger than the
/// first, and it only says what kind of failure the history already is: it explores ten
/// times the states the first one did (at least 100 000, at most `max_states`); if that
/// runs out, the history is reported [`Anomaly::NotLinearizable`], with a note.
pub fn check_with_budget(history: &History, max_states: u64) -> Verdict {
    let mut anomalies = ids::check_ids(history);
    let reported = Search::new(history, Failed::LeftOut).run(max_states);
    let mut explored = reported.explored();
    let mut linearization = None;
    match reported {
        Finding::Linearizable { order, .. } => linearization = Some(order),
        Finding::Inconclusive { explored } => anomalies.push(Anomaly::Inconclusive { explored }),
        Finding::NotLinearizable {
            placed,
            stuck,
            mut detail,
            ..
        } => {
            let budget = explored
                .saturating_mul(SECOND_BUDGET_FACTOR)
                .max(SECOND_BUDGET_FLOOR)
                .min(max_states);
            let (again, spent) = failed_took_effect(history, budget);
            explored += spent;
            match again {
                Some(Finding::Linearizable { order, .. }) => {
                    let mut calls: Vec<usize> = order
                        .iter()
                        .copied()
                        .filter(|&c| history.calls.get(c).is_some_and(failed))
                        .collect();
                    calls.sort_unstable();
                    anomalies.push(Anomaly::FailedTookEffect { calls });
                    linearization = Some(order);
                }
                other => {
                    if matches!(other, Some(Finding::Inconclusive { .. })) {
                        // The first search was exhaustive: not linearizable stands; only
                        // whether failed calls would explain it is not known.
                        detail.push_str(
                            " (whether failed calls that took effect would explain it is not \
                             known: the search ran out of budget)",
                        );
                    }
                    anomalies.push(Anomaly::NotLinearizable {
                        placed,
                        stuck,
                        detail,
                    });
                }
            }
        }
    }
    Verdict {
        anomalies,
        explored,
        linearization,
    }
}

/// The second search, failed calls taken as maybe carried out, within `max_states` states
/// in all: what it found (none if there is no failed call: it would be the first search
/// again), and the states it explored.
fn failed_took_effect(history: &History, max_states: u64) -> (Option<Finding>, u64) {
    if !history.calls.iter().any(failed) {
        return (None, 0);
    }
    let in_time = Search::new(history, Failed::InTime).run(max_states);
    let spent = in_time.explored();
    if !matches!(in_time, Finding::NotLinearizable { .. }) {
        return (Some(in_time), spent);
    }
    let any_time = Search::new(history, Failed::AsUnknown).run(max_states.saturating_sub(spent));
    let spent = spent + any_time.explored();
    (Some(any_time), spent)
}

/// Whether `call` was reported failed.
fn failed(call: &Call) -> bool {
    matches!(call.outcome, Outcome::Failed { .. })
}
