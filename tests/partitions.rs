//! Partition specs: every transform on top-level and nested columns, checked against
//! pyiceberg's own transforms of every row, with readers pruning files by them; and a
//! config whose spec differs from an existing table's, refused clearly. The embedded
//! catalog, and Apache's REST fixture with SeaweedFS.

mod support;

use floe::config::Config;
use floe::writer::Writer;
use serde_json::{Value, json};
use support::{merge, messages, read_back, runtime, services, write_ok};

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "name", "required": false, "type": "string"},
        {"id": 3, "name": "cat", "required": false, "type": "string"},
        {"id": 4, "name": "t_year", "required": false, "type": "timestamptz"},
        {"id": 5, "name": "t_month", "required": false, "type": "timestamp"},
        {"id": 6, "name": "t_hour", "required": false, "type": "timestamptz"},
        {"id": 7, "name": "d", "required": false, "type": "date"},
        {"id": 8, "name": "x", "required": false, "type": "long"},
        {"id": 9, "name": "amount", "required": false, "type": "decimal(10, 2)"},
        {"id": 10, "name": "o", "required": false, "type": {"type": "struct", "fields": [
            {"id": 11, "name": "k", "required": false, "type": "long"},
            {"id": 12, "name": "t", "required": false, "type": "timestamptz"},
            {"id": 13, "name": "s", "required": false, "type": "string"}]}}
    ]})
}

/// Every transform, top-level and nested.
const SPEC: &str = "(identity(cat), year(t_year), month(t_month), hour(t_hour), day(d), \
    bucket(16, id), truncate(4, name), void(x), truncate(100, amount), bucket(8, o.k), \
    day(o.t) as o_day, truncate(2, o.s))";

/// Row `i`: values spread over several years, months, days, hours, buckets and prefixes,
/// some null.
fn row(i: i64) -> Value {
    let year = 2020 + i % 4;
    let month = 1 + i % 12;
    let day = 1 + i % 28;
    let hour = i % 24;
    let cat = ["a", "b", "c"][(i % 3) as usize];
    json!({
        "id": i,
        "name": if i % 7 == 0 { Value::Null } else { json!(format!("name-{}", i % 13)) },
        "cat": cat,
        "t_year": format!("{year}-{month:02}-{day:02}T{hour:02}:30:00Z"),
        "t_month": format!("{year}-{month:02}-{day:02}T00:00:00"),
        "t_hour": format!("2026-12-{day:02}T{hour:02}:59:59.999999+01:00"),
        "d": format!("{year}-{month:02}-{day:02}"),
        "x": i * 3,
        "amount": format!("{}.{:02}", i * 37 - 500, i % 100),
        "o": if i % 5 == 0 { Value::Null } else {
            json!({"k": i % 11 - 5, "t": format!("2025-{month:02}-{day:02}T23:59:59Z"), "s": format!("s{}", i % 4)})
        },
    })
}

fn write_rows(writer: &Writer, rt: &tokio::runtime::Runtime) {
    for chunk in (0..240).collect::<Vec<i64>>().chunks(80) {
        let texts: Vec<String> = chunk.iter().map(|&i| row(i).to_string()).collect();
        write_ok(rt, writer, &texts);
    }
}

/// Checks, with pyiceberg, that each data file's partition tuple is the transform of
/// every row in it, and that filters on partition sources prune files.
fn check(reader_args: Value) {
    let mut args = reader_args;
    args["filters"] = json!(["cat == 'a'", "id == 17", "d >= '2023-01-01'", "o.k == 3"]);
    let out = read_back("partition-check", args);
    println!("pyiceberg: {out}");
    assert_eq!(out["mismatches"], json!([]), "{out}");
    let files = out["files"].as_u64().unwrap();
    assert!(files > 20, "rows spread over many partitions: {out}");
    for (filter, planned) in out["planned"].as_object().unwrap() {
        let planned = planned.as_u64().unwrap();
        assert!(
            planned > 0 && planned < files,
            "{filter} prunes files: {planned} of {files}"
        );
    }
    // Every row is read back.
    assert_eq!(out["rows"], 240, "{out}");
}

#[test]
fn every_transform_on_the_embedded_catalog() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let config = json!({"catalog": {"warehouse": wh.to_str().unwrap()},
        "namespace": "p", "table": "all",
        "schema_evolution": {"enabled": true, "schema": schema(), "partition_spec": SPEC}});
    let writer = rt
        .block_on(Writer::open(
            Config::from_json(&config.to_string()).unwrap(),
        ))
        .unwrap();
    write_rows(&writer, &rt);
    check(json!({
        "catalog": "sql",
        "uri": format!("sqlite:///{}", wh.join("catalog.db").display()),
        "warehouse": format!("file://{}", wh.display()),
        "table": "p.all",
    }));
}

#[test]
fn every_transform_on_rest_and_s3() {
    let rt = runtime();
    let mut config = services().floe_config();
    merge(
        &mut config,
        json!({"namespace": "partitions", "table": "all",
        "schema_evolution": {"enabled": true, "schema": schema(), "partition_spec": SPEC}}),
    );
    let writer = rt
        .block_on(Writer::open(
            Config::from_json(&config.to_string()).unwrap(),
        ))
        .unwrap();
    write_rows(&writer, &rt);
    let mut args = services().pyiceberg_args("partitions.all");
    args["catalog"] = json!("rest");
    check(args);
}

/// A table's spec is not changed by a config that names another: floe says so at once
/// instead of writing under a spec the config did not ask for.
#[test]
fn a_config_spec_other_than_the_tables_is_refused() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let config = |spec: &str| {
        let c = json!({"catalog": {"warehouse": dir.path().join("wh").to_str().unwrap()},
            "namespace": "p", "table": "t",
            "schema_evolution": {"enabled": true, "schema": schema(), "partition_spec": spec}});
        Config::from_json(&c.to_string()).unwrap()
    };
    let texts = vec![row(1).to_string()];
    let first = rt
        .block_on(Writer::open(config("(bucket(4, id))")))
        .unwrap();
    let out = rt.block_on(first.write_batch(&messages(&texts))).unwrap();
    assert!(out.failures.iter().all(Option::is_none));
    // The same spec, spelled differently, is the same spec.
    let same = rt
        .block_on(Writer::open(config("(bucket(4,id) as id_bucket)")))
        .unwrap();
    let out = rt.block_on(same.write_batch(&messages(&texts))).unwrap();
    assert!(out.failures.iter().all(Option::is_none));
    let other = rt.block_on(Writer::open(config("(day(d))"))).unwrap();
    let e = rt
        .block_on(other.write_batch(&messages(&texts)))
        .expect_err("another spec");
    assert_eq!(e.kind(), floe::ErrorKind::Config, "{e}");
    assert!(
        e.to_string().contains("bucket[4](id)") && e.to_string().contains("day(d)"),
        "{e}"
    );
}
