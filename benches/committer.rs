//! Committer throughput against SeaweedFS + Apache's REST fixture on loopback.
//!
//! For batch sizes 100, 1,000, 10,000 × `max_in_flight` 1, 4, 16, 64: that many threads
//! each call `Writer::write_batch` in a loop on ~148-B events (as the Go host does: each
//! call blocks its own thread, shredding there), for a time budget per run. Prints rows/s
//! and snapshots/s (median [min–max] over the runs), the p50/p95 latency of a call (the
//! time until its rows are committed), and the medians of floe's commit stage, of writing
//! a group's data files and of the catalog call (from the writer's stats). Each run writes
//! a fresh table and checks the table's `total-records` against the rows acknowledged.
//!
//! `cargo bench --bench committer` (FLOE_BENCH_SECONDS, FLOE_BENCH_RUNS,
//! FLOE_BENCH_BATCHES="100,1000", FLOE_BENCH_IN_FLIGHT="1,4" narrow it down;
//! FLOE_BENCH_MAX_SNAPSHOT_AGE sets `commit.max_snapshot_age`; FLOE_BENCH_WARMUP_SECONDS,
//! default 30, how long the services are warmed up first).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use floe::catalog::table_ident;
use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::json;

struct Run {
    rows_per_s: f64,
    snapshots_per_s: f64,
    latencies_ms: Vec<f64>,
    /// Medians of the commit stage, the data-file write and the catalog call (ms).
    stages_ms: [f64; 3],
}

fn one_run(
    rt: &tokio::runtime::Runtime,
    events: &[String],
    table: &str,
    batch: usize,
    in_flight: usize,
    budget: Duration,
) -> Run {
    let mut cfg = support::services().floe_config();
    let obj = cfg.as_object_mut().unwrap();
    obj.insert("namespace".into(), json!("bench"));
    obj.insert("table".into(), json!(table));
    obj.insert(
        "schema_evolution".into(),
        json!({"enabled": true, "schema": support::bench_schema()}),
    );
    let mut commit = json!({"max_retries": 20});
    if let Ok(age) = std::env::var("FLOE_BENCH_MAX_SNAPSHOT_AGE") {
        commit["max_snapshot_age"] = json!(age);
    }
    obj.insert("commit".into(), commit);
    obj.insert("max_in_flight".into(), json!(in_flight));
    let writer = rt
        .block_on(Writer::open(Config::from_json(&cfg.to_string()).unwrap()))
        .unwrap();
    let ident = table_ident("bench", table).unwrap();
    let rows = AtomicUsize::new(0);
    let latencies = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..in_flight {
            let (writer, rows, latencies) = (&writer, &rows, &latencies);
            s.spawn(move || {
                let mut mine = Vec::new();
                let mut k = t;
                while started.elapsed() < budget {
                    let first = (k * batch) % (events.len() - batch);
                    let msgs: Vec<Message> = events[first..first + batch]
                        .iter()
                        .map(|e| Message::insert(e.as_bytes()))
                        .collect();
                    let call = Instant::now();
                    let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
                    mine.push(call.elapsed().as_secs_f64() * 1e3);
                    assert!(
                        out.failures.iter().all(Option::is_none),
                        "{:?}",
                        out.failures[0]
                    );
                    rows.fetch_add(out.rows_committed, Ordering::Relaxed);
                    k += in_flight;
                }
                latencies.lock().unwrap().extend(mine);
            });
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let table = rt
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let total: usize = table
        .metadata
        .current_snapshot()
        .and_then(|s| {
            s.summary()
                .additional_properties
                .get("total-records")
                .cloned()
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let acknowledged = rows.load(Ordering::Relaxed);
    assert_eq!(total, acknowledged, "table holds what was acknowledged");
    let stats = writer.stats();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Run {
        rows_per_s: acknowledged as f64 / elapsed,
        snapshots_per_s: stats.snapshots as f64 / elapsed,
        latencies_ms: latencies.into_inner().unwrap(),
        stages_ms: [
            ms(stats.commit_p50),
            ms(stats.write_p50),
            ms(stats.catalog_p50),
        ],
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(values: &mut [f64]) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "{:>9.0} [{:.0}–{:.0}]",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1]
    )
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: one short point
    // proves the bench works without spending minutes of a debug build on it.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let batches = support::env_list(
        "FLOE_BENCH_BATCHES",
        if smoke { &[100] } else { &[100, 1_000, 10_000] },
    );
    let in_flights = support::env_list(
        "FLOE_BENCH_IN_FLIGHT",
        if smoke { &[4] } else { &[1, 4, 16, 64] },
    );
    let runs = support::env_list("FLOE_BENCH_RUNS", &[if smoke { 1 } else { 3 }])[0].max(1);
    let budget = Duration::from_secs_f64(
        std::env::var("FLOE_BENCH_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if smoke { 0.5 } else { 4.0 }),
    );
    let events: Vec<String> = (0..if smoke { 20_000 } else { 200_000 })
        .map(support::bench_event)
        .collect();
    let mean_len = events.iter().map(String::len).sum::<usize>() / events.len();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    eprintln!(
        "committer bench: {mean_len}-B events, {runs} runs × {:.0} s per point after a warm-up, REST fixture + SeaweedFS on loopback",
        budget.as_secs_f64()
    );
    let _ = support::services();
    if !smoke {
        // A catalog in service has long compiled its hot paths; a freshly started JVM
        // fixture spends most of its CPU in the JIT compiler for the first half minute
        // (commit answers from ~50 down to ~25 ms), which would be measured instead.
        let warmup = std::env::var("FLOE_BENCH_WARMUP_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30.0);
        one_run(
            &rt,
            &events,
            "warmup",
            1_000,
            4,
            Duration::from_secs_f64(warmup),
        );
    }
    println!(
        "| batch | max_in_flight | rows/s median [min–max] | snapshots/s median [min–max] | call p50 ms | call p95 ms | commit · data files · catalog p50 ms |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut table_no = 0;
    for &batch in &batches {
        for &in_flight in &in_flights {
            let mut rows = Vec::new();
            let mut snaps = Vec::new();
            let mut lat = Vec::new();
            let mut stages = Vec::new();
            for _ in 0..runs {
                table_no += 1;
                let run = one_run(
                    &rt,
                    &events,
                    &format!("t{table_no}_{batch}_{in_flight}"),
                    batch,
                    in_flight,
                    budget,
                );
                rows.push(run.rows_per_s);
                snaps.push(run.snapshots_per_s);
                lat.extend(run.latencies_ms);
                stages.push(run.stages_ms);
            }
            lat.sort_by(f64::total_cmp);
            let stage = |i: usize| {
                let mut v: Vec<f64> = stages.iter().map(|s| s[i]).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            println!(
                "| {batch} | {in_flight} | {} | {} | {:.1} | {:.1} | {:.1} · {:.1} · {:.1} |",
                summary(&mut rows),
                summary(&mut snaps),
                percentile(&lat, 0.5),
                percentile(&lat, 0.95),
                stage(0),
                stage(1),
                stage(2)
            );
        }
    }
}
