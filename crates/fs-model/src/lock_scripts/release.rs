//! The release script: gives a lock back, in any mode.

use serde_json::{Map, Value};

use super::prelude::{
    const_concat, field, integer, is_group, key_of, live, put_waiters, type_of, PRELUDE,
};
use super::{LockScript, ScriptError, ScriptOp};

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
    painless: const_concat!(
        PRELUDE,
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
    put_waiters(s, waiters);
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
