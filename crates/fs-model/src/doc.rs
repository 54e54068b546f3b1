//! [`FsDoc`]: the document that stands for one file or directory in the tree index.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{PathError, Result};
use crate::path::FsPath;

/// Whether a document is a file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DocKind {
    /// A regular file (or anything that is not a directory).
    File,
    /// A directory: other documents may name it as their `parent`.
    Dir,
}

/// Which file on disk a document stands for: its device and inode, as `stat` reports them.
/// `fsrename index` records it, and a later run that finds the same identity at another path
/// (its old path gone) renames the document instead of deleting it and creating a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Identity {
    /// The device (`st_dev`).
    pub dev: u64,
    /// The inode (`st_ino`).
    pub ino: u64,
}

/// One file or directory, as stored in the tree index.
///
/// `parent`, `name` and `depth` are derived from `path` and stored so that listing a directory
/// and filtering by depth are cheap term queries. A document's store id is not its path: it is
/// minted once ([`FsDoc::new_id`]) and kept, so a rename is an update of these fields and never
/// a delete plus a create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FsDoc {
    /// The full path.
    pub path: FsPath,
    /// The parent directory's path; `None` only for the root.
    pub parent: Option<FsPath>,
    /// The last path component; empty for the root.
    pub name: String,
    /// The number of components in `path`; 0 for the root.
    pub depth: usize,
    /// File or directory.
    pub kind: DocKind,
    /// Size in bytes (0 for directories).
    #[serde(default)]
    pub size: u64,
    /// Last modification, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub modified: i64,
    /// The file on disk it was indexed from, where the walk could tell (see [`Identity`]).
    /// Kept by renames, dropped by copies (a copy is no file on disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// The text of the file, for a search by words (`fsrename index --content` stores it for
    /// small UTF-8 files). Kept by renames and copies, which never rewrite it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// The `kind` of a copy's claim on an id ([`FsDoc::claim`]).
const CLAIM_KIND: &str = "claim";

impl FsDoc {
    /// Returns a document for `path` with the derived fields filled in.
    pub fn new(path: FsPath, kind: DocKind, size: u64, modified: i64) -> FsDoc {
        FsDoc {
            parent: path.parent(),
            name: path.name().to_owned(),
            depth: path.depth(),
            path,
            kind,
            size,
            modified,
            identity: None,
            content: None,
        }
    }

    /// Returns this document with the identity of the file it was indexed from.
    pub fn with_identity(mut self, identity: Option<Identity>) -> FsDoc {
        self.identity = identity;
        self
    }

    /// Returns this document with `content` as the text of its file.
    pub fn with_content(mut self, content: Option<String>) -> FsDoc {
        self.content = content;
        self
    }

    /// Returns true if `other` describes the same entry on disk the same way: everything but
    /// the content, which is read only when the entry is new or changed.
    pub fn same_entry(&self, other: &FsDoc) -> bool {
        self.path == other.path
            && self.parent == other.parent
            && self.name == other.name
            && self.depth == other.depth
            && self.kind == other.kind
            && self.size == other.size
            && self.modified == other.modified
            && self.identity == other.identity
    }

    /// Returns a directory document for `path` (size 0).
    pub fn dir(path: FsPath, modified: i64) -> FsDoc {
        FsDoc::new(path, DocKind::Dir, 0, modified)
    }

    /// Returns a file document for `path`.
    pub fn file(path: FsPath, size: u64, modified: i64) -> FsDoc {
        FsDoc::new(path, DocKind::File, size, modified)
    }

    /// Mints a new stable document id (a random UUID, see [`crate::entropy`]), never derived
    /// from the path.
    pub fn new_id() -> String {
        crate::entropy::uuid()
    }

    /// Returns the id of the copy that the copy job `job_id` makes of the document
    /// `source_id`: a name-based (version 5) UUID of the two, so the same job copying the same
    /// document always writes the same id. That makes a copy idempotent: a job, or the
    /// recovery that finishes it, that creates a copy already there gets a conflict and knows
    /// the copy is its own, instead of adding a second one under a fresh random id.
    pub fn copy_id(job_id: &str, source_id: &str) -> String {
        // The length prefix keeps the pair unambiguous whatever characters the ids contain.
        let name = format!("fsrename-copy:{}:{job_id}:{source_id}", job_id.len());
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes()).to_string()
    }

    /// Returns the source of a *claim*: what a copy job writes first at a copy's id, with
    /// `_create`, before it writes the copy itself there conditionally on the claim's version.
    /// A claim has no `path`, so it is no part of the tree (no path search finds it); its
    /// `kind` is `claim` and its `name` the job's id.
    ///
    /// Why two writes: a `_create` cannot be fenced. A copy job paused past its lease (a GC
    /// pause, a stopped process) may send its creates after a recovery has finished the copy
    /// and another job has deleted it, and a create of a free id succeeds. Sent as claims,
    /// such late creates add only invisible claims, which recovery sweeps; the copies become
    /// visible only through conditional writes, which fail once anything has changed.
    pub fn claim(job_id: &str) -> serde_json::Value {
        serde_json::json!({ "kind": CLAIM_KIND, "name": job_id })
    }

    /// Returns the job id of a claim ([`FsDoc::claim`]), or `None` if `source` is not one.
    pub fn claim_job(source: &serde_json::Value) -> Option<&str> {
        if source.get("path").is_some() || source.get("kind")?.as_str()? != CLAIM_KIND {
            return None;
        }
        source.get("name")?.as_str()
    }

    /// Returns true if `parent`, `name` and `depth` agree with `path`.
    pub fn is_consistent(&self) -> bool {
        self.parent == self.path.parent()
            && self.name == self.path.name()
            && self.depth == self.path.depth()
    }

    /// Returns this document moved by a rename of `from` to `to`: a new path with `parent`,
    /// `name` and `depth` recomputed; kind, size, modification time, identity and content
    /// kept.
    ///
    /// # Errors
    /// [`PathError::NotInside`] if the document is not inside `from`; a length error if the new
    /// path is too long.
    pub fn renamed(&self, from: &FsPath, to: &FsPath) -> Result<FsDoc, PathError> {
        let path = self.path.rebase(from, to)?;
        Ok(FsDoc {
            parent: path.parent(),
            name: path.name().to_owned(),
            depth: path.depth(),
            path,
            ..self.clone()
        })
    }

    /// Returns true for a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == DocKind::Dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_fields_and_json_shape() {
        let path = FsPath::parse("/clinton/projects/README.txt").expect("path");
        let doc = FsDoc::file(path, 42, 1_700_000_000_000);
        assert!(doc.is_consistent());
        let json = serde_json::to_value(&doc).expect("serialize");
        assert_eq!(
            json,
            serde_json::json!({
                "path": "/clinton/projects/README.txt", "parent": "/clinton/projects",
                "name": "README.txt", "depth": 3, "kind": "file", "size": 42,
                "modified": 1_700_000_000_000_i64
            })
        );
        let back: FsDoc = serde_json::from_value(json).expect("deserialize");
        assert_eq!(back, doc);
    }

    #[test]
    fn renamed_keeps_everything_but_the_place() {
        let identity = Some(Identity { dev: 1, ino: 2 });
        let doc = FsDoc::file(FsPath::parse("/clinton/a/b.txt").expect("path"), 7, 9)
            .with_identity(identity)
            .with_content(Some("hello".to_owned()));
        let from = FsPath::parse("/clinton").expect("path");
        let to = FsPath::parse("/gormley/c").expect("path");
        let moved = doc.renamed(&from, &to).expect("rename");
        assert_eq!(moved.path.as_str(), "/gormley/c/a/b.txt");
        assert_eq!(moved.depth, 4);
        assert_eq!(
            (moved.size, moved.modified, moved.kind, moved.identity),
            (7, 9, DocKind::File, identity)
        );
        assert_eq!(moved.content.as_deref(), Some("hello"));
        assert!(moved.same_entry(&moved.clone().with_content(None)));
        assert!(!moved.same_entry(&doc));
        assert!(moved.is_consistent());
    }

    #[test]
    fn a_claim_is_no_document_of_the_tree_and_names_its_job() {
        let claim = FsDoc::claim("job-1");
        assert_eq!(FsDoc::claim_job(&claim), Some("job-1"));
        assert!(claim.get("path").is_none(), "no path search finds a claim");
        assert!(serde_json::from_value::<FsDoc>(claim).is_err());
        let doc = FsDoc::file(FsPath::parse("/a").expect("path"), 1, 2);
        let source = serde_json::to_value(&doc).expect("json");
        assert_eq!(FsDoc::claim_job(&source), None);
    }

    #[test]
    fn copy_ids_depend_on_the_job_and_the_source_only() {
        let a = FsDoc::copy_id("job-1", "doc-1");
        assert_eq!(a, FsDoc::copy_id("job-1", "doc-1"), "deterministic");
        assert_ne!(
            a,
            FsDoc::copy_id("job-2", "doc-1"),
            "another job, another copy"
        );
        assert_ne!(
            a,
            FsDoc::copy_id("job-1", "doc-2"),
            "another source, another copy"
        );
        // The split between the two ids is part of the name.
        assert_ne!(FsDoc::copy_id("a:b", "c"), FsDoc::copy_id("a", "b:c"));
        assert_eq!(
            uuid::Uuid::parse_str(&a).expect("uuid").get_version_num(),
            5
        );
    }

    #[test]
    fn inconsistent_documents_are_spotted() {
        let mut doc = FsDoc::dir(FsPath::parse("/a/b").expect("path"), 0);
        doc.depth = 5;
        assert!(!doc.is_consistent());
    }
}
