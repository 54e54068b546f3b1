//! [`OsProcess`]: the operating-system process behind a lock holder, recorded in the lock
//! documents it writes, and the proof, on the machine where it ran, that it is gone.
//!
//! A lease is how a holder's death is learnt without its help: its locks are waited out
//! (`--lease`, 30 s by default), and an `mv` run again right after a Ctrl-C or a crash waits
//! that long. On the holder's own machine there is a proof that needs no waiting: no process
//! with its pid and start time runs any more. Linux gives the pieces of it:
//!
//! - the boot id (`/proc/sys/kernel/random/boot_id`): the same machine, not rebooted since (a
//!   pid of another boot, or of another machine, says nothing here);
//! - the pid namespace (`/proc/self/ns/pid`): the same pid numbers (a container sees other
//!   processes under the same numbers, on the same boot);
//! - `kill(pid, 0)`: `ESRCH` says no process has that pid (and, unlike a missing
//!   `/proc/PID`, cannot be a `hidepid` mount hiding another user's process);
//! - the process's start time, in clock ticks since boot (`/proc/PID/stat`, field 22): a pid
//!   reused since by another process has another one; a zombie (state `Z`) has ended.
//!
//! Wherever one of these cannot be read (another system, no `/proc`, a stat hidden from us),
//! nothing is proven and the lease is waited out as before. A wrong "gone" would let a live
//! holder's locks be taken over, so every doubt answers "not proven".

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The operating-system process that holds a lock, as recorded in the lock documents it
/// writes (`os_process`): enough for a process on the same machine to prove it gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsProcess {
    /// The boot id of its machine.
    pub boot: String,
    /// The inode of its pid namespace.
    pub pid_ns: u64,
    /// Its pid, in that namespace.
    pub pid: u32,
    /// When it started, in clock ticks since boot.
    pub start: u64,
}

impl OsProcess {
    /// Returns this process, read once; `None` where it cannot be told (not Linux, no
    /// `/proc`): its locks then record nothing, and only their lease ends them.
    pub fn current() -> Option<OsProcess> {
        static CURRENT: OnceLock<Option<OsProcess>> = OnceLock::new();
        CURRENT
            .get_or_init(|| OsProcess::running(std::process::id()))
            .clone()
    }

    /// Returns the process `pid` of this machine, if it runs and can be read.
    pub fn running(pid: u32) -> Option<OsProcess> {
        let here = Here::read()?;
        let stat = read_stat(pid)?;
        Some(OsProcess {
            boot: here.boot.clone(),
            pid_ns: here.pid_ns,
            pid,
            start: stat.start,
        })
    }

    /// Returns true only if this process is provably gone: it ran on this machine, in this
    /// boot and pid namespace, and no process with its pid and start time runs now.
    pub fn is_gone(&self) -> bool {
        match Here::read() {
            Some(here) if here.boot == self.boot && here.pid_ns == self.pid_ns => {}
            _ => return false,
        }
        let Some(pid) = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        match rustix::process::test_kill_process(pid) {
            Err(e) if e == rustix::io::Errno::SRCH => return true,
            // It exists (ours to signal, or another user's): whose is it?
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::PERM => {}
            Err(_) => return false,
        }
        match read_stat(self.pid) {
            Some(stat) => stat.start != self.start || stat.ended,
            // Hidden from us, or gone between the two looks: not proven either way.
            None => false,
        }
    }
}

/// What the process that looks knows of where it runs.
struct Here {
    boot: String,
    pid_ns: u64,
}

impl Here {
    /// Returns where this process runs, read once: neither changes while it runs.
    fn read() -> Option<&'static Here> {
        static HERE: OnceLock<Option<Here>> = OnceLock::new();
        HERE.get_or_init(Here::look).as_ref()
    }

    fn look() -> Option<Here> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let boot = boot.trim().to_owned();
        // `pid:[4026531836]`
        let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let pid_ns = ns
            .to_str()?
            .strip_prefix("pid:[")?
            .strip_suffix(']')?
            .parse()
            .ok()?;
        (!boot.is_empty()).then_some(Here { boot, pid_ns })
    }
}

/// What `/proc/PID/stat` says of a process that matters here.
struct Stat {
    start: u64,
    /// A zombie (`Z`) or dead (`X`) process: it has ended, only its entry is left.
    ended: bool,
}

fn read_stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses a `/proc/PID/stat` line: `pid (comm) state ppid ...`, where `comm` may hold spaces
/// and parentheses, so the fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    // Field 3 is the state; field 22, the start time, is 19 further.
    let start = fields.nth(18)?.parse().ok()?;
    Some(Stat {
        start,
        ended: matches!(state, "Z" | "X" | "x"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_from_its_last_parenthesis() {
        let line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 1 2 3";
        let stat = parse_stat(line).expect("parsed");
        assert_eq!(stat.start, 123_456);
        assert!(!stat.ended);
        let zombie = line.replace(") S ", ") Z ");
        assert!(parse_stat(&zombie).expect("parsed").ended);
        assert!(parse_stat("4242 (x) S 1").is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_not_gone_and_a_child_that_ended_is() {
        let me = OsProcess::current().expect("this process, on Linux");
        assert_eq!(me.pid, std::process::id());
        assert!(!me.is_gone());

        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("start sleep");
        let recorded = OsProcess::running(child.id()).expect("the child runs");
        assert!(!recorded.is_gone(), "it runs");
        child.kill().expect("kill the child");
        child.wait().expect("reap the child");
        assert!(recorded.is_gone(), "it ended");

        // A pid reused by another process: another start time.
        let reused = OsProcess {
            start: me.start + 1,
            ..me.clone()
        };
        assert!(reused.is_gone());
        // Another boot, or another pid namespace: nothing is proven.
        let elsewhere = OsProcess {
            boot: "another-boot".into(),
            ..recorded.clone()
        };
        assert!(!elsewhere.is_gone());
        let contained = OsProcess {
            pid_ns: recorded.pid_ns + 1,
            ..recorded
        };
        assert!(!contained.is_gone());
    }
}
