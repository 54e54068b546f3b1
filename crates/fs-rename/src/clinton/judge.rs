//! Whether a run showed what it is meant to show, and how an outcome reads.

use std::fmt;

use super::{Scenario, ScenarioOutcome};
use crate::error::RenameError;

/// Decides whether a run showed what it is meant to show.
pub(super) fn judge(o: &ScenarioOutcome) -> (bool, String) {
    let readme = o.readme_at.as_deref().unwrap_or("<gone>");
    let same_count = o.documents.0 == o.documents.1;
    let locks_left = o.fsck.locks_active + o.fsck.locks_gone + o.fsck.locks_expired;
    let tidy = same_count && o.fsck.is_clean() && locks_left == 0;
    let moved_all = o.left_under_clinton == 0;
    match o.scenario {
        Scenario::TreeLocksAFirst => {
            let b_clean = matches!(o.b.result, Err(RenameError::SourceNotFound { .. }));
            let ok = tidy
                && o.a.result.is_ok()
                && b_clean
                && moved_all
                && readme == "/gormley/projects/elasticsearch/README.txt";
            (
                ok,
                format!("README is at {readme}; B failed cleanly: {b_clean}; tree clean: {tidy}"),
            )
        }
        Scenario::TreeLocksBFirst => {
            let ok = tidy
                && o.a.result.is_ok()
                && o.b.result.is_ok()
                && moved_all
                && readme == "/gormley/projects/elasticsearch/README.asciidoc";
            (
                ok,
                format!("README is at {readme}: both renames took effect; tree clean: {tidy}"),
            )
        }
        Scenario::NoLocksNoVersions => {
            let lost = o.a.result.is_ok()
                && o.b.result.is_ok()
                && readme == "/gormley/projects/elasticsearch/README.txt";
            (lost && same_count, format!(
                "both jobs reported success, yet README is at {readme}: B's rename was silently lost"
            ))
        }
        Scenario::VersionsOnly => {
            let conflict = matches!(o.a.result, Err(RenameError::Conflict { .. }));
            let half = o.left_under_clinton > 0 && o.a.report.rewritten > 0;
            let ok = conflict && half && same_count && !o.fsck.is_clean();
            (ok, format!(
                "A stopped on a conflict: {conflict}; {} moved, {} left under /clinton; fsck finds {}",
                fs_model::plural(o.a.report.rewritten, "document", "documents"),
                o.left_under_clinton,
                fs_model::plural(o.fsck.problem_count, "problem", "problems")
            ))
        }
    }
}

impl fmt::Display for ScenarioOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "── {} ──", self.scenario.title())?;
        writeln!(f, "expected: {}", self.scenario.expectation())?;
        for entry in &self.timeline {
            writeln!(
                f,
                "  {:>9.2} ms  {}  {}",
                entry.at.as_secs_f64() * 1e3,
                entry.job,
                entry.what
            )?;
        }
        writeln!(
            f,
            "documents: {} before, {} after",
            self.documents.0, self.documents.1
        )?;
        let problems = self.fsck.problem_count;
        if problems > 0 {
            let first = self.fsck.problems.first().map(String::as_str).unwrap_or("");
            writeln!(
                f,
                "fsck: {}, e.g. {first}",
                fs_model::plural(problems, "problem", "problems")
            )?;
        } else if self.damage().is_some() {
            // A lost update leaves a tree of the right shape: fsck checks shape (parents,
            // names, one document a path), not what the jobs meant to do.
            writeln!(
                f,
                "fsck: clean (fsck checks the tree's shape, and a lost rename leaves it well formed: only the jobs' own reports tell)"
            )?;
        } else {
            writeln!(f, "fsck: clean")?;
        }
        let verdict = if self.as_expected {
            "as expected"
        } else {
            "NOT AS EXPECTED"
        };
        writeln!(f, "{verdict}: {}", self.verdict)
    }
}

impl ScenarioOutcome {
    /// What the run lost or broke, in a sentence for someone watching; `None` if nothing (as
    /// with tree locks).
    pub fn damage(&self) -> Option<String> {
        let readme = self.readme_at.as_deref().unwrap_or("<gone>");
        let half_moved = self.a.report.rewritten > 0 && self.left_under_clinton > 0;
        if half_moved || self.fsck.problem_count > 0 {
            Some(format!(
                "the tree is broken: {} moved to /gormley, {} left under /clinton; fsck finds {}",
                fs_model::plural(self.a.report.rewritten, "document", "documents"),
                self.left_under_clinton,
                fs_model::plural(self.fsck.problem_count, "problem", "problems")
            ))
        } else if self.b.result.is_ok() && !readme.ends_with("/README.asciidoc") {
            Some(format!(
                "B's rename was lost: B reported success, yet README is at {readme}"
            ))
        } else if self.documents.0 != self.documents.1 {
            Some(format!(
                "documents were lost: {} before, {} after",
                self.documents.0, self.documents.1
            ))
        } else {
            None
        }
    }
}
