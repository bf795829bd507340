//! Schema evolution on write against real services: new fields at any depth, widening,
//! required → optional, concurrent evolvers, the policy without evolution, inference
//! from sparse first values. SeaweedFS + Apache's REST fixture (and the embedded
//! catalog); pyiceberg and DuckDB read back what was written.

mod support;

use std::sync::Arc;

use floe::catalog::{LoadedTable, table_ident};
use floe::config::Config;
use floe::writer::{Message, Writer};
use iceberg::TableUpdate;
use iceberg::spec::FormatVersion;
use serde_json::{Value, json};
use support::{merge, messages, read_back, runtime, services, write_ok};

fn rest_config(extra: Value) -> Config {
    let mut c = services().floe_config();
    merge(
        &mut c,
        json!({"namespace": "evolution", "schema_evolution": {"enabled": true}}),
    );
    merge(&mut c, extra);
    Config::from_json(&c.to_string()).unwrap()
}

fn texts(rows: &[Value]) -> Vec<String> {
    rows.iter().map(Value::to_string).collect()
}

/// One call; every message must be written.
fn write_all(rt: &tokio::runtime::Runtime, writer: &Writer, rows: &[Value]) {
    assert_eq!(write_ok(rt, writer, &texts(rows)), rows.len());
}

/// Rows of a REST table as pyiceberg reads them, sorted by `id`.
fn pyiceberg_rows(table: &str) -> Vec<Value> {
    let out = read_back(
        "pyiceberg-rest",
        services().pyiceberg_args(&format!("evolution.{table}")),
    );
    let mut rows = out["rows"].as_array().unwrap().clone();
    rows.sort_by_key(|r| r["id"].as_i64());
    rows
}

/// The table `ns.name` as the writer's catalog has it now.
fn load(rt: &tokio::runtime::Runtime, writer: &Writer, ns: &str, name: &str) -> LoadedTable {
    rt.block_on(writer.catalog().load_table(&table_ident(ns, name).unwrap()))
        .unwrap()
        .expect("the table exists")
}

/// DuckDB's answer to `sql` (`$T` is the table) over the table's current metadata.
fn duckdb(rt: &tokio::runtime::Runtime, writer: &Writer, table: &str, sql: &str) -> Vec<Value> {
    let loaded = load(rt, writer, "evolution", table);
    let out = read_back(
        "duckdb-s3",
        json!({"metadata": loaded.metadata_location.unwrap(),
               "s3": services().duckdb_s3(), "sql": sql}),
    );
    out["rows"].as_array().unwrap().clone()
}

/// The report's case: the second batch adds a top-level column and a nested field, the
/// third a struct three levels deep, in a list element and in a map value. Every value
/// is read back; before evolution they were dropped without a word. The table starts
/// with a map column only (JSON objects are inferred as structs): the first batch adds
/// the rest.
#[test]
fn new_fields_at_any_depth_are_added_and_written() {
    let rt = runtime();
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "attrs", "required": false, "type": {"type": "map",
            "key-id": 3, "key": "string", "value-id": 4, "value-required": false,
            "value": {"type": "struct", "fields": [
                {"id": 5, "name": "v", "required": false, "type": "long"}]}}}
    ]});
    let writer = rt
        .block_on(Writer::open(rest_config(
            json!({"table": "nested", "schema_evolution": {"schema": schema}}),
        )))
        .unwrap();
    write_all(
        &rt,
        &writer,
        &[
            json!({"id": 1, "user": {"name": "a"}, "items": [{"sku": "x"}], "attrs": {"k": {"v": 1}}}),
        ],
    );
    write_all(
        &rt,
        &writer,
        &[json!({"id": 2, "country": "NL", "user": {"name": "b", "age": 30}})],
    );
    write_all(
        &rt,
        &writer,
        &[
            json!({"id": 3, "user": {"name": "c", "address": {"geo": {"lat": 52.1}}},
                 "items": [{"sku": "y", "qty": 2}], "attrs": {"k": {"v": 2, "note": "n"}}}),
        ],
    );
    let rows = pyiceberg_rows("nested");
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["country"], Value::Null);
    assert_eq!(rows[1]["country"], "NL");
    assert_eq!(rows[1]["user"]["age"], 30);
    assert_eq!(rows[2]["user"]["address"]["geo"]["lat"], 52.1);
    assert_eq!(rows[2]["items"][0]["qty"], 2);
    // pyiceberg reads maps as lists of key/value pairs.
    assert_eq!(rows[2]["attrs"], json!([["k", {"note": "n", "v": 2}]]));
    let duck = duckdb(
        &rt,
        &writer,
        "nested",
        "SELECT id, user.address.geo.lat AS lat, items[1].qty AS qty FROM $T ORDER BY id",
    );
    assert_eq!(
        duck,
        vec![
            json!({"id": 1, "lat": null, "qty": null}),
            json!({"id": 2, "lat": null, "qty": null}),
            json!({"id": 3, "lat": 52.1, "qty": 2}),
        ]
    );
}

/// A table created with narrow and required columns: values that need more widen the
/// column, and a null relaxes a required one; a value no promotion fits keeps its error
/// while the rest of the batch is written.
#[test]
fn columns_widen_and_relax_where_a_value_needs_it() {
    let rt = runtime();
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "n", "required": true, "type": "int"},
        {"id": 3, "name": "f", "required": false, "type": "float"},
        {"id": 4, "name": "d", "required": false, "type": "decimal(4, 2)"}
    ]});
    let writer = rt
        .block_on(Writer::open(rest_config(json!({"table": "widen",
            "identifier_fields": ["id"], "schema_evolution": {"schema": schema}}))))
        .unwrap();
    write_all(
        &rt,
        &writer,
        &[json!({"id": 1, "n": 1, "f": 1.5, "d": 1.25})],
    );
    let batch = texts(&[
        json!({"id": 2, "n": 3_000_000_000_i64, "f": 1e300, "d": 12345.5}),
        json!({"id": 3, "n": null}),
        json!({"id": 4, "n": "not a number"}),
        json!({"id": null, "n": 5}),
    ]);
    let out = rt
        .block_on(writer.write_batch(&messages(&batch)))
        .expect("write call");
    assert!(
        out.failures[0].is_none() && out.failures[1].is_none(),
        "{:?}",
        out.failures
    );
    let bad = out.failures[2].as_ref().expect("a string in a long column");
    assert!(bad.to_string().contains("`n`"), "{bad}");
    let key = out.failures[3]
        .as_ref()
        .expect("identifier fields stay required");
    assert!(key.to_string().contains("`id`"), "{key}");
    let rows = pyiceberg_rows("widen");
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[1]["n"], 3_000_000_000_i64);
    assert_eq!(rows[1]["f"], 1e300);
    assert_eq!(rows[1]["d"], "12345.50");
    assert_eq!(rows[2]["n"], Value::Null);
    let loaded = load(&rt, &writer, "evolution", "widen");
    let s = loaded.metadata.current_schema();
    let t = |name: &str| s.field_by_name(name).unwrap().field_type.to_string();
    assert_eq!(
        (t("n"), t("f"), t("d")),
        ("long".into(), "double".into(), "decimal(7, 2)".into())
    );
    assert!(!s.field_by_name("n").unwrap().required);
    assert!(s.field_by_name("id").unwrap().required);
}

/// Whole numbers the shredder stores in a long, written in any form it takes (an
/// exponent, a zero fraction, a quoted `+`), widen an int column as plain digits do:
/// they failed as out of range for int while the column stayed narrow.
#[test]
fn whole_numbers_in_any_form_widen_an_int_column() {
    let rt = runtime();
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "n", "required": false, "type": "int"}
    ]});
    let writer = rt
        .block_on(Writer::open(rest_config(json!({"table": "widen_forms",
            "schema_evolution": {"schema": schema}}))))
        .unwrap();
    let batch: Vec<String> = [
        r#"{"id": 1, "n": 3e9}"#,
        r#"{"id": 2, "n": 4000000000.0}"#,
        r#"{"id": 3, "n": "+5000000000"}"#,
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(write_ok(&rt, &writer, &batch), 3);
    let n: Vec<Value> = pyiceberg_rows("widen_forms")
        .iter()
        .map(|r| r["n"].clone())
        .collect();
    assert_eq!(
        n,
        [
            json!(3_000_000_000_i64),
            json!(4_000_000_000_i64),
            json!(5_000_000_000_i64)
        ]
    );
    let loaded = load(&rt, &writer, "evolution", "widen_forms");
    let n_type = &loaded
        .metadata
        .current_schema()
        .field_by_name("n")
        .unwrap()
        .field_type;
    assert_eq!(n_type.to_string(), "long");
}

/// 20 concurrent calls on one writer, each adding its own column, and two writers (own
/// catalog clients and committers, as two processes have) doing the same: every column
/// once, every value where it was written.
#[test]
fn concurrent_evolvers_converge() {
    let rt = runtime();
    let writer = Arc::new(
        rt.block_on(Writer::open(rest_config(
            json!({"table": "concurrent", "max_in_flight": 20}),
        )))
        .unwrap(),
    );
    let other = Arc::new(
        rt.block_on(Writer::open(rest_config(json!({"table": "concurrent"}))))
            .unwrap(),
    );
    write_all(&rt, &writer, &[json!({"id": 0})]);
    let calls: Vec<_> = (1..=20)
        .map(|i| {
            let w = if i % 4 == 0 {
                other.clone()
            } else {
                writer.clone()
            };
            rt.spawn(async move {
                let text = json!({"id": i, format!("c{i}"): i, "shared": {format!("s{i}"): "x"}})
                    .to_string();
                let out = w.write_batch(&[Message::insert(text.as_bytes())]).await;
                (i, out.map(|o| o.failures))
            })
        })
        .collect();
    for call in calls {
        let (i, out) = rt.block_on(call).unwrap();
        let failures = out.unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert!(
            failures.iter().all(Option::is_none),
            "call {i}: {failures:?}"
        );
    }
    let loaded = load(&rt, &writer, "evolution", "concurrent");
    let s = loaded.metadata.current_schema();
    let names: Vec<String> = s
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.clone())
        .collect();
    assert_eq!(
        names.len(),
        22,
        "id, shared and c1..c20 once each: {names:?}"
    );
    let rows = pyiceberg_rows("concurrent");
    assert_eq!(rows.len(), 21);
    for i in 1..=20i64 {
        let row = &rows[i as usize];
        assert_eq!(row[format!("c{i}")], i, "{row}");
        assert_eq!(row["shared"][format!("s{i}")], "x", "{row}");
    }
}

/// Without evolution an unknown field fails its message by default (naming the field),
/// the rest of the batch is written; `ignore` writes the message without the field.
/// A missing table is a clear error.
#[test]
fn without_evolution_unknown_fields_follow_the_policy() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let config = |extra: Value| {
        let mut c = json!({"catalog": {"warehouse": dir.path().join("wh").to_str().unwrap()},
            "namespace": "p", "table": "t"});
        merge(&mut c, extra);
        Config::from_json(&c.to_string()).unwrap()
    };
    let missing = rt.block_on(async {
        let w = Writer::open(config(json!({}))).await.unwrap();
        let t = texts(&[json!({"id": 1})]);
        w.write_batch(&messages(&t)).await
    });
    let e = missing.expect_err("no table to write to");
    assert!(
        e.to_string().contains("does not exist")
            && e.to_string().contains("schema_evolution.enabled"),
        "{e}"
    );
    let creator = rt
        .block_on(Writer::open(config(
            json!({"schema_evolution": {"enabled": true}}),
        )))
        .unwrap();
    write_all(&rt, &creator, &[json!({"id": 1, "o": {"a": 1}})]);
    let strict = rt.block_on(Writer::open(config(json!({})))).unwrap();
    let batch = texts(&[
        json!({"id": 2, "o": {"a": 2}}),
        json!({"id": 3, "o": {"a": 3, "extra": true}}),
        json!({"id": 4, "nothing": null, "empty": {}}),
    ]);
    let out = rt.block_on(strict.write_batch(&messages(&batch))).unwrap();
    let e = out.failures[1]
        .as_ref()
        .expect("an unknown field fails its message");
    assert!(e.to_string().contains("`o.extra`"), "{e}");
    assert!(
        out.failures[0].is_none() && out.failures[2].is_none(),
        "{:?}",
        out.failures
    );
    let lenient = rt
        .block_on(Writer::open(config(
            json!({"schema_evolution": {"unknown_fields": "ignore"}}),
        )))
        .unwrap();
    let batch = texts(&[json!({"id": 5, "o": {"a": 5, "extra": true}})]);
    let out = rt.block_on(lenient.write_batch(&messages(&batch))).unwrap();
    assert!(out.failures[0].is_none(), "{:?}", out.failures);
    let loaded = load(&rt, &lenient, "p", "t");
    assert!(
        loaded
            .metadata
            .current_schema()
            .field_by_name("o.extra")
            .is_none()
    );
    let read = read_back(
        "duckdb-file",
        json!({"metadata": loaded.metadata_location.unwrap(),
               "sql": "SELECT id, o.a AS a FROM $T ORDER BY id"}),
    );
    assert_eq!(
        read["rows"],
        json!([{"id": 1, "a": 1}, {"id": 2, "a": 2}, {"id": 4, "a": null}, {"id": 5, "a": 5}])
    );
}

/// A table created from a batch whose first values are null, `[]` or `{}` takes the
/// types from later messages of the group; mixed integers and floats make a double.
#[test]
fn inference_waits_for_typed_values_in_the_group() {
    let rt = runtime();
    let writer = rt
        .block_on(Writer::open(rest_config(json!({"table": "inferred"}))))
        .unwrap();
    write_all(
        &rt,
        &writer,
        &[
            json!({"id": 1, "a": null, "l": [], "o": {}, "x": 1}),
            json!({"id": 2, "a": "s", "l": [1], "o": {"p": true}, "x": 2.5}),
        ],
    );
    let loaded = load(&rt, &writer, "evolution", "inferred");
    let s = loaded.metadata.current_schema();
    let t = |name: &str| s.field_by_name(name).unwrap().field_type.to_string();
    assert_eq!(
        (t("a"), t("l.element"), t("o.p"), t("x")),
        (
            "string".into(),
            "long".into(),
            "boolean".into(),
            "double".into()
        )
    );
    let rows = pyiceberg_rows("inferred");
    assert_eq!(rows[0]["x"], 1.0);
    assert_eq!(rows[1]["x"], 2.5);
    assert_eq!(rows[1]["l"], json!([1]));
}

fn embedded(dir: &std::path::Path, extra: Value) -> Config {
    let mut c = json!({"catalog": {"warehouse": dir.join("wh").to_str().unwrap()},
        "namespace": "e", "table": "t", "schema_evolution": {"enabled": true}});
    merge(&mut c, extra);
    Config::from_json(&c.to_string()).unwrap()
}

/// Attack on evolution: a new field the catalog will not add (its name is the table's
/// partition field's) failed the whole call on every retry. Only that message fails,
/// saying why; the rest of the batch is written.
#[test]
fn a_field_the_catalog_refuses_to_add_fails_only_its_message() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let writer = rt
        .block_on(Writer::open(embedded(
            dir.path(),
            json!({"schema_evolution": {"partition_spec": "(day(ts))", "schema": {
                "type": "struct", "schema-id": 0, "fields": [
                    {"id": 1, "name": "id", "required": false, "type": "long"},
                    {"id": 2, "name": "ts", "required": false, "type": "timestamptz"}]}}}),
        )))
        .unwrap();
    write_all(
        &rt,
        &writer,
        &[json!({"id": 1, "ts": "2026-12-01T00:00:00Z"})],
    );
    let batch = texts(&[
        json!({"id": 2, "ts": "2026-12-01T00:00:00Z", "ts_day": 5}),
        json!({"id": 3, "ts": "2026-12-01T00:00:00Z"}),
    ]);
    let out = rt.block_on(writer.write_batch(&messages(&batch))).unwrap();
    let e = out.failures[0].as_ref().expect("ts_day cannot be added");
    assert_eq!(e.kind(), floe::ErrorKind::Data, "{e}");
    assert!(e.to_string().contains("`ts_day`"), "{e}");
    assert!(out.failures[1].is_none(), "{:?}", out.failures);
    assert_eq!(out.rows_committed, 1);
}

/// Attack on evolution: a field added inside a struct made every later copy-on-write
/// upsert over an older file fail ("compact the table first"). Older rows are matched
/// to the evolved schema by field id, their new fields null.
#[test]
fn copy_on_write_rewrites_files_older_than_a_nested_evolution() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let config = embedded(
        dir.path(),
        json!({"identifier_fields": ["id"], "merge_strategy": "copy-on-write"}),
    );
    let writer = rt.block_on(Writer::open(config)).unwrap();
    write_all(
        &rt,
        &writer,
        &[
            json!({"id": 1, "o": {"a": "one"}, "l": [{"x": 1}]}),
            json!({"id": 2, "o": {"a": "two"}, "l": [{"x": 2}]}),
        ],
    );
    let upsert =
        json!({"id": 1, "o": {"a": "uno", "b": true}, "l": [{"x": 1, "y": "new"}]}).to_string();
    let out = rt
        .block_on(writer.write_batch(&[Message {
            operation: Some("upsert"),
            ..Message::insert(upsert.as_bytes())
        }]))
        .expect("write call");
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    let loaded = load(&rt, &writer, "e", "t");
    let read = read_back(
        "duckdb-file",
        json!({"metadata": loaded.metadata_location.unwrap(),
               "sql": "SELECT id, o.a AS a, o.b AS b, l[1].y AS y FROM $T ORDER BY id"}),
    );
    assert_eq!(
        read["rows"],
        json!([{"id": 1, "a": "uno", "b": true, "y": "new"},
               {"id": 2, "a": "two", "b": null, "y": null}])
    );
}

/// One batch routed to 10 tables by a per-message table name (as an interpolated
/// `table` gives): each table created from its own messages, one evolving mid-batch,
/// bad messages failing alone with their index, every other message written once.
#[test]
fn a_batch_routed_to_ten_tables_has_per_message_outcomes() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let writer = rt
        .block_on(Writer::open(embedded(dir.path(), json!({}))))
        .unwrap();
    let first = |i: i64| json!({"id": i, "v": format!("v{i}")});
    let texts: Vec<String> = (0..100i64).map(|i| first(i).to_string()).collect();
    let tables: Vec<String> = (0..100).map(|i| format!("t{}", i % 10)).collect();
    let routed = |texts: &[String]| -> Vec<Option<floe::Error>> {
        let msgs: Vec<Message> = texts
            .iter()
            .zip(&tables)
            .map(|(t, table)| Message {
                table: Some(table),
                ..Message::insert(t.as_bytes())
            })
            .collect();
        rt.block_on(writer.write_batch(&msgs)).unwrap().failures
    };
    assert!(routed(&texts).iter().all(Option::is_none));
    // Second batch: table t3's messages gain a field; every 17th message is bad.
    let texts: Vec<String> = (100..200i64)
        .map(|i| match i {
            _ if i % 17 == 0 => json!({"id": "not a number"}),
            _ if i % 10 == 3 => json!({"id": i, "v": format!("v{i}"), "added": i}),
            _ => first(i),
        })
        .map(|v| v.to_string())
        .collect();
    let failures = routed(&texts);
    for (pos, failure) in failures.iter().enumerate() {
        let i = 100 + pos as i64;
        match failure {
            Some(e) => {
                assert_eq!(i % 17, 0, "message {pos} failed: {e}");
                assert!(e.to_string().contains(&format!("message {pos}")), "{e}");
            }
            None => assert_ne!(i % 17, 0, "message {pos} should have failed"),
        }
    }
    for t in 0..10 {
        let loaded = load(&rt, &writer, "e", &format!("t{t}"));
        let read = read_back(
            "duckdb-file",
            json!({"metadata": loaded.metadata_location.unwrap(),
                   "sql": "SELECT count(*) AS n, count(DISTINCT id) AS ids FROM $T"}),
        );
        let bad = (100..200i64).filter(|i| i % 10 == t && i % 17 == 0).count() as i64;
        assert_eq!(
            read["rows"][0],
            json!({"n": 20 - bad, "ids": 20 - bad}),
            "t{t}"
        );
        let added = loaded
            .metadata
            .current_schema()
            .field_by_name("added")
            .is_some();
        assert_eq!(added, t == 3, "t{t}");
    }
}

/// Turns `ns.name` into a v3 table and adds nanosecond timestamp columns (top level
/// and nested), as another tool would.
fn upgrade_to_v3_with_nanoseconds(
    rt: &tokio::runtime::Runtime,
    writer: &Writer,
    ns: &str,
    name: &str,
) {
    use iceberg::spec::FormatVersion;
    use iceberg::{TableRequirement, TableUpdate};
    let table = load(rt, writer, ns, name);
    let mut schema: Value = serde_json::to_value(table.metadata.current_schema().as_ref()).unwrap();
    let next = table.metadata.last_column_id() + 1;
    schema["schema-id"] = json!(table.metadata.current_schema_id() + 1);
    schema["fields"].as_array_mut().unwrap().extend([
        json!({"id": next, "name": "at_ns", "required": false, "type": "timestamptz_ns"}),
        json!({"id": next + 1, "name": "inner", "required": false, "type": {"type": "struct",
            "fields": [{"id": next + 2, "name": "local_ns", "required": false, "type": "timestamp_ns"}]}}),
    ]);
    rt.block_on(writer.catalog().commit(
        &table_ident(ns, name).unwrap(),
        vec![TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: table.metadata.current_schema_id(),
        }],
        vec![
            TableUpdate::UpgradeFormatVersion {
                format_version: FormatVersion::V3,
            },
            TableUpdate::AddSchema {
                schema: serde_json::from_value(schema).unwrap(),
            },
            TableUpdate::SetCurrentSchema { schema_id: -1 },
        ],
    ))
    .unwrap();
}

/// Appends to v3 tables carry row lineage (each snapshot's first row id and added rows,
/// the table's next row id), which Apache's REST fixture checks on every commit; and
/// nanosecond timestamps are written with every digit, read back by pyiceberg.
#[test]
fn v3_tables_take_appends_with_row_lineage_and_nanosecond_timestamps() {
    let rt = runtime();
    let writer = rt
        .block_on(Writer::open(rest_config(json!({"table": "v3"}))))
        .unwrap();
    let ident = table_ident("evolution", "v3").unwrap();
    rt.block_on(async {
        writer.catalog().ensure_namespace(ident.namespace()).await?;
        let schema = serde_json::from_value(json!({"type": "struct", "schema-id": 0,
            "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}))
        .unwrap();
        let table = floe::catalog::NewTable {
            schema,
            partition_spec: None,
            location: None,
            properties: Default::default(),
            format_version: iceberg::spec::FormatVersion::V2,
        };
        writer.catalog().create_table(&ident, table).await
    })
    .unwrap();
    upgrade_to_v3_with_nanoseconds(&rt, &writer, "evolution", "v3");
    drop(writer);
    let writer = rt
        .block_on(Writer::open(rest_config(json!({"table": "v3"}))))
        .unwrap();
    for b in 0..3i64 {
        let rows: Vec<Value> = (1..=10)
            .map(|i| {
                let id = b * 10 + i;
                json!({"id": id, "at_ns": format!("2026-12-01T10:00:00.{id:09}Z"),
                       "inner": {"local_ns": format!("2026-12-01 10:00:00.12345678{}", id % 10)}})
            })
            .collect();
        write_all(&rt, &writer, &rows);
    }
    let table = load(&rt, &writer, "evolution", "v3");
    let metadata = &table.metadata;
    assert_eq!(metadata.format_version(), iceberg::spec::FormatVersion::V3);
    assert_eq!(metadata.next_row_id(), 30, "one row id per row appended");
    let mut ranges: Vec<(u64, u64)> = metadata.snapshots().filter_map(|s| s.row_range()).collect();
    ranges.sort();
    assert_eq!(
        ranges,
        vec![(0, 10), (10, 10), (20, 10)],
        "first row id, rows added"
    );
    let rows = pyiceberg_rows("v3");
    assert_eq!(rows.len(), 30);
    // pyiceberg's rows, nanosecond timestamps as integers: every digit is there.
    assert_eq!(rows[6]["at_ns"], 1_796_119_200_000_000_007_i64);
    assert_eq!(rows[6]["inner"]["local_ns"], 1_796_119_200_123_456_787_i64);
}

/// `schema_evolution.format_version: 3` creates a v3 table, which takes a nanosecond
/// timestamp column from the first message's explicit types (row lineage from the first
/// append); a v2 config refuses that message alone, naming the setting.
#[test]
fn a_created_v3_table_takes_nanosecond_timestamps_and_v2_says_how() {
    let rt = runtime();
    let typed = |payload: &'static str| Message {
        types: Some(br#"{"at": "timestamptz_ns"}"#),
        ..Message::insert(payload.as_bytes())
    };
    let batch = [typed(
        r#"{"id": 1, "at": "2026-12-01T10:00:00.123456789Z"}"#,
    )];
    for version in [2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let config = embedded(
            dir.path(),
            json!({"schema_evolution": {"schema_metadata": "t", "format_version": version}}),
        );
        let writer = rt.block_on(Writer::open(config)).unwrap();
        let result = rt.block_on(writer.write_batch(&batch));
        if version == 2 {
            let e = result
                .map(|o| format!("{:?}", o.failures))
                .unwrap_or_else(|e| e.to_string());
            assert!(e.contains("schema_evolution.format_version: 3"), "{e}");
            continue;
        }
        let out = result.unwrap();
        assert!(
            out.failures.iter().all(Option::is_none),
            "{:?}",
            out.failures
        );
        let ident = table_ident("e", "t").unwrap();
        let table = rt
            .block_on(writer.catalog().load_table(&ident))
            .unwrap()
            .unwrap();
        assert_eq!(table.metadata.format_version(), FormatVersion::V3);
        assert_eq!(table.metadata.next_row_id(), 1);
        let wh = dir.path().join("wh");
        let args = json!({"uri": format!("sqlite:///{}", wh.join("catalog.db").display()),
                          "warehouse": format!("file://{}", wh.display()), "table": "e.t"});
        let rows = read_back("pyiceberg-sql", args);
        assert_eq!(
            rows["rows"][0]["at"], 1_796_119_200_123_456_789_i64,
            "{rows}"
        );
    }
}

/// Explicit types (what the Go output takes from `schema_metadata` or computes with
/// `new_column_type_mapping`) win over inference, at creation and when columns are
/// added; malformed or (when required) missing ones fail their message alone.
#[test]
fn explicit_types_win_over_inference() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let writer = rt
        .block_on(Writer::open(embedded(
            dir.path(),
            json!({"schema_evolution": {"schema_metadata": "iceberg_types",
                                        "require_schema_metadata": true}}),
        )))
        .unwrap();
    let typed = |payload: &'static str, types: &'static str| Message {
        types: Some(types.as_bytes()),
        ..Message::insert(payload.as_bytes())
    };
    let out = rt
        .block_on(writer.write_batch(&[typed(
            r#"{"id": 1, "ts": "2026-12-01T10:00:00Z", "n": 7}"#,
            r#"{"ts": "timestamptz", "n": "int"}"#,
        )]))
        .unwrap();
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    let batch = [
        typed(
            r#"{"id": 2, "amount": "12.50", "meta": {"at": 1764583200000, "tag": "x"}}"#,
            r#"{"amount": "decimal(10, 2)", "meta.at": "timestamptz"}"#,
        ),
        typed(r#"{"id": 3}"#, r#"{"amount": "money"}"#),
        Message::insert(br#"{"id": 4}"#),
    ];
    let out = rt.block_on(writer.write_batch(&batch)).unwrap();
    assert!(out.failures[0].is_none(), "{:?}", out.failures);
    let bad = out.failures[1].as_ref().expect("a type that is not one");
    assert!(bad.to_string().contains("`amount`"), "{bad}");
    let missing = out.failures[2].as_ref().expect("types are required");
    assert!(missing.to_string().contains("iceberg_types"), "{missing}");
    let table = load(&rt, &writer, "e", "t");
    let s = table.metadata.current_schema();
    let t = |name: &str| s.field_by_name(name).unwrap().field_type.to_string();
    assert_eq!(
        (t("ts"), t("n"), t("amount"), t("meta.at"), t("meta.tag")),
        (
            "timestamptz".into(),
            "int".into(),
            "decimal(10, 2)".into(),
            "timestamptz".into(),
            "string".into()
        )
    );
    let read = read_back(
        "duckdb-file",
        json!({"metadata": table.metadata_location.unwrap(),
               "sql": "SELECT id, amount::VARCHAR AS amount, epoch_ms(meta.at) AS at FROM $T ORDER BY id"}),
    );
    assert_eq!(
        read["rows"],
        json!([{"id": 1, "amount": null, "at": null},
               {"id": 2, "amount": "12.50", "at": 1764583200000_i64}])
    );
}

/// A table upgraded to v3 by another tool while floe writes: merged manifests keep their
/// entries' first row ids (and are listed under the lowest, taking no new range), so
/// each append takes exactly one row id per row.
#[test]
fn a_table_upgraded_to_v3_mid_run_keeps_each_rows_id() {
    let rt = runtime();
    let name = "upgraded_mid_run";
    let ident = table_ident("evolution", name).unwrap();
    let writer = rt
        .block_on(Writer::open(rest_config(json!({"table": name,
            "schema_evolution": {"schema": {"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": false, "type": "long"}]}}}))))
        .unwrap();
    let call = |b: i64| {
        let rows: Vec<Value> = (0..10).map(|i| json!({"id": b * 10 + i})).collect();
        write_all(&rt, &writer, &rows);
    };
    call(0);
    // Merge at every commit, so a stale merge policy shows at once.
    rt.block_on(writer.catalog().commit(
        &ident,
        vec![],
        vec![TableUpdate::SetProperties {
            updates: [("commit.manifest.min-count-to-merge".to_string(), "2".to_string())].into(),
        }],
    ))
    .unwrap();
    call(1);
    call(2);
    rt.block_on(writer.catalog().commit(
        &ident,
        vec![],
        vec![TableUpdate::UpgradeFormatVersion {
            format_version: FormatVersion::V3,
        }],
    ))
    .unwrap();
    // The first v3 commit gives the v2 rows their ids too.
    call(3);
    let first = load(&rt, &writer, "evolution", name).metadata.next_row_id();
    for b in 4..8 {
        call(b);
    }
    let table = load(&rt, &writer, "evolution", name);
    assert_eq!(table.metadata.format_version(), FormatVersion::V3);
    assert_eq!(
        table.metadata.next_row_id(),
        first + 40,
        "four appends of 10 rows took more than 40 row ids"
    );
    let ids: Vec<i64> = pyiceberg_rows(name)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (0..80).collect::<Vec<_>>());
}
