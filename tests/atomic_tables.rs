//! `commit.atomic_tables` on the embedded catalog: the tables one call writes commit in
//! one SQLite transaction, so a reader finds every table of a batch changed or none.
//! (Against Apache's REST fixture, with the writer killed between upload and commit:
//! `e2e/test_atomic_tables.py`.)

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use floe::catalog::{Catalog, table_ident};
use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::{Value, json};
use support::{Rng, merge, runtime, write_ordered_call};

const TABLES: [&str; 3] = ["a", "b", "c"];

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "batch", "required": false, "type": "long"}]})
}

fn config(dir: &std::path::Path, extra: Value) -> Config {
    let mut c = json!({
        "catalog": {"warehouse": dir.join("wh").to_str().unwrap()},
        "namespace": "cdc",
        "schema_evolution": {"enabled": true, "schema": schema()},
        "commit": {"atomic_tables": true}
    });
    merge(&mut c, extra);
    Config::from_json(&c.to_string()).unwrap()
}

/// The table's rows and snapshots so far, by its metadata.
async fn rows_and_snapshots(catalog: &Arc<dyn Catalog>, table: &str) -> (i64, usize) {
    let ident = table_ident("cdc", table).unwrap();
    let Some(t) = catalog.load_table(&ident).await.unwrap() else {
        return (0, 0);
    };
    let rows = t.metadata.current_snapshot().map_or(0, |s| {
        s.summary().additional_properties["total-records"]
            .parse()
            .unwrap()
    });
    (rows, t.metadata.snapshots().count())
}

fn routed<'a>(payloads: &'a [String], tables: &[&'a str]) -> Vec<Message<'a>> {
    payloads
        .iter()
        .zip(tables)
        .map(|(p, t)| Message {
            table: Some(t),
            ..Message::insert(p.as_bytes())
        })
        .collect()
}

#[test]
fn a_batch_commits_all_its_tables_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let writer = rt
        .block_on(Writer::open(config(dir.path(), json!({}))))
        .unwrap();
    let catalog = writer.catalog().clone();
    let ids = |n: usize| -> Vec<String> { (0..n).map(|i| format!(r#"{{"id": {i}}}"#)).collect() };

    let payloads = ids(6);
    let first = rt
        .block_on(writer.write_batch(&routed(&payloads, &["a", "b", "c", "a", "b", "c"])))
        .unwrap();
    assert!(first.failures.iter().all(Option::is_none), "{first:?}");
    for t in TABLES {
        assert_eq!(rt.block_on(rows_and_snapshots(&catalog, t)), (2, 1), "{t}");
    }

    // c's only message fails at its own fault: a and b commit without c.
    let mut payloads = ids(2);
    payloads.push(r#"{"id": "not a number"}"#.into());
    let second = rt
        .block_on(writer.write_batch(&routed(&payloads, &["a", "b", "c"])))
        .unwrap();
    let failed: Vec<usize> = (0..3).filter(|&i| second.failures[i].is_some()).collect();
    assert_eq!(failed, vec![2], "{second:?}");
    assert_eq!(rt.block_on(rows_and_snapshots(&catalog, "a")), (3, 2));
    assert_eq!(rt.block_on(rows_and_snapshots(&catalog, "c")), (2, 1));

    // c's data folder becomes a file: storing c's rows fails, not at the messages' fault.
    let c = rt
        .block_on(catalog.load_table(&table_ident("cdc", "c").unwrap()))
        .unwrap()
        .unwrap();
    let data =
        std::path::PathBuf::from(c.metadata.location().trim_start_matches("file://")).join("data");
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::write(&data, b"not a folder").unwrap();
    let payloads = ids(3);
    let third = rt.block_on(writer.write_batch(&routed(&payloads, &["a", "c", "b"])));
    match &third {
        Err(e) => assert_ne!(e.kind(), floe::ErrorKind::Data, "{e}"),
        Ok(out) => {
            assert!(out.failures.iter().all(|f| {
                f.as_ref()
                    .is_some_and(|e| e.kind() != floe::ErrorKind::Data)
            }));
            assert_eq!(out.rows_committed, 0);
        }
    }
    assert_eq!(
        rt.block_on(rows_and_snapshots(&catalog, "a")),
        (3, 2),
        "a committed without c"
    );
    assert_eq!(rt.block_on(rows_and_snapshots(&catalog, "b")), (3, 2));
    assert_eq!(rt.block_on(rows_and_snapshots(&catalog, "c")), (2, 1));
}

/// The offsets `writer_id`'s exactly-once record in `table` says are committed.
async fn recorded(catalog: &Arc<dyn Catalog>, table: &str, writer_id: &str) -> BTreeSet<i64> {
    let ident = table_ident("cdc", table).unwrap();
    let Some(t) = catalog.load_table(&ident).await.unwrap() else {
        return BTreeSet::new();
    };
    let Some(text) = t
        .metadata
        .properties()
        .get(&format!("floe.offsets.{writer_id}"))
    else {
        return BTreeSet::new();
    };
    let record: Value = serde_json::from_str(text).unwrap();
    let mut offsets = BTreeSet::new();
    for ranges in record["offsets"].as_object().unwrap().values() {
        for r in ranges.as_array().unwrap() {
            offsets.extend(r[0].as_i64().unwrap()..=r[1].as_i64().unwrap());
        }
    }
    offsets
}

/// One call's offsets, by the table they go to.
type OffsetsByTable = HashMap<&'static str, Vec<i64>>;

/// One call of a writer: each message's table and offset (its source is the writer).
struct Call {
    tables: Vec<&'static str>,
    first_offset: i64,
}

fn calls(rng: &mut Rng, n: usize) -> Vec<Call> {
    let mut offset = 0;
    (0..n)
        .map(|_| {
            let mut tables = Vec::new();
            while tables.iter().collect::<BTreeSet<_>>().len() < 2 {
                tables = (0..2 + rng.below(5))
                    .map(|_| TABLES[rng.below(3) as usize])
                    .collect();
            }
            let call = Call {
                tables,
                first_offset: offset,
            };
            offset += call.tables.len() as i64;
            call
        })
        .collect()
}

/// Two writers, each with calls in flight together, routing every call to two or three
/// tables of the same three, some messages adding columns: conflicts between them and
/// between each one's calls are retried in rounds, schema changes shred rows again. A reader meanwhile reads each table's exactly-once record, all
/// three, then all three again: a batch found in any table the first time must be in all
/// of its tables the second time.
#[test]
fn concurrent_writers_keep_each_batch_all_or_none_for_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let seed = std::env::var("FLOE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_a70b);
    let mut rng = Rng(seed);
    let writers: Vec<(String, Vec<Call>)> = ["w1", "w2"]
        .iter()
        .map(|w| (w.to_string(), calls(&mut rng, 24)))
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let opened: Vec<Arc<Writer>> = writers
        .iter()
        .map(|(id, _)| {
            let c = config(
                dir.path(),
                json!({"commit": {"exactly_once": {"writer_id": id}}}),
            );
            Arc::new(rt.block_on(Writer::open(c)).unwrap())
        })
        .collect();
    let catalog = opened[0].catalog().clone();
    let batches: Vec<(String, Vec<OffsetsByTable>)> = writers
        .iter()
        .map(|(id, calls)| {
            let per_call = calls
                .iter()
                .map(|c| {
                    let mut by_table = OffsetsByTable::new();
                    for (i, t) in c.tables.iter().enumerate() {
                        by_table
                            .entry(t)
                            .or_default()
                            .push(c.first_offset + i as i64);
                    }
                    by_table
                })
                .collect();
            (id.clone(), per_call)
        })
        .collect();
    let reader = {
        let (catalog, done, batches) = (catalog.clone(), done.clone(), batches.clone());
        rt.spawn(async move {
            let mut reads = 0;
            let mut torn = Vec::new();
            while !done.load(Ordering::SeqCst) {
                for (id, per_call) in &batches {
                    let mut first = HashMap::new();
                    let mut second = HashMap::new();
                    for t in TABLES {
                        first.insert(t, recorded(&catalog, t, id).await);
                    }
                    for t in TABLES {
                        second.insert(t, recorded(&catalog, t, id).await);
                    }
                    reads += 1;
                    for (k, by_table) in per_call.iter().enumerate() {
                        let seen = by_table
                            .iter()
                            .any(|(t, offs)| offs.iter().all(|o| first[t].contains(o)));
                        let whole = by_table
                            .iter()
                            .all(|(t, offs)| offs.iter().all(|o| second[t].contains(o)));
                        if seen && !whole {
                            torn.push(format!("{id} batch {k}: {by_table:?}"));
                        }
                    }
                }
            }
            (reads, torn)
        })
    };
    let mut tasks = Vec::new();
    for ((id, calls), writer) in writers.iter().zip(&opened) {
        for call in calls {
            let ticket = writer.arrive();
            let writer = writer.clone();
            let (id, tables, first) = (id.clone(), call.tables.clone(), call.first_offset);
            tasks.push(rt.spawn(async move {
                // Every fifth message brings a column its table may not have yet: tables
                // evolve under calls in flight, whose rows are shredded again (or, once
                // handed in, fail the call's transaction whole).
                let payloads: Vec<String> = (0..tables.len())
                    .map(|i| {
                        let id = first + i as i64;
                        match id % 5 {
                            0 => {
                                format!(r#"{{"id": {id}, "batch": {first}, "c{}": {id}}}"#, id % 7)
                            }
                            _ => format!(r#"{{"id": {id}, "batch": {first}}}"#),
                        }
                    })
                    .collect();
                let messages: Vec<Message> = payloads
                    .iter()
                    .zip(&tables)
                    .enumerate()
                    .map(|(i, (p, t))| Message {
                        table: Some(t),
                        source: Some(&id),
                        offset: Some(first + i as i64),
                        ..Message::insert(p.as_bytes())
                    })
                    .collect();
                write_ordered_call(&writer, ticket, &messages, |_| {}).await
            }));
        }
    }
    for t in tasks {
        rt.block_on(t).unwrap().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let (reads, torn) = rt.block_on(reader).unwrap();
    assert!(reads > 0);
    assert!(torn.is_empty(), "seed {seed:#x}: torn batches: {torn:?}");
    // Every message is committed once, in its table.
    for t in TABLES {
        let mut expected = 0;
        for (id, per_call) in &batches {
            let want: BTreeSet<i64> = per_call
                .iter()
                .flat_map(|b| b.get(t).into_iter().flatten().copied())
                .collect();
            assert_eq!(rt.block_on(recorded(&catalog, t, id)), want, "{t} {id}");
            expected += want.len() as i64;
        }
        assert_eq!(
            rt.block_on(rows_and_snapshots(&catalog, t)).0,
            expected,
            "{t}"
        );
    }
}

/// A call that takes a place in arrival order for itself (an unordered call committing
/// tables together) gives it back when it is cancelled: left behind, it held back every
/// later ordered call to its tables for good.
#[test]
fn a_cancelled_call_holds_no_later_call_back() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let writer = Arc::new(
        rt.block_on(Writer::open(config(dir.path(), json!({}))))
            .unwrap(),
    );
    let payloads: Vec<String> = (0..3).map(|i| format!(r#"{{"id": {i}}}"#)).collect();
    let messages = routed(&payloads, &["a", "b", "c"]);
    let cancelled = rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_micros(1),
            writer.write_batch(&messages),
        )
        .await
    });
    assert!(cancelled.is_err(), "the call was not cut short");
    let ticket = writer.arrive();
    let later = rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            write_ordered_call(&writer, ticket, &messages, |_| {}),
        )
        .await
    });
    later
        .expect("a later ordered call waited for the cancelled one")
        .unwrap();
}

/// A catalog whose `/v1/config` lists its endpoints without the multi-table commit is a
/// config error at start-up, naming the setting; without the setting it opens.
#[test]
fn a_catalog_without_multi_table_commits_is_a_config_error() {
    let rt = runtime();
    let url = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let body = r#"{"defaults": {}, "overrides": {}, "endpoints": ["GET /v1/{prefix}/namespaces", "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}"]}"#;
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        url
    });
    let config = |atomic: bool| {
        let c = json!({"catalog": {"url": url}, "namespace": "cdc", "table": "t",
            "commit": {"atomic_tables": atomic}});
        Config::from_json(&c.to_string()).unwrap()
    };
    let e = match rt.block_on(Writer::open(config(true))) {
        Err(e) => e,
        Ok(_) => panic!("a catalog without transactions/commit was accepted"),
    };
    assert_eq!(e.kind(), floe::ErrorKind::Config, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("commit.atomic_tables") && text.contains("transactions/commit"),
        "{text}"
    );
    rt.block_on(Writer::open(config(false))).unwrap();
}

/// A table whose messages of a batch all fail not at their fault (an upsert on a table
/// whose write modes differ, retried until another tool fixes them) does not withdraw:
/// the batch's other tables do not commit without it.
#[test]
fn a_table_with_only_retried_messages_holds_the_other_tables_back() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let keyed = json!({"identifier_fields": ["id"]});
    let writer = rt
        .block_on(Writer::open(config(dir.path(), keyed.clone())))
        .unwrap();
    let payloads: Vec<String> = (0..2).map(|i| format!(r#"{{"id": {i}}}"#)).collect();
    let first = rt
        .block_on(writer.write_batch(&routed(&payloads, &["a", "b"])))
        .unwrap();
    assert!(first.failures.iter().all(Option::is_none), "{first:?}");
    let a = table_ident("cdc", "a").unwrap();
    let modes = HashMap::from([
        ("write.update.mode".to_string(), "copy-on-write".to_string()),
        ("write.delete.mode".to_string(), "merge-on-read".to_string()),
    ]);
    let set = iceberg::TableUpdate::SetProperties { updates: modes };
    rt.block_on(writer.catalog().commit(&a, vec![], vec![set]))
        .unwrap();
    drop(writer);
    let writer = rt
        .block_on(Writer::open(config(dir.path(), keyed)))
        .unwrap();
    let (upsert, insert) = (r#"{"id": 0}"#, r#"{"id": 7}"#);
    let messages = [
        Message {
            table: Some("a"),
            operation: Some("upsert"),
            ..Message::insert(upsert.as_bytes())
        },
        Message {
            table: Some("b"),
            ..Message::insert(insert.as_bytes())
        },
    ];
    let out = rt.block_on(writer.write_batch(&messages));
    let failures = match &out {
        Ok(out) => out.failures.clone(),
        Err(e) => vec![Some(e.clone()); 2],
    };
    for f in &failures {
        let e = f.as_ref().expect("both messages wait for the table's fix");
        assert_ne!(e.kind(), floe::ErrorKind::Data, "{e}");
    }
    assert_eq!(
        rt.block_on(rows_and_snapshots(writer.catalog(), "b")),
        (1, 1),
        "b committed without a"
    );
}
