//! The client processes running at a moment, for the nemesis to kill or pause one in the
//! middle of its call; and the signals it sends them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rand::seq::IteratorRandom;
use rand::Rng;

/// The running `fsrename` processes of the clients: client name → process id.
#[derive(Debug, Default)]
pub struct Running {
    pids: Mutex<BTreeMap<String, u32>>,
}

impl Running {
    /// Notes that `client` runs its call in process `pid`.
    pub fn started(&self, client: &str, pid: u32) {
        if let Ok(mut pids) = self.pids.lock() {
            pids.insert(client.to_owned(), pid);
        }
    }

    /// Notes that `client`'s process ended (before its status is read, so that the nemesis
    /// never signals a process id the system may hand to another process).
    pub fn ended(&self, client: &str) {
        if let Ok(mut pids) = self.pids.lock() {
            pids.remove(client);
        }
    }

    /// One running client and its process, chosen with `rng`.
    pub fn pick(&self, rng: &mut impl Rng) -> Option<(String, u32)> {
        let pids = self.pids.lock().ok()?;
        pids.iter()
            .choose(rng)
            .map(|(client, pid)| (client.clone(), *pid))
    }
}

/// The signals the nemesis sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sig {
    /// SIGKILL.
    Kill,
    /// SIGSTOP.
    Stop,
    /// SIGCONT.
    Cont,
    /// SIGTERM.
    Term,
}

/// Sends `sig` to process `pid`; false if it is gone.
pub fn signal(pid: u32, sig: Sig) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    let sig = match sig {
        Sig::Kill => rustix::process::Signal::KILL,
        Sig::Stop => rustix::process::Signal::STOP,
        Sig::Cont => rustix::process::Signal::CONT,
        Sig::Term => rustix::process::Signal::TERM,
    };
    rustix::process::kill_process(pid, sig).is_ok()
}
