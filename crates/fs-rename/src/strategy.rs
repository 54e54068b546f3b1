//! How a rename protects itself from concurrent changes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The locking scheme of a rename: the book's three, and none (for demonstrations).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Tree locks: exclusive on source and destination, shared on their ancestors.
    #[default]
    Tree,
    /// The global lock: one rename at a time in the whole tree.
    Global,
    /// Document locks: one lock per affected document (plus the destination and its parent).
    Document,
    /// No locks at all. Only for showing what goes wrong without them.
    None,
}

impl Strategy {
    /// Returns the lowercase name used on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Tree => "tree",
            Strategy::Global => "global",
            Strategy::Document => "document",
            Strategy::None => "none",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Strategy, String> {
        match s {
            "tree" => Ok(Strategy::Tree),
            "global" => Ok(Strategy::Global),
            "document" => Ok(Strategy::Document),
            "none" => Ok(Strategy::None),
            other => Err(format!(
                "unknown strategy `{other}`: expected tree, global, document or none"
            )),
        }
    }
}
