//! `fsrename fsck [PATH] [--consistent]`: checks a tree.

use anyhow::Context;
use fs_model::FsPath;
use std::time::Duration;

use fs_rename::RenameError;
use fs_store::StoreError;

use super::{lock_settings, print_verdict};
use crate::cli::Cli;

/// Checks `scope`; under a shared lock, waiting up to `consistent` for it, if given.
pub async fn run(
    cli: &Cli,
    scope: &FsPath,
    json: bool,
    consistent: Option<Duration>,
) -> anyhow::Result<u8> {
    let scope = scope.clone();
    let store = cli.store.open_existing(&cli.store_options())?;
    let checked = match consistent {
        Some(wait) => {
            let settings = lock_settings(cli, &store, wait);
            let holder = format!("fsck --consistent {scope}");
            fs_rename::fsck_consistent(store, &cli.index, &scope, &settings, holder).await
        }
        None => fs_rename::fsck(store, &cli.index, &scope).await,
    };
    let report = match checked {
        Ok(report) => report,
        Err(RenameError::Store {
            cause: StoreError::IndexNotFound { .. },
            ..
        }) => anyhow::bail!("{}", super::no_tree(cli)),
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "checking `{scope}` in index `{}` of {}",
                    cli.index, cli.store
                )
            })
        }
    };
    // A subtree with no document at all is a path that is not there (a typo, or a tree
    // renamed since), not a clean subtree: checking nothing proves nothing.
    if report.documents == 0 && !scope.is_root() {
        anyhow::bail!(
            "`{scope}` is not in the tree (index `{}` of {}): nothing to check",
            cli.index,
            cli.store
        );
    }
    print_verdict(&report, report.is_clean(), json, |out, report| {
        out.text(report)
    })
}
