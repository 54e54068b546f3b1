//! Where the verbs print: standard output through a [`Printer`], whose write errors are
//! values, and standard error through [`to_stderr`], which never fails.
//!
//! A reader that goes away (`fsrename ls -R / | head -1`) is a normal end, not a failure.
//! Rust ignores SIGPIPE, so a write into the closed pipe fails with `BrokenPipe`, on which
//! `println!` panics. The printer turns it into [`StdoutClosed`] instead; the verb returns it
//! like any other error, so what it holds (locks, a store) is released on the way out, and the
//! caller ends the process quietly with exit code 0, as ripgrep does. SIGPIPE is deliberately
//! left ignored: its default action would kill the process in the middle of a job, locks held.
//! Other write errors (a full disk) are reported like any failure.

use std::fmt::{self, Display};
use std::io::{self, BufWriter, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::contract::Contract;

/// The error of a write to standard output after its reader went away (a broken pipe).
#[derive(Debug)]
pub struct StdoutClosed;

impl Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// Returns true if `e` says that standard output lost its reader.
pub fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| cause.is::<StdoutClosed>())
}

/// Returns `code` if `printed` succeeded or only lost its reader, else the error.
///
/// For verbs whose verdict is settled before they print (fsck's "the tree is broken"): a
/// report that nobody reads to the end does not change it.
///
/// # Errors
/// A write error other than a closed reader.
pub fn keep_verdict(printed: anyhow::Result<()>, code: u8) -> anyhow::Result<u8> {
    match printed {
        Ok(()) => Ok(code),
        Err(e) if is_stdout_closed(&e) => Ok(code),
        Err(e) => Err(e),
    }
}

/// Standard output, buffered, with write errors as values.
///
/// Whatever is still buffered when it is dropped is written then, errors ignored; call
/// [`Printer::flush`] at the end to hear about them.
pub struct Printer {
    out: BufWriter<io::Stdout>,
    /// True on a terminal: a person watching sees each line as it comes. A pipe or a file gets
    /// whole blocks, one write each instead of one per line.
    flush_each_line: bool,
}

impl Printer {
    /// Returns a printer on the process's standard output.
    pub fn stdout() -> Printer {
        let stdout = io::stdout();
        let flush_each_line = stdout.is_terminal();
        Printer {
            out: BufWriter::new(stdout),
            flush_each_line,
        }
    }

    /// Prints `line` and a newline.
    ///
    /// # Errors
    /// [`StdoutClosed`] if the reader went away, else the write error, with context.
    pub fn line(&mut self, line: impl Display) -> anyhow::Result<()> {
        writeln!(self.out, "{line}").map_err(write_error)?;
        if self.flush_each_line {
            self.flush()?;
        }
        Ok(())
    }

    /// Prints `text` as it is (it brings its own newlines).
    ///
    /// # Errors
    /// As [`Printer::line`].
    pub fn text(&mut self, text: impl Display) -> anyhow::Result<()> {
        write!(self.out, "{text}").map_err(write_error)?;
        if self.flush_each_line {
            self.flush()?;
        }
        Ok(())
    }

    /// Prints `value` as one line of the JSON contract.
    ///
    /// # Errors
    /// As [`Printer::line`].
    pub fn record<T: Contract>(&mut self, value: &T) -> anyhow::Result<()> {
        let line = value.to_line()?;
        self.line(line)
    }

    /// Prints `value` as the verb's report, its last line of JSON, and notes that it was
    /// printed: a verb that fails after it has said what it has to say ([`reported`]).
    ///
    /// # Errors
    /// As [`Printer::line`].
    pub fn report<T: Contract>(&mut self, value: &T) -> anyhow::Result<()> {
        self.record(value)?;
        self.flush()?;
        REPORTED.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Writes out what is buffered: at the end, and where a verb pauses for long between
    /// lines (the demo between its runs).
    ///
    /// # Errors
    /// As [`Printer::line`].
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.out.flush().map_err(write_error)
    }
}

/// Whether the verb printed its report with [`Printer::report`]: if it fails without one, it
/// ends with an error line instead (with `--json`), so that its last line says how it ended.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// Returns true if the verb printed its report.
pub fn reported() -> bool {
    REPORTED.load(Ordering::SeqCst)
}

fn write_error(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed)
    } else {
        anyhow::Error::new(e).context("writing to standard output")
    }
}

/// Writes `line` and a newline to standard error, ignoring failure.
///
/// Warnings, progress and error messages go there. If standard error is closed or full there
/// is nowhere left to report that, and a job must neither fail nor panic (`eprintln!` would)
/// because its log's reader went away.
pub fn to_stderr(line: impl Display) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Returns `path` as messages show it: between backticks, with control characters (a newline
/// in a file name) escaped as Rust writes them (`\n`, `\u{1b}`), so that one name is one line
/// of output and cannot pass for something else. Success lines and errors quote alike.
pub fn quoted(path: &str) -> String {
    format!("`{}`", escaped(path))
}

/// Returns `text` with its control characters escaped (see [`quoted`]).
pub fn escaped(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_paths_are_one_line_whatever_their_names() {
        assert_eq!(quoted("/a/b c"), "`/a/b c`");
        assert_eq!(quoted("/a/new\nline"), "`/a/new\\nline`");
        assert_eq!(quoted("/a/new\nline\t\u{1b}"), "`/a/new\\nline\\t\\u{1b}`");
        assert_eq!(escaped("é/ü"), "é/ü");
    }

    #[test]
    fn a_broken_pipe_is_a_closed_stdout_and_keeps_the_verdict() {
        let closed = write_error(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(is_stdout_closed(&closed));
        assert!(is_stdout_closed(&closed.context("ls `/`")));
        let closed = write_error(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(keep_verdict(Err(closed), 1).ok(), Some(1));
    }

    #[test]
    fn other_write_errors_are_failures_that_say_so() {
        let full = write_error(io::Error::other("no space left on device"));
        assert!(!is_stdout_closed(&full));
        assert_eq!(
            format!("{full:#}"),
            "writing to standard output: no space left on device"
        );
        assert!(keep_verdict(Err(full), 0).is_err());
    }
}
