//! Steps 2 and 3 of a run, under the tree lock on the target: what the store holds there
//! read once, matched with the walk (by path, or by the path a move will give it), and what
//! is not up to date written; and the second pass, when the moves left entries to do. When
//! the store holds nothing there, the walk is written as it comes instead, and not kept.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use fs_model::{FsDoc, FsPath};
use fs_store::BulkOp;

use super::content::{self, Plan};
use super::merge::{merge, MergeOptions, Merged};
use super::walk::{self, Walk, Walked};
use super::{local, moves, IndexOptions, IndexProgress, IndexProgressSink, IndexReport, Skipped};
use crate::error::{RenameError, Result};
use crate::ops::{to_source, under_write_lock};
use crate::tree::{Entry, FsTree};

/// What the store holds under the target and the walk did not find up to date (the merge's
/// residue): the entries, each taken out when it is written or found stale; `slot` holds
/// each path not yet matched (the moves' documents are matched by the path they will have,
/// in `locked_index`).
#[derive(Default)]
struct Existing {
    read: Vec<Option<Entry>>,
    slot: HashMap<FsPath, usize>,
}

impl Existing {
    fn new(entries: Vec<Entry>) -> Existing {
        let slot = entries
            .iter()
            .enumerate()
            .map(|(i, entry)| (entry.doc.path.clone(), i))
            .collect();
        Existing {
            read: entries.into_iter().map(Some).collect(),
            slot,
        }
    }

    /// Takes out the entry at `path`, if it is there and not matched yet.
    fn take(&mut self, path: &FsPath) -> Option<Entry> {
        let i = self.slot.remove(path)?;
        self.read.get_mut(i)?.take()
    }
}

/// Where and how one locked pass indexes: the local directory `dir` at `at`, and whether it
/// looks for moves.
#[derive(Clone, Copy)]
pub(super) struct Pass<'a> {
    pub tree: &'a FsTree,
    pub dir: &'a Path,
    pub at: &'a FsPath,
    pub options: &'a IndexOptions,
    pub find_moves: bool,
}

/// [`locked_index`] under the tree lock on `at`, released after it.
pub(super) async fn locked_pass(
    pass: Pass<'_>,
    walk: &mut Walk,
    progress: Option<IndexProgressSink>,
    report: &mut IndexReport,
) -> Result<Locked> {
    let holder = format!("index {} as {}", pass.dir.display(), pass.at);
    let client = pass.options.locks.client(pass.tree, holder);
    let guard = client.lock_tree(pass.at).await?;
    let work = locked_index(pass, walk, progress, report);
    under_write_lock(pass.tree, guard, work).await
}

/// What the locked pass found and left to do.
pub(super) struct Locked {
    /// The moves found, to be made after the pass.
    pub moves: Vec<moves::Planned>,
    /// For each move, its source's subtree as read here, where the rename can use it.
    pub known: Vec<Option<Vec<Entry>>>,
    /// Entries the moves will not bring up to date (new or changed inside what moves): a
    /// second pass is needed after them.
    pub deferred: bool,
    /// Paths the store holds after the pass, outside what moves (for the moves to know
    /// which parents are there); empty after a streamed pass, which finds no moves.
    pub present: HashSet<FsPath>,
    /// Documents not on disk (at the path the moves will give them).
    pub stale: Vec<Entry>,
}

impl Locked {
    /// What an interrupted pass leaves: nothing to do, nothing found stale.
    fn nothing() -> Locked {
        Locked {
            moves: Vec::new(),
            known: Vec::new(),
            deferred: false,
            present: HashSet::new(),
            stale: Vec::new(),
        }
    }
}

/// Steps 2 and 3, under the tree lock on `at`: reads what the store holds under `at`,
/// merged with the walk (`merge.rs`): what is up to date is counted and forgotten, and the
/// rest, the residue, is matched here. With `find_moves`, the moves are found in the
/// residue. Documents the moves will carry are matched with the walk at the path they will
/// have, and left to the moves; entries new or changed in the moves' area are left to a
/// second pass; everything else is created and updated here, with the text of the files that
/// need it read (see `content.rs`).
///
/// When the store holds nothing under `at` (a first index), there is nothing to match, no
/// move to find and nothing stale: the walk is then written as it comes, chunk by chunk,
/// and neither it nor the paths written are kept (see [`streamed_index`]).
async fn locked_index(
    pass: Pass<'_>,
    walk: &mut Walk,
    progress: Option<IndexProgressSink>,
    report: &mut IndexReport,
) -> Result<Locked> {
    let Pass {
        tree, at, options, ..
    } = pass;
    let merged = {
        let stopping = || options.stopping();
        let mut told = |walked: u64, report: &IndexReport| tell(&progress, walked, report);
        let how = MergeOptions {
            content: options.content,
            stopping: &stopping,
            tell: &mut told,
        };
        merge(tree, at, walk, how, report).await?
    };
    let residue = match merged {
        Merged::Nothing => {
            tracing::debug!(%at, "nothing held under the target: the walk is written as it comes");
            let matching = Matching::new(Existing::default(), Vec::new(), at, false);
            return streamed_index(pass, walk, matching, progress, report).await;
        }
        Merged::Stopped => return interrupted(tree, report).await,
        Merged::Residue(residue) => residue,
    };
    let existing = Existing::new(residue.stored);
    let walked = residue.walked;
    let planned = if pass.find_moves {
        moves::find_moves((pass.dir, at), existing.read.iter().flatten(), &walked)
    } else {
        Vec::new()
    };
    // What the merge forgot may lie inside a move's source: a directory made again where
    // one moved away, with a file moved back into it. The rename carries that file's
    // document away. It does not go unnoticed: the directory at the source's path is then
    // another file than the store's, so it is in the residue, inside the move's area, and
    // defers the pass; the second pass puts back what the rename carried away (see
    // `a_file_moved_back_into_a_directory_made_again` in `tests/indexing.rs`).
    let mut matching = Matching::new(existing, planned, at, true);
    for batch in walked.chunks(options.batch_size.max(1)) {
        if options.stopping() {
            return interrupted(tree, report).await;
        }
        index_batch(pass, &mut matching, batch, report).await?;
        tell(&progress, residue.seen, report);
    }
    tree.refresh().await?;
    Ok(matching.finish(tree, report))
}

/// [`locked_index`] of a target under which the store holds nothing: the walk taken chunk
/// by chunk and written batch by batch as it comes (parents first, as walked), nothing of
/// it kept; the walk runs a few chunks ahead. Memory stays that of a batch or two, whatever
/// the size of the tree.
async fn streamed_index(
    pass: Pass<'_>,
    walk: &mut Walk,
    mut matching: Matching,
    progress: Option<IndexProgressSink>,
    report: &mut IndexReport,
) -> Result<Locked> {
    let batch_size = pass.options.batch_size.max(1);
    let mut pending: Vec<Walked> = Vec::new();
    let mut ended = false;
    let mut walked_so_far = 0u64;
    loop {
        if pass.options.stopping() {
            return interrupted(pass.tree, report).await;
        }
        // Whole batches, whatever the walk's chunks: `batch_size` says what one bulk
        // request holds.
        while !ended && pending.len() < batch_size {
            match walk.next_chunk().await? {
                Some(chunk) if pending.is_empty() => pending = chunk,
                Some(chunk) => pending.extend(chunk),
                None => ended = true,
            }
        }
        if pending.is_empty() {
            break;
        }
        let take = pending.len().min(batch_size);
        walked_so_far += take as u64;
        index_batch(pass, &mut matching, &pending[..take], report).await?;
        pending.drain(..take);
        tell(&progress, walked_so_far, report);
    }
    pass.tree.refresh().await?;
    Ok(matching.finish(pass.tree, report))
}

/// What a pass told to stop leaves (see [`IndexOptions::stop`]), what it wrote made visible.
async fn interrupted(tree: &FsTree, report: &mut IndexReport) -> Result<Locked> {
    report.interrupted = true;
    tree.refresh().await?;
    Ok(Locked::nothing())
}

/// Matches one batch of the walk and writes what it calls for, in one bulk request.
async fn index_batch(
    pass: Pass<'_>,
    matching: &mut Matching,
    batch: &[Walked],
    report: &mut IndexReport,
) -> Result<()> {
    let Pass {
        tree,
        dir,
        at,
        options,
        ..
    } = pass;
    let writes = matching.writes_for(batch, options.content, report);
    // The files whose text is wanted are read together, off the runtime's threads,
    // before the batch is written.
    let texts = read_texts(dir, at, &writes, options.content).await?;
    matching.write(tree, at, writes, texts, report).await
}

/// Tells `progress`, if any, how far the pass is.
fn tell(progress: &Option<IndexProgressSink>, walked: u64, report: &IndexReport) {
    if let Some(sink) = progress {
        sink(IndexProgress {
            walked,
            written: report.created + report.updated,
        });
    }
}

/// A write the walk calls for: the entry as read (none for a new one), the document as found
/// on disk, and what to do with its text.
type Write = (Option<Entry>, FsDoc, Plan);

/// The walk matched with what the store holds, batch by batch, under the tree lock.
struct Matching {
    existing: Existing,
    planned: Vec<moves::Planned>,
    /// The documents the moves carry, by the path they will have: where they are in what
    /// was read (at their old path), and whether the walk found them there.
    carried: HashMap<FsPath, (usize, bool)>,
    deferred: bool,
    /// The paths up to date in the store, for the moves (see [`Locked::present`]); `None`
    /// when not remembered: a streamed pass has no moves, and would hold every path.
    present: Option<HashSet<FsPath>>,
    /// Where the walk could not read: what the store holds at and under these paths is
    /// unknown, and is not stale.
    unread: Vec<FsPath>,
}

impl Matching {
    /// Sets the documents the moves `planned` carry apart from the rest of `existing`;
    /// `remember` says whether the paths written are kept, for the moves.
    fn new(
        mut existing: Existing,
        planned: Vec<moves::Planned>,
        at: &FsPath,
        remember: bool,
    ) -> Matching {
        let mut carried: HashMap<FsPath, (usize, bool)> = HashMap::new();
        if !planned.is_empty() {
            carried.reserve(existing.slot.len());
            let pairs = || planned.iter().map(|m| (&m.from, &m.to));
            existing.slot.retain(|path, &mut i| {
                let to = moves::after(pairs(), path);
                if to == *path {
                    return true;
                }
                carried.insert(to, (i, false));
                false
            });
        }
        Matching {
            existing,
            planned,
            carried,
            deferred: false,
            present: remember.then(|| HashSet::from([at.clone()])),
            unread: Vec::new(),
        }
    }

    /// Notes that the store holds `path` up to date, if the paths are remembered.
    fn note_present(&mut self, path: FsPath) {
        if let Some(present) = &mut self.present {
            present.insert(path);
        }
    }

    /// Whether `path` is inside a move's source or target.
    fn in_area(&self, path: &FsPath) -> bool {
        self.planned
            .iter()
            .any(|m| path.is_inside(&m.from) || path.is_inside(&m.to))
    }

    /// What each entry of `batch` needs: counted in `report`, matched with what was read,
    /// left to the moves, or to be written.
    fn writes_for(
        &mut self,
        batch: &[Walked],
        content: Option<u64>,
        report: &mut IndexReport,
    ) -> Vec<Write> {
        let mut writes: Vec<Write> = Vec::new();
        for item in batch {
            let doc = match item {
                Walked::Doc(doc, _) => doc,
                Walked::Symlink(s) => {
                    report.symlinks += 1;
                    report.skip(s.clone());
                    continue;
                }
                Walked::Skipped(s) => {
                    report.skip(s.clone());
                    continue;
                }
                Walked::Unread { skipped, at } => {
                    report.not_read(skipped.clone());
                    self.unread.push(at.clone());
                    continue;
                }
            };
            if doc.is_dir() {
                report.dirs += 1;
            } else {
                report.files += 1;
                report.bytes += doc.size;
            }
            if let Some((i, found)) = self.carried.get_mut(&doc.path) {
                *found = true;
                let as_read = self.existing.read.get(*i).and_then(Option::as_ref);
                if as_read.is_some_and(|e| content::up_to_date_once_moved(&e.doc, doc, content)) {
                    report.unchanged += 1;
                } else {
                    self.deferred = true;
                }
                continue;
            }
            if self.in_area(&doc.path) {
                self.deferred = true;
                continue;
            }
            let entry = self.existing.take(&doc.path);
            let plan = content::plan(entry.as_ref().map(|e| &e.doc), doc, content);
            if plan == Plan::Unchanged {
                report.unchanged += 1;
                self.note_present(doc.path.clone());
                continue;
            }
            writes.push((entry, doc.clone(), plan));
        }
        writes
    }

    /// Writes `writes` (with their `texts`) in one bulk request; counts each in `report`.
    async fn write(
        &mut self,
        tree: &FsTree,
        at: &FsPath,
        writes: Vec<Write>,
        texts: Vec<Option<String>>,
        report: &mut IndexReport,
    ) -> Result<()> {
        let mut ops = Vec::new();
        let mut paths = Vec::new();
        for ((entry, doc, plan), text) in writes.into_iter().zip(texts) {
            let had_text = text.is_some();
            let doc = match (plan, entry) {
                // The file holds no text: its document stays as it is.
                (Plan::Fill, _) if !had_text => {
                    report.unchanged += 1;
                    self.note_present(doc.path);
                    continue;
                }
                (_, Some(entry)) => {
                    let doc = doc.with_content(text);
                    ops.push(BulkOp::Index {
                        source: to_source(tree, &entry.id, &doc)?,
                        id: entry.id,
                        if_version: Some(entry.version),
                    });
                    doc
                }
                (_, None) => {
                    let id = FsDoc::new_id();
                    let doc = doc.with_content(text);
                    ops.push(BulkOp::Create {
                        source: to_source(tree, &id, &doc)?,
                        id,
                    });
                    doc
                }
            };
            let created = matches!(ops.last(), Some(BulkOp::Create { .. }));
            paths.push((doc.path, created, had_text));
        }
        if ops.is_empty() {
            return Ok(());
        }
        let context = format!("indexing under `{at}`");
        let results = tree
            .store()
            .bulk(tree.index(), ops)
            .await
            .map_err(RenameError::store(context))?;
        for ((path, created, had_text), result) in paths.into_iter().zip(results) {
            match result {
                Ok(_) => {
                    if created {
                        report.created += 1;
                    } else {
                        report.updated += 1;
                    }
                    report.texts += u64::from(had_text);
                    self.note_present(path);
                }
                Err(e) => {
                    report.failed += 1;
                    report.skip(Skipped {
                        path: path.to_string(),
                        reason: format!("{REFUSED}: {e}"),
                    });
                }
            }
        }
        Ok(())
    }

    /// What the pass leaves: the moves, with what they carry as read; what is not on disk
    /// (what is left of the store's documents, those the moves carry at the path they will
    /// have).
    fn finish(self, tree: &FsTree, report: &mut IndexReport) -> Locked {
        let Existing { mut read, slot } = self.existing;
        let mut stale: Vec<Entry> = slot.into_values().filter_map(|i| read[i].take()).collect();
        // What the moves carry stays in `read`, in the order read: the rest is taken out.
        let mut moving = vec![false; read.len()];
        for (to, (i, found)) in self.carried {
            moving[i] = true;
            if let (false, Some(entry)) = (found, &read[i]) {
                stale.push(Entry {
                    doc: placed(entry.doc.clone(), to),
                    ..entry.clone()
                });
            }
        }
        // What lies where the walk could not read may well be on disk: never stale, so never
        // pruned (a watcher run by a user who cannot read a directory, or meeting one whose
        // mode changed, would otherwise delete what it cannot see).
        if !self.unread.is_empty() {
            let before = stale.len();
            stale.retain(|e| !self.unread.iter().any(|u| e.doc.path.is_inside(u)));
            report.kept_unread += (before - stale.len()) as u64;
        }
        let carried_as_read = read
            .into_iter()
            .zip(moving)
            .filter_map(|(entry, moving)| entry.filter(|_| moving))
            .collect();
        let known = known_subtrees(tree, &self.planned, carried_as_read);
        Locked {
            moves: self.planned,
            known,
            deferred: self.deferred,
            present: self.present.unwrap_or_default(),
            stale,
        }
    }
}

/// For each of `planned`, the documents of its source's subtree as `existing` holds them,
/// for the rename to write without reading them again ([`Renamer`] counts them under its
/// locks, and reads them if anything changed): only for a move whose subtree no move before
/// it touches (else the versions read are not those it will find), and only on a store that
/// makes several writes in one transaction, where the rename's writes of known documents
/// cost what its pipelined scan does; on Elasticsearch the scan overlaps its reads with its
/// writes, and reading again costs less than writing one page at a time.
///
/// [`Renamer`]: crate::Renamer
fn known_subtrees(
    tree: &FsTree,
    planned: &[moves::Planned],
    carried: Vec<Entry>,
) -> Vec<Option<Vec<Entry>>> {
    let mut known: Vec<Option<Vec<Entry>>> = vec![None; planned.len()];
    if !tree.store().chains_bulk() {
        return known;
    }
    let touches = |a: &FsPath, b: &FsPath| a.is_inside(b) || b.is_inside(a);
    for (k, m) in planned.iter().enumerate() {
        let untouched = planned[..k]
            .iter()
            .all(|e| !touches(&m.from, &e.from) && !touches(&m.from, &e.to));
        if untouched {
            // A directory's move carries nearly all of them, a file's one.
            let room = if k == 0 { carried.len() } else { 0 };
            known[k] = Some(Vec::with_capacity(room));
        }
    }
    // Each document goes with the first move whose source holds it: an untouched move's
    // documents are no earlier move's.
    for entry in carried {
        let first = planned
            .iter()
            .position(|m| entry.doc.path.is_inside(&m.from));
        if let Some(Some(entries)) = first.and_then(|k| known.get_mut(k)) {
            entries.push(entry);
        }
    }
    // In path order, as a scan writes them (the index on paths is updated in order): the
    // order read, on a store that reads in that order.
    for entries in known.iter_mut().flatten() {
        if !entries.is_sorted_by(|a, b| a.doc.path <= b.doc.path) {
            entries.sort_unstable_by(|a, b| a.doc.path.cmp(&b.doc.path));
        }
    }
    known
}

/// `doc` as a rename puts it at `path`: the path and what derives from it changed, the rest
/// kept.
fn placed(doc: FsDoc, path: FsPath) -> FsDoc {
    FsDoc {
        parent: path.parent(),
        name: path.name().to_owned(),
        depth: path.depth(),
        path,
        ..doc
    }
}

/// The reason given for an entry the store refused to write.
pub(super) const REFUSED: &str = "the store refused it";

/// The pass after the moves, when they left entries to bring up to date: the whole target
/// walked and read again under its tree lock, and what is not up to date written. Returns what is
/// stale. Its counts are added to `report` (what the first pass wrote, this one finds
/// unchanged).
pub(super) async fn second_pass(
    tree: &FsTree,
    (dir, at): (&Path, &FsPath),
    options: &IndexOptions,
    report: &mut IndexReport,
) -> Result<Vec<Entry>> {
    let mut again = IndexReport::default();
    let pass = Pass {
        tree,
        dir,
        at,
        options,
        find_moves: false,
    };
    // The first pass took the walk as it came, and kept only what differed: the disk is
    // walked again, as it is after the moves.
    let mut walk = Walk::start(dir, at);
    let locked = locked_pass(pass, &mut walk, None, &mut again).await?;
    let first_wrote = report.created + report.updated;
    report.created += again.created;
    report.updated += again.updated;
    report.texts += again.texts;
    report.failed += again.failed;
    report.unchanged = again.unchanged.saturating_sub(first_wrote);
    for skipped in again.skipped {
        if skipped.is_refused() {
            report.skip(skipped);
        }
    }
    Ok(locked.stale)
}

/// Reads the text of each planned file that wants it, on the blocking pool; `None` for the
/// others and for files that hold no text.
async fn read_texts(
    dir: &Path,
    at: &FsPath,
    planned: &[Write],
    content: Option<u64>,
) -> Result<Vec<Option<String>>> {
    let Some(max) = content else {
        return Ok(vec![None; planned.len()]);
    };
    let locals: Vec<Option<PathBuf>> = planned
        .iter()
        .map(|(_, doc, plan)| match plan {
            Plan::Write { read: true } | Plan::Fill => walk::local_path(dir, at, &doc.path),
            _ => None,
        })
        .collect();
    if locals.iter().all(Option::is_none) {
        return Ok(vec![None; planned.len()]);
    }
    tokio::task::spawn_blocking(move || {
        locals
            .iter()
            .map(|local| local.as_deref().and_then(|l| content::read_text(l, max)))
            .collect()
    })
    .await
    .map_err(|e| local(dir, &format!("reading the files' text failed: {e}")))
}
