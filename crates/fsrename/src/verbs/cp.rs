//! `fsrename cp [-r] SRC DST`: copies under locks.

use anyhow::Context;
use fs_model::{DocKind, FsPath};
use fs_rename::JobKind;

use super::{job, open_existing_tree};
use crate::cli::{Cli, JobArgs};

pub async fn run(
    cli: &Cli,
    from: &FsPath,
    to: &FsPath,
    recursive: bool,
    args: &JobArgs,
) -> anyhow::Result<u8> {
    let tree = open_existing_tree(cli).await?;
    let what = format!("cp{} `{from}` `{to}`", if recursive { " -r" } else { "" });
    if !recursive {
        // cp's rule, checked before any lock: it guards against a slip of the hand, not
        // against a race (the job copies whatever is at SRC once it holds its locks). A
        // missing source is left to the job, whose error says so.
        let found = async {
            tree.refresh().await?;
            tree.find(from).await
        }
        .await
        .with_context(|| what.clone())?;
        if found.is_some_and(|entry| entry.doc.kind == DocKind::Dir) {
            anyhow::bail!(
                "{what}: `{from}` is a directory (not copied): use -r to copy it and everything under it"
            );
        }
    }
    job::run(
        cli,
        &tree,
        args,
        (JobKind::Copy, from, to),
        &what,
        |renamer| async move { renamer.copy(from, to).await },
    )
    .await
}
