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
    let mut running = Running::start(binary, args, Stdio::null())?;
    let status = running.wait_watching(|| false)?;
    running.finish(status)
}

/// Runs `binary` with `args` until the first line it prints (a watcher's first pass: `index
/// --watch --json` prints the first run's report, then follows the directory), measured to
/// that line; then stops it with SIGTERM, as a supervisor would, and waits for it to exit.
/// Not SIGINT: a shell starts a background job (`fsrename-bench ... &`, as a long run is
/// started) with SIGINT ignored, and every process under it inherits that, so the watcher
/// would never hear it (`index --watch` stops on either).
///
/// # Errors
/// If it cannot be started, exits before printing, or does not stop within a minute.
pub fn run_to_first_line(binary: &Path, args: &[String]) -> anyhow::Result<Measured> {
    let mut running = Running::start(binary, args, Stdio::piped())?;
    let stdout = running
        .child
        .stdout
        .take()
        .context("the command's stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(line);
    });
    let mut first = None;
    let status = running.wait_watching(|| match rx.try_recv() {
        Ok(line) => {
            first = Some(line);
            true
        }
        Err(_) => false,
    })?;
    let at_line = running.measured();
    let Some(line) = first else {
        // It exited before printing (or closed its output): a failure, said by `finish`.
        running.finish(status)?;
        anyhow::bail!("`fsrename {}` exited without printing", args.join(" "));
    };
    anyhow::ensure!(
        !line.trim().is_empty(),
        "`fsrename {}` printed nothing",
        args.join(" ")
    );
    let pid = running.child.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .context("sending SIGTERM")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while running
        .child
        .try_wait()
        .context("waiting for the command")?
        .is_none()
    {
        if Instant::now() > deadline {
            let _ = running.child.kill();
            anyhow::bail!(
                "`fsrename {}` did not stop within a minute of SIGTERM",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(at_line)
}

/// Runs `binary` with `args` and kills it with SIGKILL after `after` (or when it ends, if
/// sooner); returns whether it was killed, and when.
///
/// # Errors
/// If it cannot be started, or fails before it is killed.
pub fn run_killed_after(
    binary: &Path,
    args: &[String],
    after: Duration,
) -> anyhow::Result<Option<f64>> {
    let mut running = Running::start(binary, args, Stdio::null())?;
    let deadline = running.started + after;
    let status = running.wait_watching(|| Instant::now() >= deadline)?;
    let Some(status) = status else {
        running.child.kill().context("killing the command")?;
        running
            .child
            .wait()
            .context("waiting for the killed command")?;
        return Ok(Some(running.started.elapsed().as_secs_f64()));
    };
    running.finish(Some(status))?;
    Ok(None)
}

/// A child running, with its stderr read beside and its peak memory watched.
struct Running {
    child: std::process::Child,
    started: Instant,
    status_file: String,
    peak_kb: Option<u64>,
    stderr: Option<std::thread::JoinHandle<String>>,
    args: String,
}

impl Running {
    fn start(binary: &Path, args: &[String], stdout: Stdio) -> anyhow::Result<Running> {
        let started = Instant::now();
        let mut child = Command::new(binary)
            .args(args)
            .env_remove("FSRENAME_STORE")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} {}", binary.display(), args.join(" ")))?;
        // Its stderr is read beside, so that a chatty command never blocks on a full pipe.
        let stderr = child.stderr.take().map(|mut stderr| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
                text
            })
        });
        Ok(Running {
            status_file: format!("/proc/{}/status", child.id()),
            child,
            started,
            peak_kb: None,
            stderr,
            args: args.join(" "),
        })
    }

    /// Reads its peak every 20 ms until it exits (its status) or `stop` holds (`None`).
    fn wait_watching(
        &mut self,
        mut stop: impl FnMut() -> bool,
    ) -> anyhow::Result<Option<std::process::ExitStatus>> {
        loop {
            if let Some(kb) = high_water_kb(&self.status_file) {
                self.peak_kb = Some(kb);
            }
            if let Some(status) = self.child.try_wait().context("waiting for the command")? {
                return Ok(Some(status));
            }
            if stop() {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn measured(&self) -> Measured {
        Measured {
            seconds: self.started.elapsed().as_secs_f64(),
            peak_kb: self.peak_kb,
        }
    }

    /// What it took, once it exited with `status`; a failure if it failed.
    fn finish(mut self, status: Option<std::process::ExitStatus>) -> anyhow::Result<Measured> {
        let measured = self.measured();
        let status = match status {
            Some(status) => status,
            None => self.child.wait().context("waiting for the command")?,
        };
        let stderr = self
            .stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        anyhow::ensure!(
            status.success(),
            "`fsrename {}` failed ({status}): {}",
            self.args,
            stderr.trim()
        );
        Ok(measured)
    }
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

    #[test]
    fn a_watcher_is_measured_to_its_first_line_then_stopped() {
        let script = [
            "-c".to_owned(),
            "sleep 0.2; echo ready; exec sleep 30".to_owned(),
        ];
        let started = Instant::now();
        let measured = run_to_first_line(Path::new("sh"), &script).expect("sh");
        assert!(measured.seconds >= 0.2, "{measured:?}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "stopped by SIGTERM"
        );
        let silent = ["-c".to_owned(), "exit 0".to_owned()];
        assert!(run_to_first_line(Path::new("sh"), &silent).is_err());
    }

    #[test]
    fn a_command_is_killed_after_a_while_unless_it_ended() {
        let killed = run_killed_after(
            Path::new("sleep"),
            &["30".to_owned()],
            Duration::from_millis(300),
        )
        .expect("sleep");
        assert!(
            killed.is_some_and(|s| (0.3..20.0).contains(&s)),
            "{killed:?}"
        );
        let ended =
            run_killed_after(Path::new("true"), &[], Duration::from_secs(30)).expect("true");
        assert_eq!(ended, None);
    }
}
