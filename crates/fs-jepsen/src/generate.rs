//! The operations the clients make: random, from a seed, on a small tree that they all share,
//! so that they meet (the same source, a destination under another's source, a delete of
//! another's parent). A mirror of the tree, updated from the acknowledged calls, steers most
//! of them to paths that exist (else nearly every call would fail on a missing source); it is
//! only a guide, never an oracle (that is the checker's model).

use std::collections::BTreeMap;
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::history::{Entry, Kind, Op};

/// The names every path is made of: few, so that paths collide.
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
/// The deepest path a client makes (copies of deep trees would grow it without end).
const MAX_DEPTH: usize = 4;
/// The most documents a client copies at once.
const MAX_COPY: usize = 8;
/// Below this many documents, a delete becomes a mkdir, so the tree does not empty.
const MIN_TREE: usize = 8;

/// The tree every history starts from: `(path, kind)`, parents first.
pub const START_TREE: [(&str, Kind); 14] = [
    ("/a", Kind::Dir),
    ("/a/b", Kind::Dir),
    ("/a/b/f", Kind::File),
    ("/a/c", Kind::Dir),
    ("/a/c/e", Kind::File),
    ("/b", Kind::Dir),
    ("/b/d", Kind::Dir),
    ("/b/d/a", Kind::File),
    ("/b/e", Kind::File),
    ("/c", Kind::Dir),
    ("/c/a", Kind::Dir),
    ("/c/a/b", Kind::Dir),
    ("/c/a/b/c", Kind::File),
    ("/d", Kind::Dir),
];

/// What kinds of operation a client may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Menu {
    /// Everything: mkdir, touch, mv, cp -r, rm -r (the command line).
    All,
    /// The jobs of the service: mv, cp -r, rm -r.
    Jobs,
}

/// The shared generator: a seeded random source and the mirror.
#[derive(Debug)]
pub struct Generator {
    inner: Mutex<(StdRng, BTreeMap<String, Kind>)>,
}

impl Generator {
    /// A generator from `seed`, its mirror the tree `start`.
    pub fn new(seed: u64, start: &[Entry]) -> Generator {
        let mirror = start
            .iter()
            .map(|e| (e.path.clone(), e.kind))
            .collect::<BTreeMap<_, _>>();
        Generator {
            inner: Mutex::new((StdRng::seed_from_u64(seed), mirror)),
        }
    }

    /// A random number below `n` (for think times and the like), from the same seed.
    pub fn below(&self, n: u64) -> u64 {
        match self.inner.lock() {
            Ok(mut inner) if n > 0 => inner.0.random_range(0..n),
            _ => 0,
        }
    }

    /// The next operation of a client with `menu`.
    pub fn next(&self, menu: Menu) -> Op {
        let Ok(mut guard) = self.inner.lock() else {
            return Op::Touch { path: "/a".into() };
        };
        let (rng, mirror) = &mut *guard;
        let roll = rng.random_range(0..100u32);
        let kind = match menu {
            Menu::All => match roll {
                0..=34 => 'm',
                35..=44 => 'c',
                45..=59 => 'r',
                60..=79 => 'd',
                _ => 't',
            },
            Menu::Jobs => match roll {
                0..=59 => 'm',
                60..=74 => 'c',
                _ => 'r',
            },
        };
        let kind = if kind == 'r' && mirror.len() < MIN_TREE {
            if menu == Menu::All {
                'd'
            } else {
                'c'
            }
        } else {
            kind
        };
        match kind {
            'm' => {
                let from = source(rng, mirror);
                let to = destination_outside(rng, mirror, &from);
                Op::Mv { from, to }
            }
            'c' => {
                let from = source(rng, mirror);
                let size = mirror.keys().filter(|p| under(p, &from)).count();
                let to = destination_outside(rng, mirror, &from);
                if size > MAX_COPY {
                    Op::Mv { from, to }
                } else {
                    Op::Cp { from, to }
                }
            }
            'r' => Op::Rm {
                path: source(rng, mirror),
            },
            'd' => Op::Mkdir {
                path: destination(rng, mirror),
            },
            _ => Op::Touch {
                path: destination(rng, mirror),
            },
        }
    }

    /// Brings the mirror in step with an acknowledged call.
    pub fn acknowledged(&self, op: &Op) {
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        let mirror = &mut guard.1;
        match op {
            Op::Mkdir { path } => {
                mirror.insert(path.clone(), Kind::Dir);
            }
            Op::Touch { path } => {
                mirror.entry(path.clone()).or_insert(Kind::File);
            }
            Op::Mv { from, to } | Op::Cp { from, to } => {
                let moved: Vec<(String, Kind)> = mirror
                    .iter()
                    .filter(|(p, _)| under(p, from))
                    .map(|(p, k)| (format!("{to}{}", &p[from.len()..]), *k))
                    .collect();
                if matches!(op, Op::Mv { .. }) {
                    mirror.retain(|p, _| !under(p, from));
                }
                mirror.extend(moved);
            }
            Op::Rm { path } => mirror.retain(|p, _| !under(p, path)),
        }
    }
}

/// Whether `path` is `top` or under it.
fn under(path: &str, top: &str) -> bool {
    path == top
        || (path.len() > top.len() && path.starts_with(top) && path.as_bytes()[top.len()] == b'/')
}

/// A path that exists, mostly; sometimes one that may not.
fn source(rng: &mut StdRng, mirror: &BTreeMap<String, Kind>) -> String {
    let existing: Vec<&String> = mirror.keys().filter(|p| p.as_str() != "/").collect();
    match existing.choose(rng) {
        Some(path) if rng.random_bool(0.85) => (*path).clone(),
        _ => random_path(rng),
    }
}

/// A destination not under `from` (a rename into itself is refused before any lock: a call
/// that tests nothing), in a few tries.
fn destination_outside(rng: &mut StdRng, mirror: &BTreeMap<String, Kind>, from: &str) -> String {
    let mut to = destination(rng, mirror);
    for _ in 0..5 {
        if !under(&to, from) {
            break;
        }
        to = destination(rng, mirror);
    }
    to
}

/// A new name in a directory that exists, mostly.
fn destination(rng: &mut StdRng, mirror: &BTreeMap<String, Kind>) -> String {
    let dirs: Vec<&String> = mirror
        .iter()
        .filter(|(p, k)| **k == Kind::Dir && depth(p) < MAX_DEPTH)
        .map(|(p, _)| p)
        .collect();
    let parent = match dirs.choose(rng) {
        Some(dir) if rng.random_bool(0.85) => (*dir).clone(),
        _ => "/".to_owned(),
    };
    let name = NAMES.choose(rng).copied().unwrap_or("a");
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

fn depth(path: &str) -> usize {
    path.matches('/').count()
}

fn random_path(rng: &mut StdRng) -> String {
    let depth = rng.random_range(1..=3);
    (0..depth)
        .map(|_| format!("/{}", NAMES.choose(rng).copied().unwrap_or("a")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start tree, each id its path.
    fn start() -> Vec<Entry> {
        START_TREE
            .iter()
            .map(|(p, k)| Entry {
                path: (*p).into(),
                id: (*p).into(),
                kind: *k,
            })
            .collect()
    }

    #[test]
    fn the_mirror_follows_renames_copies_and_deletes() {
        let start = start();
        let generator = Generator::new(1, &start);
        generator.acknowledged(&Op::Mv {
            from: "/a".into(),
            to: "/d/a".into(),
        });
        generator.acknowledged(&Op::Cp {
            from: "/b/d".into(),
            to: "/e".into(),
        });
        generator.acknowledged(&Op::Rm { path: "/c".into() });
        let mirror = generator.inner.lock().unwrap().1.clone();
        assert!(mirror.contains_key("/d/a/b/f"));
        assert!(!mirror.contains_key("/a"));
        assert!(mirror.contains_key("/e/a") && mirror.contains_key("/b/d/a"));
        assert!(!mirror.keys().any(|p| p.starts_with("/c")));
    }

    #[test]
    fn operations_stay_within_the_depth_and_copy_limits() {
        let start = start();
        let generator = Generator::new(7, &start);
        for _ in 0..500 {
            let op = generator.next(Menu::All);
            match &op {
                Op::Mkdir { path } | Op::Touch { path } => assert!(depth(path) <= MAX_DEPTH),
                Op::Mv { to, .. } | Op::Cp { to, .. } => assert!(depth(to) <= MAX_DEPTH),
                Op::Rm { .. } => {}
            }
            assert!(!matches!(
                generator.next(Menu::Jobs),
                Op::Mkdir { .. } | Op::Touch { .. }
            ));
            generator.acknowledged(&op);
        }
    }
}
