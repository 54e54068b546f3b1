//! `fsrename-bench`: runs every benchmark of issue 9 on the embedded store and on
//! osmem-server over HTTP, prints a table, checks the targets, and writes
//! `docs/benchmarks.md` with SVG plots.
//!
//! `cargo run --release -p fs-bench -- [--quick] [--max-docs N] [--out docs]`

mod book;
mod measure;
mod plot;
mod report;

use clap::Parser;

/// Measures lock costs by depth, rename throughput against the raw bulk rewrite, concurrent
/// disjoint renames per locking scheme, and locking cost by affected documents.
#[derive(Debug, Parser)]
#[command(name = "fsrename-bench", version, about)]
struct Args {
    /// Smaller sizes and fewer repetitions (a smoke run, not for the record).
    #[arg(long)]
    quick: bool,
    /// The largest directory renamed, in documents (osmem stops at 10 000 unless --full).
    #[arg(long, default_value_t = 100_000)]
    max_docs: usize,
    /// Also run 100 000-document renames on osmem (minutes).
    #[arg(long)]
    full: bool,
    /// Where to write benchmarks.md and the plots; `-` writes nothing.
    #[arg(long, default_value = "docs")]
    out: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let plan = measure::Plan::new(args.quick, args.max_docs, args.full);
    let results = measure::run_all(&plan).await?;
    let text = report::markdown(&results, &plan, &command_line());
    println!("{text}");
    if args.out != "-" {
        let dir = std::path::Path::new(&args.out);
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("benchmarks.md"), &text)?;
        plot::rename_throughput(&results, &dir.join("bench-rename.svg"))?;
        plot::concurrency(&results, &dir.join("bench-concurrency.svg"))?;
        eprintln!("wrote {}/benchmarks.md and two SVG plots", dir.display());
    }
    let missed = report::targets(&results).iter().filter(|t| !t.met).count();
    if missed > 0 {
        eprintln!("{missed} target(s) missed: see the table");
    }
    Ok(())
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo run --release -p fs-bench -- {}", args.join(" "))
        .trim_end()
        .to_owned()
}
