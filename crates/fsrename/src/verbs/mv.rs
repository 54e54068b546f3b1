//! `fsrename mv FROM TO`: renames under locks.

use super::{job, open_existing_tree, refuse_file_as_dir};
use crate::cli::{Cli, JobArgs, PathArg};
use crate::contract::Work;

pub async fn run(cli: &Cli, from: &PathArg, to: &PathArg, args: &JobArgs) -> anyhow::Result<u8> {
    let tree = open_existing_tree(cli).await?;
    let what = format!("mv `{}` `{}`", from.path(), to.path());
    refuse_file_as_dir(&tree, &what, from, Some(to)).await?;
    let (from, to) = (from.path(), to.path());
    let work = Work::Rename {
        from: from.clone(),
        to: to.clone(),
    };
    job::run(cli, &tree, args, work, &what, |renamer| async move {
        renamer.rename_reporting(from, to).await
    })
    .await
}
