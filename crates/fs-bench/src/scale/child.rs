//! One `fsrename` command run as a child process, timed, with its peak memory: the
//! high-water mark of its resident set (`VmHWM` of `/proc/PID/status`), read every 20 ms
//! while it runs. The mark only grows, so the last reading is the peak up to 20 ms before the
//! end; the workspace forbids the `unsafe` that `wait4`'s exact figure would take.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// What one command took.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub seconds: f64,
    /// Peak resident set, KiB (`None` where `/proc` cannot tell).
    pub peak_kb: Option<u64>,
}

/// The `fsrename` binary beside this one (`cargo build --release -p fsrename` puts both in
/// the same directory).
///
/// # Errors
/// If it is not there.
pub fn fsrename_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("finding this binary")?;
    let beside = me.with_file_name("fsrename");
    anyhow::ensure!(
        beside.exists(),
        "{} not found: build it first with `cargo build --release -p fsrename`",
        beside.display()
    );
    Ok(beside)
}

/// Runs `binary` with `args` (stdout discarded), and measures it.
///
/// # Errors
/// If it cannot be started, or exits with a failure (its stderr in the message).
pub fn run(binary: &Path, args: &[String]) -> anyhow::Result<Measured> {
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(args)
        .env_remove("FSRENAME_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} {}", binary.display(), args.join(" ")))?;
    let status_file = format!("/proc/{}/status", child.id());
    // Its stderr is read beside, so that a chatty command never blocks on a full pipe.
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        }
        text
    });
    let mut peak_kb = None;
    let status = loop {
        if let Some(kb) = high_water_kb(&status_file) {
            peak_kb = Some(kb);
        }
        match child.try_wait().context("waiting for the command")? {
            Some(status) => break status,
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let stderr = reader.join().unwrap_or_default();
    anyhow::ensure!(
        status.success(),
        "`fsrename {}` failed ({status}): {}",
        args.join(" "),
        stderr.trim()
    );
    Ok(Measured { seconds, peak_kb })
}

/// `VmHWM` of a `/proc/PID/status` file, KiB.
fn high_water_kb(status_file: &str) -> Option<u64> {
    let status = std::fs::read_to_string(status_file).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_timed_and_its_peak_read() {
        let measured = run(Path::new("sleep"), &["0.2".to_owned()]).expect("sleep");
        assert!(measured.seconds >= 0.2, "{measured:?}");
        assert!(measured.peak_kb.is_some_and(|kb| kb > 0), "{measured:?}");
        let failed = run(Path::new("false"), &[]).expect_err("false fails");
        assert!(failed.to_string().contains("failed"), "{failed}");
    }
}
