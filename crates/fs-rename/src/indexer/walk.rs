//! The walk of the local directory, never following symbolic links, in path order; each
//! entry becomes a document with the identity of its file on disk (device and inode, on
//! Unix), or a reason why it cannot be one.
//!
//! Path order is the byte order of the entries' store paths ([`FsPath::as_str`], compared as
//! `str` is: unsigned bytes), the order in which the store scans a subtree (SQLite's `BINARY`
//! collation, Elasticsearch's sort on a keyword): the indexer merges the walk with that scan
//! (`merge.rs`), both in the same order, without holding either. It is not the order of a
//! depth-first walk that sorts each directory's entries (as walkdir's `sort_by` does): the
//! entries of a directory `a` do not come right after `a`, since names such as `a-b` or
//! `a.c` (`-` and `.` are below `/`) sort between `/t/a` and `/t/a/x`:
//!
//! ```text
//! /t/a, /t/a-b, /t/a-b/y, /t/a.c, /t/a/x, /t/b
//! ```
//!
//! So each directory's listing is read whole and sorted by keys: each entry's name (the entry
//! itself comes there) and, for each directory, its name followed by `/` (its entries come
//! there: they all begin with that, so they take exactly its place). Parents still come
//! before their entries. A directory's listing is read when the directory itself is walked
//! (so that one that cannot be listed is reported right after its document), and kept until
//! its place comes: usually at once, later only past siblings such as `a-b` and `a.c`.
//! Entries whose names are not UTF-8 have no store path: they are only reported, placed by
//! the bytes of their name, and nothing under them is walked.

use std::ffi::OsString;
use std::fs::{FileType, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use fs_model::{FsDoc, FsPath, Identity};
use tokio::sync::mpsc;

use super::Skipped;
use crate::error::{RenameError, Result};

/// Whether a file has other names on disk: hard links, the same identity at several paths,
/// which is then no proof of a move (see `moves.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Links {
    One,
    Many,
}

/// One entry of the walk.
pub(super) enum Walked {
    /// A file or directory, and whether it has other names on disk.
    Doc(FsDoc, Links),
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

/// The walk of a directory, in path order (see the module's documentation: the order in which
/// the store scans a subtree, so that the indexer can merge the two), started on the blocking
/// pool and taken chunk by chunk ([`Walk::next_chunk`]) where it is first needed: the index
/// run takes its lock meanwhile. Nothing handed out is kept here. Dropped while it runs (a
/// run interrupted or failed), it stops walking at its next full chunk.
pub(super) struct Walk {
    root: PathBuf,
    state: WalkState,
}

enum WalkState {
    /// Going on: its chunks come through `chunks_rx`, and its task says how it ended.
    Running {
        chunks_rx: mpsc::Receiver<Vec<Walked>>,
        task: tokio::task::JoinHandle<()>,
    },
    /// Ended, every chunk handed out.
    Ended,
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
            state: WalkState::Running { chunks_rx, task },
        }
    }

    /// The walk's next chunk of entries, in path order (the order of the store's scan, with
    /// which the indexer merges it; parents come before their entries), or `None` once it
    /// has ended; what is handed out is not kept.
    ///
    /// # Errors
    /// [`RenameError::Local`] if the walk's task failed.
    pub(super) async fn next_chunk(&mut self) -> Result<Option<Vec<Walked>>> {
        let ended = match &mut self.state {
            WalkState::Running { chunks_rx, task } => {
                if let Some(chunk) = chunks_rx.recv().await {
                    return Ok(Some(chunk));
                }
                // The channel closes when the walk's task ends, however it ended. The handle
                // is awaited in place: a caller that gives up meanwhile leaves the walk as it
                // was.
                task.await
            }
            WalkState::Ended => return Ok(None),
            WalkState::Failed(message) => {
                let message = message.clone();
                return Err(self.failure(&message));
            }
        };
        match ended {
            Ok(()) => {
                self.state = WalkState::Ended;
                Ok(None)
            }
            Err(e) => {
                let message = e.to_string();
                self.state = WalkState::Failed(message.clone());
                Err(self.failure(&message))
            }
        }
    }

    fn failure(&self, message: &str) -> RenameError {
        RenameError::Local {
            path: self.root.display().to_string(),
            message: format!("the walk failed: {message}"),
        }
    }
}

/// Walks `root`, to be indexed at `at`, in full, in path order (see the module's
/// documentation: the order of the store's scan; parents come before their entries). Runs on
/// the blocking pool. The whole walk is kept, because the moves are found before anything is
/// written (see `moves.rs`): about 250 bytes an entry.
pub(super) fn walk_all(root: &Path, at: &FsPath) -> Vec<Walked> {
    let mut walked = Vec::new();
    walk_with(root, at, |item| {
        walked.push(item);
        true
    });
    walked
}

/// Walks `root`, to be indexed at `at`, handing each entry to `each` in path order (see the
/// module's documentation: the order in which the store scans, so that the indexer can merge
/// the two), until `each` returns false. Runs on the blocking pool.
///
/// The root comes first. If it is a symbolic link it is reported as one, and what it points
/// to is walked if that is a directory (a root given as a link is meant to be followed; no
/// link under it is). Entries that are not documents come where their path does: a symbolic
/// link (not followed), a name that is not UTF-8 (skipped, with nothing under it), an entry
/// whose metadata cannot be read (unread at its path), a directory that cannot be listed
/// (its document, then unread at its path); an error listing a directory that names no
/// entry is unread at `at` (anything under it may be concerned), reported before that
/// directory's entries.
fn walk_with(root: &Path, at: &FsPath, mut each: impl FnMut(Walked) -> bool) {
    let Some(first) = walk_root(root, at, &mut each) else {
        return;
    };
    let mut stack = vec![first];
    while let Some(dir) = stack.last_mut() {
        let Some(step) = dir.steps.next() else {
            stack.pop();
            continue;
        };
        let deeper = match step {
            Step::Entry(i) => {
                let (item, listed) = visit(&dir.local, &dir.store, &dir.children[i]);
                // A directory's listing waits for its place; one that cannot be listed says
                // so right after it.
                let unlisted = match listed {
                    Some(Ok(listing)) => {
                        dir.children[i].listing = Some(listing);
                        None
                    }
                    Some(Err(unlisted)) => Some(unlisted),
                    None => None,
                };
                if !std::iter::once(item).chain(unlisted).all(&mut each) {
                    return;
                }
                None
            }
            // A directory not listed (it is not a document, or it cannot be listed): nothing.
            Step::Entries(i) => dir.children[i].listing.take(),
        };
        if let Some(listing) = deeper {
            match enter(listing, at, &mut each) {
                Some(listing) => stack.push(listing),
                None => return,
            }
        }
    }
}

/// The root's own entry, handed to `each`, and its listing if it is a directory (or a
/// symbolic link to one) to walk; `None` if there is nothing more to walk, or `each` said
/// to stop.
fn walk_root(root: &Path, at: &FsPath, each: &mut impl FnMut(Walked) -> bool) -> Option<Listing> {
    let shown = || root.to_string_lossy().into_owned();
    let unread = |e: io::Error| Walked::Unread {
        skipped: Skipped {
            path: shown(),
            reason: format!("unreadable: {e}"),
        },
        at: at.clone(),
    };
    let meta = match std::fs::symlink_metadata(root) {
        Ok(meta) => meta,
        Err(e) => {
            each(unread(e));
            return None;
        }
    };
    if meta.file_type().is_symlink() {
        // A root that is a symbolic link is followed (as walkdir did: `follow_root_links`),
        // but reported as a link, not as what it points to; one that points nowhere is
        // unread.
        let target = match std::fs::metadata(root) {
            Ok(target) => target,
            Err(e) => {
                each(unread(e));
                return None;
            }
        };
        let link = Walked::Symlink(Skipped {
            path: shown(),
            reason: NOT_FOLLOWED.into(),
        });
        if !each(link) || !target.is_dir() {
            return None;
        }
    } else {
        let is_dir = meta.is_dir();
        if !each(describe(at.clone(), is_dir, &meta)) || !is_dir {
            return None;
        }
    }
    match list(root, at) {
        Ok(listing) => enter(listing, at, each),
        Err(e) => {
            each(unread(e));
            None
        }
    }
}

/// A directory's listing, sorted in path order, and how far the walk is in it.
struct Listing {
    /// The directory, on disk and in the store.
    local: PathBuf,
    store: FsPath,
    /// Errors reading the listing that name no entry.
    errors: Vec<io::Error>,
    children: Vec<Child>,
    /// What comes next, in path order.
    steps: std::vec::IntoIter<Step>,
}

/// An entry of a listing.
struct Child {
    name: OsString,
    /// Its kind, as the listing says (a symbolic link is not followed).
    kind: io::Result<FileType>,
    /// A directory's own listing, read when the directory was walked and kept until its
    /// entries' place comes.
    listing: Option<Listing>,
}

/// A step through a listing, in path order.
#[derive(Clone, Copy)]
enum Step {
    /// The entry itself (its key: its name).
    Entry(usize),
    /// The entries of a directory (its key: its name followed by `/`).
    Entries(usize),
}

impl Listing {
    /// The bytes of `step`'s key, which sort in path order.
    fn key(&self, step: Step) -> impl Iterator<Item = u8> + '_ {
        let (i, slash) = match step {
            Step::Entry(i) => (i, None),
            Step::Entries(i) => (i, Some(b'/')),
        };
        // The bytes of a UTF-8 name are those of its place in the store path. Another name
        // has no place in the store: its bytes place it where it is reported.
        let name = self.children[i].name.as_encoded_bytes();
        name.iter().copied().chain(slash)
    }
}

/// Lists the directory `local`, at `store` in the store, sorted in path order.
fn list(local: &Path, store: &FsPath) -> io::Result<Listing> {
    let mut children = Vec::new();
    let mut errors = Vec::new();
    for entry in std::fs::read_dir(local)? {
        match entry {
            Ok(entry) => children.push(Child {
                name: entry.file_name(),
                kind: entry.file_type(),
                listing: None,
            }),
            Err(e) => errors.push(e),
        }
    }
    let mut steps = Vec::with_capacity(children.len() + children.len() / 4);
    for (i, child) in children.iter().enumerate() {
        steps.push(Step::Entry(i));
        if child.kind.as_ref().is_ok_and(FileType::is_dir) {
            steps.push(Step::Entries(i));
        }
    }
    let mut listing = Listing {
        local: local.to_owned(),
        store: store.clone(),
        errors,
        children,
        steps: Vec::new().into_iter(),
    };
    // No two keys are equal: two names of a directory differ, and a name has no `/`.
    steps.sort_unstable_by(|a, b| listing.key(*a).cmp(listing.key(*b)));
    listing.steps = steps.into_iter();
    Ok(listing)
}

/// Begins walking `listing`: hands its errors that name no entry to `each` (unread at `at`:
/// anything under the root may be concerned), and returns it to walk, or `None` if `each`
/// said to stop.
fn enter(
    mut listing: Listing,
    at: &FsPath,
    each: &mut impl FnMut(Walked) -> bool,
) -> Option<Listing> {
    for e in std::mem::take(&mut listing.errors) {
        let skipped = Skipped {
            path: listing.local.to_string_lossy().into_owned(),
            reason: format!("unreadable: {e}"),
        };
        let unread = Walked::Unread {
            skipped,
            at: at.clone(),
        };
        if !each(unread) {
            return None;
        }
    }
    Some(listing)
}

/// The entry `child` of the directory `dir` (at `parent` in the store) as walked, and for a
/// directory its listing, or the entry that says it cannot be listed.
fn visit(
    dir: &Path,
    parent: &FsPath,
    child: &Child,
) -> (Walked, Option<std::result::Result<Listing, Walked>>) {
    let local = dir.join(&child.name);
    let skipped = |reason: String| Skipped {
        path: local.to_string_lossy().into_owned(),
        reason,
    };
    let path = child
        .name
        .to_str()
        .ok_or_else(|| "the name is not UTF-8".to_owned())
        .and_then(|name| parent.join(name).map_err(|e| e.to_string()));
    let (kind, path) = match (&child.kind, path) {
        (Ok(kind), Ok(path)) => (*kind, path),
        // A path that has no place in the store holds no document to keep.
        (Ok(_), Err(reason)) => return (Walked::Skipped(skipped(reason)), None),
        (Err(e), path) => {
            let skipped = skipped(format!("unreadable: {e}"));
            let item = match path {
                Ok(at) => Walked::Unread { skipped, at },
                Err(_) => Walked::Skipped(skipped),
            };
            return (item, None);
        }
    };
    if kind.is_symlink() {
        let link = Walked::Symlink(skipped(NOT_FOLLOWED.into()));
        return (link, None);
    }
    let meta = match std::fs::symlink_metadata(&local) {
        Ok(meta) => meta,
        Err(e) => {
            // Nothing under a directory that cannot be read can be walked either.
            let unread = Walked::Unread {
                skipped: skipped(format!("unreadable: {e}")),
                at: path,
            };
            return (unread, None);
        }
    };
    let item = describe(path.clone(), kind.is_dir(), &meta);
    if !kind.is_dir() {
        return (item, None);
    }
    let listed = list(&local, &path).map_err(|e| Walked::Unread {
        skipped: skipped(format!("unreadable: {e}")),
        at: path,
    });
    (item, Some(listed))
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

/// Whether the file `meta` describes has other names on disk (hard links).
pub(super) fn links_of(meta: &Metadata) -> Links {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if !meta.is_dir() && meta.nlink() > 1 {
            return Links::Many;
        }
    }
    let _ = meta;
    Links::One
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

/// The document of the entry at `path` whose metadata (not following a symbolic link) is
/// `meta`.
fn describe(path: FsPath, is_dir: bool, meta: &Metadata) -> Walked {
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let doc = if is_dir {
        FsDoc::dir(path, modified)
    } else {
        FsDoc::file(path, meta.len(), modified)
    };
    Walked::Doc(doc.with_identity(identity_of(meta)), links_of(meta))
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
                Walked::Doc(doc, _) => doc.path.to_string(),
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

    /// What each entry of the walk is, with its path in the store (a document, unread) or on
    /// disk (skipped, a symbolic link).
    fn described(walked: &[Walked]) -> Vec<String> {
        walked
            .iter()
            .map(|w| match w {
                Walked::Doc(doc, _) if doc.is_dir() => format!("dir {}", doc.path),
                Walked::Doc(doc, _) => format!("file {}", doc.path),
                Walked::Skipped(s) => format!("skipped {}", s.path),
                Walked::Symlink(s) => format!("symlink {}", s.path),
                Walked::Unread { at, .. } => format!("unread {at}"),
            })
            .collect()
    }

    #[test]
    fn the_walk_is_in_path_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        for sub in ["a", "a/x", "a-b", "é", "a b"] {
            std::fs::create_dir(root.join(sub)).expect("mkdir");
        }
        for file in ["a/x/deep", "a-b/y", "a.c", "b", "B", "é/z", "a b/w"] {
            std::fs::write(root.join(file), b"").expect("write");
        }
        let at = FsPath::parse("/t").expect("path");
        let walked = paths(&walk_all(root, &at));
        let mut sorted = walked.clone();
        sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        assert_eq!(walked, sorted);
        // The order spelled out: `a`'s entries come past `a b`, `a-b` and `a.c` (space,
        // `-` and `.` are below `/`), `B` before `a`, `é` (two bytes from 0xc3) last.
        let expected = [
            "/t",
            "/t/B",
            "/t/a",
            "/t/a b",
            "/t/a b/w",
            "/t/a-b",
            "/t/a-b/y",
            "/t/a.c",
            "/t/a/x",
            "/t/a/x/deep",
            "/t/b",
            "/t/é",
            "/t/é/z",
        ];
        assert_eq!(walked, expected);
        // Every parent comes before its entries.
        for (i, path) in walked.iter().enumerate() {
            let path = FsPath::parse(path).expect("path");
            if let Some(parent) = path.parent().filter(|_| path != at) {
                assert!(
                    walked[..i].contains(&parent.to_string()),
                    "{path} before {parent}"
                );
            }
        }
    }

    #[test]
    fn a_walk_stops_when_told() {
        let dir = tree(3, 3);
        let at = FsPath::parse("/t").expect("path");
        let whole = paths(&walk_all(dir.path(), &at));
        let mut taken = Vec::new();
        walk_with(dir.path(), &at, |item| {
            taken.push(item);
            taken.len() < 5
        });
        assert_eq!(paths(&taken), whole[..5]);
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_is_reported_not_followed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("real/inner")).expect("mkdir");
        std::fs::write(root.join("real/inner/f"), b"x").expect("write");
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).expect("symlink");
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).expect("symlink");
        let at = FsPath::parse("/t").expect("path");
        let walked = described(&walk_all(root, &at));
        let shown = |name: &str| root.join(name).to_string_lossy().into_owned();
        assert_eq!(
            walked,
            [
                "dir /t".to_owned(),
                format!("symlink {}", shown("dangling")),
                format!("symlink {}", shown("link")),
                "dir /t/real".to_owned(),
                "dir /t/real/inner".to_owned(),
                "file /t/real/inner/f".to_owned(),
            ]
        );
        let all = walk_all(root, &at);
        let link = all.iter().find_map(|w| match w {
            Walked::Symlink(s) => Some(s),
            _ => None,
        });
        assert_eq!(link.expect("a link").reason, NOT_FOLLOWED);
    }

    #[cfg(unix)]
    #[test]
    fn a_root_that_is_a_symbolic_link_is_followed() {
        // As walkdir did (`follow_root_links`): the root is reported as a link, and what it
        // points to is walked; a link under it is not followed.
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("real/sub")).expect("mkdir");
        std::fs::write(dir.path().join("real/sub/f"), b"x").expect("write");
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("real/again"))
            .expect("symlink");
        let root = dir.path().join("root");
        std::os::unix::fs::symlink(dir.path().join("real"), &root).expect("symlink");
        let at = FsPath::parse("/t").expect("path");
        let shown = |p: &Path| p.to_string_lossy().into_owned();
        assert_eq!(
            described(&walk_all(&root, &at)),
            [
                format!("symlink {}", shown(&root)),
                format!("symlink {}", shown(&root.join("again"))),
                "dir /t/sub".to_owned(),
                "file /t/sub/f".to_owned(),
            ]
        );
        // A root that points nowhere is unread, at the target.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).expect("symlink");
        assert_eq!(described(&walk_all(&dangling, &at)), ["unread /t"]);
        // A root that is a file is its document alone.
        let file = dir.path().join("real/sub/f");
        assert_eq!(described(&walk_all(&file, &at)), ["file /t"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_name_that_is_not_utf8_is_skipped_with_what_is_under_it() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let bad = dir.path().join(std::ffi::OsStr::from_bytes(b"bad\xff"));
        // Some file systems refuse such names: then there is nothing to see.
        if std::fs::create_dir(&bad).is_err() {
            println!("note: the file system refuses names that are not UTF-8; not tested");
            return;
        }
        std::fs::write(bad.join("inside"), b"").expect("write");
        std::fs::write(dir.path().join("good"), b"").expect("write");
        let at = FsPath::parse("/t").expect("path");
        assert_eq!(
            described(&walk_all(dir.path(), &at)),
            [
                "dir /t".to_owned(),
                format!("skipped {}", bad.to_string_lossy()),
                "file /t/good".to_owned(),
            ]
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_that_cannot_be_listed_is_its_document_then_unread() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).expect("mkdir");
        std::fs::write(closed.join("hidden"), b"").expect("write");
        std::fs::create_dir(dir.path().join("closed-not")).expect("mkdir");
        std::fs::write(dir.path().join("closed-not/f"), b"").expect("write");
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        let at = FsPath::parse("/t").expect("path");
        let walked = described(&walk_all(dir.path(), &at));
        // Root (or a process with CAP_DAC_READ_SEARCH) lists it all the same: then there is
        // no unreadable directory to walk, and only the order is checked.
        let listable = std::fs::read_dir(&closed).is_ok();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        if listable {
            println!(
                "note: a directory of mode 000 can be listed here (running as root?): \
                 its unread entry is not tested"
            );
            assert_eq!(
                walked,
                [
                    "dir /t",
                    "dir /t/closed",
                    "dir /t/closed-not",
                    "file /t/closed-not/f",
                    "file /t/closed/hidden",
                ]
            );
            return;
        }
        // Its document, then unread at its path, right after (in the place of its path), and
        // nothing under it.
        assert_eq!(
            walked,
            [
                "dir /t",
                "dir /t/closed",
                "unread /t/closed",
                "dir /t/closed-not",
                "file /t/closed-not/f",
            ]
        );
    }

    #[tokio::test]
    async fn a_walk_taken_chunk_by_chunk_is_the_walk_collected() {
        let dir = tree(3, 900);
        let at = FsPath::parse("/t").expect("path");
        let whole = paths(&walk_all(dir.path(), &at));
        let mut walk = Walk::start(dir.path(), &at);
        let mut streamed = Vec::new();
        let mut chunks = 0;
        while let Some(chunk) = walk.next_chunk().await.expect("chunk") {
            assert!(chunk.len() <= CHUNK);
            streamed.extend(paths(&chunk));
            chunks += 1;
        }
        assert_eq!(streamed, whole);
        assert_eq!(chunks, whole.len().div_ceil(CHUNK));
        // Ended, it stays ended.
        assert!(walk.next_chunk().await.expect("ended").is_none());
    }
}
