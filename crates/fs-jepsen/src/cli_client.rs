//! One call through the command line: a `fsrename` process of its own, its exit read as an
//! outcome.
//!
//! - exit 0: ok;
//! - killed by a signal (the nemesis), or still running at the call's deadline (killed then):
//!   unknown;
//! - an error that says the job stopped after its journal entry (recovery will finish it):
//!   unknown — it takes effect later, or (if its journal entry is fenced) never;
//! - any other error: failed, which promises that nothing was written.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::clock_faults::ClockFaults;
use crate::history::{Op, Outcome};
use crate::processes::Running;

/// The words of an error after which the outcome is unknown: the job is left to recovery
/// (`RenameError::Unfinished` and the CLI's own "stopped after its journal entry"), or a
/// write was given up unanswered when its locks' lease ran out (`RenameError::WriteUnanswered`).
const UNFINISHED: [&str; 3] = [
    "the job is unfinished",
    "after its journal entry",
    "whether it happened is unknown",
];

/// How to run `fsrename` against the history's store.
#[derive(Debug, Clone)]
pub struct Fsrename {
    /// The binary.
    pub binary: PathBuf,
    /// The global options: `--store`, `--index`, `--lease`, and any others.
    pub global: Vec<String>,
    /// How long a job waits for its locks (`--wait`).
    pub wait: Duration,
    /// More options of the service instances (`serve ...`), e.g. `--share-intentions`.
    pub serve: Vec<String>,
    /// The clock faults every process is started under, once enabled.
    pub clocks: ClockFaults,
}

impl Fsrename {
    /// A `fsrename` command with the global options, its output piped.
    pub fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .args(&self.global)
            .env_remove("FSRENAME_STORE")
            .env("FSRENAME_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        self.clocks.apply(&mut command);
        command
    }

    /// The arguments of `op`'s verb.
    fn verb(&self, op: &Op) -> Vec<String> {
        let wait = format!("{}ms", self.wait.as_millis());
        let job = |mut args: Vec<String>| {
            args.extend([
                "--wait".into(),
                wait.clone(),
                "--progress".into(),
                "none".into(),
            ]);
            args
        };
        match op {
            Op::Mkdir { path } => vec!["mkdir".into(), path.clone()],
            Op::Touch { path } => vec!["touch".into(), path.clone()],
            Op::Mv { from, to } => job(vec!["mv".into(), from.clone(), to.clone()]),
            Op::Cp { from, to } => job(vec!["cp".into(), "-r".into(), from.clone(), to.clone()]),
            Op::Rm { path } => job(vec!["rm".into(), "-r".into(), path.clone()]),
        }
    }

    /// Runs `op` as `client`, noted in `running` while it runs, for at most `deadline`.
    pub async fn call(
        &self,
        client: &str,
        op: &Op,
        running: &Running,
        deadline: Duration,
    ) -> Outcome {
        let mut child = match self.command().args(self.verb(op)).spawn() {
            Ok(child) => child,
            // Nothing ran: no effect.
            Err(e) => {
                return Outcome::Failed {
                    error: format!("cannot start {}: {e}", self.binary.display()),
                }
            }
        };
        if let Some(pid) = child.id() {
            running.started(client, pid);
        }
        let mut stderr = child.stderr.take();
        let mut stdout = child.stdout.take();
        // Both pipes drained at once, so that a full one never stalls the process.
        let read = async {
            let mut err = String::new();
            let mut out = String::new();
            let drain_err = async {
                if let Some(s) = stderr.as_mut() {
                    let _ = s.read_to_string(&mut err).await;
                }
            };
            let drain_out = async {
                if let Some(s) = stdout.as_mut() {
                    let _ = s.read_to_string(&mut out).await;
                }
            };
            tokio::join!(drain_err, drain_out);
            err
        };
        let finished = tokio::time::timeout(deadline, async {
            let (err, status) = tokio::join!(read, child.wait());
            (err, status)
        })
        .await;
        running.ended(client);
        match finished {
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                Outcome::Unknown {
                    why: format!("no answer within {deadline:?}: killed"),
                }
            }
            Ok((_, Err(e))) => Outcome::Unknown {
                why: format!("its status could not be read: {e}"),
            },
            Ok((err, Ok(status))) => outcome(status, &err),
        }
    }
}

/// The outcome of a process that ended with `status`, having written `stderr`.
pub fn outcome(status: std::process::ExitStatus, stderr: &str) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    if status.success() {
        return Outcome::Ok;
    }
    if let Some(signal) = status.signal() {
        return Outcome::Unknown {
            why: format!("killed by signal {signal}"),
        };
    }
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_owned();
    if UNFINISHED.iter().any(|w| stderr.contains(w)) {
        return Outcome::Unknown {
            why: format!("outcome unknown: {last}"),
        };
    }
    Outcome::Failed {
        error: format!("exit {}: {last}", status.code().unwrap_or(-1)),
    }
}
