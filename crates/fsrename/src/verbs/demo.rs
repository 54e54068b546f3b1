//! `fsrename demo`: the book's /clinton scenario, four ways.

use fs_rename::clinton::{run_scenario, Scenario};

use crate::output::Printer;
use crate::{EXIT_FAILED, EXIT_OK};

/// Runs the four scenarios, printing each outcome as it comes; stops (with the error of the
/// write) as soon as nobody reads them any more.
pub async fn run(files: usize) -> anyhow::Result<u8> {
    let mut out = Printer::stdout();
    out.line(format_args!(
        "The book's scenario: job A renames /clinton ({files} files) to /gormley while job B renames\n\
         /clinton/projects/elasticsearch/README.txt to README.asciidoc. Four ways:\n"
    ))?;
    out.flush()?;
    let mut failed = Vec::new();
    for scenario in Scenario::ALL {
        let outcome = run_scenario(scenario, files).await?;
        out.line(&outcome)?;
        // Each run takes a while: show it now, and find out now if the reader is gone.
        out.flush()?;
        if !outcome.as_expected {
            failed.push(scenario.title());
        }
    }
    let code = if failed.is_empty() {
        out.line("All four runs showed what they should: with tree locks nothing is lost; without them a")?;
        out.line("change is silently lost, and with version numbers alone the mass rename stops half-way.")?;
        EXIT_OK
    } else {
        out.line(format_args!(
            "FAILED: not as expected: {}",
            failed.join("; ")
        ))?;
        EXIT_FAILED
    };
    out.flush()?;
    Ok(code)
}
