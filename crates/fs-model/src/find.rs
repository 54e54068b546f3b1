//! [`FindQuery`]: what `fsrename find` asks a store for: the documents under a path whose name
//! matches a pattern and whose content holds some words.

use crate::glob::NameGlob;
use crate::path::FsPath;

/// A search of the tree by name and by content.
///
/// Every part narrows the result: documents at or under [`under`](FindQuery::under), whose
/// name matches [`name`](FindQuery::name) if given, and whose `content` holds every one of
/// [`words`](FindQuery::words) if any (case-insensitive, each a whole word), and that store
/// text at all if [`stores_text`](FindQuery::stores_text). Hits come most relevant first when
/// words are asked for (then by path), in path order otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindQuery {
    /// Where to look: this path and everything under it.
    pub under: FsPath,
    /// A pattern the name must match.
    pub name: Option<NameGlob>,
    /// Words the content must hold, lowercased (see [`FindQuery::words_of`]).
    pub words: Vec<String>,
    /// Only documents that store text (`content`), whatever it holds: what `fsrename find
    /// --text` asks when no words matched, to tell "no match" from "no text stored here".
    pub stores_text: bool,
}

impl FindQuery {
    /// Returns a query for everything at or under `under`.
    pub fn under(under: FsPath) -> FindQuery {
        FindQuery {
            under,
            name: None,
            words: Vec::new(),
            stores_text: false,
        }
    }

    /// Returns this query narrowed to documents that store text.
    pub fn storing_text(mut self) -> FindQuery {
        self.stores_text = true;
        self
    }

    /// Returns this query narrowed to names matching `glob`.
    pub fn name(mut self, glob: NameGlob) -> FindQuery {
        self.name = Some(glob);
        self
    }

    /// Returns this query narrowed to content holding every word of `text`.
    pub fn text(mut self, text: &str) -> FindQuery {
        self.words = FindQuery::words_of(text);
        self
    }

    /// Splits `text` into the words a search looks for: the runs of letters and digits,
    /// lowercased, each once. Anything else separates words (`don't` is `don` and `t`), as the
    /// stores' analysers split the content (Elasticsearch's standard analyser, SQLite FTS5's
    /// `unicode61` tokenizer), so a word of the content is found by itself.
    pub fn words_of(text: &str) -> Vec<String> {
        let mut words: Vec<String> = Vec::new();
        for word in text.split(|c: char| !c.is_alphanumeric()) {
            let word = word.to_lowercase();
            if !word.is_empty() && !words.contains(&word) {
                words.push(word);
            }
        }
        words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_runs_of_letters_and_digits_lowercased_once() {
        assert_eq!(
            FindQuery::words_of("Quick, brown FOX; quick 42 Éclair"),
            ["quick", "brown", "fox", "42", "éclair"]
        );
        assert!(FindQuery::words_of(" ,; ").is_empty());
    }
}
