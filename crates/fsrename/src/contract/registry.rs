//! Every type of the contract, and their JSON Schemas: what `fsrename schema` prints and
//! `docs/schema/` keeps.

use fs_rename::{FsckReport, IndexReport, RecoveryReport, RenameEvent, WatchBatch, WatchReport};
use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::lines::{
    CaughtUp, DemoReport, DemoRun, EntryLine, ErrorLine, FindReport, LocksReport, LsReport,
    MkdirReport, TouchReport,
};
use super::{Contract, Job, LockView, VERSION};

impl Contract for Job {
    const TYPE: &'static str = "job";

    /// A job carries its own `type` (the service answers it as is, and the jobs index stores
    /// it so).
    fn to_line(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }

    fn line_schema(generator: &mut SchemaGenerator) -> Schema {
        <Job as schemars::JsonSchema>::json_schema(generator)
    }
}

impl Contract for LockView {
    const TYPE: &'static str = "lock";
}

impl Contract for RenameEvent {
    const TYPE: &'static str = "job_event";
}

impl Contract for IndexReport {
    const TYPE: &'static str = "index_report";
}

impl Contract for WatchBatch {
    const TYPE: &'static str = "watch_batch";
}

impl Contract for WatchReport {
    const TYPE: &'static str = "watch_report";
}

impl Contract for RecoveryReport {
    const TYPE: &'static str = "recover_report";
}

impl Contract for FsckReport {
    const TYPE: &'static str = "fsck_report";
}

/// One type of the contract: its name, what prints it, and how its schema is made.
pub struct TypeInfo {
    /// The `type` of its lines.
    pub name: &'static str,
    /// Which verbs print it, and where.
    pub printed_by: &'static str,
    schema: fn(&mut SchemaGenerator) -> Schema,
}

/// Every type of the contract, in the order `docs/json.md` lists them.
pub const TYPES: &[TypeInfo] = &[
    TypeInfo {
        name: EntryLine::TYPE,
        printed_by: "`ls --json`, `find --json`: one line per entry",
        schema: EntryLine::line_schema,
    },
    TypeInfo {
        name: LsReport::TYPE,
        printed_by: "`ls --json`: the last line",
        schema: LsReport::line_schema,
    },
    TypeInfo {
        name: FindReport::TYPE,
        printed_by: "`find --json`: the last line",
        schema: FindReport::line_schema,
    },
    TypeInfo {
        name: LockView::TYPE,
        printed_by: "`locks --json`: one line per lock document (and `GET /locks`)",
        schema: LockView::line_schema,
    },
    TypeInfo {
        name: LocksReport::TYPE,
        printed_by: "`locks --json`: the last line",
        schema: LocksReport::line_schema,
    },
    TypeInfo {
        name: Job::TYPE,
        printed_by:
            "`mv`, `cp`, `rm` with `--json`: the last line (and the service's job resources)",
        schema: Job::line_schema,
    },
    TypeInfo {
        name: RenameEvent::TYPE,
        printed_by:
            "`mv`, `cp`, `rm` with `--progress json`: one line per event, on standard error",
        schema: RenameEvent::line_schema,
    },
    TypeInfo {
        name: IndexReport::TYPE,
        printed_by: "`index --json`: the last line; with `--watch`, the first run's",
        schema: IndexReport::line_schema,
    },
    TypeInfo {
        name: WatchBatch::TYPE,
        printed_by: "`index --watch --json`: one line per batch of changes applied",
        schema: WatchBatch::line_schema,
    },
    TypeInfo {
        name: CaughtUp::TYPE,
        printed_by: "`index --watch --json`: the store is in step with every change seen",
        schema: CaughtUp::line_schema,
    },
    TypeInfo {
        name: WatchReport::TYPE,
        printed_by: "`index --watch --json`: the last line, once stopped",
        schema: WatchReport::line_schema,
    },
    TypeInfo {
        name: MkdirReport::TYPE,
        printed_by: "`mkdir --json`",
        schema: MkdirReport::line_schema,
    },
    TypeInfo {
        name: TouchReport::TYPE,
        printed_by: "`touch --json`",
        schema: TouchReport::line_schema,
    },
    TypeInfo {
        name: FsckReport::TYPE,
        printed_by: "`fsck --json`",
        schema: FsckReport::line_schema,
    },
    TypeInfo {
        name: RecoveryReport::TYPE,
        printed_by: "`recover --json`",
        schema: RecoveryReport::line_schema,
    },
    TypeInfo {
        name: DemoRun::TYPE,
        printed_by: "`demo --json`: one line per run",
        schema: DemoRun::line_schema,
    },
    TypeInfo {
        name: DemoReport::TYPE,
        printed_by: "`demo --json`: the last line",
        schema: DemoReport::line_schema,
    },
    TypeInfo {
        name: ErrorLine::TYPE,
        printed_by: "any verb with `--json` that could not give its report: the last line",
        schema: ErrorLine::line_schema,
    },
];

/// The generator of every schema: JSON Schema 2020-12, describing what is written.
fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
}

/// The schema of the type named `name`, standing alone (with the definitions it refers to),
/// if the contract has such a type.
pub fn schema_of(name: &str) -> Option<Value> {
    let info = TYPES.iter().find(|t| t.name == name)?;
    let mut generator = generator();
    let schema = (info.schema)(&mut generator);
    let mut object = Map::new();
    object.insert(
        "$schema".to_owned(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    object.insert(
        "$id".to_owned(),
        json!(format!("fsrename:contract:v{VERSION}:{name}")),
    );
    object.insert("title".to_owned(), json!(format!("fsrename `{name}` line")));
    object.insert(
        "$comment".to_owned(),
        json!(format!(
            "Contract version {VERSION}. Printed by {}.",
            info.printed_by
        )),
    );
    if let Value::Object(fields) = schema.to_value() {
        object.extend(fields);
    }
    let definitions = generator.take_definitions(true);
    if !definitions.is_empty() {
        object.insert("$defs".to_owned(), Value::Object(definitions));
    }
    Some(Value::Object(object))
}

/// One schema for any line of the contract: every type under `$defs` by its name, and the
/// line one of them (told apart by `type`).
pub fn schemas() -> Value {
    let mut generator = generator();
    let mut one_of = Vec::new();
    let mut types = Map::new();
    for info in TYPES {
        types.insert(
            info.name.to_owned(),
            (info.schema)(&mut generator).to_value(),
        );
        one_of.push(json!({ "$ref": format!("#/$defs/{}", info.name) }));
    }
    let mut definitions = generator.take_definitions(true);
    definitions.extend(types);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": format!("fsrename:contract:v{VERSION}"),
        "title": "A line of fsrename's JSON output",
        "$comment": format!("Contract version {VERSION}: docs/json.md says what a version means."),
        "version": VERSION,
        "oneOf": one_of,
        "$defs": definitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_a_schema_that_requires_its_type() {
        let all = schemas();
        for info in TYPES {
            let one = schema_of(info.name).expect("a schema");
            assert_eq!(
                one["properties"]["type"]["const"], info.name,
                "{}: {one:#}",
                info.name
            );
            assert!(
                one["required"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!("type"))),
                "{}: {one:#}",
                info.name
            );
            assert!(all["$defs"][info.name].is_object(), "{}", info.name);
        }
        let mut names: Vec<&str> = TYPES.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TYPES.len(), "a type named twice");
    }

    /// `docs/schema/` holds what `fsrename schema NAME` prints, for readers without the
    /// binary. `FSRENAME_BLESS=1 cargo test -p fsrename --lib contract` writes it anew.
    #[test]
    fn the_published_schemas_are_the_types_own() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema");
        let bless = std::env::var_os("FSRENAME_BLESS").is_some();
        let mut stale = Vec::new();
        for info in TYPES {
            let schema = schema_of(info.name).expect("a schema");
            let text = serde_json::to_string_pretty(&schema).expect("JSON") + "\n";
            let path = dir.join(format!("{}.json", info.name));
            if bless {
                std::fs::create_dir_all(&dir).expect("mkdir docs/schema");
                std::fs::write(&path, &text).expect("write the schema");
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(info.name);
            }
        }
        let published: Vec<String> = std::fs::read_dir(&dir)
            .expect("docs/schema")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".json"))
            .collect();
        assert_eq!(published.len(), TYPES.len(), "{published:?}");
        assert!(
            stale.is_empty(),
            "docs/schema is out of date for {stale:?}: run `FSRENAME_BLESS=1 cargo test -p fsrename --lib contract`"
        );
    }
}
