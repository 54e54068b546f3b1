//! `fsrename mkdir [-p] PATH` and `fsrename touch PATH`.

use anyhow::Context;
use fs_model::FsPath;

use super::{lock_settings, open_tree};
use crate::cli::Cli;
use crate::output::{quoted, Printer};
use crate::EXIT_OK;

pub async fn mkdir(cli: &Cli, path: &FsPath, parents: bool) -> anyhow::Result<u8> {
    let tree = open_tree(cli).await?;
    let made = fs_rename::mkdir(
        &tree,
        &lock_settings(cli, tree.store(), cli.lease),
        path,
        parents,
    )
    .await
    .with_context(|| format!("mkdir `{path}`"))?;
    let mut out = Printer::stdout();
    for created in made.created {
        out.line(format_args!(
            "created directory {}",
            quoted(created.as_str())
        ))?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

pub async fn touch(cli: &Cli, path: &FsPath) -> anyhow::Result<u8> {
    let tree = open_tree(cli).await?;
    fs_rename::touch(&tree, &lock_settings(cli, tree.store(), cli.lease), path)
        .await
        .with_context(|| format!("touch `{path}`"))?;
    Ok(EXIT_OK)
}
