//! Copy-on-write's page splice against a model, end to end: a table of a few hundred
//! keys written in pages of a few rows, then rounds of a few upserts, deletes and
//! inserts on random keys (new ones too, nulls in every non-key column, a composite
//! string + long key, or a long key alone), each call one commit. Such rewrites touch few pages of the files
//! they rewrite, so most are spliced (the pages without a replaced row copied byte for
//! byte, the others re-encoded at the end of their row group): after every round the
//! table must equal the model as DuckDB and pyiceberg read it, and at the end as Apache
//! Iceberg's Java reader does (REST fixture and SeaweedFS). Each seed must splice files.
//! A failure prints the seed, round, reader and every operation on the first key that
//! differs. `FLOE_MODEL_SEEDS` sets the embedded catalog's seeds (default 3; the REST
//! fixture runs a third of them, at least one; `make reliability` runs 100).

mod support;

use std::collections::BTreeMap;

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::{Value, json};
use support::{Rng, merge, read_back, runtime, services};

const TENANTS: [&str; 3] = ["acme", "bücher", "zeta"];
/// Keys of the first load; later operations draw from a tenth more.
const IDS: u64 = 150;
const ROUNDS: usize = 12;

/// A row's non-key values: v, n, amount (as text, two decimals).
type Values = (Option<String>, Option<i64>, Option<String>);
/// (tenant, id) → its rows' values.
type Model = BTreeMap<(String, i64), Vec<Values>>;
/// A row as every reader gives it: tenant, id and the values.
type Row = (String, i64, Values);

struct Op {
    op: &'static str,
    key: (String, i64),
    payload: String,
}

fn random_values(rng: &mut Rng, label: String) -> Values {
    let v = (rng.below(5) != 0).then_some(label);
    let n = (rng.below(4) != 0).then(|| rng.below(1_000_000) as i64 - 500_000);
    let amount = (rng.below(3) != 0).then(|| {
        let cents = rng.below(2_000_000) as i64 - 1_000_000;
        let sign = if cents < 0 { "-" } else { "" };
        format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
    });
    (v, n, amount)
}

fn op(
    rng: &mut Rng,
    model: &mut Model,
    kind: &'static str,
    key: (String, i64),
    label: String,
) -> Op {
    let values = random_values(rng, label);
    let payload = json!({
        "tenant": key.0, "id": key.1, "v": values.0, "n": values.1,
        "amount": values.2.as_deref().map(|a| a.parse::<f64>().unwrap()),
    })
    .to_string();
    match kind {
        "upsert" => {
            model.insert(key.clone(), vec![values]);
        }
        "delete" => {
            model.remove(&key);
        }
        _ => model.entry(key.clone()).or_default().push(values),
    }
    Op {
        op: kind,
        key,
        payload,
    }
}

/// The first load: every key once.
fn load(rng: &mut Rng, model: &mut Model, tenants: &[&str]) -> Vec<Op> {
    let mut ops = Vec::new();
    for tenant in tenants {
        for id in 0..IDS as i64 {
            ops.push(op(
                rng,
                model,
                "insert",
                (tenant.to_string(), id),
                format!("load-{id}"),
            ));
        }
    }
    ops
}

/// A round's call: 1–6 operations on random keys.
fn random_call(rng: &mut Rng, model: &mut Model, round: usize, tenants: &[&str]) -> Vec<Op> {
    (0..1 + rng.below(6))
        .map(|i| {
            let key = (
                tenants[rng.below(tenants.len() as u64) as usize].to_string(),
                rng.below(IDS + IDS / 10) as i64,
            );
            let kind = match rng.below(20) {
                0..=11 => "upsert",
                12..=16 => "delete",
                _ => "insert",
            };
            op(rng, model, kind, key, format!("r{round}m{i}"))
        })
        .collect()
}

fn expected(model: &Model) -> Vec<Row> {
    let mut rows: Vec<Row> = model
        .iter()
        .flat_map(|((t, id), vs)| vs.iter().map(move |v| (t.clone(), *id, v.clone())))
        .collect();
    rows.sort();
    rows
}

/// Rows from a reader's answer: `tenant`, `id`, `v`, `n` and `amount` (as text).
fn rows_of(out: &Value) -> Vec<Row> {
    let mut rows: Vec<Row> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().map(str::to_string);
            let amount = match &r["amount"] {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(format!("{:.2}", other.as_f64().unwrap())),
            };
            (
                text("tenant").unwrap(),
                r["id"].as_i64().unwrap(),
                (text("v"), r["n"].as_i64(), amount),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn explain(got: &[Row], want: &[Row], history: &[(usize, &Op)]) -> String {
    let key_of = |r: &Row| (r.0.clone(), r.1);
    let only_in = |a: &[Row], b: &[Row]| a.iter().find(|r| !b.contains(r)).map(key_of);
    let Some(key) = only_in(got, want).or_else(|| only_in(want, got)) else {
        return format!("{} rows read, {} expected", got.len(), want.len());
    };
    let rows = |rows: &[Row]| -> Vec<Values> {
        rows.iter()
            .filter(|r| key_of(r) == key)
            .map(|r| r.2.clone())
            .collect()
    };
    let ops: Vec<String> = history
        .iter()
        .filter(|(_, o)| o.key == key)
        .map(|(round, o)| format!("  round {round}: {} {}", o.op, o.payload))
        .collect();
    format!(
        "key {key:?}: read {:?}, expected {:?}; its operations:\n{}",
        rows(got),
        rows(want),
        ops.join("\n")
    )
}

enum Backend {
    Embedded(std::path::PathBuf),
    Rest,
}

impl Backend {
    fn config(&self) -> Value {
        match self {
            Backend::Embedded(wh) => json!({"catalog": {"warehouse": wh.to_str().unwrap()}}),
            Backend::Rest => services().floe_config(),
        }
    }

    /// (reader name, reader, args) for every reader of the table now; Java's only on
    /// REST and when `last`.
    fn readers(
        &self,
        table: &str,
        metadata: String,
        last: bool,
    ) -> Vec<(&'static str, &'static str, Value)> {
        let sql = "SELECT tenant, id, v, n, CAST(amount AS VARCHAR) AS amount FROM $T";
        let name = format!("splice.{table}");
        match self {
            Backend::Embedded(wh) => vec![
                (
                    "DuckDB",
                    "duckdb-file",
                    json!({"metadata": metadata, "sql": sql}),
                ),
                (
                    "pyiceberg",
                    "pyiceberg-sql",
                    json!({"uri": format!("sqlite:///{}", wh.join("catalog.db").display()),
                           "warehouse": format!("file://{}", wh.display()), "table": name}),
                ),
            ],
            Backend::Rest => {
                let s3 = services().duckdb_s3();
                let mut readers = vec![
                    (
                        "DuckDB",
                        "duckdb-s3",
                        json!({"metadata": metadata, "s3": s3, "sql": sql}),
                    ),
                    (
                        "pyiceberg",
                        "pyiceberg-rest",
                        services().pyiceberg_args(&name),
                    ),
                ];
                if last {
                    let args = services().pyiceberg_args(&name);
                    readers.push(("Iceberg's Java reader", "java-rest", args));
                }
                readers
            }
        }
    }

    /// Data files the splice wrote under the table's `location` (`…-spliced.parquet`).
    fn spliced_files(&self, location: &str) -> usize {
        let keys: Vec<String> = match self {
            Backend::Embedded(_) => {
                walk(std::path::Path::new(location.trim_start_matches("file://")))
            }
            Backend::Rest => {
                let prefix = format!("{location}/data");
                let out = read_back(
                    "s3-list",
                    json!({"prefix": prefix, "s3": services().duckdb_s3()}),
                );
                serde_json::from_value(out["rows"].clone()).unwrap()
            }
        };
        keys.iter()
            .filter(|k| k.ends_with("-spliced.parquet"))
            .count()
    }
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out
}

/// The table's key: `tenant` and `id` (hashed in the key indexes), or `id` alone (a
/// long: exact indexes, which a spliced file carries over from the file it replaced
/// instead of reading its keys again; one tenant, so the model's key is the table's).
#[derive(Clone, Copy)]
enum Key {
    TenantAndId,
    Id,
}

fn run_seed(backend: &Backend, table: &str, seed: u64, key: Key) -> Result<usize, String> {
    let rt = runtime();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let page_rows = [4, 8, 2, 16][(seed % 4) as usize];
    let (identifier_fields, tenants) = match key {
        Key::TenantAndId => (json!(["tenant", "id"]), &TENANTS[..]),
        Key::Id => (json!(["id"]), &TENANTS[..1]),
    };
    let mut cfg = backend.config();
    merge(
        &mut cfg,
        json!({
            "namespace": "splice", "table": table,
            "identifier_fields": identifier_fields,
            "merge_strategy": "copy-on-write",
            "parquet": {"page_row_limit": page_rows},
            "schema_evolution": {"enabled": true, "schema": {"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "tenant", "required": true, "type": "string"},
                {"id": 2, "name": "id", "required": true, "type": "long"},
                {"id": 3, "name": "v", "required": false, "type": "string"},
                {"id": 4, "name": "n", "required": false, "type": "long"},
                {"id": 5, "name": "amount", "required": false, "type": "decimal(10, 2)"}
            ]}},
        }),
    );
    let writer = rt
        .block_on(Writer::open(Config::from_json(&cfg.to_string()).unwrap()))
        .unwrap();
    let ident = floe::catalog::table_ident("splice", table).unwrap();
    let mut model = Model::new();
    let mut history: Vec<(usize, Op)> = Vec::new();
    for round in 0..=ROUNDS {
        let ops = match round {
            0 => load(&mut rng, &mut model, tenants),
            _ => random_call(&mut rng, &mut model, round, tenants),
        };
        let messages: Vec<Message<'_>> = ops
            .iter()
            .map(|o| Message {
                operation: Some(o.op),
                ..Message::insert(o.payload.as_bytes())
            })
            .collect();
        let out = rt
            .block_on(writer.write_batch(&messages))
            .map_err(|e| format!("seed {seed}, round {round}: {e}"))?;
        let failed: Vec<_> = out.failures.iter().flatten().collect();
        if !failed.is_empty() {
            return Err(format!("seed {seed}, round {round}: {failed:?}"));
        }
        drop(messages);
        history.extend(ops.into_iter().map(|o| (round, o)));
        let loaded = rt
            .block_on(writer.catalog().load_table(&ident))
            .unwrap()
            .unwrap();
        let metadata = loaded.metadata_location.unwrap();
        let want = expected(&model);
        let refs: Vec<(usize, &Op)> = history.iter().map(|(r, o)| (*r, o)).collect();
        for (name, reader, args) in backend.readers(table, metadata, round == ROUNDS) {
            let got = rows_of(&read_back(reader, args));
            if got != want {
                return Err(format!(
                    "seed {seed} (pages of {page_rows} rows), after round {round}, read by {name}: {}",
                    explain(&got, &want, &refs)
                ));
            }
        }
    }
    let loaded = rt
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let spliced = backend.spliced_files(loaded.metadata.location());
    if spliced == 0 {
        return Err(format!(
            "seed {seed} (pages of {page_rows} rows): no file was spliced"
        ));
    }
    Ok(spliced)
}

fn seeds() -> u64 {
    std::env::var("FLOE_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

fn check(results: Vec<Result<usize, String>>) {
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let spliced: usize = results.iter().filter_map(|r| r.as_ref().ok()).sum();
    println!("{} seeds, {spliced} files spliced", results.len());
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed:\n{}",
        failures.len(),
        results.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

/// Every seed on the embedded catalog, each in its own folder.
fn embedded_seeds(key: Key) -> Vec<Result<usize, String>> {
    (1..=seeds())
        .map(|seed| {
            let dir = tempfile::tempdir().unwrap();
            run_seed(&Backend::Embedded(dir.path().join("wh")), "t", seed, key)
        })
        .collect()
}

#[test]
fn spliced_rewrites_equal_the_model() {
    check(embedded_seeds(Key::TenantAndId));
}

/// A long key: each spliced file's key index is carried over from the file it
/// replaced, and later rounds find the rows that moved to the end of their row group
/// through it, without reading the file.
#[test]
fn spliced_rewrites_on_a_long_key_equal_the_model() {
    check(embedded_seeds(Key::Id));
}

#[test]
fn spliced_rewrites_equal_the_model_on_rest_and_s3() {
    let results = (1..=seeds().div_ceil(3))
        .map(|seed| run_seed(&Backend::Rest, &format!("t_{seed}"), seed, Key::TenantAndId))
        .collect();
    check(results);
}
