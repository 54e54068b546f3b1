//! `fsrename ls [PATH] [-R] [--long] [--consistent]`.

use fs_model::DocKind;
use std::time::Duration;

use fs_rename::{Entry, RenameError};

use super::{lock_settings, open_existing_tree, print_report};
use crate::cli::{Cli, PathArg};
use crate::contract::{EntryLine, LsReport};
use crate::output::{escaped, Printer};
use crate::EXIT_OK;

/// How `ls` lists.
pub struct LsOptions {
    pub recursive: bool,
    pub long: bool,
    pub json: bool,
    /// Lists under a shared lock, waiting this long for it (`--consistent`).
    pub consistent: Option<Duration>,
}

pub async fn run(cli: &Cli, given: &PathArg, options: &LsOptions) -> anyhow::Result<u8> {
    let path = given.path();
    let tree = open_existing_tree(cli).await?;
    let LsOptions {
        recursive,
        long,
        json,
        ..
    } = *options;
    let mut out = Printer::stdout();
    let mut entries = 0;
    // The listing's callback can only fail with a `RenameError`: a failed write stops it as a
    // cancellation, and the write's own error (a closed reader, say) is kept here.
    let mut unprinted = None;
    let mut print = |entry: &Entry, full_path: bool| {
        if given.names_dir() && entry.doc.path == *path && entry.doc.kind == DocKind::File {
            unprinted = Some(anyhow::anyhow!(
                "ls `{}`: not a directory (`{path}` is a file)",
                given.as_given()
            ));
            return Err(stop());
        }
        entries += 1;
        print_entry(&mut out, entry, full_path, long, json).map_err(|e| {
            unprinted = Some(e);
            stop()
        })
    };
    let listed = if let Some(wait) = options.consistent {
        let settings = &lock_settings(cli, tree.store(), wait);
        // The lock is taken before the first entry is read and released after the last, also
        // when the reader goes away; a file at PATH is listed alone, under the same lock.
        let holder = format!("ls{} {path}", if recursive { " -R" } else { "" });
        fs_rename::list_consistent(&tree, settings, holder, path, recursive, |entry| {
            let file_itself = entry.doc.path == *path;
            print(entry, recursive || file_itself)
        })
        .await
    } else {
        let top = fs_rename::stat(&tree, path).await.map_err(not_there)?;
        if top.doc.kind == DocKind::File {
            print(&top, true)
        } else {
            fs_rename::list(tree.store(), tree.index(), path, recursive, |entry| {
                print(entry, recursive)
            })
            .await
        }
    };
    if let Some(e) = unprinted {
        return Err(e);
    }
    listed.map_err(not_there)?;
    out.flush()?;
    let report = LsReport {
        path: path.clone(),
        recursive,
        consistent: options.consistent.is_some(),
        entries,
    };
    // In words, the entries say it all (an empty directory prints nothing, as `ls`).
    print_report(&mut out, &report, EXIT_OK, json, |_, _| Ok(()))
}

/// What stops a listing from its callback. Never shown: the callback keeps the error to
/// return instead.
fn stop() -> RenameError {
    RenameError::Cancelled {
        kind: fs_rename::JobKind::Rename,
        rewritten: 0,
        found: 0,
    }
}

/// `ls` names a missing path as missing, not as a job's "source"; other errors say they
/// happened in `ls`.
fn not_there(e: RenameError) -> anyhow::Error {
    match e {
        RenameError::SourceNotFound { path } => {
            anyhow::anyhow!("ls `{path}`: no such file or directory in the tree")
        }
        e => anyhow::Error::new(e).context("ls"),
    }
}

pub(super) fn print_entry(
    out: &mut Printer,
    entry: &Entry,
    full_path: bool,
    long: bool,
    json: bool,
) -> anyhow::Result<()> {
    let doc = &entry.doc;
    if json {
        return out.record(&EntryLine { id: &entry.id, doc });
    }
    // A name may hold a newline or an escape sequence: printed raw, it would read as two
    // entries or drive the terminal. Escaped as the error messages do (`--json` keeps it
    // exact).
    let mut name = escaped(if full_path {
        doc.path.as_str()
    } else {
        &doc.name
    });
    if doc.kind == DocKind::Dir {
        name.push('/');
    }
    if long {
        let kind = if doc.kind == DocKind::Dir {
            "dir "
        } else {
            "file"
        };
        let modified = u64::try_from(doc.modified).unwrap_or(0);
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(modified);
        out.line(format_args!(
            "{kind} {:>12} {} {name}",
            doc.size,
            humantime::format_rfc3339_seconds(at)
        ))
    } else {
        out.line(name)
    }
}
