//! The verbs, one file each.

mod demo;
mod fsck;

use crate::cli::{Cli, Verb};
use crate::{EXIT_FAILED, EXIT_LOCK_TIMEOUT};

/// Runs the verb; prints its errors; returns the exit code.
pub async fn run(cli: Cli) -> u8 {
    let result = match &cli.verb {
        Verb::Demo { files } => demo::run(*files).await,
        Verb::Fsck { path, json } => fsck::run(&cli, path, *json).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fsrename: {e:#}");
            exit_code_of(&e)
        }
    }
}

/// Exit 3 for a lock that was not granted in time, else 1.
fn exit_code_of(e: &anyhow::Error) -> u8 {
    let timed_out = e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<fs_locks::LockError>(),
            Some(fs_locks::LockError::Timeout { .. })
        ) || matches!(
            cause.downcast_ref::<fs_rename::RenameError>(),
            Some(fs_rename::RenameError::Lock(
                fs_locks::LockError::Timeout { .. }
            ))
        )
    });
    if timed_out {
        EXIT_LOCK_TIMEOUT
    } else {
        EXIT_FAILED
    }
}
