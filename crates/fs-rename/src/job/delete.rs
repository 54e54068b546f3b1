//! The delete: every document at or under the path, deepest first, one depth per bulk
//! request, each delete conditional on the version read.
//!
//! Why one depth per request: a bulk request is not a transaction, and Elasticsearch applies
//! its items shard by shard in any order, so a request holding a directory and its children
//! could delete the directory first and then stop. Sending the children's depth, waiting for
//! every answer, and only then sending their parents' means that whenever the job stops,
//! every document still there has its parent still there: no orphan, and fsck stays clean
//! while recovery finishes the delete.
//!
//! The subtree is read whole before the first delete (a page in path order lists parents
//! before children, the wrong way round), which costs memory in proportion to its size: an
//! id, a version and a document, a few hundred bytes each.

use fs_model::FsPath;
use fs_store::{BulkOp, StoreError};

use super::before_write::Hold;
use super::Renamer;
use crate::error::{RenameError, Result};
use crate::report::{RenameEvent, RenameReport};
use crate::tree::{Entry, FsTree};

impl Renamer {
    /// Deletes everything at or under `path`, deepest first.
    pub(super) async fn delete_all(
        &self,
        hold: Hold<'_>,
        path: &FsPath,
        report: &mut RenameReport,
    ) -> Result<()> {
        let mut entries: Vec<Entry> = Vec::new();
        hold.tree
            .for_each_page(path, self.config.page_size, |page| {
                entries.extend(page);
                Ok(())
            })
            .await?;
        report.found = entries.len() as u64;
        // Deepest first; within a depth in path order, which only makes runs repeatable.
        entries.sort_by(|a, b| {
            b.doc
                .depth
                .cmp(&a.doc.depth)
                .then_with(|| a.doc.path.cmp(&b.doc.path))
        });
        for page in pages_by_depth(&entries, self.config.page_size) {
            self.before_page(hold, page, path, (report.rewritten, report.found))
                .await?;
            self.delete_page(hold.tree, page, path, report).await?;
            self.emit(RenameEvent::Progress {
                done: report.rewritten,
                total: report.found,
            });
        }
        Ok(())
    }

    /// Deletes one page (documents of one depth) in one bulk request.
    async fn delete_page(
        &self,
        tree: &FsTree,
        entries: &[Entry],
        path: &FsPath,
        report: &mut RenameReport,
    ) -> Result<()> {
        let ops = entries
            .iter()
            .map(|entry| BulkOp::Delete {
                id: entry.id.clone(),
                if_version: self.config.versioned.then_some(entry.version),
            })
            .collect();
        let context = format!("deleting documents under `{path}`");
        let answers = self.send_page(tree, ops, &context, report).await?;
        // Every item's fate is tallied before any failure is reported.
        let mut failure = None;
        for answer in answers {
            match answer.result {
                Ok(_) => report.rewritten += 1,
                // Gone already: what this delete wanted. An earlier send of it landed (its
                // answer was lost), or the job a recovery finishes deleted it just before.
                Err(StoreError::Conflict { exists: false, .. } | StoreError::NotFound { .. }) => {
                    report.rewritten += 1
                }
                Err(e) => {
                    failure.get_or_insert((answer.index, e));
                }
            }
        }
        if let Some((i, e)) = failure {
            let path = entries[i].doc.path.to_string();
            return Err(match e {
                StoreError::Conflict { .. } => RenameError::Conflict {
                    path,
                    rewritten: report.rewritten,
                    found: report.found,
                },
                e => RenameError::store(format!("deleting `{path}`"))(e),
            });
        }
        Ok(())
    }
}

/// Splits `entries` (sorted deepest first) into pages of at most `size` documents that never
/// mix two depths.
fn pages_by_depth(entries: &[Entry], size: usize) -> Vec<&[Entry]> {
    let mut pages = Vec::new();
    let mut rest = entries;
    while let Some(first) = rest.first() {
        let depth = first.doc.depth;
        let same = rest
            .iter()
            .take(size.max(1))
            .take_while(|e| e.doc.depth == depth)
            .count();
        let (page, tail) = rest.split_at(same);
        pages.push(page);
        rest = tail;
    }
    pages
}

#[cfg(test)]
mod tests {
    use super::*;
    use fs_model::{DocKind, FsDoc};
    use fs_store::Version;

    fn entry(path: &str) -> Entry {
        Entry {
            id: path.to_owned(),
            version: Version {
                seq_no: 0,
                primary_term: 1,
            },
            doc: FsDoc::new(FsPath::parse(path).expect("path"), DocKind::Dir, 0, 0),
        }
    }

    #[test]
    fn pages_never_mix_depths_and_keep_their_size() {
        let entries: Vec<Entry> = ["/a/b/c", "/a/b/d", "/a/b/e", "/a/b", "/a/x", "/a"]
            .into_iter()
            .map(entry)
            .collect();
        let pages: Vec<Vec<&str>> = pages_by_depth(&entries, 2)
            .into_iter()
            .map(|p| p.iter().map(|e| e.doc.path.as_str()).collect())
            .collect();
        assert_eq!(
            pages,
            vec![
                vec!["/a/b/c", "/a/b/d"],
                vec!["/a/b/e"],
                vec!["/a/b", "/a/x"],
                vec!["/a"]
            ]
        );
        assert!(pages_by_depth(&[], 10).is_empty());
    }
}
