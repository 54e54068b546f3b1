//! `fsrename fsck [PATH]`: checks a tree.

use anyhow::Context;
use fs_model::FsPath;
use fs_rename::RenameError;
use fs_store::StoreError;

use crate::cli::Cli;
use crate::{EXIT_FAILED, EXIT_OK};

pub async fn run(cli: &Cli, scope: &FsPath, json: bool) -> anyhow::Result<u8> {
    let scope = scope.clone();
    let store = cli.store.open(cli.replicas)?;
    let report = match fs_rename::fsck(store, &cli.index, &scope).await {
        Ok(report) => report,
        Err(RenameError::Store {
            cause: StoreError::IndexNotFound { .. },
            ..
        }) => anyhow::bail!(
            "there is no tree in index `{}` of {}: nothing has been stored there yet",
            cli.index,
            cli.store
        ),
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "checking `{scope}` in index `{}` of {}",
                    cli.index, cli.store
                )
            })
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(if report.is_clean() {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}
