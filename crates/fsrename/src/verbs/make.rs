//! `fsrename mkdir [-p] PATH` and `fsrename touch PATH`.

use anyhow::Context;
use fs_model::FsPath;

use super::{lock_settings, open_tree, print_report, rehearse_on_new_file};
use crate::cli::{Cli, PathArg};
use crate::contract::{MkdirReport, TouchReport};
use crate::output::{quoted, Printer};
use crate::EXIT_OK;

pub async fn mkdir(cli: &Cli, path: &FsPath, parents: bool, json: bool) -> anyhow::Result<u8> {
    let mkdir = |tree: fs_rename::FsTree| async move {
        fs_rename::mkdir(
            &tree,
            &lock_settings(cli, tree.store(), cli.lease),
            path,
            parents,
        )
        .await
        .with_context(|| format!("mkdir `{path}`"))
    };
    rehearse_on_new_file(cli, |tree| async { mkdir(tree).await.map(drop) }).await?;
    let made = mkdir(open_tree(cli).await?).await?;
    let report = MkdirReport {
        path: path.clone(),
        created: made.created,
    };
    print_report(
        &mut Printer::stdout(),
        &report,
        EXIT_OK,
        json,
        |out, report| {
            for created in &report.created {
                out.line(format_args!(
                    "created directory {}",
                    quoted(created.as_str())
                ))?;
            }
            Ok(())
        },
    )
}

pub async fn touch(cli: &Cli, path: &PathArg, json: bool) -> anyhow::Result<u8> {
    if path.names_dir() {
        // As Unix `touch f/`: a file's path names no directory.
        anyhow::bail!(
            "touch `{}`: a path that ends with `/` names a directory, and touch makes files (`fsrename mkdir {}` makes a directory)",
            path.as_given(),
            path.path()
        );
    }
    let path = path.path();
    let touch = |tree: fs_rename::FsTree| async move {
        fs_rename::touch(&tree, &lock_settings(cli, tree.store(), cli.lease), path)
            .await
            .with_context(|| format!("touch `{path}`"))
    };
    rehearse_on_new_file(cli, touch).await?;
    touch(open_tree(cli).await?).await?;
    let report = TouchReport { path: path.clone() };
    print_report(
        &mut Printer::stdout(),
        &report,
        EXIT_OK,
        json,
        |_, _| Ok(()),
    )
}
