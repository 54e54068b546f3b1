//! [`JobKind`]: what a journaled job does to the tree: rename, copy or delete.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a job does to the tree. A journal entry records it, so that recovery knows how to
/// finish the job: a rename rewrites what is left under the source, a copy creates the copies
/// still missing, a delete deletes what is left under the path.
///
/// Serialized as `rename`, `copy`, `delete`; journal entries written before copies and
/// deletes existed have no kind and read as [`JobKind::Rename`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// `mv`: every document at or under the source gets a new path; ids stay.
    #[default]
    Rename,
    /// `cp -r`: every document at or under the source is copied under the destination, with
    /// new ids; the source is untouched.
    Copy,
    /// `rm -r`: every document at or under the path is deleted, deepest first.
    Delete,
}

impl JobKind {
    /// Returns the lowercase name used in JSON: `rename`, `copy` or `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Rename => "rename",
            JobKind::Copy => "copy",
            JobKind::Delete => "delete",
        }
    }

    /// Returns the command that starts such a job: `mv`, `cp` or `rm`.
    pub fn verb(self) -> &'static str {
        match self {
            JobKind::Rename => "mv",
            JobKind::Copy => "cp",
            JobKind::Delete => "rm",
        }
    }

    /// Returns what a job of this kind does to each document, as messages say how far it
    /// got: `moving`, `copying`, `deleting` ("cancelled after copying 200 of 900 documents").
    pub fn writing(self) -> &'static str {
        match self {
            JobKind::Rename => "moving",
            JobKind::Copy => "copying",
            JobKind::Delete => "deleting",
        }
    }

    /// Returns how a job of this kind describes itself in labels and messages: `mv FROM TO`,
    /// `cp FROM TO`, `rm PATH` (a delete's `to` is its path again and is left out).
    pub fn describe(self, from: &str, to: &str) -> String {
        match self {
            JobKind::Delete => format!("rm {from}"),
            kind => format!("{} {from} {to}", kind.verb()),
        }
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_and_write_as_lowercase_words() {
        for kind in [JobKind::Rename, JobKind::Copy, JobKind::Delete] {
            let json = serde_json::to_value(kind).expect("serialize");
            assert_eq!(json, serde_json::json!(kind.as_str()));
            let back: JobKind = serde_json::from_value(json).expect("deserialize");
            assert_eq!(back, kind);
        }
        assert_eq!(JobKind::Delete.describe("/a", "/a"), "rm /a");
        assert_eq!(JobKind::Copy.describe("/a", "/b"), "cp /a /b");
    }
}
