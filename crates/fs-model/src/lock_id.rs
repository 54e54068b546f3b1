//! Ids of lock documents.
//!
//! The book uses the locked path itself as the lock document's id (`/fs/lock/%2Fclinton`), so
//! that every client agrees on where the lock for a path lives. Elasticsearch refuses ids longer
//! than 512 bytes, while paths may be up to 4096, so a longer path gets a hashed id instead.
//!
//! The hashed form is `sha256:` followed by the 64 lowercase hex digits of the SHA-256 of the
//! path's UTF-8 bytes. It cannot be mistaken for a path id (those start with `/`), for the global
//! lock (`global`) or for a document-lock id (a tree document's UUID). The full path is always
//! kept in the lock document's `path` field, so a hashed lock can be read back and listed.

use sha2::{Digest, Sha256};

use crate::path::FsPath;

/// The longest `_id` Elasticsearch accepts, in bytes.
pub const MAX_ID_BYTES: usize = 512;

/// The id of the global lock document, as in the book (`PUT /fs/lock/global/_create`).
pub const GLOBAL_LOCK_ID: &str = "global";

/// The prefix of hashed lock ids.
pub const HASHED_ID_PREFIX: &str = "sha256:";

/// Returns the id of the tree-lock document for `path`: the path itself when it is at most
/// [`MAX_ID_BYTES`] bytes long, else its hashed form.
pub fn tree_lock_id(path: &FsPath) -> String {
    let s = path.as_str();
    if s.len() <= MAX_ID_BYTES {
        return s.to_owned();
    }
    let digest = Sha256::digest(s.as_bytes());
    let mut id = String::with_capacity(HASHED_ID_PREFIX.len() + 64);
    id.push_str(HASHED_ID_PREFIX);
    for byte in digest {
        id.push(char::from(HEX[usize::from(byte >> 4)]));
        id.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    id
}

/// Returns true if `id` is a hashed tree-lock id rather than a path.
pub fn is_hashed_lock_id(id: &str) -> bool {
    id.starts_with(HASHED_ID_PREFIX)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds `/` + `head` (200 bytes of `fill`) + `/` + ... so that the component limit never
    /// trips, then appends `tail` as the last component.
    fn path(components: &[String]) -> FsPath {
        FsPath::parse(&format!("/{}", components.join("/"))).expect("test path")
    }

    #[test]
    fn short_paths_are_their_own_id() {
        let p = FsPath::parse("/clinton").expect("path");
        assert_eq!(tree_lock_id(&p), "/clinton");
        // 1 + 200 + 1 + 200 + 1 + 109 = 512 bytes.
        let at_limit = path(&["a".repeat(200), "b".repeat(200), "c".repeat(109)]);
        assert_eq!(at_limit.as_str().len(), 512);
        assert_eq!(tree_lock_id(&at_limit), at_limit.as_str());
    }

    #[test]
    fn long_paths_are_hashed() {
        let over = path(&["a".repeat(200), "b".repeat(200), "c".repeat(110)]);
        assert_eq!(over.as_str().len(), 513);
        let id = tree_lock_id(&over);
        assert!(is_hashed_lock_id(&id));
        assert_eq!(id.len(), HASHED_ID_PREFIX.len() + 64);
        assert!(id.len() <= MAX_ID_BYTES);
        assert_eq!(id, tree_lock_id(&over), "deterministic");
        let other = path(&["a".repeat(200), "b".repeat(200), "d".repeat(110)]);
        assert_ne!(id, tree_lock_id(&other));
    }

    #[test]
    fn the_limit_counts_bytes_not_characters() {
        // 100 two-byte characters make a 200-byte component.
        let e = "é".repeat(100);
        // 1 + 200 + 1 + 200 + 1 + 109 = 512 bytes in 1 + 100 + 1 + 100 + 1 + 109 = 312 chars.
        let at_limit = path(&[e.clone(), e.clone(), "x".repeat(109)]);
        assert_eq!(at_limit.as_str().len(), 512);
        assert_eq!(tree_lock_id(&at_limit), at_limit.as_str());
        // 511 ASCII bytes and one `é`: 512 characters but 513 bytes, so hashed.
        let straddles = path(&[
            "a".repeat(200),
            "b".repeat(200),
            format!("{}é", "c".repeat(108)),
        ]);
        assert_eq!(straddles.as_str().chars().count(), 512);
        assert_eq!(straddles.as_str().len(), 513);
        assert!(is_hashed_lock_id(&tree_lock_id(&straddles)));
        // A 3-byte character crossing the limit.
        let cjk = path(&[
            "a".repeat(200),
            "b".repeat(200),
            format!("{}日", "c".repeat(108)),
        ]);
        assert_eq!(cjk.as_str().len(), 514);
        assert!(is_hashed_lock_id(&tree_lock_id(&cjk)));
    }

    #[test]
    fn known_digest() {
        // Computed independently: Python's hashlib.sha256 of the same 603-byte path.
        let p = path(&["a".repeat(200), "b".repeat(200), "c".repeat(200)]);
        assert_eq!(
            tree_lock_id(&p),
            "sha256:47cab5159b4fc0a3b91216533e83ad6338edc367e1ea55bba516b2b853e4a65e"
        );
    }
}
