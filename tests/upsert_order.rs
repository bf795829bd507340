//! Per-key order across calls in flight together: each key's operations apply in the
//! order their calls arrived (`Writer::arrive`), whatever order the calls finish
//! shredding in, whichever of them group commit joins, and through the retries of rows
//! held back when earlier rows failed (here: a schema changed under them, by columns some
//! calls add). A seeded generator drives rounds of concurrent calls (one large call, slow
//! to shred, before small ones, all touching a few hot keys) through the real writer into
//! the embedded catalog for each strategy, and compares the table with an in-memory model
//! after every round (iceberg-rust's scan) and at the end (DuckDB, and pyiceberg where it
//! reads the table's deletes). A failure prints the seed, the round and the history of the
//! first key that differs. `FLOE_ORDER_SEEDS` sets how many seeds (default 6 per strategy).
//!
//! The same runs with 16 calls in flight and groups of at most 4 KB of JSON: more calls
//! than may wait shredded for the encoder, so calls wait for room to shred while calls
//! after them hold it, waiting their turn (`commit::committer::gate`).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::{Value, json};
use support::{
    Rng, read_back, runtime, scan_columns, write_calls_in_arrival_order, write_ordered_call,
};

/// Key → the `v` of each of its rows (several only after inserts of a live key).
type Model = BTreeMap<i64, Vec<String>>;

/// Keys every call upserts and deletes; the large calls also insert cold keys above them.
const HOT_KEYS: u64 = 6;
const ROUNDS: usize = 8;

/// Calls in flight together, and the group limit in JSON bytes (`None`: floe's).
#[derive(Clone, Copy)]
struct Shape {
    calls: usize,
    max_group_bytes: Option<usize>,
}

const FOUR_CALLS: Shape = Shape {
    calls: 4,
    max_group_bytes: None,
};

/// Enough calls, and small enough groups, that calls wait for room to shred.
const LITTLE_ROOM: Shape = Shape {
    calls: 16,
    max_group_bytes: Some(4096),
};

/// Calls that had messages to retry (held back behind rows that failed): the test must
/// have gone through that path to prove order through it.
static RETRIES: AtomicUsize = AtomicUsize::new(0);

/// One message: its operation and payload.
type Op = (&'static str, String);

/// A call's messages, applied to `model` as the call arriving now would apply them.
fn random_call(rng: &mut Rng, model: &mut Model, round: usize, call: usize) -> Vec<Op> {
    let mut ops = Vec::new();
    if call == 0 || rng.below(4) == 0 {
        // A large call: slow to shred, so the small ones after it finish first.
        for i in 0..1500 + rng.below(1500) {
            let id = 1_000_000 + (round * 100 + call) as i64 * 10_000 + i as i64;
            let v = format!("r{round}c{call}cold{i}");
            model.insert(id, vec![v.clone()]);
            ops.push(("insert", json!({"id": id, "v": v, "n": i}).to_string()));
        }
    }
    // A new column now and then: the table's schema changes under the calls in flight.
    let extra = (rng.below(6) == 0).then(|| format!("c_{round}_{call}"));
    for i in 0..1 + rng.below(12) {
        let id = rng.below(HOT_KEYS) as i64;
        let v = format!("r{round}c{call}m{i}");
        let mut payload = json!({"id": id, "v": v, "n": i});
        if let Some(column) = &extra {
            payload[column] = json!(i);
        }
        let op = match rng.below(10) {
            0..=5 => {
                model.insert(id, vec![v]);
                "upsert"
            }
            6..=8 => {
                model.remove(&id);
                "delete"
            }
            _ => {
                model.entry(id).or_default().push(v);
                "insert"
            }
        };
        ops.push((op, payload.to_string()));
    }
    ops
}

/// Writes one call under its ticket (see [`write_ordered_call`]), counting its retries.
async fn write_call(writer: Arc<Writer>, ticket: u64, ops: Vec<Op>) -> Result<(), String> {
    let messages: Vec<Message<'_>> = ops
        .iter()
        .map(|(op, payload)| Message {
            operation: Some(op),
            ..Message::insert(payload.as_bytes())
        })
        .collect();
    write_ordered_call(&writer, ticket, &messages, |_| {
        RETRIES.fetch_add(1, Ordering::Relaxed);
    })
    .await
}

fn expected(model: &Model) -> Vec<(i64, String)> {
    let mut rows: Vec<(i64, String)> = model
        .iter()
        .flat_map(|(id, vs)| vs.iter().map(move |v| (*id, v.clone())))
        .collect();
    rows.sort();
    rows
}

/// The first hot key whose rows differ, with every operation on it so far: the minimal
/// stream that shows the failure.
fn explain(
    got: &[(i64, String)],
    want: &[(i64, String)],
    history: &[(usize, usize, Op)],
) -> String {
    let rows = |rows: &[(i64, String)], id: i64| -> Vec<String> {
        rows.iter()
            .filter(|r| r.0 == id)
            .map(|r| r.1.clone())
            .collect()
    };
    let Some(id) = (0..HOT_KEYS as i64).find(|&id| rows(got, id) != rows(want, id)) else {
        return format!(
            "cold rows differ: {} rows read, {} expected",
            got.len(),
            want.len()
        );
    };
    let ops: Vec<String> = history
        .iter()
        .filter(|(_, _, (_, p))| serde_json::from_str::<Value>(p).unwrap()["id"] == json!(id))
        .map(|(round, call, (op, p))| format!("  round {round} call {call}: {op} {p}"))
        .collect();
    format!(
        "key {id}: read {:?}, expected {:?}; its operations in arrival order:\n{}",
        rows(got, id),
        rows(want, id),
        ops.join("\n")
    )
}

fn run_seed(seed: u64, strategy: &str, shape: Shape) -> Result<(), String> {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let mut cfg = json!({
        "catalog": {"warehouse": wh.to_str().unwrap()},
        "namespace": "o", "table": "t",
        "identifier_fields": ["id"],
        "merge_strategy": strategy,
        "max_in_flight": shape.calls,
        "schema_evolution": {"enabled": true, "schema": {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "v", "required": false, "type": "string"},
            {"id": 3, "name": "n", "required": false, "type": "long"}
        ]}},
    });
    if let Some(bytes) = shape.max_group_bytes {
        cfg["commit"] = json!({"max_group_bytes": bytes});
    }
    let config = Config::from_json(&cfg.to_string()).unwrap();
    let writer = Arc::new(rt.block_on(Writer::open(config.clone())).unwrap());
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut model = Model::new();
    let mut history = Vec::new();
    for round in 0..ROUNDS {
        let calls: Vec<Vec<Op>> = (0..shape.calls)
            .map(|call| random_call(&mut rng, &mut model, round, call))
            .collect();
        for (call, ops) in calls.iter().enumerate() {
            history.extend(
                ops.iter()
                    .filter(|(_, p)| !p.contains("cold"))
                    .map(|op| (round, call, op.clone())),
            );
        }
        write_calls_in_arrival_order(&rt, &writer, calls, write_call)?;
        let got = support::id_values(scan_columns(&rt, &writer, &config, &["id", "v"]));
        let want = expected(&model);
        if got != want {
            return Err(format!(
                "seed {seed}, {strategy}, after round {round} (iceberg-rust's scan): {}",
                explain(&got, &want, &history)
            ));
        }
    }
    if shape.max_group_bytes.is_some() && writer.stats().waited_to_shred == 0 {
        return Err(format!(
            "seed {seed}, {strategy}: no call waited for room to shred"
        ));
    }
    let ident = floe::catalog::table_ident("o", "t").unwrap();
    let table = rt
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let want = expected(&model);
    let duck = read_back(
        "duckdb-file",
        json!({"metadata": table.metadata_location.unwrap(), "sql": "SELECT id, v FROM $T"}),
    );
    let got = support::id_values(duck["rows"].as_array().unwrap().clone());
    if got != want {
        return Err(format!(
            "seed {seed}, {strategy} (DuckDB): {}",
            explain(&got, &want, &history)
        ));
    }
    if strategy != "merge-on-read" {
        let py = read_back(
            "pyiceberg-sql",
            json!({"uri": format!("sqlite:///{}", wh.join("catalog.db").display()),
                   "warehouse": format!("file://{}", wh.display()), "table": "o.t"}),
        );
        let got = support::id_values(py["rows"].as_array().unwrap().clone());
        if got != want {
            return Err(format!(
                "seed {seed}, {strategy} (pyiceberg): {}",
                explain(&got, &want, &history)
            ));
        }
    }
    Ok(())
}

fn seeds() -> u64 {
    std::env::var("FLOE_ORDER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

/// Each shape's seeds: a third of them with little room (its rounds take four times as
/// many calls), other seeds than the first shape's.
fn every_seed(strategy: &str, shape: Shape) {
    let seeds = match shape.max_group_bytes {
        None => 1..=seeds(),
        Some(_) => 1001..=1000 + seeds().div_ceil(3),
    };
    let count = seeds.clone().count();
    let failures: Vec<String> = seeds
        .filter_map(|seed| run_seed(seed, strategy, shape).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {count} seeds failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    // The tests of one binary share the counter; each strategy adds columns, so each
    // goes through held-back retries.
    assert!(
        RETRIES.load(Ordering::Relaxed) > 0,
        "no call was ever held back and retried"
    );
}

#[test]
fn copy_on_write_keeps_each_keys_order_across_calls_in_flight() {
    every_seed("copy-on-write", FOUR_CALLS);
}

#[test]
fn copy_on_write_keeps_each_keys_order_while_calls_wait_for_room_to_shred() {
    every_seed("copy-on-write", LITTLE_ROOM);
}

#[test]
fn positional_keeps_each_keys_order_across_calls_in_flight() {
    every_seed("merge-on-read-positional", FOUR_CALLS);
}

#[test]
fn positional_keeps_each_keys_order_while_calls_wait_for_room_to_shred() {
    every_seed("merge-on-read-positional", LITTLE_ROOM);
}

#[test]
fn merge_on_read_keeps_each_keys_order_across_calls_in_flight() {
    every_seed("merge-on-read", FOUR_CALLS);
}

#[test]
fn merge_on_read_keeps_each_keys_order_while_calls_wait_for_room_to_shred() {
    every_seed("merge-on-read", LITTLE_ROOM);
}
