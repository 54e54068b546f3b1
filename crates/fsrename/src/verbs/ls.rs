//! `fsrename ls [PATH] [-R] [--long]`.

use anyhow::Context;
use fs_model::{DocKind, FsPath};
use fs_rename::{Entry, RenameError};

use super::open_tree;
use crate::cli::Cli;
use crate::output::Printer;
use crate::EXIT_OK;

pub async fn run(
    cli: &Cli,
    path: &FsPath,
    recursive: bool,
    long: bool,
    json: bool,
) -> anyhow::Result<u8> {
    let tree = open_tree(cli).await?;
    let top = fs_rename::stat(&tree, path)
        .await
        .with_context(|| format!("ls `{path}`"))?;
    let mut out = Printer::stdout();
    let full_path = recursive || top.doc.kind == DocKind::File;
    if top.doc.kind == DocKind::File {
        print_entry(&mut out, &top, full_path, long, json)?;
    } else {
        // The listing's callback can only fail with a `RenameError`: a failed write stops it
        // as a cancellation, and the write's own error (a closed reader, say) is kept here.
        let mut unprinted = None;
        let listed = fs_rename::list(tree.store(), tree.index(), path, recursive, |entry| {
            print_entry(&mut out, entry, full_path, long, json).map_err(|e| {
                unprinted = Some(e);
                RenameError::Cancelled {
                    rewritten: 0,
                    found: 0,
                }
            })
        })
        .await;
        if let Some(e) = unprinted {
            return Err(e);
        }
        listed.with_context(|| format!("ls `{path}`"))?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

fn print_entry(
    out: &mut Printer,
    entry: &Entry,
    full_path: bool,
    long: bool,
    json: bool,
) -> anyhow::Result<()> {
    let doc = &entry.doc;
    if json {
        return out.line(serde_json::json!({ "id": entry.id, "doc": doc }));
    }
    let mut name = if full_path {
        doc.path.to_string()
    } else {
        doc.name.clone()
    };
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
