//! The stored painless scripts of the lock protocol, each beside a Rust function that does
//! exactly what it does.
//!
//! Elasticsearch runs the painless source; stores and test servers that run no painless (the
//! Elasticsearch-behaviour proxy of `fs-testkit`) run the Rust function instead, inside the
//! same read, apply, conditional-write cycle Elasticsearch's update uses. The two are kept side
//! by side, one script after the other, so that a reader can compare them line by line; the
//! real-Elasticsearch tests check the painless itself.
//!
//! The scripts implement the four modes of multi-granularity locking (IS, IX, S, X) and the
//! waiters of fair waiting; `docs/locking.md` has the document shapes and the tables. They are
//! stored under ids of their own (`fsrename2-*`), so that an fsrename from before the modes,
//! whose scripts are stored under `fsrename-*`, and this one never run each other's scripts.
//! The compare-and-set protocol runs the same Rust functions on the document it read and
//! writes the result conditionally: one implementation of the lock logic for both protocols.
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

/// The modes' helpers, declared at the top of every script that needs them: a mode's rank
/// (a missing mode, as in holder entries written before the modes, is IX), and Gray's
/// compatibility and covering tables, row = first mode, column = second, in the order IS, IX,
/// S, X.
macro_rules! mode_functions {
    () => {
        "\
int rank(def m) { if (m == null || m == 'IX') { return 1; } if (m == 'IS') { return 0; } if (m == 'S') { return 2; } return 3; }
boolean compatible(def a, def b) { int i = rank(a) * 4 + rank(b); return 'yyynyynnynynnnnn'.substring(i, i + 1) == 'y'; }
boolean covers(def a, def b) { int i = rank(a) * 4 + rank(b); return 'ynnnyynnynynyyyy'.substring(i, i + 1) == 'y'; }
Map live(def waiters, def now, def skip) { Map kept = new HashMap(); if (waiters != null) { for (def w : waiters.entrySet()) { def e = w.getValue().get('expires_at'); if (w.getKey() != skip && e != null && e >= now) { kept.put(w.getKey(), w.getValue()); } } } return kept; }
String typeOf(def holders) { for (def h : holders.values()) { if (h.get('mode') == 'S') { return 'exclusive'; } } return 'shared'; }
"
    };
}

/// The refusal that says the owner holds the lock in a weaker mode and asked for a stronger
/// one (an upgrade, which fsrename does not do).
pub const UPGRADE_REFUSAL: &str = "fsrename: upgrade";

/// The refusal by an older waiter (fair waiting: no barging).
pub const WAITER_REFUSAL: &str = "fsrename: refused by an older waiter";

/// Takes a lock in any mode. Params: `process_id`, `mode` (`IS`, `IX`, `S`, `X`), `entry` (the
/// holder entry for a group document), `exclusive` (the whole document for `X`), `path`,
/// `since` (the request's age: when it started, epoch ms), `now`, `queue` (respect older
/// waiters; false for a client that already holds locks).
///
/// - An exclusive-shaped document (fsrename's X, the global lock, a document lock, the book's
///   exclusive lock, anything unreadable) refuses everyone but its `process_id`, for whom any
///   request is a no-op (reentrant).
/// - A group document (`holders`, or the book's `lock_type: shared`): ours in a covering mode
///   is a no-op; any holder in an incompatible mode refuses, shares without a holder entry
///   (the book's `lock_count++`) count as IX; with `queue`, a live waiter older than the
///   request in an incompatible mode refuses. Otherwise the request joins: an X replaces the
///   document (it can only get here when nobody holds it), keeping the other live waiters;
///   other modes add a holder entry and one to `lock_count`. Our own waiter entry goes, and
///   so do expired ones.
pub const ACQUIRE: LockScript = LockScript {
    id: "fsrename2-acquire",
    painless: concat!(
        mode_functions!(),
        "\
def s = ctx._source;
String pid = params.process_id;
String m = params.mode;
if (s.holders == null && s.lock_type != 'shared') {
  if (s.process_id == pid) { ctx.op = 'noop'; return; }
  Debug.explain('fsrename: refused by an exclusive lock');
}
def holders = s.holders == null ? new HashMap() : s.holders;
def mine = holders.get(pid);
if (mine != null) {
  if (covers(mine.get('mode'), m)) { ctx.op = 'noop'; return; }
  Debug.explain('fsrename: upgrade');
}
for (def h : holders.values()) {
  if (!compatible(h.get('mode'), m)) { Debug.explain('fsrename: refused by an incompatible lock'); }
}
def count = s.lock_count == null ? holders.size() : s.lock_count;
if (count > holders.size() && !compatible('IX', m)) { Debug.explain('fsrename: refused by shares without a process_id'); }
if (params.queue && s.waiters != null) {
  for (def w : s.waiters.entrySet()) {
    def e = w.getValue();
    def since = e.get('since');
    if (w.getKey() != pid && e.get('expires_at') != null && e.get('expires_at') >= params.now && since != null
        && (since < params.since || (since == params.since && w.getKey().compareTo(pid) < 0))
        && !compatible(e.get('mode'), m)) {
      Debug.explain('fsrename: refused by an older waiter');
    }
  }
}
Map waiters = live(s.waiters, params.now, pid);
if (m == 'X') {
  s.clear();
  s.putAll(params.exclusive);
  if (!waiters.isEmpty()) { s.waiters = waiters; }
  return;
}
holders.put(pid, params.entry);
s.holders = holders;
s.lock_count = count + 1;
if (s.path == null) { s.path = params.path; }
if (waiters.isEmpty()) { s.remove('waiters'); } else { s.waiters = waiters; }
s.lock_type = typeOf(holders);
def expires = params.entry.get('expires_at');
if (s.expires_at == null || s.expires_at < expires) { s.expires_at = expires; }"
    ),
    run: acquire,
};

fn acquire(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    let pid = &params["process_id"];
    let m = &params["mode"];
    if !is_group(s) {
        if field(s, "process_id") == pid {
            return Ok(ScriptOp::Noop);
        }
        return Err(ScriptError::Refused(
            "fsrename: refused by an exclusive lock".into(),
        ));
    }
    let mut holders = match field(s, "holders") {
        Value::Null => Map::new(),
        Value::Object(h) => h.clone(),
        _ => return Err(ScriptError::Failed("holders is not an object".into())),
    };
    let key = key_of(pid)?;
    if let Some(mine) = holders.get(&key) {
        if covers(&mine["mode"], m) {
            return Ok(ScriptOp::Noop);
        }
        return Err(ScriptError::Refused(UPGRADE_REFUSAL.into()));
    }
    if holders.values().any(|h| !compatible(&h["mode"], m)) {
        return Err(ScriptError::Refused(
            "fsrename: refused by an incompatible lock".into(),
        ));
    }
    let listed = i64::try_from(holders.len()).unwrap_or(i64::MAX);
    let count = match field(s, "lock_count") {
        Value::Null => listed,
        other => integer(other, "lock_count")?,
    };
    if count > listed && !compatible(&Value::from("IX"), m) {
        return Err(ScriptError::Refused(
            "fsrename: refused by shares without a process_id".into(),
        ));
    }
    if params["queue"] == Value::Bool(true) {
        if let Value::Object(waiters) = field(s, "waiters") {
            for (other, e) in waiters {
                let since = &e["since"];
                if *other != key
                    && !e["expires_at"].is_null()
                    && !less(&e["expires_at"], &params["now"])?
                    && !since.is_null()
                    && (less(since, &params["since"])?
                        || (numbers_equal(since, &params["since"]) && *other < key))
                    && !compatible(&e["mode"], m)
                {
                    return Err(ScriptError::Refused(WAITER_REFUSAL.into()));
                }
            }
        }
    }
    let waiters = live(field(s, "waiters"), &params["now"], &key)?;
    if m == &Value::from("X") {
        s.clear();
        if let Value::Object(fields) = &params["exclusive"] {
            s.extend(fields.clone());
        }
        if !waiters.is_empty() {
            s.insert("waiters".into(), Value::Object(waiters));
        }
        return Ok(ScriptOp::Index);
    }
    holders.insert(key, params["entry"].clone());
    let lock_type = type_of(&holders);
    s.insert("holders".into(), Value::Object(holders));
    s.insert("lock_count".into(), Value::from(count + 1));
    if field(s, "path").is_null() {
        s.insert("path".into(), params["path"].clone());
    }
    if waiters.is_empty() {
        s.remove("waiters");
    } else {
        s.insert("waiters".into(), Value::Object(waiters));
    }
    s.insert("lock_type".into(), Value::from(lock_type));
    let expires = params["entry"]["expires_at"].clone();
    if field(s, "expires_at").is_null() || less(field(s, "expires_at"), &expires)? {
        s.insert("expires_at".into(), expires);
    }
    Ok(ScriptOp::Index)
}

/// Gives a lock back, in any mode. Params: `process_id`, `now`.
///
/// An exclusive-shaped document of ours is deleted, or, where live waiters are registered on
/// it, becomes a group document holding only them (so that their place in the queue
/// survives). A group document loses our holder entry and one from `lock_count` (never below
/// the entries still listed: foreign shares are kept), and is deleted once nobody holds it and
/// nobody live waits on it. Anything not ours is left alone (`noop`), so sending it twice is
/// harmless.
pub const RELEASE: LockScript = LockScript {
    id: "fsrename2-release",
    painless: concat!(
        mode_functions!(),
        "\
def s = ctx._source;
String pid = params.process_id;
if (s.holders == null && s.lock_type != 'shared') {
  if (s.process_id != pid) { ctx.op = 'noop'; return; }
  Map waiting = live(s.waiters, params.now, pid);
  if (waiting.isEmpty()) { ctx.op = 'delete'; return; }
  def path = s.path;
  s.clear();
  s.lock_type = 'shared';
  s.lock_count = 0;
  s.holders = new HashMap();
  s.waiters = waiting;
  if (path != null) { s.path = path; }
  return;
}
def holders = s.holders;
if (holders == null || !holders.containsKey(pid)) { ctx.op = 'noop'; return; }
holders.remove(pid);
def count = (s.lock_count == null ? 1 : s.lock_count) - 1;
if (count < holders.size()) { count = holders.size(); }
Map waiters = live(s.waiters, params.now, pid);
if (count <= 0 && waiters.isEmpty()) { ctx.op = 'delete'; return; }
s.lock_count = count;
if (waiters.isEmpty()) { s.remove('waiters'); } else { s.waiters = waiters; }
s.lock_type = typeOf(holders);
long latest = 0;
for (def h : holders.values()) { def e = h.get('expires_at'); if (e != null && e > latest) { latest = e; } }
if (latest > 0) { s.expires_at = latest; } else { s.remove('expires_at'); }"
    ),
    run: release,
};

fn release(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    let key = key_of(&params["process_id"])?;
    if !is_group(s) {
        if field(s, "process_id") != &params["process_id"] {
            return Ok(ScriptOp::Noop);
        }
        let waiting = live(field(s, "waiters"), &params["now"], &key)?;
        if waiting.is_empty() {
            return Ok(ScriptOp::Delete);
        }
        let path = field(s, "path").clone();
        s.clear();
        s.insert("lock_type".into(), Value::from("shared"));
        s.insert("lock_count".into(), Value::from(0));
        s.insert("holders".into(), Value::Object(Map::new()));
        s.insert("waiters".into(), Value::Object(waiting));
        if !path.is_null() {
            s.insert("path".into(), path);
        }
        return Ok(ScriptOp::Index);
    }
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
    let waiters = live(field(s, "waiters"), &params["now"], &key)?;
    if count <= 0 && waiters.is_empty() {
        return Ok(ScriptOp::Delete);
    }
    s.insert("lock_count".into(), Value::from(count));
    if waiters.is_empty() {
        s.remove("waiters");
    } else {
        s.insert("waiters".into(), Value::Object(waiters));
    }
    s.insert("lock_type".into(), Value::from(type_of(&remaining)));
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

/// Pushes this process's expiry forward; refuses if the lock is no longer its. Params:
/// `process_id`, `expires_at`.
pub const RENEW: LockScript = LockScript {
    id: "fsrename2-renew",
    painless: "\
def s = ctx._source;
if (s.holders != null || s.lock_type == 'shared') {
  def holders = s.holders;
  if (holders == null || !holders.containsKey(params.process_id)) { Debug.explain('fsrename: lost'); }
  holders.get(params.process_id).put('expires_at', params.expires_at);
  if (s.expires_at == null || s.expires_at < params.expires_at) { s.expires_at = params.expires_at; }
} else if (s.process_id == params.process_id) {
  s.expires_at = params.expires_at;
} else {
  Debug.explain('fsrename: lost');
}",
    run: renew,
};

fn renew(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    let expires = params["expires_at"].clone();
    if is_group(s) {
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

/// Registers (or renews) this process as a waiter on a lock document it was refused by.
/// Params: `process_id`, `entry` (`holder`, `mode`, `since`, `expires_at`, `job`), `now`. A
/// document that this process holds meanwhile is left alone; expired waiters are dropped.
pub const WAIT: LockScript = LockScript {
    id: "fsrename2-wait",
    painless: concat!(
        mode_functions!(),
        "\
def s = ctx._source;
String pid = params.process_id;
if (s.process_id == pid || (s.holders != null && s.holders.containsKey(pid))) { ctx.op = 'noop'; return; }
Map waiters = live(s.waiters, params.now, pid);
waiters.put(pid, params.entry);
s.waiters = waiters;"
    ),
    run: wait,
};

fn wait(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    let key = key_of(&params["process_id"])?;
    let holds = match field(s, "holders") {
        Value::Object(h) => h.contains_key(&key),
        _ => false,
    };
    if field(s, "process_id") == &params["process_id"] || holds {
        return Ok(ScriptOp::Noop);
    }
    let mut waiters = live(field(s, "waiters"), &params["now"], &key)?;
    waiters.insert(key, params["entry"].clone());
    s.insert("waiters".into(), Value::Object(waiters));
    Ok(ScriptOp::Index)
}

/// Removes this process's waiter entry (it gave up, or was cancelled). Params: `process_id`,
/// `now`. A group document left with no holder, no share and no live waiter is deleted.
pub const UNWAIT: LockScript = LockScript {
    id: "fsrename2-unwait",
    painless: concat!(
        mode_functions!(),
        "\
def s = ctx._source;
String pid = params.process_id;
if (s.waiters == null || !s.waiters.containsKey(pid)) { ctx.op = 'noop'; return; }
Map waiters = live(s.waiters, params.now, pid);
boolean group = s.holders != null || s.lock_type == 'shared';
if (group && waiters.isEmpty() && (s.holders == null || s.holders.isEmpty()) && (s.lock_count == null || s.lock_count <= 0)) { ctx.op = 'delete'; return; }
if (waiters.isEmpty()) { s.remove('waiters'); } else { s.waiters = waiters; }"
    ),
    run: unwait,
};

fn unwait(s: &mut Map<String, Value>, params: &Value) -> Result<ScriptOp, ScriptError> {
    let key = key_of(&params["process_id"])?;
    match field(s, "waiters") {
        Value::Object(w) if w.contains_key(&key) => {}
        _ => return Ok(ScriptOp::Noop),
    }
    let waiters = live(field(s, "waiters"), &params["now"], &key)?;
    let no_holders = match field(s, "holders") {
        Value::Object(h) => h.is_empty(),
        _ => true,
    };
    let no_count = match field(s, "lock_count") {
        Value::Null => true,
        other => integer(other, "lock_count")? <= 0,
    };
    if is_group(s) && waiters.is_empty() && no_holders && no_count {
        return Ok(ScriptOp::Delete);
    }
    if waiters.is_empty() {
        s.remove("waiters");
    } else {
        s.insert("waiters".into(), Value::Object(waiters));
    }
    Ok(ScriptOp::Index)
}

/// Every stored script of the lock protocol.
pub const LOCK_SCRIPTS: [LockScript; 5] = [ACQUIRE, RELEASE, RENEW, WAIT, UNWAIT];

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

/// True for a group document (fsrename's `holders`, or the book's `lock_type: shared`); false
/// for an exclusive-shaped one.
fn is_group(s: &Map<String, Value>) -> bool {
    !field(s, "holders").is_null() || field(s, "lock_type") == &Value::from("shared")
}

/// The painless `rank`: IS 0, IX 1 (also a missing mode), S 2, anything else X 3.
fn rank(mode: &Value) -> usize {
    match mode.as_str() {
        None if mode.is_null() => 1,
        Some("IX") => 1,
        Some("IS") => 0,
        Some("S") => 2,
        _ => 3,
    }
}

/// Gray's compatibility of two modes (the painless `compatible`).
fn compatible(a: &Value, b: &Value) -> bool {
    b"yyynyynnynynnnnn"[rank(a) * 4 + rank(b)] == b'y'
}

/// Whether holding `a` makes a request for `b` needless (the painless `covers`).
fn covers(a: &Value, b: &Value) -> bool {
    b"ynnnyynnynynyyyy"[rank(a) * 4 + rank(b)] == b'y'
}

/// The live waiters (expiry at or after `now`) other than `skip` (the painless `live`).
fn live(waiters: &Value, now: &Value, skip: &str) -> Result<Map<String, Value>, ScriptError> {
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
fn type_of(holders: &Map<String, Value>) -> &'static str {
    if holders.values().any(|h| h["mode"] == "S") {
        "exclusive"
    } else {
        "shared"
    }
}

/// Painless's `a == b` on two numbers.
fn numbers_equal(a: &Value, b: &Value) -> bool {
    matches!((a.as_f64(), b.as_f64()), (Some(a), Some(b)) if a == b)
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

    fn entry(mode: &str, expires_at: i64) -> Value {
        json!({"holder": "h", "acquired_at": 1, "expires_at": expires_at, "mode": mode})
    }

    fn ask(pid: &str, mode: &str, since: i64) -> Value {
        json!({"process_id": pid, "mode": mode, "path": "/x", "since": since, "now": 10,
               "queue": true, "entry": entry(mode, 50),
               "exclusive": {"lock_type": "exclusive", "process_id": pid, "path": "/x", "expires_at": 50}})
    }

    fn group(holders: Value) -> Value {
        let n = holders.as_object().map_or(0, Map::len);
        json!({"lock_type": "shared", "lock_count": n, "path": "/x", "holders": holders})
    }

    #[test]
    fn grays_table_on_one_document() {
        let modes = ["IS", "IX", "S", "X"];
        let want = [
            [true, true, true, false],
            [true, true, false, false],
            [true, false, true, false],
            [false, false, false, false],
        ];
        for (i, held) in modes.iter().enumerate() {
            for (j, asked) in modes.iter().enumerate() {
                let doc = if *held == "X" {
                    json!({"lock_type": "exclusive", "process_id": "p1", "path": "/x"})
                } else {
                    group(json!({"p1": entry(held, 40)}))
                };
                let (op, _) = run(&ACQUIRE, doc, ask("p2", asked, 5));
                assert_eq!(op.is_ok(), want[i][j], "{held} held, {asked} asked: {op:?}");
            }
        }
    }

    #[test]
    fn a_share_counts_each_process_once_and_s_looks_exclusive_to_the_book() {
        let doc = group(json!({"p1": entry("IS", 40)}));
        let (op, doc) = run(&ACQUIRE, doc, ask("p2", "S", 5));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["lock_count"], 2);
        assert_eq!(
            doc["lock_type"], "exclusive",
            "a book share must be refused"
        );
        assert_eq!(doc["expires_at"], 50);
        let (again, _) = run(&ACQUIRE, doc.clone(), ask("p2", "IS", 5));
        assert_eq!(again, Ok(ScriptOp::Noop), "S covers IS");
        let (upgrade, _) = run(&ACQUIRE, doc.clone(), ask("p1", "S", 5));
        assert_eq!(upgrade, Err(ScriptError::Refused(UPGRADE_REFUSAL.into())));
        let (op, doc) = run(&RELEASE, doc, json!({"process_id": "p2", "now": 10}));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["lock_type"], "shared");
        assert_eq!(doc["lock_count"], 1);
    }

    #[test]
    fn the_books_shares_count_as_ix() {
        let book = json!({"lock_type": "shared", "lock_count": 2});
        assert!(run(&ACQUIRE, book.clone(), ask("p2", "IS", 5)).0.is_ok());
        assert!(run(&ACQUIRE, book.clone(), ask("p2", "IX", 5)).0.is_ok());
        assert!(run(&ACQUIRE, book.clone(), ask("p2", "S", 5)).0.is_err());
        assert!(run(&ACQUIRE, book, ask("p2", "X", 5)).0.is_err());
        let (op, doc) = run(
            &ACQUIRE,
            json!({"lock_type": "shared", "lock_count": 1}),
            ask("p2", "IX", 5),
        );
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["lock_count"], 2);
        let (op, doc) = run(&RELEASE, doc, json!({"process_id": "p2", "now": 10}));
        assert_eq!(
            (op, doc["lock_count"].clone()),
            (Ok(ScriptOp::Index), json!(1))
        );
    }

    #[test]
    fn exclusive_documents_refuse_all_but_their_owner() {
        for doc in [
            json!({"lock_type": "exclusive"}),
            json!({"process_id": 123}),
            json!({}),
        ] {
            for mode in ["IS", "IX", "S", "X"] {
                assert!(matches!(
                    run(&ACQUIRE, doc.clone(), ask("p2", mode, 5)).0,
                    Err(ScriptError::Refused(_))
                ));
            }
        }
        let ours = json!({"lock_type": "exclusive", "process_id": "p2"});
        assert_eq!(
            run(&ACQUIRE, ours, ask("p2", "IX", 5)).0,
            Ok(ScriptOp::Noop)
        );
    }

    #[test]
    fn older_live_waiters_refuse_younger_conflicting_requests() {
        let waiter = json!({"holder": "w", "mode": "X", "since": 3, "expires_at": 40});
        let mut doc = group(json!({"p1": entry("IX", 40)}));
        doc["waiters"] = json!({"w": waiter});
        // Younger and incompatible: refused. Older: granted. Compatible modes are never
        // refused by a waiter in a compatible mode (no X waiter here would be compatible).
        assert_eq!(
            run(&ACQUIRE, doc.clone(), ask("p2", "IX", 5)).0,
            Err(ScriptError::Refused(WAITER_REFUSAL.into()))
        );
        assert_eq!(
            run(&ACQUIRE, doc.clone(), ask("p2", "IX", 2)).0,
            Ok(ScriptOp::Index)
        );
        // Ties go by process id.
        assert!(run(&ACQUIRE, doc.clone(), ask("a", "IX", 3)).0.is_ok());
        assert!(run(&ACQUIRE, doc.clone(), ask("z", "IX", 3)).0.is_err());
        // Without the queue (a client that already holds locks), waiters are not looked at.
        let mut bypass = ask("p2", "IX", 5);
        bypass["queue"] = json!(false);
        assert!(run(&ACQUIRE, doc.clone(), bypass).0.is_ok());
        // An expired waiter blocks nobody, and a grant drops it.
        doc["waiters"]["w"]["expires_at"] = json!(9);
        let (op, after) = run(&ACQUIRE, doc, ask("p2", "IX", 5));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert!(after.get("waiters").is_none(), "{after}");
    }

    #[test]
    fn waiters_register_keep_their_place_and_leave() {
        let x =
            json!({"lock_type": "exclusive", "process_id": "p1", "path": "/x", "expires_at": 40});
        let w = json!({"process_id": "w", "now": 10,
                       "entry": {"holder": "w", "mode": "IX", "since": 3, "expires_at": 40}});
        let (op, doc) = run(&WAIT, x, w.clone());
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["waiters"]["w"]["mode"], "IX");
        // The holder leaves: the document stays, holding only the waiter.
        let (op, doc) = run(&RELEASE, doc, json!({"process_id": "p1", "now": 10}));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["lock_count"], 0);
        assert_eq!(doc["holders"], json!({}));
        assert_eq!(doc["path"], "/x");
        // A younger X is refused there; the waiter itself is granted and its entry goes.
        assert!(run(&ACQUIRE, doc.clone(), ask("p9", "X", 5)).0.is_err());
        let (op, granted) = run(&ACQUIRE, doc.clone(), ask("w", "IX", 3));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert!(granted.get("waiters").is_none());
        assert_eq!(granted["lock_count"], 1);
        // A waiter that gives up leaves nothing behind.
        let (op, _) = run(&UNWAIT, doc, json!({"process_id": "w", "now": 10}));
        assert_eq!(op, Ok(ScriptOp::Delete));
        // Registering where we hold already does nothing.
        let ours = json!({"lock_type": "exclusive", "process_id": "w"});
        assert_eq!(run(&WAIT, ours, w).0, Ok(ScriptOp::Noop));
    }

    #[test]
    fn an_x_granted_over_waiters_keeps_the_others() {
        let doc = json!({"lock_type": "shared", "lock_count": 0, "holders": {}, "path": "/x",
                         "waiters": {"old": {"mode": "IX", "since": 9, "expires_at": 40},
                                     "dead": {"mode": "X", "since": 1, "expires_at": 2}}});
        let (op, doc) = run(&ACQUIRE, doc, ask("p2", "X", 5));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["process_id"], "p2");
        assert_eq!(doc["lock_type"], "exclusive");
        assert_eq!(doc["waiters"].as_object().map(Map::len), Some(1));
        assert!(doc.get("holders").is_none());
    }

    #[test]
    fn renewal_moves_only_our_expiry() {
        let doc = json!({"lock_type": "exclusive", "lock_count": 2, "expires_at": 40,
                         "holders": {"p1": entry("S", 40), "p2": entry("IS", 30)}});
        let (op, doc) = run(&RENEW, doc, json!({"process_id": "p2", "expires_at": 90}));
        assert_eq!(op, Ok(ScriptOp::Index));
        assert_eq!(doc["holders"]["p2"]["expires_at"], 90);
        assert_eq!(doc["holders"]["p1"]["expires_at"], 40);
        let (lost, _) = run(&RENEW, doc, json!({"process_id": "p3", "expires_at": 90}));
        assert!(matches!(lost, Err(ScriptError::Refused(_))));
    }

    #[test]
    fn scripts_are_found_by_id_and_by_source_and_are_new() {
        for script in LOCK_SCRIPTS {
            assert_eq!(lock_script(script.id).map(|s| s.id), Some(script.id));
            assert_eq!(
                lock_script_by_source(script.painless).map(|s| s.id),
                Some(script.id)
            );
            assert!(script.id.starts_with("fsrename2-"), "{}", script.id);
        }
        assert!(lock_script("fsrename-shared-acquire").is_none());
    }
}
