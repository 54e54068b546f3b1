//! [`FsPath`]: a validated, normalised absolute path in the virtual tree.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{PathError, Result};

/// The longest path accepted, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// The longest single component accepted, in bytes (Linux's `NAME_MAX`).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// How much of a rejected input an error message shows.
const SHOWN_BYTES: usize = 80;

/// A validated absolute path such as `/clinton/projects/README.txt`.
///
/// The rules, each with its own [`PathError`]: the path starts with `/`; has no empty component
/// (`//`); no `.` or `..` component; no trailing `/` except for the root; no NUL or other control
/// character; at most [`MAX_PATH_BYTES`] bytes, each component at most [`MAX_COMPONENT_BYTES`].
///
/// Paths order by their UTF-8 bytes, which is also how Elasticsearch sorts `keyword` fields and
/// how SQLite compares `TEXT`, so a sorted listing agrees across every store.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FsPath(String);

impl FsPath {
    /// Returns the root path `/`.
    pub fn root() -> FsPath {
        FsPath("/".to_owned())
    }

    /// Parses and validates a path.
    ///
    /// # Errors
    /// Returns the [`PathError`] of the first rule the input breaks.
    pub fn parse(s: &str) -> Result<FsPath> {
        validate(s)?;
        Ok(FsPath(s.to_owned()))
    }

    /// Parses a path as a person types it: as [`FsPath::parse`], but one `/` at the end of a
    /// path other than the root is dropped (`/clinton/` is `/clinton`), since shells complete
    /// directories so and `ls -R` prints them so. Returns the path and whether it ended with
    /// that `/`, which names a directory: a caller may refuse it for a file, as Unix does.
    ///
    /// Only for input from people and clients; documents read from a store go through
    /// [`FsPath::parse`], which keeps refusing a trailing `/`.
    ///
    /// # Errors
    /// As [`FsPath::parse`], for the path without its trailing `/` (`/a//` still has an empty
    /// component).
    pub fn parse_input(s: &str) -> Result<(FsPath, bool)> {
        match s.strip_suffix('/') {
            Some(dir) if !dir.is_empty() && !dir.ends_with('/') => Ok((FsPath::parse(dir)?, true)),
            _ => Ok((FsPath::parse(s)?, false)),
        }
    }

    /// Returns the path as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Returns true for the root `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// Returns the parent directory, or `None` for the root.
    pub fn parent(&self) -> Option<FsPath> {
        if self.is_root() {
            return None;
        }
        let cut = self.0.rfind('/').unwrap_or(0);
        Some(FsPath(if cut == 0 {
            "/".to_owned()
        } else {
            self.0[..cut].to_owned()
        }))
    }

    /// Returns the last component (`README.txt` for `/clinton/README.txt`); empty for the root.
    pub fn name(&self) -> &str {
        match self.0.rfind('/') {
            Some(cut) => &self.0[cut + 1..],
            None => "",
        }
    }

    /// Returns the number of components: 0 for `/`, 1 for `/clinton`.
    pub fn depth(&self) -> usize {
        if self.is_root() {
            0
        } else {
            self.0.bytes().filter(|&b| b == b'/').count()
        }
    }

    /// Returns the components in order (`["clinton", "README.txt"]`); none for the root.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    /// Returns the proper ancestors, root first: `/`, `/clinton`, `/clinton/projects` for
    /// `/clinton/projects/README.txt`. Empty for the root.
    pub fn ancestors(&self) -> Vec<FsPath> {
        if self.is_root() {
            return Vec::new();
        }
        let mut out = vec![FsPath::root()];
        for (i, b) in self.0.bytes().enumerate().skip(1) {
            if b == b'/' {
                out.push(FsPath(self.0[..i].to_owned()));
            }
        }
        out
    }

    /// Returns the proper ancestors, deepest first: the reverse of [`FsPath::ancestors`].
    pub fn ancestors_deepest_first(&self) -> Vec<FsPath> {
        let mut out = self.ancestors();
        out.reverse();
        out
    }

    /// Returns true if `self` is `dir` or lies below it, comparing whole components:
    /// `/clinton/a` is inside `/clinton`, `/clintonx` is not.
    pub fn is_inside(&self, dir: &FsPath) -> bool {
        if dir.is_root() || self.0 == dir.0 {
            return true;
        }
        self.0.len() > dir.0.len()
            && self.0.starts_with(&dir.0)
            && self.0.as_bytes()[dir.0.len()] == b'/'
    }

    /// Returns true if `self` lies strictly below `dir` (inside it and not equal).
    pub fn is_descendant_of(&self, dir: &FsPath) -> bool {
        self != dir && self.is_inside(dir)
    }

    /// Returns true if one of the two paths is inside the other (equal, ancestor or descendant).
    pub fn overlaps(&self, other: &FsPath) -> bool {
        self.is_inside(other) || other.is_inside(self)
    }

    /// Returns true if a path inside `self` can still come at or after `later` in path order,
    /// `self` being at or before `later`: a scan in path order that has reached `later` may
    /// still meet something under `self`. The root holds everything; another path's subtree
    /// starts at `self/` and is passed once `later` no longer starts with `self` followed by
    /// a byte at most `/` (`/a-b` sorts between `/a` and `/a/x`; `/b` after all of `/a`).
    ///
    /// ```
    /// use fs_model::FsPath;
    /// let p = |s| FsPath::parse(s).unwrap();
    /// assert!(p("/a").may_hold_paths_after(&p("/a-b")));
    /// assert!(!p("/a").may_hold_paths_after(&p("/b")));
    /// ```
    pub fn may_hold_paths_after(&self, later: &FsPath) -> bool {
        if self.is_root() {
            return true;
        }
        let (open, later) = (self.0.as_bytes(), later.0.as_bytes());
        later.starts_with(open) && later.get(open.len()).is_some_and(|&b| b <= b'/')
    }

    /// Returns the child path `self/name`.
    ///
    /// # Errors
    /// [`PathError::InvalidName`] if `name` is empty, `.`, `..` or contains `/`; any length or
    /// character error of the joined path.
    pub fn join(&self, name: &str) -> Result<FsPath> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(PathError::InvalidName { name: shown(name) });
        }
        let joined = if self.is_root() {
            format!("/{name}")
        } else {
            format!("{}/{name}", self.0)
        };
        FsPath::parse(&joined)
    }

    /// Moves `self` from under `from` to under `to`, as a rename of `from` to `to` does:
    /// `/clinton/projects/x` rebased from `/clinton` to `/gormley` is `/gormley/projects/x`.
    ///
    /// # Errors
    /// [`PathError::NotInside`] if `self` is not inside `from`; [`PathError::TooLong`] (or
    /// [`PathError::ComponentTooLong`]) if the result would break a length limit.
    pub fn rebase(&self, from: &FsPath, to: &FsPath) -> Result<FsPath> {
        if !self.is_inside(from) {
            return Err(PathError::NotInside {
                path: shown(&self.0),
                from: shown(&from.0),
            });
        }
        let rest = if from.is_root() {
            &self.0[..]
        } else {
            &self.0[from.0.len()..]
        };
        let rebased = match (to.is_root(), rest) {
            (_, "") => to.0.clone(),
            (true, rest) => rest.to_owned(),
            (false, rest) => format!("{}{rest}", to.0),
        };
        FsPath::parse(&rebased)
    }
}

/// Checks every rule; the order decides which error a path breaking several rules gets.
fn validate(s: &str) -> Result<()> {
    if !s.starts_with('/') {
        return Err(PathError::NotAbsolute { path: shown(s) });
    }
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(PathError::ControlCharacter {
            path: shown(s),
            code: c as u32,
        });
    }
    if s.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong {
            path: shown(s),
            len: s.len(),
            max: MAX_PATH_BYTES,
        });
    }
    if s == "/" {
        return Ok(());
    }
    if s.ends_with('/') && !s.ends_with("//") {
        return Err(PathError::TrailingSlash { path: shown(s) });
    }
    for component in s[1..].split('/') {
        match component {
            "" => return Err(PathError::EmptyComponent { path: shown(s) }),
            "." | ".." => {
                return Err(PathError::DotComponent {
                    path: shown(s),
                    component: component.to_owned(),
                })
            }
            c if c.len() > MAX_COMPONENT_BYTES => {
                return Err(PathError::ComponentTooLong {
                    path: shown(s),
                    len: c.len(),
                    max: MAX_COMPONENT_BYTES,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// Renders a rejected input for an error message: control characters escaped, long input cut.
fn shown(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if out.len() >= SHOWN_BYTES {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl fmt::Display for FsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for FsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl FromStr for FsPath {
    type Err = PathError;

    fn from_str(s: &str) -> Result<FsPath> {
        FsPath::parse(s)
    }
}

impl TryFrom<String> for FsPath {
    type Error = PathError;

    fn try_from(s: String) -> Result<FsPath> {
        validate(&s)?;
        Ok(FsPath(s))
    }
}

impl AsRef<str> for FsPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for FsPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// One or more components, each after a `/`, as a regular expression: a component is anything
/// without `/` or a control character (Unicode's Cc, as `char::is_control`), with at least one
/// character that is not a dot, or three dots or more. The byte lengths are not in it: a
/// pattern counts characters.
macro_rules! components {
    () => {
        r"(/([^/\x00-\x1F\x7F-\x9F]*[^/.\x00-\x1F\x7F-\x9F][^/\x00-\x1F\x7F-\x9F]*|\.\.\.+))+"
    };
}

/// What [`FsPath::parse`] accepts, as a regular expression (JSON Schema's `pattern`): `/`, or
/// components. Paths are also at most [`MAX_PATH_BYTES`] bytes long, which a pattern cannot
/// count.
pub const PATH_PATTERN: &str = concat!("^(/|", components!(), ")$");

/// What [`FsPath::parse_input`] accepts: a path as [`PATH_PATTERN`], or one that ends with a
/// `/` after its last component.
pub const INPUT_PATH_PATTERN: &str = concat!("^(/|", components!(), "/?)$");

/// Any path but `/`, as a regular expression.
pub const BELOW_ROOT_PATTERN: &str = concat!("^", components!(), "$");

/// A path is a string in JSON, described by its pattern.
impl schemars::JsonSchema for FsPath {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Path".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": PATH_PATTERN,
            "description": "An absolute path in the tree: `/`, or `/a/b`",
        })
    }
}

impl<'de> Deserialize<'de> for FsPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<FsPath, D::Error> {
        let s = String::deserialize(deserializer)?;
        FsPath::try_from(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).expect("valid test path")
    }

    #[test]
    fn input_may_end_with_a_slash_that_names_a_directory() {
        let input = |s: &str| FsPath::parse_input(s).map(|(p, dir)| (p.to_string(), dir));
        assert_eq!(input("/t/a/"), Ok(("/t/a".to_owned(), true)));
        assert_eq!(input("/t/a"), Ok(("/t/a".to_owned(), false)));
        assert_eq!(input("/"), Ok(("/".to_owned(), false)));
        assert!(matches!(
            input("/t/a//"),
            Err(PathError::EmptyComponent { .. })
        ));
        assert!(matches!(input("//"), Err(PathError::EmptyComponent { .. })));
        assert!(matches!(input("t/"), Err(PathError::NotAbsolute { .. })));
        // Documents keep the strict rule.
        assert!(matches!(
            FsPath::parse("/t/a/"),
            Err(PathError::TrailingSlash { .. })
        ));
    }

    #[test]
    fn a_subtree_stays_open_until_a_scan_passes_it() {
        let open = |a: &str, b: &str| p(a).may_hold_paths_after(&p(b));
        assert!(open("/", "/z"));
        assert!(open("/a", "/a/x"));
        // `/a-b` sorts between `/a` and `/a/x`: `/a` may still hold what comes next.
        assert!(open("/a", "/a-b"));
        assert!(open("/a", "/a.c/d"));
        assert!(open("/a", "/a b"));
        assert!(!open("/a", "/a0"));
        assert!(!open("/a", "/ab"));
        assert!(!open("/a", "/b"));
        assert!(!open("/a/f1", "/a/f2"));
    }

    #[test]
    fn each_rule_has_its_own_error() {
        type IsExpected = fn(&PathError) -> bool;
        let cases: &[(&str, IsExpected)] = &[
            ("clinton", |e| matches!(e, PathError::NotAbsolute { .. })),
            ("", |e| matches!(e, PathError::NotAbsolute { .. })),
            ("/a//b", |e| matches!(e, PathError::EmptyComponent { .. })),
            ("//", |e| matches!(e, PathError::EmptyComponent { .. })),
            ("/a/./b", |e| matches!(e, PathError::DotComponent { .. })),
            ("/a/..", |e| matches!(e, PathError::DotComponent { .. })),
            ("/a/", |e| matches!(e, PathError::TrailingSlash { .. })),
            ("/a\0b", |e| {
                matches!(e, PathError::ControlCharacter { code: 0, .. })
            }),
            ("/a\nb", |e| {
                matches!(e, PathError::ControlCharacter { code: 10, .. })
            }),
        ];
        for (input, is_expected) in cases {
            let err = FsPath::parse(input).expect_err(input);
            assert!(is_expected(&err), "{input:?} gave {err:?}");
        }
        let long = format!("/{}", "a/".repeat(MAX_PATH_BYTES / 2) + "z");
        assert!(matches!(
            FsPath::parse(&long),
            Err(PathError::TooLong { .. })
        ));
        let wide = format!("/{}", "x".repeat(MAX_COMPONENT_BYTES + 1));
        assert!(matches!(
            FsPath::parse(&wide),
            Err(PathError::ComponentTooLong { len: 256, .. })
        ));
        assert!(FsPath::parse(&format!("/{}", "x".repeat(MAX_COMPONENT_BYTES))).is_ok());
    }

    #[test]
    fn errors_name_the_input() {
        let msg = FsPath::parse("clinton/x")
            .expect_err("relative")
            .to_string();
        assert_eq!(
            msg,
            "path `clinton/x` is not absolute: it must start with `/`"
        );
        let msg = FsPath::parse("/a\u{1}").expect_err("control").to_string();
        assert!(msg.contains("`/a\\u{1}`"), "{msg}");
    }

    #[test]
    fn parent_name_depth() {
        let readme = p("/clinton/projects/elasticsearch/README.txt");
        assert_eq!(readme.parent(), Some(p("/clinton/projects/elasticsearch")));
        assert_eq!(readme.name(), "README.txt");
        assert_eq!(readme.depth(), 4);
        assert_eq!(p("/clinton").parent(), Some(FsPath::root()));
        assert_eq!(FsPath::root().parent(), None);
        assert_eq!(FsPath::root().depth(), 0);
        assert_eq!(FsPath::root().name(), "");
    }

    #[test]
    fn ancestors_in_both_orders() {
        let readme = p("/clinton/projects/elasticsearch/README.txt");
        let names = |v: Vec<FsPath>| v.into_iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(
            names(readme.ancestors()),
            [
                "/",
                "/clinton",
                "/clinton/projects",
                "/clinton/projects/elasticsearch"
            ]
        );
        assert_eq!(
            names(readme.ancestors_deepest_first()),
            [
                "/clinton/projects/elasticsearch",
                "/clinton/projects",
                "/clinton",
                "/"
            ]
        );
        assert!(FsPath::root().ancestors().is_empty());
    }

    #[test]
    fn inside_is_component_wise() {
        assert!(p("/clinton/a").is_inside(&p("/clinton")));
        assert!(p("/clinton").is_inside(&p("/clinton")));
        assert!(!p("/clintonx").is_inside(&p("/clinton")));
        assert!(!p("/clinton").is_inside(&p("/clinton/a")));
        assert!(p("/x").is_inside(&FsPath::root()));
        assert!(!p("/clinton").is_descendant_of(&p("/clinton")));
        assert!(p("/clinton").overlaps(&p("/clinton/a/b")));
        assert!(!p("/clinton").overlaps(&p("/gormley")));
    }

    #[test]
    fn rebase_moves_the_prefix() {
        let from = p("/clinton");
        let to = p("/gormley");
        assert_eq!(
            p("/clinton/projects/x").rebase(&from, &to),
            Ok(p("/gormley/projects/x"))
        );
        assert_eq!(from.rebase(&from, &to), Ok(to.clone()));
        assert!(matches!(
            p("/clintonx").rebase(&from, &to),
            Err(PathError::NotInside { .. })
        ));
        assert_eq!(p("/a/b").rebase(&p("/a"), &FsPath::root()), Ok(p("/b")));
        assert_eq!(p("/b").rebase(&FsPath::root(), &p("/a")), Ok(p("/a/b")));
    }

    #[test]
    fn join_rejects_bad_names() {
        assert_eq!(FsPath::root().join("a"), Ok(p("/a")));
        assert_eq!(p("/a").join("b"), Ok(p("/a/b")));
        for bad in ["", ".", "..", "a/b"] {
            assert!(
                matches!(p("/a").join(bad), Err(PathError::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn serde_validates() {
        let json = serde_json::to_string(&p("/a/b")).expect("serialize");
        assert_eq!(json, "\"/a/b\"");
        assert!(serde_json::from_str::<FsPath>("\"a/b\"").is_err());
    }

    /// A component: printable, no `/`, never `.` or `..`, sometimes multi-byte.
    fn component() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_.é日 -]{1,12}".prop_filter("not a dot component", |c| c != "." && c != "..")
    }

    fn path() -> impl Strategy<Value = FsPath> {
        prop::collection::vec(component(), 0..8)
            .prop_map(|cs| FsPath::parse(&format!("/{}", cs.join("/"))).expect("generated path"))
    }

    proptest! {
        #[test]
        fn parse_display_round_trips(path in path()) {
            // Through Display on purpose: that is the form users and documents see.
            let displayed = path.to_string();
            prop_assert_eq!(FsPath::parse(&displayed), Ok(path.clone()));
        }

        #[test]
        fn rebase_round_trips(base in path(), rest in prop::collection::vec(component(), 0..4),
                              to in path()) {
            prop_assume!(!to.is_descendant_of(&base) && !base.is_descendant_of(&to));
            let mut p = base.clone();
            for c in &rest {
                p = p.join(c).expect("join");
            }
            let moved = p.rebase(&base, &to).expect("rebase");
            prop_assert!(moved.is_inside(&to));
            prop_assert_eq!(moved.depth() + base.depth(), p.depth() + to.depth());
            prop_assert_eq!(moved.rebase(&to, &base), Ok(p));
        }

        #[test]
        fn ancestors_are_inside_each_other(path in path()) {
            let ancestors = path.ancestors();
            prop_assert_eq!(ancestors.len(), path.depth());
            for (depth, a) in ancestors.iter().enumerate() {
                prop_assert_eq!(a.depth(), depth);
                prop_assert!(path.is_descendant_of(a));
            }
        }

        #[test]
        fn empty_component_rejected(path in path(), at in 0usize..8) {
            let mut parts: Vec<&str> = path.components().collect();
            let at = at.min(parts.len());
            parts.insert(at, "");
            let broken = format!("/{}/x", parts.join("/"));
            let is_empty = matches!(FsPath::parse(&broken), Err(PathError::EmptyComponent { .. }));
            prop_assert!(is_empty, "{:?}", broken);
        }

        #[test]
        fn dot_components_rejected(path in path(), dots in prop::sample::select(vec![".", ".."])) {
            let broken = format!("{}/{dots}", path.as_str().trim_end_matches('/'));
            let is_dot = matches!(FsPath::parse(&broken), Err(PathError::DotComponent { .. }));
            prop_assert!(is_dot, "{:?}", broken);
        }

        #[test]
        fn trailing_slash_rejected(path in path()) {
            prop_assume!(!path.is_root());
            let broken = format!("{path}/");
            let is_trailing = matches!(FsPath::parse(&broken), Err(PathError::TrailingSlash { .. }));
            prop_assert!(is_trailing);
        }

        #[test]
        fn relative_rejected(path in path()) {
            let broken = &path.as_str()[1..];
            let is_relative = matches!(FsPath::parse(broken), Err(PathError::NotAbsolute { .. }));
            prop_assert!(is_relative);
        }

        #[test]
        fn control_characters_rejected(path in path(), c in prop::char::range('\0', '\u{1f}')) {
            let broken = format!("{}/a{c}b", path.as_str().trim_end_matches('/'));
            let is_control = matches!(FsPath::parse(&broken),
                Err(PathError::ControlCharacter { code, .. }) if code == c as u32);
            prop_assert!(is_control);
        }

        #[test]
        fn lengths_rejected(extra in 1usize..64) {
            let wide = format!("/{}", "x".repeat(MAX_COMPONENT_BYTES + extra));
            let is_wide = matches!(FsPath::parse(&wide), Err(PathError::ComponentTooLong { .. }));
            prop_assert!(is_wide);
            let long = "/xxxxxxxxx".repeat(MAX_PATH_BYTES / 10 + extra);
            let is_long = matches!(FsPath::parse(&long), Err(PathError::TooLong { .. }));
            prop_assert!(is_long);
        }
    }
}
