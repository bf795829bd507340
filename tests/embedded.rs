//! End to end on the embedded catalog: floe writes through SQLite + a local folder, and
//! pyiceberg's SqlCatalog and DuckDB's iceberg extension read the table back.

mod support;

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::{Value, json};
use support::{merge, messages, pyiceberg_sql_args, read_back, runtime};

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
        pyiceberg_sql_args(&wh, "demo.events.mixed"),
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

    let table = loaded(&rt, &writer, "mixed");
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
    let table = loaded(&rt, &writer, "parted");
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
    let mut msgs = messages(&texts);
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

/// Table and namespace names from messages become folder names: `../..` wrote a table
/// outside the warehouse, `x/../y` shared another table's folder, and a name too long
/// for the file system (or holding a NUL) was retried for ever as not the message's
/// fault. Each such message fails alone, as its own fault; nothing is written outside.
#[test]
fn names_that_are_no_single_folder_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let cfg = config(dir.path(), json!({"schema_evolution": {"schema": null}}));
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    let long = "x".repeat(300);
    let bad_tables = [
        "../../../escaped",
        "x/../y",
        "a\\b",
        "nul\u{0}name",
        "..",
        long.as_str(),
    ];
    let mut msgs = vec![Message {
        table: Some("good"),
        ..Message::insert(br#"{"id": 1}"#)
    }];
    for t in &bad_tables {
        msgs.push(Message {
            table: Some(t),
            ..Message::insert(br#"{"id": 2}"#)
        });
    }
    msgs.push(Message {
        namespace: Some("demo.a/b"),
        ..Message::insert(br#"{"id": 3}"#)
    });
    let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
    assert!(out.failures[0].is_none(), "{:?}", out.failures);
    for (i, e) in out.failures.iter().enumerate().skip(1) {
        let e = e
            .as_ref()
            .unwrap_or_else(|| panic!("message {i} is refused"));
        assert_eq!(e.kind(), floe::ErrorKind::Data, "{e}");
    }
    assert_eq!(out.rows_committed, 1);
    let outside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, ["wh"], "only the warehouse folder");
}

/// Partition values that would name folders outside the table (`..`, `/`, a name too
/// long for a folder) or cut a location short for readers that parse it as a URL (`#`,
/// `?`) are escaped into one folder each: every file stays under the table's data
/// folder, and DuckDB and pyiceberg read every row back with its value.
#[test]
fn partition_values_never_leave_the_tables_folder() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let cfg = json!({
        "table": "parted",
        "schema_evolution": {"schema": null, "partition_spec": "(kind)"}
    });
    let writer = rt.block_on(Writer::open(config(dir.path(), cfg))).unwrap();
    let long = "é".repeat(300);
    let kinds = [
        "../../../../escaped",
        "a/b",
        "..",
        ".",
        "50%",
        "back\\slash",
        "line\nbreak",
        "C#",
        "a?b",
        "[x]*",
        long.as_str(),
        "plain",
    ];
    let payloads: Vec<String> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| json!({"id": i, "kind": k}).to_string())
        .collect();
    assert_eq!(support::write_ok(&rt, &writer, &payloads), kinds.len());
    let outside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, ["wh"], "only the warehouse folder");
    let data = dir.path().join("wh/demo/events/parted/data");
    let mut files = Vec::new();
    for entry in walk(&dir.path().join("wh")) {
        if entry.extension().is_some_and(|x| x == "parquet") {
            assert!(
                entry.starts_with(&data),
                "{} is outside {}",
                entry.display(),
                data.display()
            );
            // One folder per partition value, right under the data folder.
            assert_eq!(
                entry.parent().unwrap().parent().unwrap(),
                data,
                "{}",
                entry.display()
            );
            files.push(entry);
        }
    }
    assert_eq!(files.len(), kinds.len());
    let table = loaded(&rt, &writer, "parted");
    let duck = read_back(
        "duckdb-file",
        json!({
            "metadata": table.metadata_location.unwrap(),
            "sql": "SELECT id, kind FROM $T ORDER BY id"
        }),
    );
    let rows: Vec<Value> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| json!({"id": i, "kind": k}))
        .collect();
    assert_eq!(duck["rows"], Value::Array(rows.clone()));
    let py = read_back(
        "pyiceberg-sql",
        pyiceberg_sql_args(&dir.path().join("wh"), "demo.events.parted"),
    );
    let mut read: Vec<Value> = py["rows"].as_array().unwrap().clone();
    read.sort_by_key(|r| r["id"].as_u64());
    assert_eq!(read, rows);
}

/// Table `name` of namespace `demo.events`, as the writer's catalog has it now.
fn loaded(rt: &tokio::runtime::Runtime, writer: &Writer, name: &str) -> floe::catalog::LoadedTable {
    let ident = floe::catalog::table_ident("demo.events", name).unwrap();
    rt.block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap()
}

/// Every file under `root`.
fn walk(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files
}

/// Regression (reliability issue, item 6): a `source` that forgot the partition makes
/// partition 1's offset 5 look like partition 0's offset 5, and the second message was
/// dropped silently. A repeated position with a different payload fails that message.
#[test]
fn a_repeated_position_with_another_payload_fails_that_message() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let cfg = config(
        dir.path(),
        json!({"table": "positions", "commit": {"exactly_once": {"writer_id": "w"}}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    let payloads = [r#"{"id": 1}"#, r#"{"id": 2}"#, r#"{"id": 1}"#];
    let msgs: Vec<Message> = payloads
        .iter()
        .map(|p| Message {
            source: Some("orders"),
            offset: Some(5),
            ..Message::insert(p.as_bytes())
        })
        .collect();
    let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
    assert!(out.failures[0].is_none(), "{:?}", out.failures);
    let e = out.failures[1]
        .as_ref()
        .expect("a different payload at the same position");
    assert_eq!(e.kind(), floe::ErrorKind::Data);
    assert!(
        e.to_string()
            .contains(r#"source "orders" offset 5 repeats message 0"#),
        "{e}"
    );
    // The same payload again is a replay: written once, acknowledged.
    assert!(out.failures[2].is_none(), "{:?}", out.failures);
    assert_eq!(out.rows_committed, 1);
}

/// Regression (reliability issue, item 7): the commit's table-UUID requirement came from
/// the reloaded metadata, so files written for a table that was dropped and recreated
/// under the same name could be committed into the new one. The UUID is pinned: the
/// call fails, the writer reopens the table, and the next call writes for the new table.
#[test]
fn files_written_for_a_dropped_table_never_reach_its_successor() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let wh = dir.path().join("wh");
    let cfg = || {
        config(
            dir.path(),
            json!({"table": "recreated", "schema_evolution": {"schema": {"type": "struct",
                "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}}}),
        )
    };
    let writer = rt.block_on(Writer::open(cfg())).unwrap();
    let write = |id: i64| {
        rt.block_on(writer.write_batch(&[Message::insert(format!(r#"{{"id": {id}}}"#).as_bytes())]))
    };
    assert!(write(1).expect("write call").failures[0].is_none());
    // Another process drops the table and creates a new one under the same name, whose
    // field 1 is a string: files written for the old table (field 1 = id, a long) would
    // be read as garbage there.
    let other_cfg = config(
        dir.path(),
        json!({"table": "recreated", "schema_evolution": {"schema": {"type": "struct",
            "schema-id": 0, "fields": [
                {"id": 1, "name": "label", "required": false, "type": "string"},
                {"id": 2, "name": "id", "required": false, "type": "long"}]}}}),
    );
    let other = rt.block_on(Writer::open(other_cfg)).unwrap();
    let ident = floe::catalog::table_ident("demo.events", "recreated").unwrap();
    read_back(
        "drop-sql-table",
        json!({"uri": format!("sqlite:///{}", wh.join("catalog.db").display()),
               "warehouse": format!("file://{}", wh.display()), "table": "demo.events.recreated"}),
    );
    assert!(
        rt.block_on(other.catalog().load_table(&ident))
            .unwrap()
            .is_none()
    );
    let out = rt
        .block_on(other.write_batch(&[Message::insert(br#"{"id": 100, "label": "new"}"#)]))
        .expect("the other process creates the table anew");
    assert!(out.failures[0].is_none());
    // The first writer still holds the old table: its next call must not land there.
    let first_try = write(2);
    let committed_then = match &first_try {
        Ok(out) => out.failures[0].is_none(),
        Err(_) => false,
    };
    if !committed_then {
        assert!(
            write(2).expect("write call").failures[0].is_none(),
            "reopened, it writes"
        );
    }
    let new = rt
        .block_on(other.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let duck = read_back(
        "duckdb-file",
        json!({"metadata": new.metadata_location.unwrap(),
               "sql": "SELECT list(id ORDER BY id) AS ids FROM $T"}),
    );
    assert_eq!(duck["rows"][0]["ids"], json!([2, 100]), "{first_try:?}");
}

/// Regression (reliability issue, item 4): an expiry round read every retained
/// snapshot's manifest list, so it cost more as the table aged. On a streaming table
/// (one chain) it reads the lists of what it expires and of one kept neighbour, deletes
/// exactly the expired lists, and leaves the table whole.
#[test]
fn an_expiry_round_reads_what_it_expires_and_keeps_the_table_whole() {
    use floe::commit::expire::{Retention, delete_unreachable, expired_snapshots, removal_request};
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    // floe's own expiry off: the round is run by hand below.
    let cfg = config(
        dir.path(),
        json!({"table": "aging", "commit": {"max_snapshot_age": "0s"},
               "schema_evolution": {"schema": {"type": "struct", "schema-id": 0,
                 "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    for i in 0..40 {
        let text = format!(r#"{{"id": {i}}}"#);
        let out = rt
            .block_on(writer.write_batch(&[Message::insert(text.as_bytes())]))
            .expect("write call");
        assert!(out.failures[0].is_none());
    }
    let ident = floe::catalog::table_ident("demo.events", "aging").unwrap();
    let before = rt
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let now = chrono::Utc::now().timestamp_millis() + 1_000;
    let retention = Retention {
        max_age: std::time::Duration::from_secs(3600),
        max_snapshots: 10,
    };
    let expired = expired_snapshots(&before.metadata, retention, now);
    assert_eq!(expired.len(), 30, "the count cap keeps the newest 10 of 40");
    let (requirements, updates) = removal_request(&before.metadata, expired.clone(), Vec::new());
    let after = rt
        .block_on(writer.catalog().commit(&ident, requirements, updates))
        .unwrap();
    let file_io = floe::storage::build_file_io(Default::default());
    let cleanup = rt
        .block_on(delete_unreachable(
            &before.metadata,
            &after.metadata,
            &file_io,
            &expired,
        ))
        .unwrap();
    println!("expired 30 of 40 snapshots: {cleanup:?}");
    assert_eq!(
        cleanup.lists_read, 31,
        "the expired lists and one kept neighbour"
    );
    assert_eq!(cleanup.deleted, 30, "exactly the expired manifest lists");
    let duck = read_back(
        "duckdb-file",
        json!({"metadata": after.metadata_location.unwrap(),
               "sql": "SELECT count(*) AS n, count(DISTINCT id) AS d FROM $T"}),
    );
    assert_eq!(duck["rows"][0], json!({"n": 40, "d": 40}));
}

/// Regression (reliability issue, item 11): embedded catalog calls ran SQLite (with its
/// 30 s busy timeout) on the runtime's worker threads, stalling every other task. While
/// another process holds the catalog's write lock, a commit waits without holding up
/// the rest of the runtime: here a runtime with one worker still runs another task.
#[test]
fn a_locked_embedded_catalog_does_not_stall_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let cfg = config(
        dir.path(),
        json!({"table": "locked", "schema_evolution": {"schema": {"type": "struct",
            "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}}}),
    );
    let writer = std::sync::Arc::new(rt.block_on(Writer::open(cfg)).unwrap());
    let first = rt
        .block_on(writer.write_batch(&[Message::insert(br#"{"id": 1}"#)]))
        .expect("write call");
    assert!(first.failures[0].is_none());
    // Another process takes the write lock and keeps it.
    let other = rusqlite::Connection::open(dir.path().join("wh/catalog.db")).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let w = writer.clone();
    let blocked = rt.spawn(async move { w.write_batch(&[Message::insert(br#"{"id": 2}"#)]).await });
    std::thread::sleep(std::time::Duration::from_millis(300));
    // With the commit waiting on SQLite, the runtime still runs a new task.
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let _ = tx.send(());
    });
    let ran = rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok();
    other.execute_batch("COMMIT").unwrap();
    assert!(ran, "the runtime stalled while SQLite waited for the lock");
    let out = rt.block_on(blocked).unwrap().expect("write call");
    assert!(out.failures[0].is_none(), "{:?}", out.failures);
}

/// `storage.aws_s3.bucket` is not ignored: a warehouse outside it is a config problem,
/// found before anything is opened, naming both.
#[test]
fn a_configured_bucket_refuses_a_warehouse_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"catalog": {"warehouse": dir.path().join("wh").to_str().unwrap()},
        "storage": {"aws_s3": {"bucket": "lake"}}});
    let e = floe::validate::config_from_json(&config.to_string()).unwrap_err();
    assert_eq!(e.kind(), floe::ErrorKind::Config, "{e}");
    assert!(
        e.to_string().contains("\"lake\"") && e.to_string().contains("file://"),
        "{e}"
    );
    assert!(!dir.path().join("wh").exists(), "nothing was created");
}

/// Calls that share a snapshot (group commit) count it once between them: summed over the
/// calls, their snapshots are the table's, as the host's `iceberg_snapshots_total` says.
#[test]
fn calls_sharing_a_snapshot_count_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let config = config(
        dir.path(),
        json!({"table": "grouped", "commit": {"linger": "200ms"}}),
    );
    let writer = rt.block_on(Writer::open(config)).unwrap();
    let payloads: Vec<String> = (0..8).map(|i| format!(r#"{{"id": {i}}}"#)).collect();
    let outcomes = rt.block_on(futures::future::join_all(payloads.iter().map(|p| {
        let writer = &writer;
        async move {
            let messages = [Message::insert(p.as_bytes())];
            writer.write_batch(&messages).await.expect("write call")
        }
    })));
    let counted: usize = outcomes.iter().map(|o| o.snapshots).sum();
    let table = loaded(&rt, &writer, "grouped");
    let in_table = table.metadata.snapshots().count();
    assert!(
        in_table < 8,
        "the linger grouped no calls: {in_table} snapshots"
    );
    assert_eq!(counted, in_table);
    assert_eq!(writer.stats().snapshots as usize, in_table);
}

/// A call whose rows committed in one table must not fail as a whole because another of
/// its tables failed: the host would write the committed rows again. Here the call's
/// snapshot in table `a` is shared with (and counted by) an earlier call, so the call
/// itself counts no snapshot, yet its rows in `a` are committed.
#[test]
fn a_call_committed_in_a_shared_snapshot_is_not_failed_whole() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let config = config(dir.path(), json!({"commit": {"linger": "300ms"}}));
    let writer = rt.block_on(Writer::open(config)).unwrap();
    let on = |table: &'static str, payload: &'static str| Message {
        table: Some(table),
        ..Message::insert(payload.as_bytes())
    };
    // Both tables exist; then table b's data folder becomes a file, so its uploads fail
    // (a storage error, not the messages' fault), even for root.
    for table in ["a", "b"] {
        let out = rt
            .block_on(writer.write_batch(&[on(table, r#"{"id": 0}"#)]))
            .expect("write call");
        assert!(out.failures.iter().all(Option::is_none), "{out:?}");
    }
    let data = find_dir(&dir.path().join("wh"), "b", "data").expect("table b's data folder");
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::write(&data, b"not a folder").unwrap();

    let first = [on("a", r#"{"id": 1}"#)];
    let second = [on("a", r#"{"id": 2}"#), on("b", r#"{"id": 3}"#)];
    let (first, second) = rt.block_on(async {
        futures::join!(writer.write_batch(&first), async {
            // Joins the group after the first call's submission.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            writer.write_batch(&second).await
        })
    });
    let first = first.expect("the first call");
    assert!(first.failures.iter().all(Option::is_none), "{first:?}");
    let second = second.expect("a call with committed rows must not fail whole");
    assert!(second.failures[0].is_none(), "{second:?}");
    let failed = second.failures[1].as_ref().expect("table b failed");
    assert_ne!(failed.kind(), floe::error::ErrorKind::Data, "{failed}");
    assert_eq!(second.rows_committed, 1);
}

/// The folder named `name` inside a folder named `parent`, anywhere under `root`.
fn find_dir(root: &std::path::Path, parent: &str, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name()? == name && path.parent()?.file_name()? == parent {
            return Some(path);
        }
        if let Some(found) = find_dir(&path, parent, name) {
            return Some(found);
        }
    }
    None
}

/// Review of the upserts issue (low): after another tool rolled main back behind
/// floe's last exactly-once commit, the writer's ledger still answered "committed" for
/// re-delivered offsets of the rolled-back snapshot, so they were acknowledged without
/// being in the table. Once the writer has seen the rollback (here: its next commit
/// meets it), such offsets are refused saying why, as opening the table refuses it.
#[test]
fn offsets_of_a_rolled_back_commit_are_never_acknowledged_unwritten() {
    use iceberg::TableUpdate;
    use iceberg::spec::{SnapshotReference, SnapshotRetention};
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let cfg = config(
        dir.path(),
        json!({"table": "rolled", "commit": {"exactly_once": {"writer_id": "w"}}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    let payloads: Vec<String> = (0..15).map(|i| format!(r#"{{"id": {i}}}"#)).collect();
    let write = |from: usize, to: usize| {
        let msgs: Vec<Message> = (from..to)
            .map(|i| Message {
                source: Some("s"),
                offset: Some(i as i64),
                ..Message::insert(payloads[i].as_bytes())
            })
            .collect();
        rt.block_on(writer.write_batch(&msgs))
    };
    let ident = floe::catalog::table_ident("demo.events", "rolled").unwrap();
    let head = || {
        let t = rt.block_on(writer.catalog().load_table(&ident)).unwrap();
        t.unwrap().metadata.current_snapshot_id().unwrap()
    };
    assert_eq!(write(0, 5).unwrap().rows_committed, 5);
    let first = head();
    assert_eq!(write(5, 10).unwrap().rows_committed, 5);
    // Another tool rolls main back to the first commit: offsets 5..10 are gone.
    rt.block_on(writer.catalog().commit(
        &ident,
        vec![],
        vec![TableUpdate::SetSnapshotRef {
            ref_name: "main".into(),
            reference: SnapshotReference::new(first, SnapshotRetention::branch(None, None, None)),
        }],
    ))
    .unwrap();
    // Re-delivered at once (no commit in between): not acknowledged unwritten either.
    let replay = write(5, 10);
    assert!(
        replay
            .as_ref()
            .map_or(true, |out| out.failures.iter().all(Option::is_some)),
        "offsets 5..10 were acknowledged right after the rollback: {replay:?}"
    );
    // The next commit meets the rollback and is refused.
    let next = write(10, 15);
    let refused = match &next {
        Err(e) => Some(e.clone()),
        Ok(out) => out.failures.iter().flatten().next().cloned(),
    };
    let refused = refused.expect("a commit on a table rolled back behind the record");
    assert!(refused.to_string().contains("rolled back"), "{refused}");
    // A re-delivery of the rolled-back offsets must not be acknowledged unwritten.
    let again = write(5, 10);
    let acknowledged = match &again {
        Err(_) => 0,
        Ok(out) => out.failures.iter().filter(|f| f.is_none()).count(),
    };
    assert_eq!(
        acknowledged, 0,
        "offsets 5..10 were acknowledged but are not in the table: {again:?}"
    );
    let e = match again {
        Err(e) => e,
        Ok(out) => out.failures[0].clone().unwrap(),
    };
    assert!(e.to_string().contains("rolled back"), "{e}");
    assert_ne!(e.kind(), floe::ErrorKind::Data, "{e}");
}

/// Tables a pipeline no longer writes are closed after `commit.table_idle_timeout`
/// (their committers stop); one it writes again is opened again, with its exactly-once
/// record: a message committed before the table was closed and delivered again is
/// acknowledged, not written twice.
#[test]
fn idle_tables_close_and_reopen_with_their_exactly_once_record() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let cfg = config(
        dir.path(),
        json!({"commit": {"table_idle_timeout": "1s", "exactly_once": {"writer_id": "w"}}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    let to = |table: &'static str, offset: i64, payload: &'static str| Message {
        table: Some(table),
        source: Some("s"),
        offset: Some(offset),
        ..Message::insert(payload.as_bytes())
    };
    for (n, table) in ["t1", "t2", "t3"].into_iter().enumerate() {
        let out = rt
            .block_on(writer.write_batch(&[to(table, n as i64, r#"{"id": 1}"#)]))
            .unwrap();
        assert_eq!(out.rows_committed, 1, "{:?}", out.failures);
    }
    assert_eq!(writer.open_tables(), 3);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let out = rt
        .block_on(writer.write_batch(&[to("t4", 3, r#"{"id": 1}"#)]))
        .unwrap();
    assert_eq!(out.rows_committed, 1, "{:?}", out.failures);
    assert_eq!(writer.open_tables(), 1, "t1..t3 idle for 2 s: closed");
    // t1 again: its committed position 0 is acknowledged, position 4 written.
    let again = [to("t1", 0, r#"{"id": 1}"#), to("t1", 4, r#"{"id": 2}"#)];
    let out = rt.block_on(writer.write_batch(&again)).unwrap();
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    assert_eq!(out.rows_committed, 1);
    assert_eq!(writer.open_tables(), 2);
    let table = loaded(&rt, &writer, "t1");
    let sql = "SELECT id FROM $T ORDER BY id";
    let args = json!({"metadata": table.metadata_location.unwrap(), "sql": sql});
    let ids: Vec<i64> = read_back("duckdb-file", args)["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2]);
}
