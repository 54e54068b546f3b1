//! A history: the tree at the start, every call a client made (what, when, how it ended),
//! every fault the nemesis caused, and the tree at the end. Plain values, in JSON for a
//! history kept beside a failed run.

use serde::{Deserialize, Serialize};

/// One operation on the tree, as a client asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// `fsrename mkdir PATH`: a new directory (its parent must be a directory).
    Mkdir {
        /// The new directory.
        path: String,
    },
    /// `fsrename touch PATH`: a new empty file, or nothing changed if PATH exists.
    Touch {
        /// The file.
        path: String,
    },
    /// `fsrename mv FROM TO` (or `POST /renames`): FROM and everything under it moved to TO.
    Mv {
        /// What is renamed.
        from: String,
        /// Its new path.
        to: String,
    },
    /// `fsrename cp -r FROM TO` (or `POST /copies`): a copy of FROM's subtree at TO, new ids.
    Cp {
        /// What is copied.
        from: String,
        /// Where the copy goes.
        to: String,
    },
    /// `fsrename rm -r PATH` (or `POST /deletes`): PATH and everything under it removed.
    Rm {
        /// What is removed.
        path: String,
    },
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Mkdir { path } => write!(f, "mkdir {path}"),
            Op::Touch { path } => write!(f, "touch {path}"),
            Op::Mv { from, to } => write!(f, "mv {from} {to}"),
            Op::Cp { from, to } => write!(f, "cp -r {from} {to}"),
            Op::Rm { path } => write!(f, "rm -r {path}"),
        }
    }
}

/// How a call ended, as its client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Acknowledged: it took effect, once, between its invocation and its completion.
    Ok,
    /// Reported failed: it must have taken no effect.
    Failed {
        /// The error the client reported.
        error: String,
    },
    /// Not known: the client was killed, timed out, or was told the job is unfinished and
    /// left to recovery. It took effect once, at some moment after its invocation, or never.
    Unknown {
        /// Why it is not known.
        why: String,
    },
}

/// Through what a call was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// A `fsrename` process of its own.
    Cli,
    /// A job of `fsrename serve`, over HTTP.
    Service,
}

/// One call: its operation, its client, and the times (microseconds since the history began)
/// it was invoked and it completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    /// The client that made it (`cli-0`, `svc-1`, ...).
    pub client: String,
    /// Through what.
    pub via: Via,
    /// What it asked for.
    pub op: Op,
    /// When it was sent.
    pub invoked: u64,
    /// When its answer came (or, for an unknown outcome, when the client gave up on it).
    pub completed: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// A directory or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A directory.
    Dir,
    /// A file.
    File,
}

/// One document of the tree as read at the start or the end: path, id, kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Entry {
    /// Its absolute path (`/` is the root).
    pub path: String,
    /// Its document id.
    pub id: String,
    /// Directory or file.
    pub kind: Kind,
}

/// The kinds of fault a nemesis causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A node killed (SIGKILL), then started again.
    NodeKill,
    /// A node paused (SIGSTOP), then let go on (SIGCONT).
    NodePause,
    /// A node cut from the others (its transport traffic dropped), then healed.
    Partition,
    /// A client killed (SIGKILL) in the middle of a call.
    ClientKill,
    /// A client paused past its locks' lease, then let go on.
    ClientPause,
    /// The tree index blocked as by the flood-stage disk watermark, then unblocked.
    FloodStage,
    /// The network between clients and the store faulty for a while (refused connections,
    /// 429 and 503, requests cut before or after they were carried out, failover replays).
    NetStorm,
    /// The node the clients talk to gone at once (its port refusing), then back.
    NodeLoss,
    /// Processes started for a while with their wall clock set off, ahead or behind, by more
    /// than `max_clock_skew` (and often a lease); a service instance among them, sometimes.
    ClockSkew,
    /// Every running process's wall clock stepped, forward past a lease or back, then back.
    ClockJump,
}

/// One fault, as the nemesis logged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// What kind.
    pub kind: FaultKind,
    /// On what: a node's URL, a client's name, an index.
    pub target: String,
    /// When it began (microseconds since the history began).
    pub began: u64,
    /// When it was healed.
    pub healed: u64,
}

/// A whole history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The tree before the first call.
    pub start: Vec<Entry>,
    /// Every call, in order of invocation.
    pub calls: Vec<Call>,
    /// Every fault, in order.
    pub faults: Vec<Fault>,
    /// The tree after the last call, after healing and recovery.
    pub end: Vec<Entry>,
}

impl History {
    /// Counts the calls by outcome: `(ok, failed, unknown)`.
    pub fn outcomes(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for call in &self.calls {
            match call.outcome {
                Outcome::Ok => counts.0 += 1,
                Outcome::Failed { .. } => counts.1 += 1,
                Outcome::Unknown { .. } => counts.2 += 1,
            }
        }
        counts
    }
}
