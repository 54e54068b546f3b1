//! `fsrename find [PATH] [--name GLOB] [--text WORDS]`: the tree searched by name and text.

use anyhow::Context;
use fs_model::{FindQuery, FsPath, NameGlob};

use super::ls::print_entry;
use super::open_existing_tree;
use crate::cli::Cli;
use crate::output::{to_stderr, Printer};
use crate::EXIT_OK;

/// What `find` looks for and how it prints.
pub struct FindOptions {
    pub name: Option<NameGlob>,
    pub text: Option<String>,
    pub limit: usize,
    pub long: bool,
    pub json: bool,
}

pub async fn run(cli: &Cli, path: &FsPath, options: &FindOptions) -> anyhow::Result<u8> {
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
    // One more than asked tells whether there are more.
    let mut found = tree
        .find_matching(&query, options.limit + 1)
        .await
        .with_context(|| format!("find under `{path}` in {}", cli.store))?;
    let more = found.len() > options.limit;
    found.truncate(options.limit);
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
    Ok(EXIT_OK)
}
