//! `fsrename-jepsen check HISTORY.json...`: checks histories kept by the Jepsen-style test
//! (`FSRENAME_TEST_JEPSEN_OUT`), or written by hand, and prints a verdict per file. Exits 1 if
//! any history fails, 2 on bad usage or a file that is not a history.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let files = match args.split_first() {
        Some((verb, files)) if verb == "check" && !files.is_empty() => files,
        _ => {
            eprintln!("usage: fsrename-jepsen check HISTORY.json...\n\nChecks each history (the JSON of fs_jepsen::History): no id lost, duplicated or\nunexplained; the end one that the acknowledged calls, and some of the unknown ones,\nmake in an order that respects real time; no failed call with an effect.");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for file in files {
        let history: fs_jepsen::History = match std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
        {
            Ok(history) => history,
            Err(e) => {
                eprintln!("{file}: not a history: {e}");
                return ExitCode::from(2);
            }
        };
        let started = std::time::Instant::now();
        let verdict = fs_jepsen::check(&history);
        let (ok, bad, unknown) = history.outcomes();
        if verdict.passed() {
            println!(
                "{file}: passed: {} calls ({ok} ok, {bad} failed, {unknown} unknown), {} faults, checked in {:.2} s",
                history.calls.len(),
                history.faults.len(),
                started.elapsed().as_secs_f64()
            );
        } else {
            failed = true;
            println!("{file}: FAILED:\n{verdict}");
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
