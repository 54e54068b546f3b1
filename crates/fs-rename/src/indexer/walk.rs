//! The walk of the local directory: walkdir, never following symbolic links, parents before
//! their entries; each entry becomes a document with the identity of its file on disk
//! (device and inode, on Unix), or a reason why it cannot be one.

use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use fs_model::{FsDoc, FsPath, Identity};
use tokio::sync::mpsc;

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

/// Entries the walk sends at a time.
const CHUNK: usize = 1_000;

/// Chunks the walk may run ahead of its reader: enough to keep it going while a batch is
/// written, few enough that a walk nobody takes from holds a few thousand entries, not the
/// tree.
const CHUNKS_AHEAD: usize = 4;

/// The walk of a directory, started on the blocking pool and taken where it is first
/// needed: the index run takes its lock and reads the store meanwhile. It is taken either
/// whole ([`Walk::entries`], kept for as long as the walk lives: the moves are found before
/// anything is written) or chunk by chunk ([`Walk::next_chunk`], nothing kept: a first index,
/// where there are no moves to find). Dropped while it runs (a run interrupted or failed),
/// it stops walking at its next full chunk.
pub(super) struct Walk {
    root: PathBuf,
    state: WalkState,
}

enum WalkState {
    /// Going on: its chunks come through `chunks_rx`, and its task says how it ended.
    /// `taken` holds the chunks collected so far; `streamed` says some were handed out
    /// instead, so the walk can no longer be had whole.
    Running {
        chunks_rx: mpsc::Receiver<Vec<Walked>>,
        task: tokio::task::JoinHandle<()>,
        taken: Vec<Walked>,
        streamed: bool,
    },
    /// Ended, and collected whole.
    Done(Vec<Walked>),
    /// Ended, handed out chunk by chunk: nothing of it is kept.
    Streamed,
    /// The walk's task failed (it panicked or was cancelled): the message.
    Failed(String),
}

impl Walk {
    /// Starts walking `root`, to be indexed at `at`.
    pub(super) fn start(root: &Path, at: &FsPath) -> Walk {
        let (dir, at) = (root.to_owned(), at.clone());
        let (chunks_tx, chunks_rx) = mpsc::channel(CHUNKS_AHEAD);
        let task = tokio::task::spawn_blocking(move || {
            let mut chunk = Vec::with_capacity(CHUNK);
            let mut sent = true;
            walk_with(&dir, &at, |item| {
                chunk.push(item);
                if chunk.len() >= CHUNK {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK));
                    // An error means the reader is gone (the run ended, or was
                    // interrupted): nobody wants the rest.
                    sent = chunks_tx.blocking_send(full).is_ok();
                }
                sent
            });
            if sent && !chunk.is_empty() {
                // The reader may be gone by now: then nobody wants this last chunk either.
                let _ = chunks_tx.blocking_send(chunk);
            }
        });
        Walk {
            root: root.to_owned(),
            state: WalkState::Running {
                chunks_rx,
                task,
                taken: Vec::new(),
                streamed: false,
            },
        }
    }

    /// The walk's entries, all of them, once it has ended.
    ///
    /// # Errors
    /// [`RenameError::Local`] if the walk's task failed, or if the walk was taken chunk by
    /// chunk ([`Walk::next_chunk`]), so that it is no longer whole.
    pub(super) async fn entries(&mut self) -> Result<&[Walked]> {
        if let WalkState::Running {
            chunks_rx,
            task,
            taken,
            streamed: false,
        } = &mut self.state
        {
            while let Some(chunk) = chunks_rx.recv().await {
                taken.extend(chunk);
            }
            // The handle is awaited in place, not moved out: a caller that gives up on this
            // future meanwhile leaves the walk as it was, what was collected included.
            let ended = task.await;
            let taken = std::mem::take(taken);
            self.state = match ended {
                Ok(()) => WalkState::Done(taken),
                Err(e) => WalkState::Failed(e.to_string()),
            };
        }
        let message = match &self.state {
            WalkState::Done(walked) => return Ok(walked),
            WalkState::Failed(message) => message.as_str(),
            WalkState::Streamed | WalkState::Running { .. } => {
                "it was taken chunk by chunk, and is not kept"
            }
        };
        Err(self.failure(message))
    }

    /// The walk's next chunk of entries (parents before their entries, as in
    /// [`Walk::entries`]), or `None` once it has ended; what is handed out is not kept.
    ///
    /// # Errors
    /// [`RenameError::Local`] if the walk's task failed, or if the walk was collected whole
    /// ([`Walk::entries`]) before.
    pub(super) async fn next_chunk(&mut self) -> Result<Option<Vec<Walked>>> {
        let ended = match &mut self.state {
            WalkState::Running {
                chunks_rx,
                task,
                taken,
                streamed,
            } => {
                *streamed = true;
                // Anything collected before comes first, in the order walked.
                if !taken.is_empty() {
                    return Ok(Some(std::mem::take(taken)));
                }
                if let Some(chunk) = chunks_rx.recv().await {
                    return Ok(Some(chunk));
                }
                // The channel closes when the walk's task ends, however it ended.
                task.await
            }
            WalkState::Streamed => return Ok(None),
            WalkState::Failed(message) => {
                let message = message.clone();
                return Err(self.failure(&message));
            }
            WalkState::Done(_) => {
                return Err(self.failure("it was collected whole, and is read from there"))
            }
        };
        match ended {
            Ok(()) => {
                self.state = WalkState::Streamed;
                Ok(None)
            }
            Err(e) => {
                let message = e.to_string();
                self.state = WalkState::Failed(message.clone());
                Err(self.failure(&message))
            }
        }
    }

    /// Whether the walk can still be taken chunk by chunk: it was not collected whole (a
    /// pass that found moves did, and a second pass reads it again from there).
    pub(super) fn streams(&self) -> bool {
        matches!(self.state, WalkState::Running { .. } | WalkState::Streamed)
    }

    fn failure(&self, message: &str) -> RenameError {
        RenameError::Local {
            path: self.root.display().to_string(),
            message: format!("the walk failed: {message}"),
        }
    }
}

/// Walks `root`, to be indexed at `at`, in full: parents come before their entries. Runs on
/// the blocking pool. The whole walk is kept, because the moves are found before anything
/// is written (see `moves.rs`): about 250 bytes an entry.
pub(super) fn walk_all(root: &Path, at: &FsPath) -> Vec<Walked> {
    let mut walked = Vec::new();
    walk_with(root, at, |item| {
        walked.push(item);
        true
    });
    walked
}

/// Walks `root`, to be indexed at `at`, handing each entry to `each`, parents before their
/// entries, until `each` returns false. Runs on the blocking pool.
fn walk_with(root: &Path, at: &FsPath, mut each: impl FnMut(Walked) -> bool) {
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
        if !each(item) {
            return;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(walked: &[Walked]) -> Vec<String> {
        walked
            .iter()
            .map(|w| match w {
                Walked::Doc(doc) => doc.path.to_string(),
                _ => "(not a document)".to_owned(),
            })
            .collect()
    }

    /// A walk of a tree of several chunks, `dirs` directories of `files` files.
    fn tree(dirs: usize, files: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for d in 0..dirs {
            let sub = dir.path().join(format!("d{d}"));
            std::fs::create_dir(&sub).expect("mkdir");
            for f in 0..files {
                std::fs::write(sub.join(format!("f{f}")), b"").expect("write");
            }
        }
        dir
    }

    #[tokio::test]
    async fn a_walk_taken_chunk_by_chunk_is_the_walk_collected() {
        let dir = tree(3, 900);
        let at = FsPath::parse("/t").expect("path");
        let whole = paths(&walk_all(dir.path(), &at));
        let mut walk = Walk::start(dir.path(), &at);
        assert!(walk.streams());
        let mut streamed = Vec::new();
        let mut chunks = 0;
        while let Some(chunk) = walk.next_chunk().await.expect("chunk") {
            assert!(chunk.len() <= CHUNK);
            streamed.extend(paths(&chunk));
            chunks += 1;
        }
        assert_eq!(streamed, whole);
        assert_eq!(chunks, whole.len().div_ceil(CHUNK));
        // Handed out, the walk is not kept: it cannot be had whole any more.
        assert!(walk.next_chunk().await.expect("ended").is_none());
        assert!(walk.entries().await.is_err());
    }

    #[tokio::test]
    async fn a_walk_collected_whole_is_not_streamed() {
        let dir = tree(2, 700);
        let at = FsPath::parse("/t").expect("path");
        let whole = paths(&walk_all(dir.path(), &at));
        let mut walk = Walk::start(dir.path(), &at);
        let collected = paths(walk.entries().await.expect("entries"));
        assert_eq!(collected, whole);
        // Asked again (a second pass), it is the same walk.
        assert_eq!(paths(walk.entries().await.expect("entries")), whole);
        assert!(!walk.streams());
        assert!(walk.next_chunk().await.is_err());
    }
}
