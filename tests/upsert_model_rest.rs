//! The upsert model on the real services: Apache's REST fixture and SeaweedFS, four calls
//! in flight together (`max_in_flight` 4, so group commit merges them), a composite key of
//! a string (some non-ASCII) and a long, and a partitioned table. For copy-on-write and
//! positional the partition is off the key (`bucket(4, n)`, with `n` new in every
//! message), so an upsert moves its key to another partition and the old row must go;
//! merge-on-read, whose deletes must meet the key's partition, is partitioned by the key's
//! string. Each call's operations on a key apply in the order the calls arrived
//! (`Writer::arrive`): the model applies the calls in that order. After every round the
//! table is read by DuckDB and, where it reads the table's deletes, pyiceberg; every other
//! round and at the end by Apache Iceberg's Java reader (every round on v3 tables). A failure prints the seed, the
//! round, the reader and every operation on the first key that differs, in arrival order:
//! the minimal stream that shows it. Copy-on-write writes pages of 1 or 2 rows in two
//! seeds of three (the first among them), so that its rewrites splice pages (copying
//! those without a replaced row), and such a seed fails if it spliced no file.
//! Merge-on-read and positional run on v3 tables too (`schema_evolution.format_version`
//! 3): positional then writes deletion vectors, and such a seed fails unless it wrote
//! some, replaced some, and wrote no position-delete file.
//! `FLOE_MODEL_SEEDS` sets the seeds per strategy (default 1; `make reliability` runs
//! 100).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::{Value, json};
use support::{
    Rng, merge, read_back, runtime, services, write_calls_in_arrival_order, write_ordered_call,
};

/// (tenant, id) → the `v` of each of its rows (several only after inserts of a live key).
type Model = BTreeMap<(String, i64), Vec<String>>;

const TENANTS: [&str; 3] = ["acme", "bücher", "zeta"];
const IDS: u64 = 5;
const CALLS_PER_ROUND: usize = 4;
const ROUNDS: usize = 6;

/// One message: its operation, key and payload.
#[derive(Clone)]
struct Op {
    op: &'static str,
    key: (String, i64),
    payload: String,
}

/// A call of 1–20 operations on the hot keys, applied to `model` as the call arriving
/// now would apply them (upserts replace, deletes remove, inserts add a row).
fn random_call(rng: &mut Rng, model: &mut Model, round: usize, call: usize) -> Vec<Op> {
    (0..1 + rng.below(20))
        .map(|i| {
            let key = (
                TENANTS[rng.below(TENANTS.len() as u64) as usize].to_string(),
                rng.below(IDS) as i64,
            );
            let v = format!("r{round}c{call}m{i}");
            let n = rng.below(1_000) as i64;
            let payload = json!({"tenant": key.0, "id": key.1, "v": v, "n": n}).to_string();
            let op = match rng.below(10) {
                0..=5 => {
                    model.insert(key.clone(), vec![v]);
                    "upsert"
                }
                6..=8 => {
                    model.remove(&key);
                    "delete"
                }
                _ => {
                    model.entry(key.clone()).or_default().push(v);
                    "insert"
                }
            };
            Op { op, key, payload }
        })
        .collect()
}

async fn write_call(writer: Arc<Writer>, ticket: u64, ops: Vec<Op>) -> Result<(), String> {
    let messages: Vec<Message<'_>> = ops
        .iter()
        .map(|o| Message {
            operation: Some(o.op),
            ..Message::insert(o.payload.as_bytes())
        })
        .collect();
    write_ordered_call(&writer, ticket, &messages, |_| {}).await
}

type Row = (String, i64, String);

fn expected(model: &Model) -> Vec<Row> {
    let mut rows: Vec<Row> = model
        .iter()
        .flat_map(|((t, id), vs)| vs.iter().map(move |v| (t.clone(), *id, v.clone())))
        .collect();
    rows.sort();
    rows
}

fn rows_of(out: &Value) -> Vec<Row> {
    let mut rows: Vec<Row> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap().to_string();
            (text("tenant"), r["id"].as_i64().unwrap(), text("v"))
        })
        .collect();
    rows.sort();
    rows
}

/// What v3 row lineage says of a row: its `_row_id` and `_last_updated_sequence_number`.
type Lineage = (i64, i64);

/// Each row's lineage as Apache Iceberg's Java reader gives it, by the row's value `v`
/// (unique: every operation writes a new one).
fn lineage_of(table: &str) -> BTreeMap<String, Lineage> {
    let mut args = services().pyiceberg_args(&format!("model.{table}"));
    merge(&mut args, json!({"lineage": true}));
    let out = read_back("java-rest", args);
    let rows = out["rows"].as_array().unwrap().iter().map(|r| {
        let long = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k} of {r}"));
        let v = r["v"].as_str().unwrap().to_string();
        (v, (long("_row_id"), long("_last_updated_sequence_number")))
    });
    rows.collect()
}

/// v3 row lineage against the last round's: a row that stayed keeps its row id and
/// last-updated sequence number (through copy-on-write's rewrites too); a row written
/// since has a row id no row had before and a sequence number of a commit since
/// (`after`, exclusive, to `upto`); no two rows share a row id.
fn check_lineage(
    now: &BTreeMap<String, Lineage>,
    before: &BTreeMap<String, Lineage>,
    ever: &mut std::collections::HashSet<i64>,
    (after, upto): (i64, i64),
) -> Result<(), String> {
    let mut ids = std::collections::HashSet::new();
    for (v, &(id, sequence)) in now {
        if !ids.insert(id) {
            return Err(format!("row {v}: row id {id} is another live row's too"));
        }
        match before.get(v) {
            Some(&was) if was != (id, sequence) => {
                return Err(format!(
                    "row {v} kept, but its (row id, last-updated sequence number) went from \
                     {was:?} to {:?}",
                    (id, sequence)
                ));
            }
            Some(_) => {}
            None if ever.contains(&id) => {
                return Err(format!(
                    "new row {v} got row id {id}, which an earlier row had"
                ));
            }
            None if sequence <= after || sequence > upto => {
                return Err(format!(
                    "new row {v}: last-updated sequence number {sequence}, not a commit of \
                     this round ({after} < n <= {upto})"
                ));
            }
            None => {}
        }
    }
    ever.extend(ids);
    Ok(())
}

/// The first key whose rows differ, with every operation on it in arrival order.
fn explain(got: &[Row], want: &[Row], history: &[(usize, usize, Op)]) -> String {
    let rows_of_key = |rows: &[Row], key: &(String, i64)| -> Vec<String> {
        rows.iter()
            .filter(|r| (&r.0, r.1) == (&key.0, key.1))
            .map(|r| r.2.clone())
            .collect()
    };
    let keys = got.iter().chain(want).map(|r| (r.0.clone(), r.1));
    let Some(key) = keys
        .into_iter()
        .find(|k| rows_of_key(got, k) != rows_of_key(want, k))
    else {
        return format!("{} rows read, {} expected", got.len(), want.len());
    };
    let ops: Vec<String> = history
        .iter()
        .filter(|(_, _, o)| o.key == key)
        .map(|(round, call, o)| format!("  round {round} call {call}: {} {}", o.op, o.payload))
        .collect();
    format!(
        "key {key:?}: read {:?}, expected {:?}; its operations in arrival order:\n{}",
        rows_of_key(got, &key),
        rows_of_key(want, &key),
        ops.join("\n")
    )
}

/// The readers of the table as it is now: (name, rows).
fn read_table(
    writer: &Writer,
    table: &str,
    (strategy, version): (&str, u8),
    java: bool,
) -> Vec<(&'static str, Vec<Row>)> {
    let rt = runtime();
    let ident = floe::catalog::table_ident("model", table).unwrap();
    let loaded = rt
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let sql = "SELECT tenant, id, v FROM $T";
    let duck = json!({"metadata": loaded.metadata_location.unwrap(), "s3": services().duckdb_s3(), "sql": sql});
    assert_eq!(loaded.metadata.format_version() as u8, version);
    let mut readers = vec![("DuckDB", rows_of(&read_back("duckdb-s3", duck)))];
    let args = services().pyiceberg_args(&format!("model.{table}"));
    if strategy != "merge-on-read" {
        readers.push((
            "pyiceberg",
            rows_of(&read_back("pyiceberg-rest", args.clone())),
        ));
    }
    if java {
        readers.push((
            "Iceberg's Java reader",
            rows_of(&read_back("java-rest", args)),
        ));
    }
    readers
}

fn run_seed(seed: u64, strategy: &str, version: u8) -> Result<(), String> {
    let rt = runtime();
    let table = format!("{}_v{version}_{seed}", strategy.replace('-', "_"));
    let partition = match strategy {
        "merge-on-read" => "(tenant)",
        _ => "(bucket(4, n))",
    };
    let mut cfg = services().floe_config();
    merge(
        &mut cfg,
        json!({
            "namespace": "model", "table": table,
            "identifier_fields": ["tenant", "id"],
            "merge_strategy": strategy,
            "max_in_flight": CALLS_PER_ROUND,
            "schema_evolution": {"enabled": true, "partition_spec": partition,
                "format_version": version,
                "schema": {"type": "struct", "schema-id": 0, "fields": [
                    {"id": 1, "name": "tenant", "required": true, "type": "string"},
                    {"id": 2, "name": "id", "required": true, "type": "long"},
                    {"id": 3, "name": "v", "required": false, "type": "string"},
                    {"id": 4, "name": "n", "required": false, "type": "long"}
                ]}},
        }),
    );
    // Copy-on-write splices files of several pages (copying the pages without a
    // replaced row): small pages make this stream's few-row files spliceable.
    let page_rows = page_rows_of(seed, strategy).filter(|_| version == 2);
    if let Some(rows) = page_rows {
        merge(&mut cfg, json!({"parquet": {"page_row_limit": rows}}));
    }
    let config = Config::from_json(&cfg.to_string()).unwrap();
    let writer = Arc::new(rt.block_on(Writer::open(config)).unwrap());
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut model = Model::new();
    let mut history = Vec::new();
    let (mut lineage, mut row_ids_ever, mut sequence) = (BTreeMap::new(), Default::default(), 0);
    for round in 0..ROUNDS {
        let calls: Vec<Vec<Op>> = (0..CALLS_PER_ROUND)
            .map(|call| random_call(&mut rng, &mut model, round, call))
            .collect();
        for (call, ops) in calls.iter().enumerate() {
            history.extend(ops.iter().map(|o| (round, call, o.clone())));
        }
        write_calls_in_arrival_order(&rt, &writer, calls, write_call)?;
        // On v3, manifests merge from the second round on, so that lineage is checked
        // through merged data manifests too (their entries carry their first row ids).
        if version == 3 && round == 0 {
            let ident = floe::catalog::table_ident("model", &table).unwrap();
            let merge_early = iceberg::TableUpdate::SetProperties {
                updates: [("commit.manifest.min-count-to-merge".into(), "2".into())].into(),
            };
            let set = writer.catalog().commit(&ident, vec![], vec![merge_early]);
            rt.block_on(set).map_err(|e| e.to_string())?;
        }
        let java = version == 3 || round % 2 == 1 || round + 1 == ROUNDS;
        let want = expected(&model);
        for (reader, got) in read_table(&writer, &table, (strategy, version), java) {
            if got != want {
                return Err(format!(
                    "seed {seed}, {strategy}, after round {round}, read by {reader}: {}",
                    explain(&got, &want, &history)
                ));
            }
        }
        if version == 3 {
            let now = lineage_of(&table);
            let upto = last_sequence_number(&writer, &table);
            check_lineage(&now, &lineage, &mut row_ids_ever, (sequence, upto)).map_err(|e| {
                format!("seed {seed}, {strategy} on v3, after round {round}, row lineage: {e}")
            })?;
            (lineage, sequence) = (now, upto);
        }
    }
    if page_rows.is_some() && files_named(&writer, &table, "data", "-spliced.parquet") == 0 {
        return Err(format!("seed {seed}, {strategy}: no file was spliced"));
    }
    if version == 3 && files_named(&writer, &table, "metadata", "-m1.avro") == 0 {
        return Err(format!(
            "seed {seed}, {strategy} on v3: no manifests merged"
        ));
    }
    // On v3, positional deletes go into deletion vectors, never position-delete files.
    if version == 3 && strategy == "merge-on-read-positional" {
        let vectors = files_named(&writer, &table, "data", "-deletes.puffin");
        let position_files = files_named(&writer, &table, "data", "-pos-deletes");
        let replaced = replaced_deletion_vectors(&writer, &table);
        if vectors == 0 || position_files > 0 || replaced == 0 {
            return Err(format!(
                "seed {seed}, v3 positional: {vectors} Puffin files, {position_files} \
                 position-delete files, {replaced} deletion vectors replaced"
            ));
        }
    }
    Ok(())
}

/// The page row limit a copy-on-write seed writes with (two in three seeds small, the
/// first seed included); `None`: the default.
fn page_rows_of(seed: u64, strategy: &str) -> Option<u64> {
    (strategy == "copy-on-write")
        .then_some([Some(2), Some(1), None][((seed - 1) % 3) as usize])
        .flatten()
}

/// The table's last sequence number (that of its newest commit).
fn last_sequence_number(writer: &Writer, table: &str) -> i64 {
    let ident = floe::catalog::table_ident("model", table).unwrap();
    let loaded = runtime()
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    loaded.metadata.last_sequence_number()
}

/// How many deletion vectors the table's snapshots replaced with new ones (each
/// snapshot's `removed-delete-files`: positional writes remove no other delete files).
fn replaced_deletion_vectors(writer: &Writer, table: &str) -> u64 {
    let ident = floe::catalog::table_ident("model", table).unwrap();
    let loaded = runtime()
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let figure = |s: &iceberg::spec::SnapshotRef| {
        let removed = s
            .summary()
            .additional_properties
            .get("removed-delete-files");
        removed.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    };
    loaded.metadata.snapshots().map(figure).sum()
}

/// Files in the table's `folder` (`data`, `metadata`) whose names hold `suffix`
/// (`-spliced.parquet`: the splice's).
fn files_named(writer: &Writer, table: &str, folder: &str, suffix: &str) -> usize {
    let ident = floe::catalog::table_ident("model", table).unwrap();
    let loaded = runtime()
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let prefix = format!("{}/{folder}", loaded.metadata.location());
    let out = read_back(
        "s3-list",
        json!({"prefix": prefix, "s3": services().duckdb_s3()}),
    );
    let keys: Vec<String> = serde_json::from_value(out["rows"].clone()).unwrap();
    keys.iter().filter(|k| k.contains(suffix)).count()
}

fn every_seed(strategy: &str) {
    every_seed_of(strategy, 2);
}

fn every_seed_of(strategy: &str, version: u8) {
    let seeds: u64 = std::env::var("FLOE_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let failures: Vec<String> = (1..=seeds)
        .filter_map(|seed| run_seed(seed, strategy, version).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {seeds} seeds failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn merge_on_read_equals_the_model_on_rest_and_s3() {
    every_seed("merge-on-read");
}

#[test]
fn copy_on_write_equals_the_model_on_rest_and_s3_with_keys_moving_partitions() {
    every_seed("copy-on-write");
}

#[test]
fn positional_equals_the_model_on_rest_and_s3_with_keys_moving_partitions() {
    every_seed("merge-on-read-positional");
}

#[test]
fn merge_on_read_equals_the_model_on_a_v3_table() {
    every_seed_of("merge-on-read", 3);
}

#[test]
fn positional_writes_deletion_vectors_that_equal_the_model_on_a_v3_table() {
    every_seed_of("merge-on-read-positional", 3);
}

#[test]
fn copy_on_write_keeps_row_lineage_on_a_v3_table() {
    every_seed_of("copy-on-write", 3);
}
