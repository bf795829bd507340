//! Upserts and deletes (merge-on-read): a seeded random stream of inserts, upserts and
//! deletes, checked after every commit against an in-memory model of the table, read
//! back by DuckDB (which applies equality deletes) and by iceberg-rust's own scan.

mod support;

use std::collections::BTreeMap;

use floe::config::Config;
use floe::writer::{Message, Writer};
use futures::TryStreamExt;
use serde_json::{Value, json};
use support::{merge, read_back, runtime, services};

/// A small deterministic generator (xorshift64*), so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the table must hold: key → its rows' values (several only after inserts).
type Model = BTreeMap<(String, i64), Vec<String>>;

/// One message of the random stream, and its effect on the model.
struct Op {
    op: &'static str,
    payload: String,
}

fn random_ops(rng: &mut Rng, model: &mut Model, n: usize, keys: u64, batch: usize) -> Vec<Op> {
    let tenants = ["acme", "globex", "initech"];
    (0..n)
        .map(|i| {
            let tenant = tenants[rng.below(3) as usize].to_string();
            let id = rng.below(keys) as i64;
            let value = format!("b{batch}-m{i}");
            // `1.0` and `1` are one long key; spell some ids as floats.
            let id_text = if rng.below(5) == 0 {
                format!("{id}.0")
            } else {
                id.to_string()
            };
            let payload =
                format!(r#"{{"tenant":"{tenant}","id":{id_text},"v":"{value}","n":{i}}}"#);
            let key = (tenant.clone(), id);
            let op = match rng.below(10) {
                0..=5 => {
                    model.insert(key, vec![value]);
                    "upsert"
                }
                6..=7 => {
                    model.remove(&key);
                    "delete"
                }
                _ => {
                    model.entry(key).or_default().push(value);
                    "insert"
                }
            };
            Op { op, payload }
        })
        .collect()
}

fn expected(model: &Model) -> Vec<Value> {
    let mut rows: Vec<Value> = model
        .iter()
        .flat_map(|((t, id), vs)| vs.iter().map(move |v| json!([t, id, v])))
        .collect();
    rows.sort_by_key(|r| r.to_string());
    rows
}

fn rows_of(out: &Value) -> Vec<Value> {
    let mut rows: Vec<Value> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| json!([r["tenant"], r["id"], r["v"]]))
        .collect();
    rows.sort_by_key(|r| r.to_string());
    rows
}

/// The table as iceberg-rust's scan reads it (it applies equality deletes too).
fn scanned(rt: &tokio::runtime::Runtime, writer: &Writer, io: &floe::config::Config) -> Vec<Value> {
    let ident = floe::catalog::table_ident("up", "t").unwrap();
    let loaded = rt
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let mut props = floe::storage::file_io_props(&io.storage);
    props.extend(loaded.io_props.clone());
    let table = iceberg::table::Table::builder()
        .metadata(loaded.metadata.clone())
        .identifier(ident)
        .file_io(floe::storage::build_file_io(props))
        .metadata_location(loaded.metadata_location.clone().unwrap())
        .runtime(iceberg::Runtime::new(rt))
        .build()
        .unwrap();
    let batches: Vec<arrow_array::RecordBatch> = rt.block_on(async {
        table
            .scan()
            .select(["tenant", "id", "v"])
            .build()
            .unwrap()
            .to_arrow()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    });
    let mut rows = Vec::new();
    for b in batches {
        let mut buf = Vec::new();
        let mut w = arrow_json::ArrayWriter::new(&mut buf);
        w.write(&b).unwrap();
        w.finish().unwrap();
        if buf.is_empty() {
            continue;
        }
        let objects: Vec<Value> = serde_json::from_slice(&buf).unwrap();
        rows.extend(
            objects
                .into_iter()
                .map(|r| json!([r["tenant"], r["id"], r["v"]])),
        );
    }
    rows.sort_by_key(|r| r.to_string());
    rows
}

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "tenant", "required": true, "type": "string"},
        {"id": 2, "name": "id", "required": true, "type": "long"},
        {"id": 3, "name": "v", "required": false, "type": "string"},
        {"id": 4, "name": "n", "required": false, "type": "long"}
    ]})
}

/// Runs the random stream against `base` (a catalog + storage config), checking every
/// commit with DuckDB (`duck` reader args) and iceberg-rust's scan.
fn model_run(base: Value, partition: Option<&str>, duck: impl Fn(&str) -> (String, Value)) {
    let rt = runtime();
    let mut cfg = base;
    merge(
        &mut cfg,
        json!({
            "namespace": "up", "table": "t",
            "identifier_fields": ["tenant", "id"],
            "schema_evolution": {"enabled": true, "schema": schema()},
        }),
    );
    if let Some(spec) = partition {
        merge(
            &mut cfg,
            json!({"schema_evolution": {"partition_spec": spec}}),
        );
    }
    let config = Config::from_json(&cfg.to_string()).unwrap();
    let writer = rt.block_on(Writer::open(config.clone())).unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut model = Model::new();
    for batch in 0..12 {
        let ops = random_ops(&mut rng, &mut model, 150, 60, batch);
        let messages: Vec<Message<'_>> = ops
            .iter()
            .map(|o| Message {
                operation: Some(o.op),
                ..Message::insert(o.payload.as_bytes())
            })
            .collect();
        let out = rt.block_on(writer.write_batch(&messages)).unwrap();
        assert!(
            out.failures.iter().all(Option::is_none),
            "batch {batch}: {:?}",
            out.failures.iter().flatten().collect::<Vec<_>>()
        );
        let ident = floe::catalog::table_ident("up", "t").unwrap();
        let table = rt
            .block_on(writer.catalog().load_table(&ident))
            .unwrap()
            .unwrap();
        let (reader, mut args) = duck(&table.metadata_location.unwrap());
        merge(&mut args, json!({"sql": "SELECT tenant, id, v FROM $T"}));
        let want = expected(&model);
        assert_eq!(
            rows_of(&read_back(&reader, args)),
            want,
            "DuckDB after batch {batch}"
        );
        assert_eq!(
            scanned(&rt, &writer, &config),
            want,
            "iceberg-rust after batch {batch}"
        );
    }
    // Snapshots of upserts are row deltas; deletes count in the summary.
    let ident = floe::catalog::table_ident("up", "t").unwrap();
    let table = rt
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let head = table.metadata.current_snapshot().unwrap();
    assert_eq!(
        head.summary().operation,
        iceberg::spec::Operation::Overwrite
    );
    let props = &head.summary().additional_properties;
    assert!(props["added-equality-deletes"].parse::<u64>().unwrap() > 0);
    let mut ids: Vec<i32> = table
        .metadata
        .current_schema()
        .identifier_field_ids()
        .collect();
    ids.sort();
    assert_eq!(ids, vec![1, 2], "tables floe creates register the key");
}

#[test]
fn merge_on_read_matches_the_model_on_the_embedded_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    model_run(
        json!({"catalog": {"warehouse": wh.to_str().unwrap()}}),
        None,
        |metadata| ("duckdb-file".into(), json!({"metadata": metadata})),
    );
}

#[test]
fn merge_on_read_matches_the_model_on_rest_and_s3_partitioned_by_key() {
    model_run(
        services().floe_config(),
        Some("(tenant, bucket(4, id))"),
        |metadata| {
            (
                "duckdb-s3".into(),
                json!({"metadata": metadata, "s3": services().duckdb_s3()}),
            )
        },
    );
}

#[test]
fn bad_keys_fail_alone_and_the_rest_commits() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let cfg = json!({
        "catalog": {"warehouse": dir.path().join("wh").to_str().unwrap()},
        "namespace": "up", "table": "t",
        "identifier_fields": ["tenant", "id"],
        "schema_evolution": {"enabled": true, "schema": schema()},
    });
    let writer = rt
        .block_on(Writer::open(Config::from_json(&cfg.to_string()).unwrap()))
        .unwrap();
    let texts = [
        (r#"{"tenant":"a","id":1,"v":"x"}"#, "upsert"),
        (r#"{"tenant":"a","v":"no id"}"#, "upsert"),
        (r#"{"tenant":"a","id":null}"#, "delete"),
        (r#"{"tenant":"a","id":1.5}"#, "delete"),
        (r#"{"tenant":"a","id":2,"v":"y"}"#, "merge"),
        (r#"{"tenant":"a","id":3,"v":"z"}"#, "UPSERT"),
    ];
    let messages: Vec<Message<'_>> = texts
        .iter()
        .map(|(t, op)| Message {
            operation: Some(op),
            ..Message::insert(t.as_bytes())
        })
        .collect();
    let out = rt.block_on(writer.write_batch(&messages)).unwrap();
    let failed: Vec<usize> = (0..texts.len())
        .filter(|&i| out.failures[i].is_some())
        .collect();
    assert_eq!(failed, vec![1, 2, 3, 4], "{:?}", out.failures);
    for i in failed {
        let e = out.failures[i].as_ref().unwrap();
        assert_eq!(e.kind(), floe::ErrorKind::Data, "{e}");
        assert!(e.to_string().contains(&format!("message {i}")), "{e}");
    }
    assert!(
        out.failures[4]
            .as_ref()
            .unwrap()
            .to_string()
            .contains("\"merge\"")
    );
    assert_eq!(out.rows_committed, 2);
}

#[test]
fn a_missing_identifier_field_is_a_config_error_naming_it() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let cfg = json!({
        "catalog": {"warehouse": dir.path().join("wh").to_str().unwrap()},
        "namespace": "up", "table": "t",
        "identifier_fields": ["tenant", "user_id"],
        "schema_evolution": {"enabled": true, "schema": schema()},
    });
    let writer = rt
        .block_on(Writer::open(Config::from_json(&cfg.to_string()).unwrap()))
        .unwrap();
    let msg = [Message {
        operation: Some("upsert"),
        ..Message::insert(br#"{"tenant":"a","id":1}"#)
    }];
    let e = rt.block_on(writer.write_batch(&msg)).unwrap_err();
    assert_eq!(e.kind(), floe::ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("user_id"), "{e}");
}
