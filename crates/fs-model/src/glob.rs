//! [`NameGlob`]: a shell pattern for the last component of a path, as `find -name` takes it,
//! with one meaning on every store: matched here, or sent to Elasticsearch as the regular
//! expression that means the same.

use std::fmt;

use crate::error::PathError;

/// One piece of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// `*`: any run of characters, none included.
    Any,
    /// `?`: exactly one character.
    One,
    /// A character that stands for itself (`\c` for a special one).
    Char(char),
    /// `[...]`, or `[!...]` / `[^...]` negated: one character in (or not in) the ranges.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A shell pattern on names: `*` (any run of characters), `?` (one character), `[abc]`,
/// `[a-z]`, `[!a-z]` or `[^a-z]` (one character in, or not in, the set), and `\` before a
/// character that should stand for itself. Case-sensitive, as names are; `/` never occurs in a
/// name, so it never matches.
///
/// ```
/// use fs_model::NameGlob;
///
/// let glob = NameGlob::parse("README*.[mt][dx]?")?;
/// assert!(glob.matches("README.txt"));
/// assert!(glob.matches("README-old.md5"));
/// assert!(!glob.matches("readme.txt"));
/// # Ok::<(), fs_model::PathError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameGlob {
    text: String,
    pieces: Vec<Piece>,
}

impl NameGlob {
    /// Parses a pattern.
    ///
    /// # Errors
    /// [`PathError::BadPattern`] for an empty pattern, a `/` in it, a `[` without its `]`, a
    /// range backwards (`[z-a]`) or a `\` at the end.
    pub fn parse(text: &str) -> Result<NameGlob, PathError> {
        let bad = |why: &str| PathError::BadPattern {
            pattern: text.to_owned(),
            message: why.to_owned(),
        };
        if text.is_empty() {
            return Err(bad("it is empty"));
        }
        if text.contains('/') {
            return Err(bad(
                "a name holds no `/` (the pattern is matched against names)",
            ));
        }
        let mut pieces = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            let piece = match c {
                '*' => {
                    if pieces.last() == Some(&Piece::Any) {
                        continue;
                    }
                    Piece::Any
                }
                '?' => Piece::One,
                '\\' => Piece::Char(chars.next().ok_or_else(|| bad("it ends with `\\`"))?),
                '[' => {
                    let negated = matches!(chars.peek(), Some('!' | '^'));
                    if negated {
                        chars.next();
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    loop {
                        let c = chars.next().ok_or_else(|| bad("a `[` has no `]`"))?;
                        // A `]` first in the set stands for itself, as in the shell.
                        if c == ']' && !first {
                            break;
                        }
                        first = false;
                        let low = if c == '\\' {
                            chars.next().ok_or_else(|| bad("it ends with `\\`"))?
                        } else {
                            c
                        };
                        let mut high = low;
                        let mut ahead = chars.clone();
                        if ahead.next() == Some('-') && ahead.peek().is_some_and(|&n| n != ']') {
                            chars.next();
                            let c = chars.next().ok_or_else(|| bad("a `[` has no `]`"))?;
                            high = if c == '\\' {
                                chars.next().ok_or_else(|| bad("it ends with `\\`"))?
                            } else {
                                c
                            };
                            if high < low {
                                return Err(bad(&format!("the range `{low}-{high}` is backwards")));
                            }
                        }
                        ranges.push((low, high));
                    }
                    Piece::Class { negated, ranges }
                }
                c => Piece::Char(c),
            };
            pieces.push(piece);
        }
        Ok(NameGlob {
            text: text.to_owned(),
            pieces,
        })
    }

    /// Returns the pattern as it was written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Returns true if `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        let (mut p, mut n) = (0, 0);
        // Where to go back to after a mismatch: the last `*` seen and the name position it
        // was tried at. One is enough: a later `*` can always take over what an earlier one
        // would have matched.
        let mut star: Option<(usize, usize)> = None;
        while n < name.len() {
            match self.pieces.get(p) {
                Some(Piece::Any) => {
                    star = Some((p, n));
                    p += 1;
                    continue;
                }
                Some(piece) if piece_matches(piece, name[n]) => {
                    p += 1;
                    n += 1;
                    continue;
                }
                _ => {}
            }
            match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            }
        }
        self.pieces[p..].iter().all(|piece| *piece == Piece::Any)
    }

    /// Returns the pattern as a Lucene regular expression (Elasticsearch's `regexp` query on
    /// a `keyword`), which matches exactly the same names.
    pub fn to_lucene_regexp(&self) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Any => out.push_str(".*"),
                Piece::One => out.push('.'),
                Piece::Char(c) => push_lucene_char(&mut out, *c),
                Piece::Class { negated, ranges } => {
                    out.push('[');
                    if *negated {
                        out.push('^');
                    }
                    for &(low, high) in ranges {
                        push_lucene_char(&mut out, low);
                        if high != low {
                            out.push('-');
                            push_lucene_char(&mut out, high);
                        }
                    }
                    out.push(']');
                }
            }
        }
        out
    }
}

fn piece_matches(piece: &Piece, c: char) -> bool {
    match piece {
        Piece::Any | Piece::One => true,
        Piece::Char(want) => *want == c,
        Piece::Class { negated, ranges } => {
            ranges.iter().any(|&(low, high)| low <= c && c <= high) != *negated
        }
    }
}

/// Every character Lucene's regular expressions give a meaning to (with all their optional
/// operators on, as Elasticsearch's `regexp` query has them by default) is escaped.
fn push_lucene_char(out: &mut String, c: char) {
    if ".?+*|{}[]()\"\\#@&<>~^-".contains(c) {
        out.push('\\');
    }
    out.push(c);
}

impl fmt::Display for NameGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for NameGlob {
    type Err = PathError;

    fn from_str(s: &str) -> Result<NameGlob, PathError> {
        NameGlob::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(s: &str) -> NameGlob {
        NameGlob::parse(s).expect("pattern")
    }

    #[test]
    fn stars_questions_and_classes() {
        assert!(glob("*").matches("anything"));
        assert!(glob("*").matches(""));
        assert!(glob("*.txt").matches("a.b.txt"));
        assert!(!glob("*.txt").matches("a.txt.gz"));
        assert!(glob("a*b*c").matches("aXbYbZc"));
        assert!(!glob("a*b*c").matches("aXbYbZ"));
        assert!(glob("?.rs").matches("é.rs"), "one character, not one byte");
        assert!(!glob("?.rs").matches("ab.rs"));
        assert!(glob("[a-c]x").matches("bx"));
        assert!(!glob("[!a-c]x").matches("bx"));
        assert!(glob("[^a-c]x").matches("dx"));
        assert!(glob("[]]").matches("]"));
        assert!(glob("[a-]").matches("-"));
        assert!(glob(r"\*").matches("*"));
        assert!(!glob(r"\*").matches("x"));
        assert!(!glob("README").matches("readme"), "case-sensitive");
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for (text, why) in [
            ("", "empty"),
            ("a/b", "`/`"),
            ("[ab", "no `]`"),
            ("[z-a]", "backwards"),
            ("a\\", "ends with"),
        ] {
            let err = NameGlob::parse(text).expect_err(text).to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn the_lucene_regexp_escapes_what_lucene_gives_a_meaning_to() {
        assert_eq!(glob("*.txt").to_lucene_regexp(), r".*\.txt");
        assert_eq!(glob("a?[!x-z]").to_lucene_regexp(), r"a.[^x-z]");
        assert_eq!(
            glob("#@&<>~\"").to_lucene_regexp(),
            "\\#\\@\\&\\<\\>\\~\\\""
        );
        assert_eq!(glob(r"\*").to_lucene_regexp(), r"\*");
    }
}
