//! `fsrename demo`: the book's /clinton scenario, four ways.

use fs_rename::clinton::{run_scenario, Scenario};

use crate::{EXIT_FAILED, EXIT_OK};

pub async fn run(files: usize) -> anyhow::Result<u8> {
    println!(
        "The book's scenario: job A renames /clinton ({files} files) to /gormley while job B renames\n\
         /clinton/projects/elasticsearch/README.txt to README.asciidoc. Four ways:\n"
    );
    let mut failed = Vec::new();
    for scenario in Scenario::ALL {
        let outcome = run_scenario(scenario, files).await?;
        println!("{outcome}");
        if !outcome.as_expected {
            failed.push(scenario.title());
        }
    }
    if failed.is_empty() {
        println!("All four runs showed what they should: with tree locks nothing is lost; without them a");
        println!("change is silently lost, and with version numbers alone the mass rename stops half-way.");
        Ok(EXIT_OK)
    } else {
        println!("FAILED: not as expected: {}", failed.join("; "));
        Ok(EXIT_FAILED)
    }
}
