//! `fsrename rm [-r] PATH`: removes under locks.

use super::{job, open_existing_tree, refuse_file_as_dir};
use crate::cli::{Cli, JobArgs, PathArg};
use crate::contract::Work;

pub async fn run(cli: &Cli, path: &PathArg, recursive: bool, args: &JobArgs) -> anyhow::Result<u8> {
    let tree = open_existing_tree(cli).await?;
    let what = format!("rm{} `{}`", if recursive { " -r" } else { "" }, path.path());
    refuse_file_as_dir(&tree, &what, path, None).await?;
    let path = path.path();
    let work = Work::Delete {
        path: path.clone(),
        recursive,
    };
    job::run(cli, &tree, args, work, &what, |renamer| async move {
        renamer.remove_reporting(path, recursive).await
    })
    .await
}
