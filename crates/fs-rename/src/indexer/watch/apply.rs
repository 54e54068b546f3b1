//! Applying one batch of changes: renames first (paired by inotify, or by identity), then
//! each dirty path brought in step with the disk, a directory indexed again.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use fs_model::{FsDoc, FsPath, Identity};
use fs_store::Scope;

use super::super::one::describe_one;
use super::super::{index_prepared, index_unpruned, IndexReport, Target};
use super::{Applier, Change, WatchBatch, MAX_HOLD, RECENT};
use crate::error::RenameError;
use crate::tree::Entry;

impl Applier<'_> {
    /// Applies a batch. While the events go on (`quiet` false: the batch was cut by the
    /// longest wait), only its renames are applied: indexing a directory then would read the
    /// disk as it is now, ahead of events not yet received (a directory filled by moves and
    /// moved again, indexed at its last place before the renames that lead there), and those
    /// renames would find their destination taken. The dirty paths wait, followed through
    /// the renames, for a quiet batch, or [`MAX_HOLD`] at most.
    pub(super) async fn apply(&mut self, changes: Vec<Change>, quiet: bool) -> WatchBatch {
        let mut batch = self.apply_changes(changes, quiet).await;
        batch.skipped = self.take_skipped();
        batch
    }

    /// [`Applier::apply`], but for the names skipped.
    async fn apply_changes(&mut self, changes: Vec<Change>, quiet: bool) -> WatchBatch {
        let mut batch = WatchBatch::default();
        if let Some(Change::Rescan(why)) = changes.iter().find(|c| matches!(c, Change::Rescan(_))) {
            let why = why.clone();
            return self.rescan(why).await;
        }
        // What earlier batches found gone: this batch's events came after it was found gone,
        // so a rename that explains it is among them (and carries its documents, ids and
        // all); what is still gone after them was deleted, or moved out.
        let hold = !quiet && self.held.2.is_none_or(|since| since.elapsed() < MAX_HOLD);
        let (earlier, recheck): (Vec<PathBuf>, Vec<PathBuf>) = if hold {
            (Vec::new(), Vec::new())
        } else {
            (
                std::mem::take(&mut *self.postponed_list()),
                std::mem::take(&mut *self.recheck_list()),
            )
        };
        let mut dirty: Vec<PathBuf> = std::mem::take(&mut self.held.0);
        let mut touched: BTreeSet<PathBuf> = std::mem::take(&mut self.held.1);
        self.apply_renames(changes, (&mut dirty, &mut touched), &mut batch)
            .await;
        while self
            .recent
            .front()
            .is_some_and(|(_, _, at)| at.elapsed() > RECENT)
        {
            self.recent.pop_front();
        }
        self.renamed_away.retain(|_, at| at.elapsed() <= RECENT);
        if hold {
            self.held = (
                dirty,
                touched,
                self.held.2.or(Some(tokio::time::Instant::now())),
            );
            return batch;
        }
        self.held.2 = None;
        self.revisit_earlier(earlier, recheck, &mut dirty);
        // An event from inside a directory just moved may carry its old path: where the old
        // path is gone, its new place is looked at too.
        let mut followed = Vec::new();
        for path in &dirty {
            if path.symlink_metadata().is_ok() {
                continue;
            }
            let moved = self.follow(path);
            if moved != *path {
                followed.push(moved);
            }
        }
        dirty.extend(followed);
        self.sync_dirty(dirty, touched, &mut batch).await;
        batch
    }

    /// Adds to `dirty` what earlier batches left to look at again: the directories to
    /// `recheck`, and the paths found gone (`earlier`), each followed through the renames
    /// since. A path still gone is marked confirmed: the next sync may forget it.
    fn revisit_earlier(
        &mut self,
        earlier: Vec<PathBuf>,
        recheck: Vec<PathBuf>,
        dirty: &mut Vec<PathBuf>,
    ) {
        self.confirmed.clear();
        self.rechecking.clear();
        for dir in recheck {
            let moved = self.follow(&dir);
            if moved.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                self.rechecking.insert(moved.clone());
                dirty.push(moved);
            }
        }
        for path in earlier {
            let moved = self.follow(&path);
            if moved != path {
                // Renamed since: looked at in its new place (the store rename carried what
                // the store held there; what it did not hold is indexed there). What the
                // store holds at the old place now came after, and is stale.
                dirty.push(moved);
            }
            // Gone, not merely unreadable (a directory above it whose mode changed): only
            // what is not found is forgotten.
            if path
                .symlink_metadata()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            {
                self.confirmed.insert(path.clone());
            }
            dirty.push(path);
        }
    }

    /// Brings the store in step with the disk at the `dirty` paths and the `touched`
    /// directories: directories indexed whole, the rest one document each.
    async fn sync_dirty(
        &mut self,
        dirty: Vec<PathBuf>,
        mut touched: BTreeSet<PathBuf>,
        batch: &mut WatchBatch,
    ) {
        // A directory's entries changed: its own modification time did too.
        touched.extend(dirty.iter().filter_map(|p| p.parent()).map(Path::to_owned));
        touched.retain(|p| p.starts_with(self.root));
        // What vanished, even under a directory indexed whole (which would only find it gone).
        let vanished = topmost(
            dirty
                .iter()
                .filter(|p| p.symlink_metadata().is_err())
                .cloned()
                .collect(),
        );
        // Directories on disk are indexed whole (created, moved in: their entries may have
        // come before their watch); the rest, and the directories touched, one document each.
        let (dirs, others): (Vec<PathBuf>, Vec<PathBuf>) = topmost(dirty)
            .into_iter()
            .partition(|p| p.symlink_metadata().is_ok_and(|m| m.is_dir()));
        // A move into a directory made just before it has no pair: inotify had no watch there
        // yet; a rename the store could not follow (its source held elsewhere, its
        // destination's directory not yet seen) is a path gone and a path new. What vanished
        // and turns up under a directory to index, or as a file to write, is the same file by
        // identity, and is renamed, not deleted and created again.
        if !vanished.is_empty() && !self.stopping() && could_turn_up(&dirs, &others) {
            self.pair_by_identity((&dirs, &others), &vanished, batch)
                .await;
        }
        for dir in &dirs {
            if self.stopping() {
                return;
            }
            self.index_subtree(dir, batch).await;
        }
        touched.retain(|p| !dirs.iter().any(|d| p.starts_with(d)));
        let mut single: Vec<PathBuf> = others;
        single.extend(touched);
        single.sort();
        single.dedup();
        let slow = match self.sync_documents(&single, batch).await {
            Ok(slow) => slow,
            Err(e) => {
                batch
                    .failures
                    .push(format!("{} entries: {e}", single.len()));
                Vec::new()
            }
        };
        for path in slow {
            if self.stopping() {
                return;
            }
            self.sync(&path, batch).await;
        }
    }

    /// Indexes the whole tree again, with pruning, after events were lost (`why`).
    async fn rescan(&mut self, why: String) -> WatchBatch {
        let mut batch = WatchBatch::default();
        tracing::warn!(reason = %why, "events were lost: indexing the whole tree again");
        batch.rescan = true;
        batch.rescan_reason = Some(why.clone());
        // The rescan sees all that the held paths would have said.
        self.held = (Vec::new(), BTreeSet::new(), None);
        let mut options = self.index.clone();
        options.prune = true;
        let target = Target {
            tree: self.tree,
            dir: self.root,
            at: self.at,
        };
        match index_prepared(target, &options, None).await {
            Ok(r) => {
                batch.renames += r.moves;
                batch.indexed += 1;
                batch.removed += r.pruned;
                self.note_index_run(&mut batch, self.root, &r);
            }
            Err(e) => batch.failures.push(format!("rescan: {e}")),
        }
        batch
    }

    /// Applies the renames among `changes` to the store, in order, and gathers the other
    /// changes' paths into `dirty` (followed through the renames) and the directories whose
    /// entries the renames changed into `touched`.
    async fn apply_renames(
        &mut self,
        changes: Vec<Change>,
        (dirty, touched): (&mut Vec<PathBuf>, &mut BTreeSet<PathBuf>),
        batch: &mut WatchBatch,
    ) {
        // The halves of the renames inotify paired: the rename itself says it all.
        let paired: HashSet<usize> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Rename(_, _, tracker) => *tracker,
                _ => None,
            })
            .collect();
        for change in changes {
            if self.stopping() {
                return;
            }
            match change {
                Change::Dirty(_, Some(t)) if paired.contains(&t) => {}
                Change::Dirty(path, tracker) => {
                    // Half a rename (only renames carry a tracker): the other half went
                    // outside, or into a directory with no watch yet.
                    if tracker.is_some() {
                        self.renamed_away
                            .insert(path.clone(), tokio::time::Instant::now());
                    }
                    dirty.push(path);
                }
                Change::Rename(from, to, _) => {
                    // Inside a directory just moved, inotify may still name the old place:
                    // if the destination is not on disk, its new place is taken.
                    let (from, to) = if to.symlink_metadata().is_err() {
                        let (f, t) = (self.follow(&from), self.follow(&to));
                        if t.symlink_metadata().is_ok() {
                            (f, t)
                        } else {
                            (from, to)
                        }
                    } else {
                        (from, to)
                    };
                    // Made or written in this batch (or one held), or inside a directory not
                    // indexed yet (made or moved in): the store holds at most part of what
                    // moves, or an older copy. What it holds is renamed, and the destination
                    // looked at.
                    let fresh = dirty.iter().any(|d| is_under(&from, d));
                    let partial = dirty.iter().any(|d| is_under(&from, d) && *d != from);
                    // What was dirty under `from` is now under `to`.
                    // (Thousands of renames a batch, over thousands of paths: rsync, tar.
                    // Only what is under `from` is rebuilt.)
                    for path in dirty.iter_mut() {
                        if is_under(path, &from) {
                            *path = moved_by(path, (&from, &to));
                        }
                    }
                    if self.renamed_away.keys().any(|path| is_under(path, &from)) {
                        self.renamed_away = std::mem::take(&mut self.renamed_away)
                            .into_iter()
                            .map(|(path, at)| (moved_by(&path, (&from, &to)), at))
                            .collect();
                    }
                    // If the store cannot follow it (it holds the source at another path, or
                    // the destination is in a directory it has not seen yet), the source is
                    // dirty and gone, and found again by identity.
                    self.renamed_away
                        .insert(from.clone(), tokio::time::Instant::now());
                    // Their directories' modification times changed.
                    touched.extend(from.parent().map(Path::to_owned));
                    touched.extend(to.parent().map(Path::to_owned));
                    self.rename((&from, &to), fresh, dirty, batch).await;
                    // A directory renamed is looked at again in its new place: inotify moves
                    // its watches under new descriptors, and what is written in it meanwhile
                    // (`mv a b && echo more >> b/f`) has no event at all.
                    if partial || to.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                        dirty.push(to.clone());
                    }
                    self.recent
                        .push_back((from, to, tokio::time::Instant::now()));
                }
                Change::Rescan(_) => {}
            }
        }
    }

    /// Renames in the store what vanished from disk in this batch (`vanished`, gone from disk)
    /// and turns up, by identity, under one of `dirs` or as one of `files` (the destination
    /// of a rename the store could not follow, say); see `moves.rs`.
    pub(super) async fn pair_by_identity(
        &self,
        (dirs, files): (&[PathBuf], &[PathBuf]),
        vanished: &[PathBuf],
        batch: &mut WatchBatch,
    ) {
        let mut gone: HashMap<FsPath, Entry> = HashMap::new();
        let paths: Vec<FsPath> = vanished
            .iter()
            .filter(|local| local.symlink_metadata().is_err())
            .filter_map(|local| self.store_path(local))
            .collect();
        // Most of what vanishes was never in the store (the temporary files of rsync, of
        // downloads, of editors): what it holds is found a chunk of paths a search, and only
        // the directories among it are read whole, a chunk of them a scan.
        for chunk in paths.chunks(VANISHED_CHUNK) {
            let held = match self.read_at(chunk).await {
                Ok(held) => held,
                Err(e) => {
                    batch
                        .failures
                        .push(format!("reading {} paths: {e}", chunk.len()));
                    continue;
                }
            };
            let mut dirs = Vec::new();
            for (path, entry) in held {
                if entry.doc.is_dir() {
                    dirs.push(path);
                } else {
                    gone.insert(path, entry);
                }
            }
            if dirs.is_empty() {
                continue;
            }
            let read = self
                .tree
                .for_each_page_of(
                    Scope::AnyOf(dirs.into_iter().map(Scope::Subtree).collect()),
                    1_000,
                    |page| {
                        gone.extend(page.into_iter().map(|e| (e.doc.path.clone(), e)));
                        Ok(())
                    },
                )
                .await;
            if let Err(e) = read {
                batch.failures.push(format!("reading what vanished: {e}"));
            }
        }
        if gone.is_empty() {
            return;
        }
        // All the directories at once: what moved into one may be inside what moved into
        // another (a directory moved, then a directory of it moved elsewhere), and the
        // moves are found in order, each from where the moves before it put it.
        let mut walked = Vec::new();
        for dir in dirs {
            let Some(path) = self.store_path(dir) else {
                continue;
            };
            let local = dir.clone();
            if let Ok(found) =
                tokio::task::spawn_blocking(move || super::super::walk::walk_all(&local, &path))
                    .await
            {
                walked.extend(found);
            }
        }
        for file in files {
            if let (Some(path), Ok(meta)) = (self.store_path(file), file.symlink_metadata()) {
                if meta.is_file() {
                    walked.push(super::super::walk::Walked::Doc(
                        describe_one(&path, &meta),
                        super::super::walk::links_of(&meta),
                    ));
                }
            }
        }
        let gone = self.trusting_renames(&gone, &walked);
        let planned = super::super::moves::find_moves((self.root, self.at), gone.iter(), &walked);
        match super::super::moves::apply_moves(
            self.tree,
            (self.root, self.at),
            (&planned, Vec::new()),
            &HashSet::new(),
            self.index,
            super::super::moves::Taken::Replace,
        )
        .await
        {
            Ok(moves) => {
                batch.renames += moves.done.len() as u64;
                // Indexed as new where they are now: their ids are not kept.
                for failed in &moves.failed {
                    tracing::warn!(%failed, "a move found by identity could not be made");
                }
            }
            Err(e) => batch.failures.push(format!("moves found by identity: {e}")),
        }
    }

    /// `gone`, where a file found on disk under its identity is given the size and
    /// modification time found there when it is surely the same file. Move detection asks a
    /// file for the same size and time too, to tell a reused inode from the same file; but a
    /// write before the move (the store not yet told of it) must not turn the move into a
    /// deletion and a new file with a new id. It is the same file if the events saw it renamed
    /// away (it still exists, so its inode is not free), or if the file on disk was born no
    /// later than the stored file was last written (a reused inode belongs to a file born
    /// after the old one was deleted).
    fn trusting_renames(
        &self,
        gone: &HashMap<FsPath, Entry>,
        walked: &[super::super::walk::Walked],
    ) -> Vec<Entry> {
        let found: HashMap<Identity, &FsDoc> = walked
            .iter()
            .filter_map(|w| match w {
                super::super::walk::Walked::Doc(doc, _) => doc.identity.map(|i| (i, doc)),
                _ => None,
            })
            .collect();
        let local = |path: &FsPath| super::super::walk::local_path(self.root, self.at, path);
        gone.values()
            .map(|entry| {
                let mut entry = entry.clone();
                let Some(on_disk) = entry.doc.identity.and_then(|i| found.get(&i)) else {
                    return entry;
                };
                if entry.doc.is_dir()
                    || (entry.doc.size, entry.doc.modified) == (on_disk.size, on_disk.modified)
                {
                    return entry;
                }
                let renamed_away =
                    local(&entry.doc.path).is_some_and(|l| self.renamed_away.contains_key(&l));
                let born_before =
                    local(&on_disk.path).is_some_and(|l| born_by(&l, entry.doc.modified));
                if renamed_away || born_before {
                    entry.doc.size = on_disk.size;
                    entry.doc.modified = on_disk.modified;
                }
                entry
            })
            .collect()
    }

    /// Where `path` is after the recent renames, in order.
    pub(super) fn follow(&self, path: &Path) -> PathBuf {
        self.recent
            .iter()
            .fold(path.to_owned(), |moved, (from, to, _)| {
                if is_under(&moved, from) {
                    moved_by(&moved, (from, to))
                } else {
                    moved
                }
            })
    }

    /// Indexes the directory `local` and everything under it.
    pub(super) async fn index_subtree(&self, local: &Path, batch: &mut WatchBatch) {
        let Some(path) = self.store_path(local) else {
            return;
        };
        // A directory made or moved in is watched from when notify sees it, and what
        // changed in it before that (an entry moved out at once, say) has no event: it is
        // indexed once more in the next batch, when its watch is surely in place.
        if !self.rechecking.contains(local) {
            self.recheck_list().push(local.to_owned());
        }
        let target = Target {
            tree: self.tree,
            dir: local,
            at: &path,
        };
        match index_unpruned(target, self.index, None).await {
            Ok((r, stale)) => {
                // A directory indexed again to be sure (see above) counts only if that found
                // something the events had not said: a look that changes nothing is no news,
                // and a batch of nothing else says nothing.
                let again = self.rechecking.contains(local);
                if !again || r.created + r.updated + r.moves > 0 {
                    batch.indexed += 1;
                }
                batch.renames += r.moves;
                self.note_index_run(batch, local, &r);
                // What the index found gone goes once a later batch confirms it.
                let gone: Vec<Entry> = stale
                    .into_iter()
                    .filter(|e| {
                        super::super::walk::local_path(self.root, self.at, &e.doc.path)
                            .is_some_and(|l| self.gone_for_good(&l))
                    })
                    .collect();
                if !gone.is_empty() {
                    let mut pruned = IndexReport::default();
                    match super::super::prune::prune(
                        self.tree,
                        (self.root, &path),
                        gone,
                        self.index,
                        &mut pruned,
                    )
                    .await
                    {
                        Ok(n) => batch.removed += n,
                        Err(e) => batch.failures.push(format!("prune under {path}: {e}")),
                    }
                    batch.failures.extend(
                        pruned
                            .skipped
                            .into_iter()
                            .map(|s| format!("{}: {}", s.path, s.reason)),
                    );
                }
            }
            // Gone since the batch began: its going has events of its own.
            Err(RenameError::Local { .. }) if local.symlink_metadata().is_err() => {}
            Err(e) => batch
                .failures
                .push(format!("index {}: {e}", local.display())),
        }
    }

    /// Applies a rename on disk to the store; what cannot be applied that way is marked
    /// dirty instead (a source the store does not hold yet, a destination outside the tree).
    /// A `fresh` source (made or written in this batch: the temporary file of rsync, of a
    /// download or of an editor's save) is not renamed in the store at all: the store holds
    /// none of it, or not as it is now; both ends are looked at, and what the store held is
    /// found again by identity.
    pub(super) async fn rename(
        &self,
        (from, to): (&Path, &Path),
        fresh: bool,
        dirty: &mut Vec<PathBuf>,
        batch: &mut WatchBatch,
    ) {
        let (Some(f), Some(t)) = (self.store_path(from), self.store_path(to)) else {
            dirty.push(from.to_owned());
            dirty.push(to.to_owned());
            return;
        };
        // One look-up, not a whole locked rename job that fails: a source the store does not
        // hold is common (a temporary file renamed as soon as written).
        let held = !fresh && matches!(self.tree.find(&f).await, Ok(Some(_)));
        if !held {
            dirty.push(from.to_owned());
            dirty.push(to.to_owned());
            return;
        }
        let renamer = self.renamer(format!("mv {f} {t}"));
        // A destination whose parent the store does not hold (a directory made on disk, or
        // moved where inotify had no watch yet, or held by the store elsewhere) is not made
        // here: made, it could take the place the store's own must be renamed to. Both ends
        // are left dirty, and the source is found again by identity (`pair_by_identity`).
        let mut outcome = renamer.rename(&f, &t).await;
        if let Err(RenameError::DestinationExists { .. }) = outcome {
            // rename(2) replaces its destination: so does the store.
            if let Err(e) = renamer.remove(&t, true).await {
                batch
                    .failures
                    .push(format!("rm -r {t} (replaced on disk): {e}"));
            }
            outcome = renamer.rename(&f, &t).await;
        }
        match outcome {
            Ok(_) => batch.renames += 1,
            // Not in the store yet (created in this batch), or its parent is not: indexed.
            Err(_) => {
                dirty.push(from.to_owned());
                dirty.push(to.to_owned());
            }
        }
    }
}

/// Whether what vanished could turn up on disk under `dirs` (directories to index) or as one
/// of `others` (files to write): if neither holds anything, nothing is read for a pairing
/// that cannot be (an `rm -rf` of hundreds of directories is just that).
fn could_turn_up(dirs: &[PathBuf], others: &[PathBuf]) -> bool {
    !dirs.is_empty()
        || others
            .iter()
            .any(|p| p.symlink_metadata().is_ok_and(|m| m.is_file()))
}

/// Paths whose stored entries one search reads, when looking for what vanished.
const VANISHED_CHUNK: usize = 500;

/// Whether the file at `local` was born (its birth time, where the file system keeps one) no
/// later than `modified` (milliseconds since the Unix epoch).
fn born_by(local: &Path, modified: i64) -> bool {
    let born = local
        .symlink_metadata()
        .and_then(|meta| meta.created())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok());
    born.is_some_and(|born| born <= modified)
}

/// Whether `path` is `dir` or under it. The same as `Path::starts_with` for the absolute,
/// normal paths inotify gives, but a comparison of bytes, not of components: it is asked
/// millions of times in a batch of thousands of renames.
fn is_under(path: &Path, dir: &Path) -> bool {
    let (path, dir) = (
        path.as_os_str().as_encoded_bytes(),
        dir.as_os_str().as_encoded_bytes(),
    );
    path.starts_with(dir)
        && (path.len() == dir.len() || path.get(dir.len()) == Some(&b'/') || dir.ends_with(b"/"))
}

/// Where `path` is once `from` is renamed to `to` (itself if it is not under `from`).
fn moved_by(path: &Path, (from, to): (&Path, &Path)) -> PathBuf {
    match path.strip_prefix(from) {
        Ok(rest) => rebased(to, rest),
        Err(_) => path.to_owned(),
    }
}

/// `to` followed by `rest` (`Path::join` of an empty `rest` would add a trailing slash, and
/// a file's path with one is no file's).
fn rebased(to: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        to.to_owned()
    } else {
        to.join(rest)
    }
}

/// The paths of `dirty` that no other one is above (or equal to), in order.
fn topmost(dirty: Vec<PathBuf>) -> Vec<PathBuf> {
    let all: BTreeSet<PathBuf> = dirty.into_iter().collect();
    all.iter()
        .filter(|p| !p.ancestors().skip(1).any(|a| all.contains(a)))
        .cloned()
        .collect()
}
