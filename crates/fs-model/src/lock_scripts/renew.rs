//! The renew script: pushes a holder's expiry forward.

use serde_json::{Map, Value};

use super::prelude::{field, is_group, key_of, less};
use super::{LockScript, ScriptError, ScriptOp};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock_scripts::testing::*;
    use serde_json::json;

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
}
