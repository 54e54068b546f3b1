//! `fsrename schema [NAME]`, `fsrename completions SHELL` and `fsrename man [--dir DIR]`: what
//! fsrename says of itself, generated from its own definitions (the contract's types, the clap
//! arguments), so that it cannot drift from what it does.

use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::contract;
use crate::output::Printer;
use crate::EXIT_OK;

/// Prints the schema of the type `name`, or of any line.
pub fn run(name: Option<&str>) -> anyhow::Result<u8> {
    let schema = match name {
        // The argument's parser accepts only the contract's names.
        Some(name) => contract::schema_of(name)
            .with_context(|| format!("`{name}` is not a type of the JSON contract"))?,
        None => contract::schemas(),
    };
    let mut out = Printer::stdout();
    out.line(serde_json::to_string_pretty(&schema)?)?;
    out.flush()?;
    Ok(EXIT_OK)
}

/// Prints the completion script of `shell`.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "fsrename", &mut script);
    let mut out = Printer::stdout();
    out.text(String::from_utf8_lossy(&script))?;
    out.flush()?;
    Ok(EXIT_OK)
}

/// Prints `fsrename.1`, or writes it and a page per verb into `dir`.
pub fn man(dir: Option<&Path>) -> anyhow::Result<u8> {
    let command = Cli::command();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command)
            .render(&mut page)
            .context("writing the manual page")?;
        let mut out = Printer::stdout();
        out.text(String::from_utf8_lossy(&page))?;
        out.flush()?;
        return Ok(EXIT_OK);
    };
    if !dir.is_dir() {
        anyhow::bail!(
            "`{}` is not a directory: create it first (man pages go in a `man1` directory, e.g. ~/.local/share/man/man1)",
            dir.display()
        );
    }
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("writing the manual pages into `{}`", dir.display()))?;
    let mut out = Printer::stdout();
    out.line(format_args!(
        "wrote fsrename.1 and a page per verb into `{}`",
        dir.display()
    ))?;
    out.flush()?;
    Ok(EXIT_OK)
}
