//! The JSON contract: what every verb prints with `--json`, and what the service answers for a
//! job, each a value of one type defined once.
//!
//! Every line is one JSON object with a `type` ([`Contract::TYPE`]); durations are whole
//! milliseconds named `*_ms`; paths are strings. A verb's report is its last line, also when it
//! found nothing; a verb that could not make one ends with an [`ErrorLine`]. `fsrename schema`
//! prints the JSON Schema of every type, derived from the types themselves (`schemars`), so the
//! published schema cannot drift from what is printed; `docs/json.md` says how the contract is
//! versioned ([`VERSION`]).
//!
//! - [`job`]: the job of `mv`, `cp` and `rm` ([`Job`]), which the service's job resources are too;
//! - [`lock`]: a lock document as `locks` and `GET /locks` show it ([`LockView`]);
//! - `lines.rs`: the small reports of the command line's other verbs, and [`ErrorLine`];
//! - `registry.rs`: every type of the contract, and the schemas `fsrename schema` prints.

pub mod job;
mod lines;
pub mod lock;
mod registry;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;

pub use job::{Job, JobState, Progress, Work};
pub use lines::{
    CaughtUp, DemoReport, DemoRun, EntryLine, ErrorLine, FindReport, LocksReport, LsReport,
    MkdirReport, TouchReport,
};
pub use lock::LockView;
pub use registry::{schema_of, schemas, TYPES};

/// The version of the contract. A change that can break a reader (a field removed, renamed or
/// given another meaning or type, a `type` removed) makes the next version; adding a field or
/// a `type` does not (readers ignore what they do not know). `docs/json.md` says so.
pub const VERSION: u32 = 1;

/// A value that is one line of the contract: it has a `type`, and a schema.
pub trait Contract: Serialize + JsonSchema {
    /// The `type` of its lines: `entry`, `job`, `fsck_report`...
    const TYPE: &'static str;

    /// Returns the value as one line of JSON, `type` first.
    ///
    /// # Errors
    /// A value that cannot be serialised (a map with keys that are not strings: none here).
    fn to_line(&self) -> serde_json::Result<String> {
        serde_json::to_string(&Typed {
            kind: Self::TYPE,
            value: self,
        })
    }

    /// Returns the schema of its lines: the type's own, with `type` added and required.
    fn line_schema(generator: &mut SchemaGenerator) -> Schema {
        typed_schema(Self::json_schema(generator), Self::TYPE)
    }
}

/// A value and its `type`, as a line writes them.
#[derive(Serialize)]
struct Typed<'a, T: ?Sized> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    value: &'a T,
}

/// `schema` with a required `type` property whose value is `kind`.
fn typed_schema(mut schema: Schema, kind: &str) -> Schema {
    let object = schema.ensure_object();
    let properties = object
        .entry("properties")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    if let serde_json::Value::Object(properties) = properties {
        properties.insert(
            "type".to_owned(),
            serde_json::json!({ "const": kind, "description": "What the line is." }),
        );
    }
    let required = object
        .entry("required")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let serde_json::Value::Array(required) = required {
        required.insert(0, serde_json::Value::from("type"));
    }
    object.insert("type".to_owned(), serde_json::Value::from("object"));
    schema
}
