//! The walk of the local directory: walkdir, never following symbolic links, parents before
//! their entries; each entry becomes a document with the identity of its file on disk
//! (device and inode, on Unix), or a reason why it cannot be one.

use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use fs_model::{FsDoc, FsPath, Identity};

use super::Skipped;
use crate::error::{RenameError, Result};

/// One entry of the walk.
pub(super) enum Walked {
    Doc(FsDoc),
    Skipped(Skipped),
    Symlink(Skipped),
    /// Something that exists but could not be read (a directory whose entries cannot be
    /// listed, an entry whose metadata cannot be read): what the store holds at `at` and
    /// under it is unknown, not gone, and is never pruned.
    Unread {
        skipped: Skipped,
        at: FsPath,
    },
}

/// The walk of a directory, started on the blocking pool and awaited where it is first
/// needed: the index run takes its lock and reads the store meanwhile.
pub(super) struct Walk {
    root: PathBuf,
    state: WalkState,
}

enum WalkState {
    Running(tokio::task::JoinHandle<Vec<Walked>>),
    Done(Vec<Walked>),
    /// The walk's task failed (it panicked or was cancelled): the message.
    Failed(String),
}

impl Walk {
    /// Starts walking `root`, to be indexed at `at`.
    pub(super) fn start(root: &Path, at: &FsPath) -> Walk {
        let (dir, at) = (root.to_owned(), at.clone());
        Walk {
            root: root.to_owned(),
            state: WalkState::Running(tokio::task::spawn_blocking(move || walk_all(&dir, &at))),
        }
    }

    /// The walk's entries, once it has ended.
    ///
    /// # Errors
    /// [`RenameError::Local`] if the walk's task failed.
    pub(super) async fn entries(&mut self) -> Result<&[Walked]> {
        if let WalkState::Running(handle) = &mut self.state {
            self.state = match handle.await {
                Ok(walked) => WalkState::Done(walked),
                Err(e) => WalkState::Failed(e.to_string()),
            };
        }
        let message = match &self.state {
            WalkState::Done(walked) => return Ok(walked),
            WalkState::Failed(message) => message.as_str(),
            // Awaited to its end above.
            WalkState::Running(_) => "it did not end",
        };
        Err(RenameError::Local {
            path: self.root.display().to_string(),
            message: format!("the walk failed: {message}"),
        })
    }
}

/// Walks `root`, to be indexed at `at`, in full: parents come before their entries. Runs on
/// the blocking pool. The whole walk is kept, because the moves are found before anything
/// is written (see `moves.rs`): about 200 bytes an entry.
pub(super) fn walk_all(root: &Path, at: &FsPath) -> Vec<Walked> {
    let mut walked = Vec::new();
    let mut entries = walkdir::WalkDir::new(root).follow_links(false).into_iter();
    while let Some(next) = entries.next() {
        let item = match next {
            Err(e) => {
                let local = e.path().unwrap_or(root);
                let skipped = Skipped {
                    path: local.to_string_lossy().into_owned(),
                    reason: e
                        .io_error()
                        .map_or_else(|| e.to_string(), |io| format!("unreadable: {io}")),
                };
                // A path that has no place in the store (a name that is not UTF-8) holds no
                // document to keep; one the error does not name may be anything under the
                // root, so everything there is kept.
                match e.path().map(|p| store_path(root, at, p)) {
                    Some(Err(_)) => Walked::Skipped(skipped),
                    Some(Ok(path)) => Walked::Unread { skipped, at: path },
                    None => Walked::Unread {
                        skipped,
                        at: at.clone(),
                    },
                }
            }
            Ok(entry) => {
                let shown = entry.path().to_string_lossy().into_owned();
                let is_dir = entry.file_type().is_dir();
                match describe(root, at, &entry) {
                    Ok(item) => item,
                    Err(Undescribed { reason, at }) => {
                        if is_dir {
                            // Nothing under a directory that cannot be indexed can be either.
                            entries.skip_current_dir();
                        }
                        let skipped = Skipped {
                            path: shown,
                            reason,
                        };
                        match at {
                            Some(at) => Walked::Unread { skipped, at },
                            None => Walked::Skipped(skipped),
                        }
                    }
                }
            }
        };
        walked.push(item);
    }
    walked
}

/// The identity of the file `meta` describes: device and inode on Unix; none elsewhere (no
/// stable inode to rely on: moves are then not detected, and come out as a deletion and a
/// creation, as before identities).
pub(super) fn identity_of(meta: &Metadata) -> Option<Identity> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Why a walked entry cannot be a document, and, where it has a place in the store, that
/// place: it exists but could not be read, so what the store holds there is kept.
struct Undescribed {
    reason: String,
    at: Option<FsPath>,
}

/// The store path of the local path `local`, found under `root`, indexed at `at`.
pub(super) fn store_path(root: &Path, at: &FsPath, local: &Path) -> Result<FsPath, String> {
    let relative = local.strip_prefix(root).map_err(|e| e.to_string())?;
    let mut path = at.clone();
    for component in relative.components() {
        let name = component
            .as_os_str()
            .to_str()
            .ok_or_else(|| "the name is not UTF-8".to_owned())?;
        path = path.join(name).map_err(|e| e.to_string())?;
    }
    Ok(path)
}

/// Why a symbolic link is skipped.
pub(super) const NOT_FOLLOWED: &str = "symbolic link (not followed)";

/// Turns a walked entry into a document, or says why it cannot be one.
fn describe(root: &Path, at: &FsPath, entry: &walkdir::DirEntry) -> Result<Walked, Undescribed> {
    let file_type = entry.file_type();
    let path =
        store_path(root, at, entry.path()).map_err(|reason| Undescribed { reason, at: None })?;
    if file_type.is_symlink() {
        let shown = entry.path().to_string_lossy().into_owned();
        return Ok(Walked::Symlink(Skipped {
            path: shown,
            reason: NOT_FOLLOWED.into(),
        }));
    }
    let meta = entry.metadata().map_err(|e| Undescribed {
        reason: format!("unreadable: {e}"),
        at: Some(path.clone()),
    })?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let doc = if file_type.is_dir() {
        FsDoc::dir(path, modified)
    } else {
        FsDoc::file(path, meta.len(), modified)
    };
    Ok(Walked::Doc(doc.with_identity(identity_of(&meta))))
}

/// The local path of the store path `path`, for a tree indexed from `root` at `at`; `None`
/// if `path` is not under `at`.
pub(super) fn local_path(root: &Path, at: &FsPath, path: &FsPath) -> Option<std::path::PathBuf> {
    if !path.is_inside(at) {
        return None;
    }
    let mut local = root.to_owned();
    let skip = at.depth();
    for name in path
        .as_str()
        .split('/')
        .filter(|n| !n.is_empty())
        .skip(skip)
    {
        local.push(name);
    }
    Some(local)
}
