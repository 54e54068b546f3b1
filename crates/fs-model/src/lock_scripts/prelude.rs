//! What the scripts share: the painless functions declared at the top of every script that
//! needs them (with Gray's tables written in from [`LockMode`] at compile time), their Rust
//! twins, and how the Rust twins read a document the way painless does.

use serde_json::{Map, Value};

use super::ScriptError;
use crate::lock_mode::{COMPATIBLE_LETTERS, COVERS_LETTERS};
use crate::LockMode;

/// Returns the total length of `parts`, for [`const_concat!`].
pub(super) const fn total_len(parts: &[&str]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < parts.len() {
        len += parts[i].len();
        i += 1;
    }
    len
}

/// Returns `parts` one after the other; `N` must be their [`total_len`].
pub(super) const fn concat_bytes<const N: usize>(parts: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    let mut i = 0;
    while i < parts.len() {
        let bytes = parts[i].as_bytes();
        let mut j = 0;
        while j < bytes.len() {
            out[at] = bytes[j];
            at += 1;
            j += 1;
        }
        i += 1;
    }
    assert!(at == N, "concat_bytes: N is not the total length");
    out
}

/// Returns UTF-8 `bytes` as a `str`, at compile time.
pub(super) const fn utf8(bytes: &'static [u8]) -> &'static str {
    match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(_) => panic!("a painless source is not UTF-8"),
    }
}

/// `concat!` for `&'static str` constants, not only literals: the painless sources are put
/// together at compile time from literals and the tables of [`LockMode`].
macro_rules! const_concat {
    ($($part:expr),+ $(,)?) => {{
        const PARTS: &[&str] = &[$($part),+];
        const LEN: usize = $crate::lock_scripts::prelude::total_len(PARTS);
        const BYTES: [u8; LEN] = $crate::lock_scripts::prelude::concat_bytes::<LEN>(PARTS);
        $crate::lock_scripts::prelude::utf8(&BYTES)
    }};
}
pub(super) use const_concat;

/// The modes' helpers, declared at the top of every script that needs them: a mode's rank
/// (a missing mode, as in holder entries written before the modes, is IX), and Gray's
/// compatibility and covering tables ([`LockMode`]'s, row = first mode, column = second, in
/// the order IS, IX, S, X), the live waiters and the `lock_type` the book must see.
pub(super) const PRELUDE: &str = const_concat!(
    "int rank(def m) { if (m == null || m == 'IX') { return 1; } if (m == 'IS') { return 0; } if (m == 'S') { return 2; } return 3; }\n",
    "boolean compatible(def a, def b) { int i = rank(a) * 4 + rank(b); return '",
    utf8(&COMPATIBLE_LETTERS),
    "'.substring(i, i + 1) == 'y'; }\n",
    "boolean covers(def a, def b) { int i = rank(a) * 4 + rank(b); return '",
    utf8(&COVERS_LETTERS),
    "'.substring(i, i + 1) == 'y'; }\n",
    "Map live(def waiters, def now, def skip) { Map kept = new HashMap(); if (waiters != null) { for (def w : waiters.entrySet()) { def e = w.getValue().get('expires_at'); if (w.getKey() != skip && e != null && e >= now) { kept.put(w.getKey(), w.getValue()); } } } return kept; }\n",
    "String typeOf(def holders) { for (def h : holders.values()) { if (h.get('mode') == 'S') { return 'exclusive'; } } return 'shared'; }\n",
);

static NULL: Value = Value::Null;

/// `ctx._source.<name>`: a missing field reads as null, as in painless.
pub(super) fn field<'a>(s: &'a Map<String, Value>, name: &str) -> &'a Value {
    s.get(name).unwrap_or(&NULL)
}

/// A map key from a param: painless would call `containsKey` with whatever it is given; our
/// callers always pass a string.
pub(super) fn key_of(value: &Value) -> Result<String, ScriptError> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| ScriptError::Failed(format!("process_id {value} is not a string")))
}

/// A number field, as painless reads a `long` (a float is cut to its whole part).
pub(super) fn integer(value: &Value, name: &str) -> Result<i64, ScriptError> {
    value
        .as_i64()
        .or_else(|| value.as_f64().map(|f| f as i64))
        .ok_or_else(|| ScriptError::Failed(format!("{name} {value} is not a number")))
}

/// Painless's `a < b` on two numbers.
pub(super) fn less(a: &Value, b: &Value) -> Result<bool, ScriptError> {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => Ok(a < b),
        _ => Err(ScriptError::Failed(format!("cannot compare {a} with {b}"))),
    }
}

/// Painless's `a == b` on two numbers.
pub(super) fn numbers_equal(a: &Value, b: &Value) -> bool {
    matches!((a.as_f64(), b.as_f64()), (Some(a), Some(b)) if a == b)
}

/// True for a group document (fsrename's `holders`, or the book's `lock_type: shared`); false
/// for an exclusive-shaped one.
pub(super) fn is_group(s: &Map<String, Value>) -> bool {
    !field(s, "holders").is_null() || field(s, "lock_type") == &Value::from("shared")
}

/// The mode a stored `mode` field names, as the painless `rank` reads it: a missing mode is
/// IX, anything it does not know is X.
pub(super) fn mode_of(mode: &Value) -> LockMode {
    match mode.as_str() {
        None if mode.is_null() => LockMode::IntentExclusive,
        Some("IX") => LockMode::IntentExclusive,
        Some("IS") => LockMode::IntentShared,
        Some("S") => LockMode::Shared,
        _ => LockMode::Exclusive,
    }
}

/// Gray's compatibility of two stored modes (the painless `compatible`).
pub(super) fn compatible(a: &Value, b: &Value) -> bool {
    mode_of(a).compatible(mode_of(b))
}

/// Whether holding `a` makes a request for `b` needless (the painless `covers`).
pub(super) fn covers(a: &Value, b: &Value) -> bool {
    mode_of(a).covers(mode_of(b))
}

/// The live waiters (expiry at or after `now`) other than `skip` (the painless `live`).
pub(super) fn live(
    waiters: &Value,
    now: &Value,
    skip: &str,
) -> Result<Map<String, Value>, ScriptError> {
    let mut kept = Map::new();
    if let Value::Object(waiters) = waiters {
        for (pid, entry) in waiters {
            let expires = &entry["expires_at"];
            if pid != skip && !expires.is_null() && !less(expires, now)? {
                kept.insert(pid.clone(), entry.clone());
            }
        }
    }
    Ok(kept)
}

/// `exclusive` if any holder holds S (a book client must see the subtree locked), else
/// `shared` (the painless `typeOf`).
pub(super) fn type_of(holders: &Map<String, Value>) -> &'static str {
    if holders
        .values()
        .any(|h| h["mode"] == LockMode::Shared.as_str())
    {
        "exclusive"
    } else {
        "shared"
    }
}

/// Stores `waiters` under `waiters`, or removes the field when there are none (painless:
/// `if (waiters.isEmpty()) { s.remove('waiters'); } else { s.waiters = waiters; }`).
pub(super) fn put_waiters(s: &mut Map<String, Value>, waiters: Map<String, Value>) {
    if waiters.is_empty() {
        s.remove("waiters");
    } else {
        s.insert("waiters".into(), Value::Object(waiters));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_painless_rank_is_the_modes_rank() {
        // The tables are written in from `LockMode`; `rank` is a literal, checked here.
        let rank = PRELUDE.lines().next().unwrap_or_default();
        for mode in LockMode::ALL {
            let returned = format!("return {}; }}", mode.rank());
            let asked = match mode {
                LockMode::IntentExclusive => "if (m == null || m == 'IX') { ".to_owned(),
                LockMode::Exclusive => " ".to_owned(),
                other => format!("if (m == '{other}') {{ "),
            };
            assert!(
                rank.contains(&format!("{asked}{returned}")),
                "{mode}: {rank}"
            );
            assert_eq!(mode_of(&json!(mode.as_str())), mode);
        }
        assert_eq!(mode_of(&Value::Null), LockMode::IntentExclusive);
        assert_eq!(
            mode_of(&json!("shared")),
            LockMode::Exclusive,
            "as painless reads it"
        );
        assert!(PRELUDE.contains("rank(a) * 4 + rank(b)"));
        assert_eq!(LockMode::ALL.len(), 4);
    }
}
