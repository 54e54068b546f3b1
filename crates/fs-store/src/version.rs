//! [`Version`]: a document's version, the value every conditional write and every conflict
//! carries. At the bottom of the crate: errors and the values that cross the store trait both
//! name it.

use serde::{Deserialize, Serialize};

/// A document's version as Elasticsearch reports it: every write gives the document a new
/// `seq_no`; `primary_term` changes when a new primary shard takes over. Conditional writes pass
/// both back (`if_seq_no`, `if_primary_term`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Version {
    /// The sequence number of the write that produced this version.
    pub seq_no: i64,
    /// The primary term under which it was written.
    pub primary_term: i64,
}
