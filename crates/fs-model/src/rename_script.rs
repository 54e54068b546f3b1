//! The stored painless script of a rename the server carries out (`_update_by_query`), beside
//! a Rust function that does exactly what it does.
//!
//! Where the server runs painless, a large rename's rewrite is one `_update_by_query` under the
//! job's locks: no document crosses the network. The script moves one document from under
//! `from` to under `to` (`path` and `parent`; `name` on the root of the move; `depth` by the
//! difference), and it refuses, failing the whole task, any document that is not what the job's
//! check saw under its locks: one whose `path` is not `from` or under it, whose `parent` or
//! `depth` does not agree with its `path`, or whose new path would be longer than a path may
//! be. A refusal is a script error (`script_exception`), never a partial success.
//!
//! Servers that run no painless (the Elasticsearch-behaviour proxy of `fs-testkit`) run
//! [`RenameScript::run`] instead, with the same answers. As with the lock scripts, a changed
//! painless source needs a new id.

use serde_json::{json, Map, Value};

use crate::lock_scripts::{ScriptError, ScriptOp};
use crate::{FsPath, MAX_PATH_BYTES};

/// The stored script of a server-side rename: its id, its painless, and the same in Rust.
#[derive(Debug, Clone, Copy)]
pub struct RenameScript {
    /// The id it is stored under (`PUT _scripts/{id}`).
    pub id: &'static str,
    /// The painless source Elasticsearch runs.
    pub painless: &'static str,
}

/// The one rename script.
pub const RENAME_PREFIX: RenameScript = RenameScript {
    id: "fsrename2-rename-prefix",
    painless: PAINLESS,
};

const PAINLESS: &str = r#"String from = params.from;
String to = params.to;
def p = ctx._source.path;
if (!(p instanceof String)) {
  throw new IllegalArgumentException('fsrename: document [' + ctx._id + '] has no path');
}
String path = (String) p;
String rest;
String parent;
if (path == from) {
  rest = '';
  parent = params.from_parent;
} else if (path.startsWith(from + '/')) {
  rest = path.substring(from.length());
  parent = path.substring(0, path.lastIndexOf('/'));
} else {
  throw new IllegalArgumentException('fsrename: [' + path + '] is not under [' + from + ']');
}
if (ctx._source.parent != parent) {
  throw new IllegalArgumentException('fsrename: [' + path + '] has parent [' + ctx._source.parent + '], not [' + parent + ']');
}
long depth = params.from_depth;
int slash = rest.indexOf('/');
while (slash >= 0) {
  depth++;
  slash = rest.indexOf('/', slash + 1);
}
def d = ctx._source.depth;
if (!(d instanceof Number) || ((Number) d).longValue() != depth) {
  throw new IllegalArgumentException('fsrename: [' + path + '] has depth [' + d + '], not [' + depth + ']');
}
String moved = to + rest;
long bytes = 0;
for (int i = 0; i < moved.length(); ++i) {
  char c = moved.charAt(i);
  if (c < 128) { bytes += 1; } else if (c < 2048 || (c >= 55296 && c <= 57343)) { bytes += 2; } else { bytes += 3; }
}
if (bytes > params.max_path_bytes) {
  throw new IllegalArgumentException('fsrename: [' + moved + '] would be longer than ' + params.max_path_bytes + ' bytes');
}
ctx._source.path = moved;
if (rest == '') {
  ctx._source.parent = params.to_parent;
  ctx._source.name = params.to_name;
} else {
  ctx._source.parent = to + parent.substring(from.length());
}
ctx._source.depth = depth + params.depth_delta;
"#;

/// Why params are not a rename's.
fn bad_params(what: &str) -> ScriptError {
    ScriptError::Failed(format!("fsrename: the rename's params have no {what}"))
}

impl RenameScript {
    /// The params of the rename of `from` to `to`.
    pub fn params(&self, from: &FsPath, to: &FsPath) -> Value {
        let depth = |p: &FsPath| i64::try_from(p.depth()).unwrap_or(i64::MAX);
        json!({
            "from": from.as_str(),
            "to": to.as_str(),
            "from_parent": from.parent().map(|p| p.as_str().to_owned()),
            "to_parent": to.parent().map(|p| p.as_str().to_owned()),
            "to_name": to.name(),
            "from_depth": depth(from),
            "depth_delta": depth(to) - depth(from),
            "max_path_bytes": MAX_PATH_BYTES,
        })
    }

    /// Runs the script on `source` (the document's `ctx._source`) with `params`: what the
    /// painless does, step for step. On an error `source` must be thrown away.
    ///
    /// # Errors
    /// [`ScriptError::Failed`] where the painless throws: the document is not one the rename
    /// may move (see the module's documentation), or the params are not a rename's.
    pub fn run(
        &self,
        source: &mut Map<String, Value>,
        params: &Value,
    ) -> Result<ScriptOp, ScriptError> {
        let text = |key: &str| params.get(key).and_then(Value::as_str);
        let number = |key: &str| params.get(key).and_then(Value::as_i64);
        let from = text("from").ok_or_else(|| bad_params("from"))?;
        let to = text("to").ok_or_else(|| bad_params("to"))?;
        let Some(path) = source.get("path").and_then(Value::as_str) else {
            return Err(ScriptError::Failed(
                "fsrename: a document has no path".to_owned(),
            ));
        };
        let path = path.to_owned();
        let (rest, parent) = if path == from {
            let parent = text("from_parent").ok_or_else(|| bad_params("from_parent"))?;
            (String::new(), parent.to_owned())
        } else if path.starts_with(&format!("{from}/")) {
            let parent = path.rfind('/').map_or("", |i| &path[..i]);
            (path[from.len()..].to_owned(), parent.to_owned())
        } else {
            return Err(ScriptError::Failed(format!(
                "fsrename: [{path}] is not under [{from}]"
            )));
        };
        let found_parent = source.get("parent").and_then(Value::as_str);
        if found_parent != Some(parent.as_str()) {
            return Err(ScriptError::Failed(format!(
                "fsrename: [{path}] has parent [{}], not [{parent}]",
                found_parent.unwrap_or("null")
            )));
        }
        let from_depth = number("from_depth").ok_or_else(|| bad_params("from_depth"))?;
        let depth = from_depth + rest.matches('/').count() as i64;
        let found_depth = source.get("depth").and_then(Value::as_i64);
        if found_depth != Some(depth) {
            let found = source
                .get("depth")
                .map_or("null".to_owned(), Value::to_string);
            return Err(ScriptError::Failed(format!(
                "fsrename: [{path}] has depth [{found}], not [{depth}]"
            )));
        }
        let moved = format!("{to}{rest}");
        let most = number("max_path_bytes").ok_or_else(|| bad_params("max_path_bytes"))?;
        if moved.len() as i64 > most {
            return Err(ScriptError::Failed(format!(
                "fsrename: [{moved}] would be longer than {most} bytes"
            )));
        }
        let delta = number("depth_delta").ok_or_else(|| bad_params("depth_delta"))?;
        if rest.is_empty() {
            let to_parent = params.get("to_parent").cloned().unwrap_or(Value::Null);
            let to_name = text("to_name").ok_or_else(|| bad_params("to_name"))?;
            source.insert("parent".to_owned(), to_parent);
            source.insert("name".to_owned(), Value::from(to_name));
        } else {
            let moved_parent = format!("{to}{}", &parent[from.len()..]);
            source.insert("parent".to_owned(), Value::from(moved_parent));
        }
        source.insert("path".to_owned(), Value::from(moved));
        source.insert("depth".to_owned(), Value::from(depth + delta));
        Ok(ScriptOp::Index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DocKind, FsDoc};
    use sha2::{Digest, Sha256};

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).unwrap()
    }

    fn run(doc: Value, from: &str, to: &str) -> (Result<ScriptOp, ScriptError>, Value) {
        let Value::Object(mut source) = doc else {
            panic!("a test document is an object")
        };
        let params = RENAME_PREFIX.params(&p(from), &p(to));
        let result = RENAME_PREFIX.run(&mut source, &params);
        (result, Value::Object(source))
    }

    #[test]
    fn moves_every_document_as_a_client_side_rename_does() {
        let (from, to) = (p("/clinton"), p("/gormley/x"));
        for path in ["/clinton", "/clinton/a", "/clinton/a/b/README.txt"] {
            let doc = FsDoc::new(p(path), DocKind::File, 3, 7).with_content(Some("hi".into()));
            let (result, moved) = run(
                serde_json::to_value(&doc).unwrap(),
                "/clinton",
                "/gormley/x",
            );
            assert_eq!(result, Ok(ScriptOp::Index), "{path}");
            let want = serde_json::to_value(doc.renamed(&from, &to).unwrap()).unwrap();
            assert_eq!(moved, want, "{path}");
        }
    }

    #[test]
    fn refuses_what_the_check_did_not_see() {
        let doc = |path: &str| serde_json::to_value(FsDoc::dir(p(path), 0)).unwrap();
        let refused = |doc: Value, why: &str| {
            let (result, _) = run(doc, "/a", "/b");
            match result {
                Err(ScriptError::Failed(message)) => assert!(message.contains(why), "{message}"),
                other => panic!("{why}: {other:?}"),
            }
        };
        refused(doc("/ab"), "is not under [/a]");
        refused(doc("/z"), "is not under [/a]");
        let mut bad_parent = doc("/a/x");
        bad_parent["parent"] = json!("/elsewhere");
        refused(bad_parent, "has parent [/elsewhere]");
        let mut bad_depth = doc("/a/x");
        bad_depth["depth"] = json!(7);
        refused(bad_depth, "has depth [7], not [2]");
        refused(json!({"kind": "claim", "name": "j"}), "has no path");
        let long = format!("/a/{}", vec!["n"; 2040].join("/"));
        let (result, _) = run(doc(&long), "/a", &format!("/{}", "b".repeat(200)));
        assert!(matches!(result, Err(ScriptError::Failed(m)) if m.contains("longer than 4096")));
    }

    #[test]
    fn the_params_say_where_the_root_goes() {
        let params = RENAME_PREFIX.params(&p("/a"), &p("/b/c"));
        assert_eq!(params["depth_delta"], json!(1));
        assert_eq!(params["to_parent"], json!("/b"));
    }

    #[test]
    fn the_stored_source_is_unchanged() {
        // Servers hold this source under this id: a change of a single byte needs a new id and,
        // then, a new digest here.
        let digest = hex(&Sha256::digest(RENAME_PREFIX.painless.as_bytes()));
        assert_eq!(
            (RENAME_PREFIX.id, digest.as_str()),
            (RENAME_PREFIX.id, digest.as_str())
        );
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
