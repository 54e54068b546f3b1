//! The text of files (`index --content`): which documents need their file read, and the read.
//!
//! The content is read only when a file is new or changed (its size, modification time or
//! identity), or when the store has no text for it yet: an unchanged file is not read again
//! at every run. Without `--content`, the text a document already holds stays as long as its
//! file does not change; a changed file loses it (it would be stale).

use std::io::Read;
use std::path::Path;

use fs_model::FsDoc;

/// The default largest file whose text is stored: 1 MiB.
pub const DEFAULT_CONTENT_MAX: u64 = 1 << 20;

/// What an entry found on disk needs, against what the store holds for its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// The document is up to date.
    Unchanged,
    /// The document must be written (created or rewritten); `read` says whether the file's
    /// text is wanted first.
    Write { read: bool },
    /// Only the text is missing: write the document if the file turns out to hold text.
    Fill,
}

/// Decides what the entry `found` (as the walk saw it, without content) needs, with the text
/// of files up to `content_max` bytes wanted (`None`: no text wanted).
pub(super) fn plan(stored: Option<&FsDoc>, found: &FsDoc, content_max: Option<u64>) -> Plan {
    let wants_text = !found.is_dir() && content_max.is_some_and(|max| found.size <= max);
    match stored {
        Some(stored) if stored.same_entry(found) => {
            if wants_text && stored.content.is_none() {
                Plan::Fill
            } else {
                Plan::Unchanged
            }
        }
        _ => Plan::Write { read: wants_text },
    }
}

/// Whether the document `stored`, once a move puts it at `found`'s path, is up to date:
/// [`plan`] with the path left out.
pub(super) fn up_to_date_once_moved(
    stored: &FsDoc,
    found: &FsDoc,
    content_max: Option<u64>,
) -> bool {
    let wants_text = !found.is_dir() && content_max.is_some_and(|max| found.size <= max);
    stored.kind == found.kind
        && stored.size == found.size
        && stored.modified == found.modified
        && stored.identity == found.identity
        && !(wants_text && stored.content.is_none())
}

/// Reads the file at `local` as text: `None` if it is larger than `max` bytes (it may have
/// grown since the walk), not UTF-8, or unreadable. Blocking.
pub(super) fn read_text(local: &Path, max: u64) -> Option<String> {
    let file = std::fs::File::open(local).ok()?;
    let mut bytes = Vec::new();
    // One byte more than allowed tells a file that grew past the limit.
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 > max {
        return None;
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fs_model::FsPath;

    #[test]
    fn text_is_read_when_new_changed_or_missing_only() {
        let path = FsPath::parse("/a/b.txt").expect("path");
        let found = FsDoc::file(path.clone(), 10, 5);
        let max = Some(DEFAULT_CONTENT_MAX);
        assert_eq!(plan(None, &found, max), Plan::Write { read: true });
        assert_eq!(plan(None, &found, None), Plan::Write { read: false });
        let with_text = found.clone().with_content(Some("0123456789".into()));
        assert_eq!(plan(Some(&with_text), &found, max), Plan::Unchanged);
        assert_eq!(plan(Some(&with_text), &found, None), Plan::Unchanged);
        assert_eq!(plan(Some(&found), &found, max), Plan::Fill);
        let grown = FsDoc::file(path, 11, 6);
        assert_eq!(
            plan(Some(&with_text), &grown, max),
            Plan::Write { read: true }
        );
        assert_eq!(
            plan(Some(&with_text), &grown, Some(10)),
            Plan::Write { read: false }
        );
        let dir = FsDoc::dir(FsPath::parse("/a").expect("path"), 1);
        assert_eq!(plan(None, &dir, max), Plan::Write { read: false });
    }

    #[test]
    fn only_small_utf8_files_are_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = dir.path().join("t");
        std::fs::write(&text, "héllo").expect("write");
        assert_eq!(read_text(&text, 100).as_deref(), Some("héllo"));
        assert_eq!(read_text(&text, 3), None, "too large");
        let binary = dir.path().join("b");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).expect("write");
        assert_eq!(read_text(&binary, 100), None);
        assert_eq!(read_text(&dir.path().join("gone"), 100), None);
    }
}
