//! `fsrename fsck [PATH] [--consistent]`: checks a tree.

use anyhow::Context;
use std::time::Duration;

use fs_rename::{RenameError, Verdict};
use fs_store::StoreError;

use super::{lock_settings, print_report};
use crate::cli::{Cli, PathArg};
use crate::{EXIT_FAILED, EXIT_OK, EXIT_UNFINISHED};

/// Checks `scope`; under a shared lock, waiting up to `consistent` for it, if given. Exits 0
/// for a clean tree, [`EXIT_UNFINISHED`] for one whose only problems are jobs not finished,
/// 1 for a broken one.
pub async fn run(
    cli: &Cli,
    scope: &PathArg,
    json: bool,
    consistent: Option<Duration>,
) -> anyhow::Result<u8> {
    let given = scope.as_given();
    let names_dir = scope.names_dir();
    let scope = scope.path().clone();
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
    // A directory's subtree counts the directory itself.
    if names_dir && report.dirs == 0 {
        anyhow::bail!("fsck `{given}`: not a directory (`{scope}` is a file)");
    }
    let code = match report.verdict {
        Verdict::Clean => EXIT_OK,
        Verdict::Unfinished => EXIT_UNFINISHED,
        Verdict::Broken => EXIT_FAILED,
    };
    print_report(
        &mut crate::output::Printer::stdout(),
        &report,
        code,
        json,
        |out, report| out.text(report),
    )
}
