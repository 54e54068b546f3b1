//! The stored painless scripts of the lock protocol, each beside a Rust function that does
//! exactly what it does.
//!
//! Elasticsearch runs the painless source; stores and test servers that run no painless (the
//! Elasticsearch-behaviour proxy of `fs-testkit`) run the Rust function instead, inside the
//! same read, apply, conditional-write cycle Elasticsearch's update uses. The two are kept side
//! by side, one script after the other, so that a reader can compare them line by line; the
//! real-Elasticsearch tests check the painless itself.
//!
//! Painless semantics the Rust follows: a missing field reads as `null`; `null != 'x'` is true
//! and `null == 'x'` false; `ctx.op = 'noop'` discards every change the script made;
//! `Debug.explain` fails the update with `painless_explain_error` (the book's `assert false`),
//! which callers read as a deliberate refusal, never as a race.

use serde_json::{Map, Value};

/// What a script asks the update to do with the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptOp {
    /// Write the changed source (`ctx.op` left at `index`).
    Index,
    /// Change nothing (`ctx.op = 'noop'`).
    Noop,
    /// Delete the document (`ctx.op = 'delete'`).
    Delete,
}

/// Why a script did not finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The script refused on purpose (`Debug.explain`): Elasticsearch answers 400 with
    /// `painless_explain_error`.
    #[error("refused: {0}")]
    Refused(String),
    /// The script failed on the document it found (a field of the wrong type): Elasticsearch
    /// answers 400 with a `script_exception`.
    #[error("script error: {0}")]
    Failed(String),
}

/// One stored script: its id, its painless source, and the same logic in Rust.
#[derive(Debug, Clone, Copy)]
pub struct LockScript {
    /// The id it is stored under (`PUT _scripts/{id}`).
    pub id: &'static str,
    /// The painless source Elasticsearch runs.
    pub painless: &'static str,
    run: fn(&mut Map<String, Value>, &Value) -> Result<ScriptOp, ScriptError>,
}

impl LockScript {
    /// Runs the script on `source` (the document's `ctx._source`) with `params`. On
    /// [`ScriptOp::Noop`] and on an error, `source` must be thrown away: painless discards the
    /// changes of a script that does not end in `index`.
    ///
    /// # Errors
    /// [`ScriptError::Refused`] where the painless calls `Debug.explain`, [`ScriptError::Failed`]
    /// where it would throw.
    pub fn run(
        &self,
        source: &mut Map<String, Value>,
        params: &Value,
    ) -> Result<ScriptOp, ScriptError> {
        (self.run)(source, params)
    }
}

/// Acquires a share: the book's shared-lock script (refuse an exclusive lock, else
/// `lock_count++`), plus one holder entry per process so that applying it twice counts once.
pub const SHARED_ACQUIRE: LockScript = LockScript {
    id: "fsrename-shared-acquire",
    painless: "\
if (ctx._source.lock_type != 'shared') {
  if (ctx._source.process_id == params.process_id) { ctx.op = 'noop'; return; }
  Debug.explain('fsrename: refused by an exclusive lock');
}
if (ctx._source.holders == null) { ctx._source.holders = new HashMap(); }
if (ctx._source.holders.containsKey(params.process_id)) { ctx.op = 'noop'; return; }
ctx._source.holders.put(params.process_id, params.entry);
ctx._source.lock_count = (ctx._source.lock_count == null ? 0 : ctx._source.lock_count) + 1;
if (ctx._source.path == null) { ctx._source.path = params.path; }
def expires = params.entry.get('expires_at');
if (ctx._source.expires_at == null || ctx._source.expires_at < expires) { ctx._source.expires_at = expires; }",
    run: shared_acquire,
};

fn shared_acquire(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    let pid = &params["process_id"];
    if field(s, "lock_type") != &Value::from("shared") {
        if field(s, "process_id") == pid {
            return Ok(ScriptOp::Noop);
        }
        return Err(ScriptError::Refused(
            "fsrename: refused by an exclusive lock".into(),
        ));
    }
    let holders = holders_mut(s)?;
    let key = key_of(pid)?;
    if holders.contains_key(&key) {
        return Ok(ScriptOp::Noop);
    }
    holders.insert(key, params["entry"].clone());
    let count = match field(s, "lock_count") {
        Value::Null => 0,
        other => integer(other, "lock_count")?,
    };
    s.insert("lock_count".into(), Value::from(count + 1));
    if field(s, "path").is_null() {
        s.insert("path".into(), params["path"].clone());
    }
    let expires = params["entry"]["expires_at"].clone();
    if field(s, "expires_at").is_null() || less(field(s, "expires_at"), &expires)? {
        s.insert("expires_at".into(), expires);
    }
    Ok(ScriptOp::Index)
}

/// The book's document-lock script: refuse unless ours, and change nothing (reentrant).
pub const EXCLUSIVE_ACQUIRE: LockScript = LockScript {
    id: "fsrename-exclusive-acquire",
    painless: "\
if (ctx._source.process_id != params.process_id) { Debug.explain('fsrename: refused'); }
ctx.op = 'noop';",
    run: exclusive_acquire,
};

fn exclusive_acquire(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    if field(s, "process_id") != &params["process_id"] {
        return Err(ScriptError::Refused("fsrename: refused".into()));
    }
    Ok(ScriptOp::Noop)
}

/// The book's shared release (`if (--ctx._source.lock_count == 0) { ctx.op = 'delete' }`),
/// removing only this process's entry, and never below the entries still listed.
pub const SHARED_RELEASE: LockScript = LockScript {
    id: "fsrename-shared-release",
    painless: "\
def holders = ctx._source.holders;
if (holders == null || !holders.containsKey(params.process_id)) { ctx.op = 'noop'; return; }
holders.remove(params.process_id);
int count = (ctx._source.lock_count == null ? 1 : ctx._source.lock_count) - 1;
if (count < holders.size()) { count = holders.size(); }
if (count <= 0) { ctx.op = 'delete'; return; }
ctx._source.lock_count = count;
long latest = 0;
for (def h : holders.values()) { def e = h.get('expires_at'); if (e != null && e > latest) { latest = e; } }
if (latest > 0) { ctx._source.expires_at = latest; } else { ctx._source.remove('expires_at'); }",
    run: shared_release,
};

fn shared_release(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    let key = key_of(&params["process_id"])?;
    let remaining = match s.get_mut("holders") {
        Some(Value::Object(holders)) if holders.contains_key(&key) => {
            holders.remove(&key);
            holders.clone()
        }
        Some(Value::Null) | None | Some(Value::Object(_)) => return Ok(ScriptOp::Noop),
        Some(_) => return Err(ScriptError::Failed("holders is not an object".into())),
    };
    let count = match field(s, "lock_count") {
        Value::Null => 1,
        other => integer(other, "lock_count")?,
    } - 1;
    let count = count.max(i64::try_from(remaining.len()).unwrap_or(i64::MAX));
    if count <= 0 {
        return Ok(ScriptOp::Delete);
    }
    s.insert("lock_count".into(), Value::from(count));
    let mut latest = 0;
    for holder in remaining.values() {
        match &holder["expires_at"] {
            Value::Null => {}
            e => latest = latest.max(integer(e, "expires_at")?),
        }
    }
    if latest > 0 {
        s.insert("expires_at".into(), Value::from(latest));
    } else {
        s.remove("expires_at");
    }
    Ok(ScriptOp::Index)
}

/// Deletes an exclusive lock if it is still this process's.
pub const EXCLUSIVE_RELEASE: LockScript = LockScript {
    id: "fsrename-exclusive-release",
    painless: "\
if (ctx._source.process_id == params.process_id) { ctx.op = 'delete'; } else { ctx.op = 'noop'; }",
    run: exclusive_release,
};

fn exclusive_release(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    if field(s, "process_id") == &params["process_id"] {
        Ok(ScriptOp::Delete)
    } else {
        Ok(ScriptOp::Noop)
    }
}

/// Pushes this process's expiry forward; refuses if the lock is no longer its.
pub const RENEW: LockScript = LockScript {
    id: "fsrename-renew",
    painless: "\
if (ctx._source.lock_type == 'shared') {
  def holders = ctx._source.holders;
  if (holders == null || !holders.containsKey(params.process_id)) { Debug.explain('fsrename: lost'); }
  holders.get(params.process_id).put('expires_at', params.expires_at);
  if (ctx._source.expires_at == null || ctx._source.expires_at < params.expires_at) { ctx._source.expires_at = params.expires_at; }
} else if (ctx._source.process_id == params.process_id) {
  ctx._source.expires_at = params.expires_at;
} else {
  Debug.explain('fsrename: lost');
}",
    run: renew,
};

fn renew(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    let expires = params["expires_at"].clone();
    if field(s, "lock_type") == &Value::from("shared") {
        let key = key_of(&params["process_id"])?;
        let entry = match s.get_mut("holders") {
            Some(Value::Object(holders)) => holders.get_mut(&key),
            _ => None,
        };
        let Some(entry) = entry else {
            return Err(ScriptError::Refused("fsrename: lost".into()));
        };
        match entry {
            Value::Object(entry) => {
                entry.insert("expires_at".into(), expires.clone());
            }
            _ => {
                return Err(ScriptError::Failed(
                    "a holder entry is not an object".into(),
                ))
            }
        }
        if field(s, "expires_at").is_null() || less(field(s, "expires_at"), &expires)? {
            s.insert("expires_at".into(), expires);
        }
        Ok(ScriptOp::Index)
    } else if field(s, "process_id") == &params["process_id"] {
        s.insert("expires_at".into(), expires);
        Ok(ScriptOp::Index)
    } else {
        Err(ScriptError::Refused("fsrename: lost".into()))
    }
}

/// Every stored script of the lock protocol.
pub const LOCK_SCRIPTS: [LockScript; 5] = [
    SHARED_ACQUIRE,
    EXCLUSIVE_ACQUIRE,
    SHARED_RELEASE,
    EXCLUSIVE_RELEASE,
    RENEW,
];

/// Returns the lock script stored under `id`.
pub fn lock_script(id: &str) -> Option<&'static LockScript> {
    LOCK_SCRIPTS.iter().find(|s| s.id == id)
}

/// Returns the lock script whose painless source is `painless`, so that a server that runs no
/// painless can recognise what it is asked to store.
pub fn lock_script_by_source(painless: &str) -> Option<&'static LockScript> {
    LOCK_SCRIPTS.iter().find(|s| s.painless == painless)
}

static NULL: Value = Value::Null;

/// `ctx._source.<name>`: a missing field reads as null, as in painless.
fn field<'a>(s: &'a Map<String, Value>, name: &str) -> &'a Value {
    s.get(name).unwrap_or(&NULL)
}

/// `ctx._source.holders`, made an empty map where it is null.
fn holders_mut(s: &mut Map<String, Value>) -> Result<&mut Map<String, Value>, ScriptError> {
    let holders = s.entry("holders").or_insert(Value::Null);
    if holders.is_null() {
        *holders = Value::Object(Map::new());
    }
    match holders {
        Value::Object(map) => Ok(map),
        _ => Err(ScriptError::Failed("holders is not an object".into())),
    }
}

/// A map key from a param: painless would call `containsKey` with whatever it is given; our
/// callers always pass a string.
fn key_of(value: &Value) -> Result<String, ScriptError> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| ScriptError::Failed(format!("process_id {value} is not a string")))
}

fn integer(value: &Value, name: &str) -> Result<i64, ScriptError> {
    value
        .as_i64()
        .or_else(|| value.as_f64().map(|f| f as i64))
        .ok_or_else(|| ScriptError::Failed(format!("{name} {value} is not a number")))
}

/// Painless's `a < b` on two numbers.
fn less(a: &Value, b: &Value) -> Result<bool, ScriptError> {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => Ok(a < b),
        _ => Err(ScriptError::Failed(format!("cannot compare {a} with {b}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(
        script: &LockScript,
        doc: Value,
        params: Value,
    ) -> (Result<ScriptOp, ScriptError>, Value) {
        let Value::Object(mut source) = doc else {
            panic!("a test document is an object")
        };
        let result = script.run(&mut source, &params);
        (result, Value::Object(source))
    }

    fn entry(expires_at: i64) -> Value {
        json!({"holder": "h", "acquired_at": 1, "expires_at": expires_at})
    }

    #[test]
    fn a_share_counts_each_process_once() {
        let params = json!({"process_id": "p2", "path": "/x", "entry": entry(50)});
        let doc = json!({"lock_type": "shared", "lock_count": 1, "holders": {"p1": entry(40)}, "expires_at": 40});
        let (op, doc) = run(&SHARED_ACQUIRE, doc, params.clone());
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["lock_count"], 2);
        assert_eq!(doc["expires_at"], 50);
        assert_eq!(doc["path"], "/x");
        let (again, _) = run(&SHARED_ACQUIRE, doc, params);
        assert_eq!(again, Ok(ScriptOp::Noop));
    }

    #[test]
    fn a_share_under_an_exclusive_lock_is_refused_unless_ours() {
        let params = json!({"process_id": "p2", "path": "/x", "entry": entry(50)});
        let (book, _) = run(
            &SHARED_ACQUIRE,
            json!({"lock_type": "exclusive"}),
            params.clone(),
        );
        assert!(matches!(book, Err(ScriptError::Refused(_))));
        let ours = json!({"lock_type": "exclusive", "process_id": "p2"});
        assert_eq!(run(&SHARED_ACQUIRE, ours, params).0, Ok(ScriptOp::Noop));
    }

    #[test]
    fn the_books_share_without_holders_is_kept_on_release() {
        // A book client's share (`lock_count: 1`, no holders) plus ours.
        let doc = json!({"lock_type": "shared", "lock_count": 2, "holders": {"p1": entry(40)}});
        let (op, doc) = run(&SHARED_RELEASE, doc, json!({"process_id": "p1"}));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["lock_count"], 1);
        assert_eq!(doc["holders"], json!({}));
        assert!(doc.get("expires_at").is_none());
        let (last, _) = run(
            &SHARED_RELEASE,
            json!({"lock_type": "shared", "lock_count": 1, "holders": {"p1": entry(40)}}),
            json!({"process_id": "p1"}),
        );
        assert_eq!(last, Ok(ScriptOp::Delete));
        let (not_ours, _) = run(
            &SHARED_RELEASE,
            json!({"lock_count": 1}),
            json!({"process_id": "p1"}),
        );
        assert_eq!(not_ours, Ok(ScriptOp::Noop));
    }

    #[test]
    fn exclusive_scripts_check_the_owner() {
        let ours = json!({"lock_type": "exclusive", "process_id": "p1"});
        let p1 = json!({"process_id": "p1"});
        let p2 = json!({"process_id": "p2"});
        assert_eq!(
            run(&EXCLUSIVE_ACQUIRE, ours.clone(), p1.clone()).0,
            Ok(ScriptOp::Noop)
        );
        assert!(matches!(
            run(&EXCLUSIVE_ACQUIRE, ours.clone(), p2.clone()).0,
            Err(ScriptError::Refused(_))
        ));
        assert_eq!(
            run(&EXCLUSIVE_RELEASE, ours.clone(), p1).0,
            Ok(ScriptOp::Delete)
        );
        assert_eq!(run(&EXCLUSIVE_RELEASE, ours, p2).0, Ok(ScriptOp::Noop));
    }

    #[test]
    fn renewal_moves_only_our_expiry() {
        let doc = json!({"lock_type": "shared", "lock_count": 2, "expires_at": 40,
                         "holders": {"p1": entry(40), "p2": entry(30)}});
        let (op, doc) = run(&RENEW, doc, json!({"process_id": "p2", "expires_at": 90}));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["holders"]["p2"]["expires_at"], 90);
        assert_eq!(doc["holders"]["p1"]["expires_at"], 40);
        assert_eq!(doc["expires_at"], 90);
        let (lost, _) = run(&RENEW, doc, json!({"process_id": "p3", "expires_at": 90}));
        assert!(matches!(lost, Err(ScriptError::Refused(_))));
        let (mine, doc) = run(
            &RENEW,
            json!({"lock_type": "exclusive", "process_id": "p1", "expires_at": 1}),
            json!({"process_id": "p1", "expires_at": 9}),
        );
        assert_eq!(
            (mine, doc["expires_at"].clone()),
            (Ok(ScriptOp::Index), json!(9))
        );
    }

    #[test]
    fn scripts_are_found_by_id_and_by_source() {
        for script in LOCK_SCRIPTS {
            assert_eq!(lock_script(script.id).map(|s| s.id), Some(script.id));
            assert_eq!(
                lock_script_by_source(script.painless).map(|s| s.id),
                Some(script.id)
            );
        }
        assert!(lock_script("nope").is_none());
    }
}
