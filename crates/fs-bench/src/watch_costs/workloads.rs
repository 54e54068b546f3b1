//! The workloads a watcher follows: the tools people change directories with (`cp -a`,
//! `rsync`, `tar`, `mv`, `rm -rf`, `git checkout`), an editor's saves and a burst of files,
//! each run on a watched directory of a [`Disk`], and the entries each changes, counted from
//! the workload itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use super::tools::{files, repository, run, GIT_FILES};

/// Files a directory of the copied tree holds.
const PER_DIR: usize = 10;

/// Files a directory of the burst holds.
const BURST_PER_DIR: usize = 500;

/// The pause after each of the editor's saves: longer than the watcher's debounce (250 ms),
/// so that each save is a batch of its own, as a person's saves are.
pub const SAVE_EVERY: Duration = Duration::from_millis(300);

/// One workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `cp -a` of the tree into a new directory.
    CopyA,
    /// `rsync -a --delete` of the tree into a new directory.
    Rsync,
    /// `tar -xf` of an archive of the tree.
    Untar,
    /// `mv` of the copy `cp -a` made.
    MoveDir,
    /// `rm -rf` of the directory rsync made.
    RemoveDir,
    /// `git checkout` of a branch that moves directories, changes, deletes and adds files.
    Checkout,
    /// `git checkout` back.
    CheckoutBack,
    /// An editor's saves: a temporary file written, renamed over the original.
    Saves,
    /// Files made as fast as can be, their parent renamed right after.
    Burst,
}

impl Workload {
    /// Every workload, in the order they are run.
    pub const ALL: [Workload; 9] = [
        Workload::CopyA,
        Workload::Rsync,
        Workload::Untar,
        Workload::MoveDir,
        Workload::RemoveDir,
        Workload::Checkout,
        Workload::CheckoutBack,
        Workload::Saves,
        Workload::Burst,
    ];
}

/// The sizes of the workloads.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Entries of the tree copied, synced, unpacked, moved and removed (its top included).
    pub entries: usize,
    /// Files of the burst.
    pub burst: usize,
    /// The editor's saves.
    pub saves: usize,
}

/// A temporary directory: `tree`, the watched one, and `outside` beside it, with what the
/// workloads read (the tree to copy, its archive) and a git repository in `tree/repo`.
pub struct Disk {
    _work: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    sizes: Sizes,
    /// Entries a checkout from one branch to the other changes in the work tree.
    checkout_changes: u64,
}

impl Disk {
    /// Makes the directories, the tree, its archive and the repository (blocking).
    ///
    /// # Errors
    /// If the file system or a tool fails.
    pub fn prepare(sizes: Sizes) -> anyhow::Result<Disk> {
        let work = tempfile::tempdir().context("creating a temporary directory")?;
        let root = work.path().join("tree");
        let outside = work.path().join("outside");
        for dir in [&root, &outside] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // The watch works on the canonical path: compare like with like.
        let root = std::fs::canonicalize(&root)?;
        let outside = std::fs::canonicalize(&outside)?;
        tree(&outside.join("src"), sizes.entries, PER_DIR)?;
        run(&outside, "tar", &["-cf", "src.tar", "src"])?;
        let checkout_changes = repository(&root.join("repo"))?;
        std::fs::create_dir(root.join("notes"))?;
        std::fs::write(root.join("notes/draft.txt"), "draft\n")?;
        Ok(Disk {
            _work: work,
            root,
            outside,
            sizes,
            checkout_changes,
        })
    }

    /// The watched directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What the workload is, for the report.
    pub fn label(&self, workload: Workload) -> String {
        let n = thousands(self.sizes.entries as u64);
        match workload {
            Workload::CopyA => format!("`cp -a` of a tree of {n} entries into a new directory"),
            Workload::Rsync => "`rsync -a --delete` of the same tree into a new one".to_owned(),
            Workload::Untar => "`tar -xf` of the same tree".to_owned(),
            Workload::MoveDir => format!("`mv` of the copy ({n} entries)"),
            Workload::RemoveDir => format!("`rm -rf` of rsync's copy ({n} entries)"),
            Workload::Checkout => format!(
                "`git checkout` of a branch that `git mv`s 2 directories, changes every tenth file, deletes 20, adds 30 (of {} files)",
                thousands(GIT_FILES as u64)
            ),
            Workload::CheckoutBack => "`git checkout` back".to_owned(),
            Workload::Saves => format!(
                "{} editor saves of one file (a temporary file renamed over it), {} ms apart",
                self.sizes.saves,
                SAVE_EVERY.as_millis()
            ),
            Workload::Burst => format!(
                "a burst of {} files, their parent renamed right after",
                thousands(self.sizes.burst as u64)
            ),
        }
    }

    /// The entries the workload creates, moves, removes or writes (an entry created then
    /// moved by the same workload once); git's own writes in `.git` are not counted.
    pub fn changes(&self, workload: Workload) -> u64 {
        let entries = self.sizes.entries as u64;
        match workload {
            Workload::CopyA
            | Workload::Rsync
            | Workload::Untar
            | Workload::MoveDir
            | Workload::RemoveDir => entries,
            Workload::Checkout | Workload::CheckoutBack => self.checkout_changes,
            Workload::Saves => self.sizes.saves as u64,
            Workload::Burst => {
                let burst = self.sizes.burst;
                (1 + burst.div_ceil(BURST_PER_DIR) + burst) as u64
            }
        }
    }

    /// Runs the workload (blocking).
    ///
    /// # Errors
    /// If a tool or the file system fails.
    pub fn run(&self, workload: Workload) -> anyhow::Result<()> {
        let (root, outside) = (&self.root, &self.outside);
        let src = outside.join("src");
        match workload {
            Workload::CopyA => run(root, "cp", &["-a", &text(&src), "copy"]),
            Workload::Rsync => run(
                root,
                "rsync",
                &["-a", "--delete", &format!("{}/", text(&src)), "mirror/"],
            ),
            Workload::Untar => run(root, "tar", &["-xf", &text(&outside.join("src.tar"))]),
            Workload::MoveDir => run(root, "mv", &["copy", "moved"]),
            Workload::RemoveDir => run(root, "rm", &["-rf", "mirror"]),
            Workload::Checkout => run(&root.join("repo"), "git", &["checkout", "-q", "moves"]),
            Workload::CheckoutBack => run(&root.join("repo"), "git", &["checkout", "-q", "main"]),
            Workload::Saves => {
                let (tmp, file) = (
                    root.join("notes/.draft.txt.swp"),
                    root.join("notes/draft.txt"),
                );
                for save in 0..self.sizes.saves {
                    if save > 0 {
                        std::thread::sleep(SAVE_EVERY);
                    }
                    std::fs::write(&tmp, format!("draft, save {save}\n"))?;
                    std::fs::rename(&tmp, &file)?;
                }
                Ok(())
            }
            Workload::Burst => {
                let burst = root.join("burst");
                std::fs::create_dir(&burst)?;
                files(&burst, self.sizes.burst, BURST_PER_DIR)?;
                std::fs::rename(&burst, root.join("burst-renamed"))?;
                Ok(())
            }
        }
    }
}

/// A tree of `entries` entries at `top` (`top` included): directories `d<i>` of `per_dir`
/// files `f<j>` each, the last one short.
pub fn tree(top: &Path, entries: usize, per_dir: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(top).with_context(|| format!("creating {}", top.display()))?;
    // Each directory is one entry and its files `per_dir` more.
    let files_wanted = entries.saturating_sub(1);
    let (mut made, mut i) = (0, 0);
    while made < files_wanted {
        let dir = top.join(format!("d{i}"));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        made += 1;
        for j in 0..per_dir.min(files_wanted - made) {
            std::fs::write(dir.join(format!("f{j}")), format!("file {i}/{j}\n"))?;
            made += 1;
        }
        i += 1;
    }
    Ok(())
}

fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// `3299` as `3 299`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_has_the_entries_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("t");
        tree(&top, 3_299, PER_DIR).unwrap();
        assert_eq!(walkdir::WalkDir::new(&top).into_iter().count(), 3_299);
    }

    #[test]
    fn thousands_are_spaced() {
        assert_eq!(thousands(3_299), "3 299");
        assert_eq!(thousands(100_000), "100 000");
        assert_eq!(thousands(999), "999");
    }
}
