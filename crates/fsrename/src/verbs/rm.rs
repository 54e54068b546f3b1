//! `fsrename rm [-r] PATH`: removes under locks.

use fs_model::FsPath;
use fs_rename::JobKind;

use super::{job, open_existing_tree};
use crate::cli::{Cli, JobArgs};

pub async fn run(cli: &Cli, path: &FsPath, recursive: bool, args: &JobArgs) -> anyhow::Result<u8> {
    let tree = open_existing_tree(cli).await?;
    let what = format!("rm{} `{path}`", if recursive { " -r" } else { "" });
    job::run(
        cli,
        &tree,
        args,
        (JobKind::Delete, path, path),
        &what,
        |renamer| async move { renamer.remove(path, recursive).await },
    )
    .await
}
