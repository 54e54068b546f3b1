//! `fsrename mv FROM TO`: renames under locks.

use fs_model::FsPath;
use fs_rename::JobKind;

use super::{job, open_existing_tree};
use crate::cli::{Cli, JobArgs};

pub async fn run(cli: &Cli, from: &FsPath, to: &FsPath, args: &JobArgs) -> anyhow::Result<u8> {
    let tree = open_existing_tree(cli).await?;
    let what = format!("mv `{from}` `{to}`");
    job::run(
        cli,
        &tree,
        args,
        (JobKind::Rename, from, to),
        &what,
        |renamer| async move { renamer.rename(from, to).await },
    )
    .await
}
