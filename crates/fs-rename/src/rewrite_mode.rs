//! Where a rename's documents are rewritten: by the client, page by page, or by the server in
//! one task (`_update_by_query`), under the same locks, check, journal and release.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a rename's documents are rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rewrite {
    /// By the server where it can (it runs painless) and the rename moves more than a page of
    /// documents (more than its check reads); by the client otherwise. A server that turns
    /// out not to run painless leaves the rename to the client.
    #[default]
    Auto,
    /// By the server, whatever the size; a store that cannot is an error.
    Server,
    /// By the client, page by page: every document read, rewritten and sent back.
    Client,
}

impl Rewrite {
    /// Returns the lowercase name used on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Rewrite::Auto => "auto",
            Rewrite::Server => "server",
            Rewrite::Client => "client",
        }
    }
}

impl fmt::Display for Rewrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Rewrite {
    type Err = String;

    fn from_str(s: &str) -> Result<Rewrite, String> {
        match s {
            "auto" => Ok(Rewrite::Auto),
            "server" => Ok(Rewrite::Server),
            "client" => Ok(Rewrite::Client),
            other => Err(format!(
                "unknown rewrite `{other}`: expected auto, server or client"
            )),
        }
    }
}
