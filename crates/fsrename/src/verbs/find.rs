//! `fsrename find [PATH] [--name GLOB] [--text WORDS]`: the tree searched by name and text.

use anyhow::Context;
use fs_model::{DocKind, FindQuery, NameGlob};

use super::ls::print_entry;
use super::{open_existing_tree, print_report};
use crate::cli::{Cli, PathArg};
use crate::contract::FindReport;
use crate::output::{quoted, to_stderr, Printer};
use crate::EXIT_OK;

/// What `find` looks for and how it prints.
pub struct FindOptions {
    pub name: Option<NameGlob>,
    pub text: Option<String>,
    pub limit: usize,
    pub long: bool,
    pub json: bool,
}

pub async fn run(cli: &Cli, given: &PathArg, options: &FindOptions) -> anyhow::Result<u8> {
    let path = given.path();
    let mut query = FindQuery::under(path.clone());
    if let Some(glob) = &options.name {
        query = query.name(glob.clone());
    }
    if let Some(text) = &options.text {
        query = query.text(text);
        if query.words.is_empty() {
            anyhow::bail!(
                "--text `{text}` holds no word to look for (words are letters and digits)"
            );
        }
    }
    let tree = open_existing_tree(cli).await?;
    let context = || format!("find under `{path}` in {}", cli.store);
    if given.names_dir() && tree.kind_of(path).await.with_context(context)? == Some(DocKind::File) {
        anyhow::bail!(
            "find `{}`: not a directory (`{path}` is a file)",
            given.as_given()
        );
    }
    // One more than asked tells whether there are more.
    let mut found = tree
        .find_matching(&query, options.limit + 1)
        .await
        .with_context(context)?;
    let more = found.len() > options.limit;
    found.truncate(options.limit);
    // Words found nowhere: where no document stores text (indexed without `--content`), no
    // word can be, and an empty answer would pass for "not there".
    let text_stored = match &options.text {
        Some(_) if found.is_empty() => Some(
            !tree
                .find_matching(&FindQuery::under(path.clone()).storing_text(), 1)
                .await
                .with_context(context)?
                .is_empty(),
        ),
        Some(_) => Some(true),
        None => None,
    };
    let mut out = Printer::stdout();
    for entry in &found {
        print_entry(&mut out, entry, true, options.long, options.json)?;
    }
    out.flush()?;
    if more {
        to_stderr(format_args!(
            "fsrename: more than {0} found; showing the first {0}{1}",
            options.limit,
            if options.limit < 10_000 {
                " (--limit shows up to 10000)"
            } else {
                ""
            }
        ));
    }
    if text_stored == Some(false) {
        to_stderr(format_args!(
            "fsrename: no document under {} stores text, so no word can be found there: index it with `fsrename index DIR --as PATH --content` to search the text of its files",
            quoted(path.as_str())
        ));
    }
    let report = FindReport {
        path: path.clone(),
        name: options.name.as_ref().map(ToString::to_string),
        text: options.text.clone(),
        found: found.len() as u64,
        limit: options.limit as u64,
        more,
        text_stored,
    };
    print_report(&mut out, &report, EXIT_OK, options.json, |_, _| Ok(()))
}
