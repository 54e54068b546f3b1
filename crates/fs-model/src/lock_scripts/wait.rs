//! The wait and unwait scripts: a refused request registers as a waiter, and leaves.

use serde_json::{Map, Value};

use super::prelude::{const_concat, field, integer, is_group, key_of, live, put_waiters, PRELUDE};
use super::{LockScript, ScriptError, ScriptOp};

/// Registers (or renews) this process as a waiter on a lock document it was refused by.
/// Params: `process_id`, `entry` (`holder`, `mode`, `since`, `expires_at`, `job`), `now`. A
/// document that this process holds meanwhile is left alone; expired waiters are dropped.
pub const WAIT: LockScript = LockScript {
    id: "fsrename2-wait",
    painless: const_concat!(
        PRELUDE,
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
    painless: const_concat!(
        PRELUDE,
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
    put_waiters(s, waiters);
    Ok(ScriptOp::Index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock_scripts::testing::*;
    use crate::lock_scripts::{ACQUIRE, RELEASE};
    use serde_json::json;

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
}
