//! The book's /clinton scenario, run four ways: with tree locks (both orders), without locks,
//! and with version numbers only. `cargo run -p fs-rename --example clinton -- [FILES]`.

use fs_rename::clinton::{run_scenario, Scenario};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let files = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|e| anyhow::anyhow!("FILES must be a number, got `{arg}`: {e}"))?,
        None => 20_000,
    };
    let mut all_as_expected = true;
    for scenario in Scenario::ALL {
        let outcome = run_scenario(scenario, files).await?;
        println!("{outcome}");
        all_as_expected &= outcome.as_expected;
    }
    anyhow::ensure!(
        all_as_expected,
        "a scenario did not show what it is meant to show"
    );
    Ok(())
}
