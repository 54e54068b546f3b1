//! `fsrename cp [-r] SRC DST`: copies under locks.

use anyhow::Context;
use fs_model::DocKind;

use super::{job, open_existing_tree, refuse_file_as_dir};
use crate::cli::{Cli, JobArgs, PathArg};
use crate::contract::Work;

pub async fn run(
    cli: &Cli,
    from: &PathArg,
    to: &PathArg,
    recursive: bool,
    args: &JobArgs,
) -> anyhow::Result<u8> {
    let tree = open_existing_tree(cli).await?;
    let what = format!(
        "cp{} `{}` `{}`",
        if recursive { " -r" } else { "" },
        from.path(),
        to.path()
    );
    refuse_file_as_dir(&tree, &what, from, Some(to)).await?;
    let (from, to) = (from.path(), to.path());
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
    let work = Work::Copy {
        from: from.clone(),
        to: to.clone(),
    };
    job::run(cli, &tree, args, work, &what, |renamer| async move {
        renamer.copy_reporting(from, to).await
    })
    .await
}
