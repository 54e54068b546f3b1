//! Who may do what where: a caller's [`Grant`]s (a path and the [`Capability`]s it gives over
//! it and everything under it), and the checks every route makes with them.
//!
//! Deny unless granted. What a caller may not read is absent from every answer, not named in a
//! refusal: lists leave it out, a job or a lock outside the grants is not shown, and a text
//! that would name a path outside them (a lock holder's label, a job's error) has the path
//! taken out ([`Caller::redact`]). A directory on the way down to a grant (`/home` for a grant
//! of `/home/alice`) is shown by the name the grant itself spells, and nothing else in it.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use fs_model::FsPath;

use crate::contract::{Job, LockView, Work};

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// List the tree (`GET /tree`), see its locks and one's own jobs, the live page and its
    /// events; be the source of a copy.
    Read,
    /// Rename from here (the source), or into here (the destination's parent).
    Rename,
    /// Copy into here (the destination's parent).
    Copy,
    /// Delete here (the whole subtree).
    Delete,
    /// See every lock and every job here, whoever runs it; on `/`, the metrics and locks that
    /// name no path.
    Admin,
}

impl Capability {
    /// Every capability, as a token file names them.
    pub const ALL: [Capability; 5] = [
        Capability::Read,
        Capability::Rename,
        Capability::Copy,
        Capability::Delete,
        Capability::Admin,
    ];

    /// The name a token file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Read => "read",
            Capability::Rename => "rename",
            Capability::Copy => "copy",
            Capability::Delete => "delete",
            Capability::Admin => "admin",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Capability {
    type Err = String;

    fn from_str(s: &str) -> Result<Capability, String> {
        Capability::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown capability `{s}`: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// A path and what may be done over it and everything under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The subtree.
    pub path: FsPath,
    /// What may be done there.
    pub can: Vec<Capability>,
}

/// Who is asking, and what they were granted: the token's name and its grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    name: String,
    grants: Vec<Grant>,
}

/// A request refused by the caller's grants: the capability it needed and the path it needed
/// it on (both the caller's own words, never a path it did not give).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotGranted {
    /// The capability.
    pub needed: Capability,
    /// Where.
    pub on: FsPath,
}

impl fmt::Display for NotGranted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not granted: `{}` on `{}` (deny unless granted; see docs/service.md)",
            self.needed, self.on
        )
    }
}

impl Caller {
    /// A caller named `name` with `grants`.
    pub fn new(name: impl Into<String>, grants: Vec<Grant>) -> Caller {
        Caller {
            name: name.into(),
            grants,
        }
    }

    /// A caller who may do everything everywhere: a service without tokens, or the one token of
    /// `FSRENAME_TOKEN`.
    pub fn everything(name: impl Into<String>) -> Caller {
        Caller::new(
            name,
            vec![Grant {
                path: FsPath::root(),
                can: Capability::ALL.to_vec(),
            }],
        )
    }

    /// The token's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True if a grant covering `path` gives `capability`.
    pub fn may(&self, capability: Capability, path: &FsPath) -> bool {
        self.grants
            .iter()
            .any(|g| path.is_inside(&g.path) && g.can.contains(&capability))
    }

    /// [`Caller::may`], as a result naming what is missing.
    ///
    /// # Errors
    /// [`NotGranted`] if no grant gives it.
    pub fn must(&self, capability: Capability, path: &FsPath) -> Result<(), NotGranted> {
        if self.may(capability, path) {
            Ok(())
        } else {
            Err(NotGranted {
                needed: capability,
                on: path.clone(),
            })
        }
    }

    /// Checks what a job needs: a rename `rename` on its source and on its destination's
    /// parent; a copy `read` on its source and `copy` on its destination's parent; a delete
    /// `delete` on its path (the whole subtree under it). Made before anything is looked up, so
    /// that a refusal never tells whether a path exists.
    ///
    /// # Errors
    /// The first [`NotGranted`].
    pub fn check_work(&self, work: &Work) -> Result<(), NotGranted> {
        let parent = |to: &FsPath| to.parent().unwrap_or_else(FsPath::root);
        match work {
            Work::Rename { from, to } => {
                self.must(Capability::Rename, from)?;
                self.must(Capability::Rename, &parent(to))
            }
            Work::Copy { from, to } => {
                self.must(Capability::Read, from)?;
                self.must(Capability::Copy, &parent(to))
            }
            Work::Delete { path, .. } => self.must(Capability::Delete, path),
        }
    }

    /// True if the caller may do everything everywhere (no check can refuse it).
    pub fn is_unrestricted(&self) -> bool {
        Capability::ALL
            .iter()
            .all(|c| self.may(*c, &FsPath::root()))
    }

    /// True if `path` may be read: under a grant of `read` or `admin`.
    pub fn reads(&self, path: &FsPath) -> bool {
        self.may(Capability::Read, path) || self.may(Capability::Admin, path)
    }

    /// True if `path` lies strictly above a path the caller may read: a directory on the way
    /// down to a grant, which is shown (by the name the grant spells) with nothing else in it.
    pub fn passes_through(&self, path: &FsPath) -> bool {
        self.readable_roots()
            .any(|root| root.is_descendant_of(path))
    }

    /// The roots of what the caller may read: the paths of its `read` and `admin` grants.
    pub fn readable_roots(&self) -> impl Iterator<Item = &FsPath> {
        self.grants
            .iter()
            .filter(|g| g.can.contains(&Capability::Read) || g.can.contains(&Capability::Admin))
            .map(|g| &g.path)
    }

    /// True if the caller sees the job: one it submitted, or one whose paths all lie under its
    /// `admin` grants.
    pub fn sees_job(&self, job: &Job) -> bool {
        if job.submitted_by.as_deref() == Some(self.name.as_str()) || self.is_unrestricted() {
            return true;
        }
        paths_of(&job.work)
            .iter()
            .all(|p| self.may(Capability::Admin, p))
    }

    /// True if the caller sees the lock: one on a path it may read; a lock that names no path
    /// (the global lock, a document lock) only with `admin` on `/`.
    pub fn sees_lock(&self, lock: &LockView) -> bool {
        match lock.path.as_deref().map(FsPath::parse) {
            Some(Ok(path)) => self.reads(&path),
            _ => self.may(Capability::Admin, &FsPath::root()),
        }
    }

    /// `text` with every path in it that the caller may not read replaced by `(outside your
    /// grants)`: a lock holder's label (`mv /a /b`), a job's error or the lock it waits for.
    /// A path is a run of characters from a `/` at the start of a word (or after a backtick
    /// or a quote) to the next space, backtick, quote, comma, closing bracket or colon.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.is_unrestricted() || !text.contains('/') {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut changed = false;
        let mut rest = text;
        while let Some(start) = path_start(rest) {
            out.push_str(&rest[..start]);
            let tail = &rest[start..];
            let end = tail
                .find(|c: char| c.is_whitespace() || "`'\",)]:".contains(c))
                .unwrap_or(tail.len());
            let word = &tail[..end];
            match FsPath::parse(word) {
                Ok(path) if !self.reads(&path) && !self.passes_through(&path) => {
                    out.push_str("(outside your grants)");
                    changed = true;
                }
                _ => out.push_str(word),
            }
            rest = &tail[end..];
        }
        out.push_str(rest);
        if changed {
            Cow::Owned(out)
        } else {
            Cow::Borrowed(text)
        }
    }

    /// `job` as the caller may see it: its texts redacted (the lock it waits for, its error, its
    /// warnings, the locks its report names).
    pub fn redacted_job(&self, mut job: Job) -> Job {
        if self.is_unrestricted() {
            return job;
        }
        job.redact_with(|text| self.redact(text).into_owned());
        job
    }

    /// `lock` as the caller may see it: the holders' and waiters' labels redacted.
    pub fn redacted_lock(&self, mut lock: LockView) -> LockView {
        if self.is_unrestricted() {
            return lock;
        }
        lock.holders = self.redact(&lock.holders).into_owned();
        for grant in &mut lock.grants {
            grant.holder = self.redact(&grant.holder).into_owned();
        }
        for waiter in &mut lock.waiters {
            waiter.holder = self.redact(&waiter.holder).into_owned();
        }
        lock
    }
}

/// Where the next path starts in `text`: a `/` at the start, after a space, or after an opening
/// backtick, quote or bracket.
fn path_start(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().find_map(|(i, b)| {
        let starts = *b == b'/' && (i == 0 || b" `'\"([".contains(&bytes[i - 1]));
        starts.then_some(i)
    })
}

/// The paths a job works on.
fn paths_of(work: &Work) -> Vec<FsPath> {
    match work {
        Work::Rename { from, to } | Work::Copy { from, to } => vec![from.clone(), to.clone()],
        Work::Delete { path, .. } => vec![path.clone()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).expect("path")
    }

    fn alice() -> Caller {
        Caller::new(
            "alice",
            vec![
                Grant {
                    path: p("/home/alice"),
                    can: vec![Capability::Read, Capability::Rename],
                },
                Grant {
                    path: p("/shared"),
                    can: vec![Capability::Read],
                },
            ],
        )
    }

    #[test]
    fn a_grant_covers_its_path_and_what_is_under_it() {
        let a = alice();
        assert!(a.may(Capability::Rename, &p("/home/alice")));
        assert!(a.may(Capability::Rename, &p("/home/alice/x/y")));
        assert!(!a.may(Capability::Rename, &p("/home/alicex")));
        assert!(!a.may(Capability::Rename, &p("/home")));
        assert!(!a.may(Capability::Rename, &p("/shared/x")));
        assert!(a.reads(&p("/shared/x")));
        assert!(a.passes_through(&p("/home")) && a.passes_through(&p("/")));
        assert!(!a.passes_through(&p("/home/alice")) && !a.passes_through(&p("/home/bob")));
        assert!(!a.is_unrestricted() && Caller::everything("t").is_unrestricted());
        let refused = a
            .must(Capability::Delete, &p("/home/alice"))
            .expect_err("no delete");
        assert_eq!(
            refused.to_string(),
            "not granted: `delete` on `/home/alice` (deny unless granted; see docs/service.md)"
        );
    }

    #[test]
    fn a_job_needs_its_capability_on_its_source_and_on_its_destinations_parent() {
        let a = alice();
        let rename = |from: &str, to: &str| Work::Rename {
            from: p(from),
            to: p(to),
        };
        assert!(a
            .check_work(&rename("/home/alice/a", "/home/alice/b"))
            .is_ok());
        // Into a subtree not granted: refused, naming the destination's parent.
        let refused = a
            .check_work(&rename("/home/alice/a", "/home/bob/a"))
            .expect_err("into bob's");
        assert_eq!(
            (refused.needed, refused.on),
            (Capability::Rename, p("/home/bob"))
        );
        // A copy reads its source: from the shared tree into alice's own, not granted `copy`.
        let copy = Work::Copy {
            from: p("/shared/x"),
            to: p("/home/alice/x"),
        };
        assert_eq!(
            a.check_work(&copy).expect_err("no copy").needed,
            Capability::Copy
        );
        let delete = Work::Delete {
            path: p("/home/alice/a"),
            recursive: true,
        };
        assert_eq!(
            a.check_work(&delete).expect_err("no delete").needed,
            Capability::Delete
        );
    }

    #[test]
    fn texts_lose_the_paths_the_caller_may_not_read() {
        let a = alice();
        assert_eq!(
            a.redact("mv /home/bob/secret /home/alice/x (process p1)"),
            "mv (outside your grants) /home/alice/x (process p1)"
        );
        assert_eq!(
            a.redact("lock on `/home/bob/secret` (X held by rm /home/bob)"),
            "lock on `(outside your grants)` (X held by rm (outside your grants))"
        );
        assert_eq!(
            a.redact("mv /home/alice/a /shared/b"),
            "mv /home/alice/a /shared/b"
        );
        assert_eq!(a.redact("on / and /home"), "on / and /home");
        assert_eq!(a.redact("3/4 done"), "3/4 done");
    }

    #[test]
    fn capabilities_are_named_as_the_file_names_them() {
        for c in Capability::ALL {
            assert_eq!(c.as_str().parse::<Capability>(), Ok(c));
        }
        let e = "write".parse::<Capability>().expect_err("unknown");
        assert_eq!(
            e,
            "unknown capability `write`: expected one of read, rename, copy, delete, admin"
        );
    }
}
