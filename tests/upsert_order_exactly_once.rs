//! Per-key order through exactly-once refusals: a call that re-sends a position an
//! earlier call is still committing (a redelivery) is refused for it, and the messages
//! after it are held back to be retried with it; the call keeps its place in arrival
//! order meanwhile, so a later call's operation on a key still lands after its own.
//!
//! X (first ticket): a large call (slow to shred) holding offset 5.
//! A (second): offset 5 again (the same payload) and offset 6 upserting key 1 to "A".
//! B (third): offset 7 upserting key 1 to "B". Arrival order says key 1 ends as "B".
//! Before the fix A gave its place up when refused, B committed first and key 1 read "A".

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::json;
use support::{runtime, scan_columns, write_ordered_call};

const SOURCE: &str = "topic/0";

/// (operation, payload, offset) of one message.
type Op = (&'static str, String, i64);

/// Attempts refused for a position in flight: the race must have happened.
static REFUSED: AtomicUsize = AtomicUsize::new(0);

/// Writes one call under its ticket (see [`write_ordered_call`]), counting the attempts
/// refused for a position in flight.
async fn write_call(writer: Arc<Writer>, ticket: u64, ops: Vec<Op>) -> Result<(), String> {
    let messages: Vec<Message<'_>> = ops
        .iter()
        .map(|(op, payload, offset)| Message {
            operation: Some(op),
            source: Some(SOURCE),
            offset: Some(*offset),
            ..Message::insert(payload.as_bytes())
        })
        .collect();
    write_ordered_call(&writer, ticket, &messages, |failures| {
        let refused = failures
            .iter()
            .flatten()
            .any(|e| e.to_string().contains("is being committed by another call"));
        if refused {
            REFUSED.fetch_add(1, Ordering::Relaxed);
        }
    })
    .await
}

#[test]
fn a_call_refused_a_position_in_flight_keeps_its_place_for_the_messages_after_it() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let cfg = json!({
        "catalog": {"warehouse": wh.to_str().unwrap()},
        "namespace": "o", "table": "t",
        "identifier_fields": ["id"],
        "merge_strategy": "copy-on-write",
        "max_in_flight": 3,
        "commit": {"exactly_once": {"writer_id": "w"}},
        "schema_evolution": {"enabled": true, "schema": {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "v", "required": false, "type": "string"}
        ]}},
    });
    let config = Config::from_json(&cfg.to_string()).unwrap();
    let writer = Arc::new(rt.block_on(Writer::open(config.clone())).unwrap());
    // The table exists before the race.
    let warm = writer.arrive();
    rt.block_on(write_call(
        writer.clone(),
        warm,
        vec![("upsert", json!({"id": 100, "v": "warm"}).to_string(), 0)],
    ))
    .unwrap();

    let shared = json!({"id": 9, "v": "x"}).to_string();
    let mut x_ops: Vec<Op> = vec![("upsert", shared.clone(), 5)];
    for i in 0..60_000i64 {
        x_ops.push((
            "insert",
            json!({"id": 1_000_000 + i, "v": format!("cold{i}")}).to_string(),
            1000 + i,
        ));
    }
    let a_ops: Vec<Op> = vec![
        ("upsert", shared, 5),
        ("upsert", json!({"id": 1, "v": "A"}).to_string(), 6),
    ];
    let b_ops: Vec<Op> = vec![("upsert", json!({"id": 1, "v": "B"}).to_string(), 7)];

    let (tx, ta, tb) = (writer.arrive(), writer.arrive(), writer.arrive());
    let x = rt.spawn(write_call(writer.clone(), tx, x_ops));
    // X has claimed its offsets and is shredding 60k rows.
    std::thread::sleep(std::time::Duration::from_millis(400));
    let a = rt.spawn(write_call(writer.clone(), ta, a_ops));
    let b = rt.spawn(write_call(writer.clone(), tb, b_ops));
    rt.block_on(x).unwrap().unwrap();
    rt.block_on(a).unwrap().unwrap();
    rt.block_on(b).unwrap().unwrap();

    let rows = scan_columns(&rt, &writer, &config, &["id", "v"]);
    let k1: Vec<String> = rows
        .iter()
        .filter(|r| r["id"] == json!(1))
        .map(|r| r["v"].as_str().unwrap().to_string())
        .collect();
    eprintln!(
        "refusals seen: {}; key 1 reads {k1:?}",
        REFUSED.load(Ordering::Relaxed)
    );
    assert!(
        REFUSED.load(Ordering::Relaxed) > 0,
        "the race was not set up: A never saw offset 5 in flight"
    );
    assert_eq!(
        k1,
        vec!["B".to_string()],
        "A (ticket {ta}) arrived before B (ticket {tb}): B's upsert of key 1 must win"
    );
}
