//! What the workloads are made of: files, a git repository, and the tools they run (a tool's
//! failure with what it said).

use std::path::Path;
use std::process::Command;

use anyhow::Context as _;

/// Files of the git repository's first branch, 20 to a directory.
pub const GIT_FILES: usize = 1_000;

/// A git repository at `repo` on branch `main`, with a branch `moves` that moves two
/// directories (one into a new one), changes every tenth file, deletes a directory and adds
/// three; returns the entries a checkout from one to the other changes in the work tree.
pub fn repository(repo: &Path) -> anyhow::Result<u64> {
    std::fs::create_dir_all(repo)?;
    files(&repo.join("src"), GIT_FILES, 20)?;
    run(repo, "git", &["init", "-q", "-b", "main"])?;
    run(repo, "git", &["add", "."])?;
    run(repo, "git", &["commit", "-q", "-m", "first"])?;
    run(repo, "git", &["checkout", "-q", "-b", "moves"])?;
    run(repo, "git", &["mv", "src/d0", "src/moved"])?;
    std::fs::create_dir(repo.join("lib"))?;
    run(repo, "git", &["mv", "src/d1", "lib/d1"])?;
    run(repo, "git", &["rm", "-q", "-r", "src/d2"])?;
    for i in (0..GIT_FILES).step_by(10) {
        let file = repo.join(format!("src/d{}/f{i}", i / 20));
        if file.exists() {
            std::fs::write(&file, format!("file {i}, changed on the branch\n"))?;
        }
    }
    files(&repo.join("added"), 30, 10)?;
    run(repo, "git", &["add", "-A"])?;
    run(repo, "git", &["commit", "-q", "-m", "moves"])?;
    run(repo, "git", &["checkout", "-q", "main"])?;
    // Files added, deleted or changed (a file moved is both), then directories made or gone.
    let diff = output(
        repo,
        "git",
        &["diff", "--name-status", "--no-renames", "main", "moves"],
    )?;
    let dirs = |rev: &str| -> anyhow::Result<std::collections::BTreeSet<String>> {
        let listed = output(repo, "git", &["ls-tree", "-r", "-d", "--name-only", rev])?;
        Ok(listed.lines().map(str::to_owned).collect())
    };
    let (main, moves) = (dirs("main")?, dirs("moves")?);
    let files = diff.lines().filter(|l| !l.trim().is_empty()).count();
    Ok((files + main.symmetric_difference(&moves).count()) as u64)
}

/// Runs `program` in `dir`; it must succeed.
pub fn run(dir: &Path, program: &str, args: &[&str]) -> anyhow::Result<()> {
    output(dir, program, args).map(drop)
}

/// Runs `program` in `dir` and returns its standard output; it must succeed.
fn output(dir: &Path, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        // git: none of the machine's configuration, an author of the benchmark's.
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .output()
        .with_context(|| format!("cannot run {program} (is it installed?)"))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {args:?} in {}: {}: {}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `count` files of a few bytes in `dir/d<i>/f<j>`, `per_dir` to a directory.
pub fn files(dir: &Path, count: usize, per_dir: usize) -> anyhow::Result<()> {
    for i in 0..count {
        let sub = dir.join(format!("d{}", i / per_dir));
        if i % per_dir == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        std::fs::write(sub.join(format!("f{i}")), format!("file {i}\n"))?;
    }
    Ok(())
}
