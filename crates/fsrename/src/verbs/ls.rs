//! `fsrename ls [PATH] [-R] [--long]`.

use anyhow::Context;
use fs_model::{DocKind, FsPath};
use fs_rename::Entry;

use super::open_tree;
use crate::cli::Cli;
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
    let print = |entry: &Entry| -> fs_rename::Result<()> {
        print_entry(
            entry,
            recursive || top.doc.kind == DocKind::File,
            long,
            json,
        );
        Ok(())
    };
    if top.doc.kind == DocKind::File {
        print(&top)?;
    } else {
        fs_rename::list(tree.store(), tree.index(), path, recursive, print)
            .await
            .with_context(|| format!("ls `{path}`"))?;
    }
    Ok(EXIT_OK)
}

fn print_entry(entry: &Entry, full_path: bool, long: bool, json: bool) {
    let doc = &entry.doc;
    if json {
        let line = serde_json::json!({ "id": entry.id, "doc": doc });
        println!("{line}");
        return;
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
        println!(
            "{kind} {:>12} {} {name}",
            doc.size,
            humantime::format_rfc3339_seconds(at)
        );
    } else {
        println!("{name}");
    }
}
