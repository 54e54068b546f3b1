//! The acquire script: takes a lock in any mode, or refuses.

use serde_json::{Map, Value};

use super::prelude::{
    compatible, const_concat, covers, field, integer, is_group, key_of, less, live, numbers_equal,
    put_waiters, type_of, PRELUDE,
};
use super::{LockScript, ScriptError, ScriptOp, UPGRADE_REFUSAL, WAITER_REFUSAL};

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
    painless: const_concat!(
        PRELUDE,
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
        put_waiters(s, waiters);
        return Ok(ScriptOp::Index);
    }
    holders.insert(key, params["entry"].clone());
    let lock_type = type_of(&holders);
    s.insert("holders".into(), Value::Object(holders));
    s.insert("lock_count".into(), Value::from(count + 1));
    if field(s, "path").is_null() {
        s.insert("path".into(), params["path"].clone());
    }
    put_waiters(s, waiters);
    s.insert("lock_type".into(), Value::from(lock_type));
    let expires = params["entry"]["expires_at"].clone();
    if field(s, "expires_at").is_null() || less(field(s, "expires_at"), &expires)? {
        s.insert("expires_at".into(), expires);
    }
    Ok(ScriptOp::Index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock_scripts::testing::*;
    use crate::lock_scripts::RELEASE;
    use serde_json::json;

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
}
