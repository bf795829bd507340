//! Upserts on a composite key of a `timestamptz`, a `decimal(10, 2)` and a string, each
//! value spelled in several equal ways (an instant in UTC or with an offset, with or
//! without fractional seconds; `1.5` and `1.50`): a seeded random stream of inserts,
//! upserts and deletes, checked after every batch against an in-memory model by DuckDB
//! (which applies equality deletes) and, for the strategies without them, pyiceberg, for
//! each strategy and several seeds (`FLOE_MODEL_SEEDS`, default 3) on the embedded
//! catalog, and a third as many on the REST fixture and SeaweedFS. A spelling that made
//! two keys of one value would leave a superseded row behind, or a deleted one.
//! A failure prints its seed, strategy and batch, and the shortest prefix of that
//! batch's operations on the key that went wrong.

mod support;

use std::collections::BTreeMap;

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::{Value, json};
use support::{Rng, merge, read_back, runtime, services};

/// Instants of the key, each with spellings of the same moment.
const INSTANTS: [(i64, [&str; 3]); 3] = [
    (
        1_767_225_600_000_000,
        [
            "2026-01-01T00:00:00Z",
            "2026-01-01T01:00:00+01:00",
            "2026-01-01T00:00:00.000000Z",
        ],
    ),
    (
        1_767_225_600_250_000,
        [
            "2026-01-01T00:00:00.25Z",
            "2025-12-31T19:00:00.250-05:00",
            "2026-01-01T00:00:00.250000+00:00",
        ],
    ),
    (
        1_780_000_000_000_000,
        [
            "2026-05-28T20:26:40Z",
            "2026-05-29T05:56:40+09:30",
            "2026-05-28T20:26:40.000Z",
        ],
    ),
];

/// Amounts in cents, each with spellings of the same number.
const AMOUNTS: [(i64, [&str; 2]); 3] = [
    (150, ["1.5", "1.50"]),
    (-325, ["-3.25", "-3.250"]),
    (0, ["0", "0.00"]),
];

const CODES: [&str; 2] = ["a", "Ä"];

/// (instant index, cents, code) → the values its rows hold.
type Model = BTreeMap<(usize, i64, &'static str), Vec<String>>;

#[derive(Debug)]
struct Op {
    op: &'static str,
    key: (usize, i64, &'static str),
    payload: String,
}

fn random_ops(rng: &mut Rng, n: usize, batch: usize) -> Vec<Op> {
    (0..n)
        .map(|i| {
            let t = rng.below(INSTANTS.len() as u64) as usize;
            let (cents, spellings) = AMOUNTS[rng.below(AMOUNTS.len() as u64) as usize];
            let code = CODES[rng.below(CODES.len() as u64) as usize];
            let ts = INSTANTS[t].1[rng.below(3) as usize];
            let amount = spellings[rng.below(2) as usize];
            let payload =
                format!(r#"{{"ts":"{ts}","amount":{amount},"code":"{code}","v":"b{batch}-m{i}"}}"#);
            let op = match rng.below(10) {
                0..=5 => "upsert",
                6..=7 => "delete",
                _ => "insert",
            };
            Op {
                op,
                key: (t, cents, code),
                payload,
            }
        })
        .collect()
}

fn apply(model: &mut Model, op: &Op) {
    let value = serde_json::from_str::<Value>(&op.payload).unwrap()["v"]
        .as_str()
        .unwrap()
        .to_string();
    match op.op {
        "upsert" => {
            model.insert(op.key, vec![value]);
        }
        "delete" => {
            model.remove(&op.key);
        }
        _ => model.entry(op.key).or_default().push(value),
    }
}

fn cents_text(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
}

/// The model's rows as `[epoch µs, amount text, code, v]`, sorted.
fn expected(model: &Model) -> Vec<Value> {
    let mut rows: Vec<Value> = model
        .iter()
        .flat_map(|(&(t, cents, code), vs)| {
            vs.iter()
                .map(move |v| json!([INSTANTS[t].0, cents_text(cents), code, v]))
        })
        .collect();
    rows.sort_by_key(|r| r.to_string());
    rows
}

/// pyiceberg's rows in the same form: its timestamps are ISO text in UTC.
fn pyiceberg_rows(out: &Value) -> Vec<Value> {
    let mut rows: Vec<Value> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let iso = r["ts"].as_str().unwrap();
            let us = INSTANTS
                .iter()
                .find(|(us, _)| iso_of(*us) == iso)
                .map_or(json!(iso), |(us, _)| json!(us));
            json!([us, r["amount"], r["code"], r["v"]])
        })
        .collect();
    rows.sort_by_key(|r| r.to_string());
    rows
}

/// An instant as pyiceberg prints it (`datetime.isoformat()` in UTC).
fn iso_of(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let frac = if micros == 0 {
        String::new()
    } else {
        format!(".{micros:06}")
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn rows_of_duckdb(out: &Value) -> Vec<Value> {
    let mut rows: Vec<Value> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| json!([r["ts_us"], r["amount"], r["code"], r["v"]]))
        .collect();
    rows.sort_by_key(|r| r.to_string());
    rows
}

/// The shortest prefix of `ops` whose operations on `key` the table got wrong: printed
/// with a failure, so the case reads without replaying the whole stream.
fn ops_on(ops: &[Op], key: (usize, i64, &'static str)) -> Vec<String> {
    ops.iter()
        .filter(|o| o.key == key)
        .map(|o| format!("{} {}", o.op, o.payload))
        .collect()
}

/// Where a run writes: the embedded catalog in a folder, or the REST fixture on
/// SeaweedFS; and how DuckDB and pyiceberg reach the table there.
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

    /// DuckDB's reader and its args for the table at `metadata`.
    fn duckdb(&self, metadata: String, sql: &str) -> (&'static str, Value) {
        match self {
            Backend::Embedded(_) => ("duckdb-file", json!({"metadata": metadata, "sql": sql})),
            Backend::Rest => (
                "duckdb-s3",
                json!({"metadata": metadata, "s3": services().duckdb_s3(), "sql": sql}),
            ),
        }
    }

    fn pyiceberg(&self, table: &str) -> (&'static str, Value) {
        match self {
            Backend::Embedded(wh) => (
                "pyiceberg-sql",
                json!({"uri": format!("sqlite:///{}", wh.join("catalog.db").display()),
                       "warehouse": format!("file://{}", wh.display()), "table": format!("typed.{table}")}),
            ),
            Backend::Rest => (
                "pyiceberg-rest",
                services().pyiceberg_args(&format!("typed.{table}")),
            ),
        }
    }
}

fn run(seed: u64, strategy: &str) {
    let dir = tempfile::tempdir().unwrap();
    run_on(
        Backend::Embedded(dir.path().join("wh")),
        "t",
        seed,
        strategy,
    );
}

/// The same on the REST fixture and SeaweedFS, a table per seed and strategy.
fn run_rest(seed: u64, strategy: &str) {
    let table = format!("t_{}_{seed:x}", strategy.replace('-', "_"));
    run_on(Backend::Rest, &table, seed, strategy);
}

fn run_on(backend: Backend, table: &str, seed: u64, strategy: &str) {
    let rt = runtime();
    let mut cfg = backend.config();
    merge(
        &mut cfg,
        json!({
            "namespace": "typed", "table": table,
            "identifier_fields": ["ts", "amount", "code"],
            "merge_strategy": strategy,
            "schema_evolution": {"enabled": true, "schema": {"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "ts", "required": true, "type": "timestamptz"},
                {"id": 2, "name": "amount", "required": true, "type": "decimal(10, 2)"},
                {"id": 3, "name": "code", "required": true, "type": "string"},
                {"id": 4, "name": "v", "required": false, "type": "string"}
            ]}},
        }),
    );
    let writer = rt
        .block_on(Writer::open(Config::from_json(&cfg.to_string()).unwrap()))
        .unwrap();
    let pyiceberg = backend.pyiceberg(table);
    let mut rng = Rng(seed);
    let mut model = Model::new();
    // Operations that meet their key spelled otherwise than when it was last written:
    // what the run is for, so it must see many.
    let mut last_spelling = BTreeMap::new();
    let mut respelled = 0;
    for batch in 0..6 {
        let before = model.clone();
        let ops = random_ops(&mut rng, 60, batch);
        for op in &ops {
            apply(&mut model, op);
            let spelling = spelling_of(&op.payload);
            if let Some(old) = last_spelling.insert(op.key, spelling.clone()) {
                respelled += usize::from(old != spelling && op.op != "insert");
            }
        }
        let messages: Vec<Message<'_>> = ops
            .iter()
            .map(|o| Message {
                operation: Some(o.op),
                ..Message::insert(o.payload.as_bytes())
            })
            .collect();
        let out = rt.block_on(writer.write_batch(&messages)).unwrap();
        let failed: Vec<_> = out.failures.iter().flatten().collect();
        assert!(
            failed.is_empty(),
            "seed {seed:#x} {strategy} batch {batch}: {failed:?}"
        );
        let ident = floe::catalog::table_ident("typed", table).unwrap();
        let loaded = rt
            .block_on(writer.catalog().load_table(&ident))
            .unwrap()
            .unwrap();
        let sql =
            "SELECT epoch_us(ts) AS ts_us, CAST(amount AS VARCHAR) AS amount, code, v FROM $T";
        let (reader, args) = backend.duckdb(loaded.metadata_location.unwrap(), sql);
        let duck = read_back(reader, args);
        let want = expected(&model);
        let mut readers = vec![("DuckDB", rows_of_duckdb(&duck))];
        if strategy != "merge-on-read" {
            readers.push((
                "pyiceberg",
                pyiceberg_rows(&read_back(pyiceberg.0, pyiceberg.1.clone())),
            ));
        }
        for (reader, got) in readers {
            if got != want {
                let wrong = first_wrong_key(&got, &want);
                panic!(
                    "seed {seed:#x} {strategy} batch {batch}, read by {reader}: key {wrong:?} wrong.\n\
                     model before the batch: {:?}\nthe batch's operations on it:\n  {}\n\
                     got  {got:?}\nwant {want:?}",
                    wrong.and_then(|k| before.get(&k)),
                    wrong
                        .map(|k| ops_on(&ops, k).join("\n  "))
                        .unwrap_or_default(),
                );
            }
        }
    }
    assert!(
        respelled >= 20,
        "seed {seed:#x}: only {respelled} operations met a respelled key"
    );
}

/// The key's spelling in a payload: its `ts` and `amount` text.
fn spelling_of(payload: &str) -> String {
    let ts = payload
        .split(r#""ts":""#)
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let amount = payload
        .split(r#""amount":"#)
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    format!("{ts} {amount}")
}

/// The first key whose rows differ between two readings, as a model key.
fn first_wrong_key(got: &[Value], want: &[Value]) -> Option<(usize, i64, &'static str)> {
    let key_of = |r: &Value| {
        let t = INSTANTS.iter().position(|(us, _)| json!(us) == r[0])?;
        let cents = AMOUNTS
            .iter()
            .find(|(c, _)| json!(cents_text(*c)) == r[1])?
            .0;
        let code = CODES.iter().find(|c| json!(c) == r[2])?;
        Some((t, cents, *code))
    };
    let only_in = |a: &[Value], b: &[Value]| a.iter().find(|r| !b.contains(r)).cloned();
    only_in(got, want)
        .or_else(|| only_in(want, got))
        .and_then(|r| key_of(&r))
}

fn seeds() -> Vec<u64> {
    let n: u64 = std::env::var("FLOE_MODEL_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    (0..n)
        .map(|i| 0x7e57_0000_0000_0001 + i * 0x9e37_79b9)
        .collect()
}

#[test]
fn typed_keys_equal_the_model_merge_on_read() {
    for seed in seeds() {
        run(seed, "merge-on-read");
    }
}

#[test]
fn typed_keys_equal_the_model_copy_on_write() {
    for seed in seeds() {
        run(seed, "copy-on-write");
    }
}

#[test]
fn typed_keys_equal_the_model_positional() {
    for seed in seeds() {
        run(seed, "merge-on-read-positional");
    }
}

/// A third of the seeds (at least one) of each strategy on the REST fixture and SeaweedFS.
#[test]
fn typed_keys_equal_the_model_on_rest_and_s3() {
    let seeds = seeds();
    for strategy in ["merge-on-read", "copy-on-write", "merge-on-read-positional"] {
        for &seed in seeds.iter().take(seeds.len().div_ceil(3)) {
            run_rest(seed, strategy);
        }
    }
}

#[test]
fn instants_print_as_pyiceberg_does() {
    assert_eq!(iso_of(INSTANTS[0].0), "2026-01-01T00:00:00+00:00");
    assert_eq!(iso_of(INSTANTS[1].0), "2026-01-01T00:00:00.250000+00:00");
    assert_eq!(iso_of(INSTANTS[2].0), "2026-05-28T20:26:40+00:00");
    assert_eq!(cents_text(-325), "-3.25");
    assert_eq!(cents_text(0), "0.00");
}
