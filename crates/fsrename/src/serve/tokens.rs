//! The service's tokens: who a request's secret makes it ([`Caller`]), from a token file
//! (`serve --tokens FILE`), from `FSRENAME_TOKEN` (one token that may do everything), or from
//! nothing (a service on loopback that needs no token: everyone may do everything).
//!
//! A token file holds no secret: each entry names a token, gives the SHA-256 of its secret in
//! hex, and its grants (TOML):
//!
//! ```toml
//! [[token]]
//! name = "alice"
//! sha256 = "…64 hex digits…"
//! grants = [
//!   { path = "/home/alice", can = ["read", "rename", "copy", "delete"] },
//!   { path = "/shared", can = ["read"] },
//! ]
//! ```
//!
//! A file that does not parse, a hash that is not 64 hex digits, an unknown capability, a
//! relative path, or two tokens of one name or one hash are refused, with the line. The file
//! is read again on SIGHUP ([`Keys::reload`]): a file refused then leaves the tokens in force
//! as they were.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use fs_model::FsPath;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::Spanned;

use super::grants::{Caller, Capability, Grant};

/// The name `FSRENAME_TOKEN`'s token goes by (in the audit trail, say).
pub const ENV_TOKEN_NAME: &str = "FSRENAME_TOKEN";

/// The name of the caller of a service that needs no token.
pub const ANONYMOUS: &str = "anonymous";

/// One token: its name, the SHA-256 of its secret, its grants.
#[derive(Debug, Clone)]
struct Token {
    sha256: [u8; 32],
    caller: Caller,
}

/// A set of tokens.
#[derive(Debug, Clone, Default)]
pub struct TokenSet {
    tokens: Vec<Token>,
}

impl TokenSet {
    /// The one token `secret` (`FSRENAME_TOKEN`), which may do everything.
    pub fn everything_for(secret: &str) -> TokenSet {
        TokenSet {
            tokens: vec![Token {
                sha256: sha256(secret),
                caller: Caller::everything(ENV_TOKEN_NAME),
            }],
        }
    }

    /// Reads a token file.
    ///
    /// # Errors
    /// The file cannot be read, or its text is refused ([`TokenSet::parse`]).
    pub fn read(path: &Path) -> anyhow::Result<TokenSet> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the token file `{}`", path.display()))?;
        TokenSet::parse(&text).map_err(|e| anyhow::anyhow!("token file `{}`: {e}", path.display()))
    }

    /// Parses the text of a token file.
    ///
    /// # Errors
    /// What is wrong, with its line: TOML that does not parse, an unknown field, a hash that
    /// is not 64 hex digits, an unknown capability, a relative path, two tokens of one name or
    /// one hash.
    pub fn parse(text: &str) -> Result<TokenSet, String> {
        let file: File = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(String::new(), |span| {
                format!("line {}: ", line_of(text, span.start))
            });
            format!("{at}{}", e.message().trim_end())
        })?;
        let mut tokens: Vec<Token> = Vec::new();
        for entry in file.token {
            let at = |span: std::ops::Range<usize>| line_of(text, span.start);
            let name = entry.name.get_ref().trim();
            if name.is_empty() {
                return Err(format!(
                    "line {}: a token's `name` is empty",
                    at(entry.name.span())
                ));
            }
            if tokens.iter().any(|t| t.caller.name() == name) {
                return Err(format!(
                    "line {}: a second token named `{name}` (a name says whose request it was: it must be one token's)",
                    at(entry.name.span())
                ));
            }
            let sha256 = hash_of(entry.sha256.get_ref()).map_err(|why| {
                format!("line {}: token `{name}`: {why}", at(entry.sha256.span()))
            })?;
            if let Some(same) = tokens.iter().find(|t| t.sha256 == sha256) {
                return Err(format!(
                    "line {}: token `{name}` has the same secret as `{}`",
                    at(entry.sha256.span()),
                    same.caller.name()
                ));
            }
            let mut grants = Vec::new();
            for grant in entry.grants {
                let (path, _) = FsPath::parse_input(grant.path.get_ref())
                    .map_err(|e| format!("line {}: token `{name}`: {e}", at(grant.path.span())))?;
                let mut can = Vec::new();
                for capability in &grant.can {
                    let parsed = capability.get_ref().parse::<Capability>().map_err(|e| {
                        format!("line {}: token `{name}`: {e}", at(capability.span()))
                    })?;
                    can.push(parsed);
                }
                grants.push(Grant { path, can });
            }
            tokens.push(Token {
                sha256,
                caller: Caller::new(name, grants),
            });
        }
        Ok(TokenSet { tokens })
    }

    /// How many tokens it holds.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The caller whose secret is `secret`, if any: its SHA-256 compared with every token's,
    /// each comparison taking the same time whatever it finds.
    pub fn find(&self, secret: &str) -> Option<Caller> {
        let given = sha256(secret);
        let mut found = None;
        for token in &self.tokens {
            if constant_time_eq(&token.sha256, &given) {
                found = Some(token.caller.clone());
            }
        }
        found
    }
}

/// The text of a token file, as it is read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    token: Vec<Entry>,
}

/// One `[[token]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: Spanned<String>,
    sha256: Spanned<String>,
    #[serde(default)]
    grants: Vec<GrantEntry>,
}

/// One grant of a token.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantEntry {
    path: Spanned<String>,
    can: Vec<Spanned<String>>,
}

/// The line (from 1) of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// A SHA-256 written as 64 hex digits.
fn hash_of(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "`sha256` must be 64 hex digits (the SHA-256 of the secret, as `sha256sum` prints it), not `{}`",
            hex.chars().take(80).collect::<String>()
        ));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| "`sha256` must be hex digits".to_owned())?;
    }
    Ok(out)
}

/// The SHA-256 of `secret`.
fn sha256(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Compares without returning early.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Where the service's tokens come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// No token: everyone may do everything (a service on loopback only).
    None,
    /// `FSRENAME_TOKEN`: one token that may do everything.
    Env(String),
    /// A token file, read again on SIGHUP.
    File(PathBuf),
}

/// The tokens in force, replaced whole when the file is read again. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Keys {
    source: Source,
    current: Arc<RwLock<Arc<TokenSet>>>,
}

impl Keys {
    /// The tokens of `source`, read now.
    ///
    /// # Errors
    /// A token file that cannot be read or is refused (see [`TokenSet::parse`]).
    pub fn load(source: Source) -> anyhow::Result<Keys> {
        let set = match &source {
            Source::None => TokenSet::default(),
            Source::Env(secret) => TokenSet::everything_for(secret),
            Source::File(path) => TokenSet::read(path)?,
        };
        Ok(Keys {
            source,
            current: Arc::new(RwLock::new(Arc::new(set))),
        })
    }

    /// Whether requests need a token.
    pub fn required(&self) -> bool {
        self.source != Source::None
    }

    /// The tokens in force.
    pub fn current(&self) -> Arc<TokenSet> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The caller `secret` makes a request: `None` for a secret of no token (a revoked one
    /// included); for a service that needs no token, anybody.
    pub fn caller(&self, secret: Option<&str>) -> Option<Caller> {
        if !self.required() {
            return Some(Caller::everything(ANONYMOUS));
        }
        self.current().find(secret?)
    }

    /// Reads the token file again (on SIGHUP): the new tokens are in force from the next
    /// request; a file refused leaves the old ones. Returns how many tokens are in force.
    ///
    /// # Errors
    /// The file's error: nothing changed.
    pub fn reload(&self) -> anyhow::Result<usize> {
        let Source::File(path) = &self.source else {
            return Ok(self.current().len());
        };
        let set = TokenSet::read(path)?;
        let n = set.len();
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(secret: &str) -> String {
        sha256(secret).iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_file_names_tokens_by_the_hash_of_their_secret() {
        let text = format!(
            "[[token]]\nname = \"alice\"\nsha256 = \"{}\"\ngrants = [\n  {{ path = \"/home/alice\", can = [\"read\", \"rename\"] }},\n]\n\n[[token]]\nname = \"ops\"\nsha256 = \"{}\"\ngrants = [{{ path = \"/\", can = [\"admin\", \"read\"] }}]\n",
            hash("s3cret"),
            hash("0ps").to_uppercase()
        );
        let set = TokenSet::parse(&text).expect("a good file");
        assert_eq!(set.len(), 2);
        let alice = set.find("s3cret").expect("alice");
        assert_eq!(alice.name(), "alice");
        assert!(alice.may(
            Capability::Rename,
            &FsPath::parse("/home/alice/x").expect("p")
        ));
        assert_eq!(
            set.find("0ps").map(|c| c.name().to_owned()),
            Some("ops".to_owned())
        );
        assert!(set.find("nope").is_none() && set.find("").is_none());
    }

    #[test]
    fn what_is_wrong_is_said_with_its_line() {
        let good = hash("x");
        for (text, said) in [
            ("[[token]\n".to_owned(), "line 1: "),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{}\"\n", &good[..63]),
                "line 3: token `a`: `sha256` must be 64 hex digits",
            ),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\ngrants = [\n  {{ path = \"home\", can = [\"read\"] }},\n]\n"),
                "line 5: token `a`: path `home` is not absolute",
            ),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\ngrants = [{{ path = \"/\", can = [\"write\"] }}]\n"),
                "line 4: token `a`: unknown capability `write`: expected one of read, rename, copy, delete, admin",
            ),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\n[[token]]\nname = \"a\"\nsha256 = \"{}\"\n", hash("y")),
                "line 5: a second token named `a`",
            ),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\n[[token]]\nname = \"b\"\nsha256 = \"{good}\"\n"),
                "line 6: token `b` has the same secret as `a`",
            ),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nsecret = \"x\"\n"),
                "line 4: unknown field `secret`",
            ),
        ] {
            let e = TokenSet::parse(&text).expect_err(&text);
            assert!(e.starts_with(said) || e.contains(said), "{text:?}: {e}");
        }
    }

    #[test]
    fn without_tokens_anybody_may_do_everything_and_with_one_only_its_holder() {
        let open = Keys::load(Source::None).expect("keys");
        assert!(!open.required());
        assert!(open.caller(None).is_some_and(|c| c.is_unrestricted()));
        let one = Keys::load(Source::Env("t".to_owned())).expect("keys");
        assert!(one.caller(None).is_none() && one.caller(Some("u")).is_none());
        let caller = one.caller(Some("t")).expect("the token");
        assert_eq!(caller.name(), ENV_TOKEN_NAME);
        assert!(caller.is_unrestricted());
    }
}
