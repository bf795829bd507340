//! End to end on the embedded catalog: floe writes through SQLite + a local folder, and
//! pyiceberg's SqlCatalog and DuckDB's iceberg extension read the table back.

mod support;

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::{Value, json};
use support::{merge, read_back, runtime};

fn mixed_schema() -> Value {
    json!({
        "type": "struct", "schema-id": 0,
        "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "ok", "required": false, "type": "boolean"},
            {"id": 3, "name": "n", "required": false, "type": "int"},
            {"id": 4, "name": "x", "required": false, "type": "double"},
            {"id": 5, "name": "price", "required": false, "type": "decimal(20, 3)"},
            {"id": 6, "name": "day", "required": false, "type": "date"},
            {"id": 7, "name": "ts", "required": false, "type": "timestamptz"},
            {"id": 8, "name": "s", "required": false, "type": "string"},
            {"id": 9, "name": "u", "required": false, "type": "uuid"},
            {"id": 10, "name": "blob", "required": false, "type": "binary"},
            {"id": 11, "name": "st", "required": false, "type": {"type": "struct", "fields": [
                {"id": 12, "name": "a", "required": false, "type": "long"},
                {"id": 13, "name": "b", "required": false, "type": "string"}]}},
            {"id": 14, "name": "tags", "required": false, "type": {"type": "list",
                "element-id": 15, "element-required": false, "element": "string"}},
            {"id": 16, "name": "m", "required": false, "type": {"type": "map",
                "key-id": 17, "key": "string", "value-id": 18, "value-required": false, "value": "long"}}
        ]
    })
}

fn config(dir: &std::path::Path, extra: Value) -> Config {
    let mut c = json!({
        "catalog": {"warehouse": dir.join("wh").to_str().unwrap()},
        "namespace": "demo.events",
        "table": "mixed",
        "schema_evolution": {"enabled": true, "schema": mixed_schema()}
    });
    merge(&mut c, extra);
    Config::from_json(&c.to_string()).unwrap()
}

const MESSAGES: [&str; 4] = [
    r#"{"id": 9007199254740993, "ok": true, "n": -5, "x": 1.25, "price": "1234567890123.456",
        "day": "2024-02-29", "ts": "2024-05-01T12:30:00.123456Z", "s": "héllo",
        "u": "0190a0b1-2c3d-4e5f-8a9b-0c1d2e3f4a5b", "blob": "AAEC",
        "st": {"a": 7, "b": "inner"}, "tags": ["a", null, "c"], "m": {"k": 1, "z": null}}"#,
    r#"{"id": 2, "ts": 1714566600000}"#,
    r#"{"id": "not a number"}"#,
    r#"{"id": 3, "st": null, "tags": [], "m": {}}"#,
];

#[test]
fn embedded_catalog_round_trip_with_independent_readers() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let writer = rt
        .block_on(Writer::open(config(dir.path(), json!({}))))
        .unwrap();
    let messages: Vec<Message> = MESSAGES
        .iter()
        .map(|m| Message::insert(m.as_bytes()))
        .collect();
    let outcome = rt
        .block_on(writer.write_batch(&messages))
        .expect("write call");
    let failed: Vec<usize> = (0..4).filter(|&i| outcome.failures[i].is_some()).collect();
    assert_eq!(failed, vec![2], "{:?}", outcome.failures);
    let reason = outcome.failures[2].as_ref().unwrap().to_string();
    assert!(reason.contains("message 2: field `id`"), "{reason}");
    assert_eq!((outcome.rows_committed, outcome.snapshots), (3, 1));

    let wh = dir.path().join("wh");
    let py = read_back(
        "pyiceberg-sql",
        json!({
            "uri": format!("sqlite:///{}", wh.join("catalog.db").display()),
            "warehouse": format!("file://{}", wh.display()),
            "table": "demo.events.mixed"
        }),
    );
    assert_eq!(py["count"], 3);
    let rows = py["rows"].as_array().unwrap();
    let first = rows
        .iter()
        .find(|r| r["id"] == json!(9007199254740993u64))
        .unwrap();
    assert_eq!(first["ok"], true);
    assert_eq!(first["n"], -5);
    assert_eq!(first["x"], 1.25);
    assert_eq!(first["price"], "1234567890123.456");
    assert_eq!(first["day"], "2024-02-29");
    assert_eq!(first["ts"], "2024-05-01T12:30:00.123456+00:00");
    assert_eq!(first["s"], "héllo");
    assert_eq!(first["u"], "0190a0b1-2c3d-4e5f-8a9b-0c1d2e3f4a5b");
    assert_eq!(first["blob"], "000102");
    assert_eq!(first["st"], json!({"a": 7, "b": "inner"}));
    assert_eq!(first["tags"], json!(["a", null, "c"]));
    let mut m = first["m"].as_array().unwrap().clone();
    m.sort_by_key(|kv| kv[0].as_str().unwrap().to_string());
    assert_eq!(m, vec![json!(["k", 1]), json!(["z", null])]);
    let second = rows.iter().find(|r| r["id"] == 2).unwrap();
    assert_eq!(second["ts"], "2024-05-01T12:30:00+00:00");
    assert_eq!(second["s"], Value::Null);
    assert_eq!(second["tags"], Value::Null);
    let third = rows.iter().find(|r| r["id"] == 3).unwrap();
    assert_eq!(third["st"], Value::Null);
    assert_eq!(third["tags"], json!([]));

    let table = rt
        .block_on(
            writer
                .catalog()
                .load_table(&floe::catalog::table_ident("demo.events", "mixed").unwrap()),
        )
        .unwrap()
        .unwrap();
    let duck = read_back(
        "duckdb-file",
        json!({
            "metadata": table.metadata_location.unwrap(),
            "sql": "SELECT count(*) AS n, sum(id) AS ids, max(price)::VARCHAR AS price, \
                    count(tags) AS tags, max(st.b) AS b FROM $T"
        }),
    );
    assert_eq!(
        duck["rows"][0],
        json!({"n": 3, "ids": 9007199254740998u64, "price": "1234567890123.456", "tags": 2, "b": "inner"})
    );
}

#[test]
fn partitioned_table_and_inferred_schema() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let cfg = json!({
        "table": "parted",
        "schema_evolution": {"schema": null, "partition_spec": "(event_type, bucket(4, user_id))"},
        "parquet": {"compression": "snappy", "target_file_size_bytes": 1048576}
    });
    let writer = rt.block_on(Writer::open(config(dir.path(), cfg))).unwrap();
    let events: Vec<String> = (0..1000)
        .map(|i| {
            format!(
                r#"{{"id": {i}, "user_id": {}, "event_type": "t{}", "value": {}.5}}"#,
                i % 17,
                i % 3,
                i
            )
        })
        .collect();
    for chunk in events.chunks(250) {
        let msgs: Vec<Message> = chunk
            .iter()
            .map(|m| Message::insert(m.as_bytes()))
            .collect();
        let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
        assert!(
            out.failures.iter().all(Option::is_none),
            "{:?}",
            out.failures
        );
    }
    let table = rt
        .block_on(
            writer
                .catalog()
                .load_table(&floe::catalog::table_ident("demo.events", "parted").unwrap()),
        )
        .unwrap()
        .unwrap();
    let meta = &table.metadata;
    assert_eq!(meta.snapshots().count(), 4);
    let summary = &meta
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_eq!(summary["total-records"], "1000");
    assert!(summary.contains_key("floe.commit-id"));
    assert_eq!(meta.default_partition_spec().fields().len(), 2);
    let duck = read_back(
        "duckdb-file",
        json!({
            "metadata": table.metadata_location.unwrap(),
            "sql": "SELECT count(*) AS n, count(DISTINCT id) AS ids, sum(value) AS v, \
                    count(DISTINCT event_type) AS types FROM $T"
        }),
    );
    assert_eq!(
        duck["rows"][0],
        json!({"n": 1000, "ids": 1000, "v": 500000.0, "types": 3})
    );
    // Three event types × up to four buckets, per commit: one file per partition.
    let mut parquet = Vec::new();
    let mut stack = vec![dir.path().join("wh/demo/events/parted/data")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                parquet.push(p);
            }
        }
    }
    assert!(
        (13..=48).contains(&parquet.len()),
        "{} data files",
        parquet.len()
    );
    assert!(
        parquet
            .iter()
            .all(|p| p.to_string_lossy().contains("event_type=t"))
    );
}

#[test]
fn errors_name_the_index_in_the_whole_batch_across_tables() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let writer = rt
        .block_on(Writer::open(config(dir.path(), json!({}))))
        .unwrap();
    let payloads = [
        r#"{"id": 1}"#,
        r#"{"id": 2}"#,
        r#"{"id": "bad"}"#,
        r#"{"id": 4}"#,
    ];
    let tables = ["a", "b", "b", "a"];
    let messages: Vec<Message> = payloads
        .iter()
        .zip(tables)
        .map(|(p, t)| Message {
            table: Some(t),
            ..Message::insert(p.as_bytes())
        })
        .collect();
    let out = rt
        .block_on(writer.write_batch(&messages))
        .expect("write call");
    let failed: Vec<usize> = (0..4).filter(|&i| out.failures[i].is_some()).collect();
    assert_eq!(failed, vec![2]);
    let text = out.failures[2].as_ref().unwrap().to_string();
    assert!(text.starts_with("message 2: field `id`"), "{text}");
    assert_eq!((out.rows_committed, out.snapshots), (3, 2));
}

/// Regression (reliability issue, item 8): every commit left its `metadata.json` behind
/// for good. Tables floe creates delete the versions that fall out of the metadata log.
#[test]
fn old_metadata_files_are_deleted_after_the_log_drops_them() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let cfg = config(
        dir.path(),
        json!({"table": "versions", "schema_evolution": {"schema": {"type": "struct",
            "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    let commits = 130;
    for i in 0..commits {
        let text = format!(r#"{{"id": {i}}}"#);
        let out = rt
            .block_on(writer.write_batch(&[Message::insert(text.as_bytes())]))
            .expect("write call");
        assert!(out.failures[0].is_none());
    }
    let metadata_dir = dir.path().join("wh/demo/events/versions/metadata");
    let versions = std::fs::read_dir(&metadata_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", metadata_dir.display()))
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".metadata.json")
        })
        .count();
    println!("{commits} commits leave {versions} metadata.json files");
    // The current version plus the log's 100 previous ones.
    assert!(
        versions <= 101,
        "{versions} metadata.json files after {commits} commits"
    );
    let py = read_back(
        "pyiceberg-sql",
        json!({"uri": format!("sqlite:///{}", dir.path().join("wh/catalog.db").display()),
               "warehouse": format!("file://{}", dir.path().join("wh").display()),
               "table": "demo.events.versions"}),
    );
    assert_eq!(py["rows"].as_array().unwrap().len(), commits);
}

/// Regression (attack on the commit path): a batch spanning tables, one of which fails,
/// must not fail (and so replay) the messages already committed to the other. A message
/// naming a table that does not exist fails alone, as its own fault.
#[test]
fn a_message_naming_a_missing_table_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let create = config(dir.path(), json!({"table": "present"}));
    let writer = rt.block_on(Writer::open(create)).unwrap();
    let first = rt
        .block_on(writer.write_batch(&[Message::insert(br#"{"id": 0}"#)]))
        .expect("write call");
    assert!(first.failures[0].is_none(), "{:?}", first.failures);
    drop(writer);
    let cfg = config(
        dir.path(),
        json!({"table": "present", "schema_evolution": {"enabled": false}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    let texts: Vec<String> = (1..=5).map(|i| format!(r#"{{"id": {i}}}"#)).collect();
    let mut msgs: Vec<Message> = texts
        .iter()
        .map(|t| Message::insert(t.as_bytes()))
        .collect();
    msgs.push(Message {
        table: Some("missing"),
        ..Message::insert(br#"{"id": 6}"#)
    });
    let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
    assert!(
        out.failures[..5].iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    let e = out.failures[5]
        .as_ref()
        .expect("the missing table's message fails");
    assert_eq!(e.kind(), floe::ErrorKind::Data, "{e}");
    assert_eq!(out.rows_committed, 5);
}
