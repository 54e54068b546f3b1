//! Clock faults: the clients' clocks set off (skewed) or stepped (jumped) with libfaketime
//! (Debian's `faketime`), as Jepsen does where processes share a kernel.
//!
//! Once clock faults are [enabled](ClockFaults::enable), every `fsrename` process of the
//! history (command-line clients and service instances) is started under libfaketime with its
//! monotonic clock left alone, as a real machine's: a step of the wall clock moves no
//! monotonic clock. Then:
//!
//! - **a skew**: while it lasts, processes started get their wall clock set off by a fixed
//!   amount (ahead or behind, by more than `max_clock_skew`, often by more than a lease), and
//!   a service instance may be restarted so (and restarted again at the heal);
//! - **a jump**: every process started under the shared time file (all but the skewed ones)
//!   sees its wall clock stepped, forward past a lease or back, while it runs, and stepped
//!   back at the heal. libfaketime reads the file again every second.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where Debian's libfaketime is.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The history's clock faults, shared by every command it starts and by the nemesis. Cheap to
/// clone (clones share the state).
#[derive(Debug, Clone, Default)]
pub struct ClockFaults {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// The file every unskewed process reads its offset from, once enabled.
    file: Option<PathBuf>,
    /// The offset of processes started now, while a skew lasts (libfaketime's "-7.5s").
    skew: Option<String>,
}

impl ClockFaults {
    /// Starts every later process under libfaketime, reading its offset from `file` (written
    /// "+0s" now).
    ///
    /// # Errors
    /// libfaketime missing, or the file not written.
    pub fn enable(&self, file: &Path) -> Result<(), String> {
        if !Path::new(LIBFAKETIME).exists() {
            return Err(format!(
                "{LIBFAKETIME} is missing: install Debian's faketime for clock faults"
            ));
        }
        write_offset(file, "+0s")?;
        self.lock().file = Some(file.to_owned());
        Ok(())
    }

    /// Whether clock faults are enabled.
    pub fn enabled(&self) -> bool {
        self.lock().file.is_some()
    }

    /// Sets the environment of `command` for a process started now.
    pub fn apply(&self, command: &mut tokio::process::Command) {
        let state = self.lock();
        let Some(file) = &state.file else {
            return;
        };
        command
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME_DONT_RESET", "1");
        match &state.skew {
            Some(offset) => {
                command
                    .env("FAKETIME", offset)
                    .env_remove("FAKETIME_TIMESTAMP_FILE");
            }
            None => {
                command
                    .env("FAKETIME_TIMESTAMP_FILE", file)
                    .env("FAKETIME_CACHE_DURATION", "1")
                    .env_remove("FAKETIME");
            }
        }
    }

    /// Processes started from now on run `offset_ms` off (ahead if positive), until
    /// [`ClockFaults::unskew`].
    pub fn skew(&self, offset_ms: i64) {
        self.lock().skew = Some(spec(offset_ms));
    }

    /// Processes started from now on run on the shared file again.
    pub fn unskew(&self) {
        self.lock().skew = None;
    }

    /// Steps the wall clock of every process on the shared file by `offset_ms` from the true
    /// time (0 steps it back).
    ///
    /// # Errors
    /// The file not written.
    pub fn jump(&self, offset_ms: i64) -> Result<(), String> {
        let file = self.lock().file.clone();
        match file {
            Some(file) => write_offset(&file, &spec(offset_ms)),
            None => Err("clock faults are not enabled".to_owned()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// libfaketime's relative offset: "+1.250s", "-40.000s".
fn spec(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let ms = offset_ms.unsigned_abs();
    format!("{sign}{}.{:03}s", ms / 1000, ms % 1000)
}

/// Writes the offset whole, so that a process never reads half of it: to a file beside, then
/// renamed over.
fn write_offset(file: &Path, offset: &str) -> Result<(), String> {
    let next = file.with_extension("next");
    std::fs::write(&next, format!("{offset}\n"))
        .and_then(|()| std::fs::rename(&next, file))
        .map_err(|e| format!("writing the clock offset to {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::spec;

    #[test]
    fn offsets_are_said_as_libfaketime_reads_them() {
        assert_eq!(spec(0), "+0.000s");
        assert_eq!(spec(7_500), "+7.500s");
        assert_eq!(spec(-40_001), "-40.001s");
    }
}
