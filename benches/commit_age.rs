//! floe's CPU per commit against table age, on SeaweedFS + Apache's REST fixture.
//!
//! One writer commits one small batch per call (`max_in_flight` 1, expiry off so the
//! table keeps every snapshot). At each age in FLOE_BENCH_AGES (snapshots retained,
//! default 1, 1,000, 10,000) it times FLOE_BENCH_COMMITS calls (default 200, so merges are among them) and prints,
//! per age: the size of the table metadata, floe's CPU per commit (this process's user +
//! system time across the call: shredding, Parquet, manifests, the catalog request and
//! its answer; median [min–max]), and the call's wall time. Between ages the table is
//! grown with calls that are not measured. A commit's CPU that grows with the table's age
//! is what the catalog's answer (the whole metadata) and work over all snapshots cost.
//! Beside floe's figures: the REST fixture's and SeaweedFS's CPU per commit (the mean
//! over the measured commits, from their `/proc` accounting), which show what every
//! commit makes the services do as the table ages (the catalog rewrites the whole
//! metadata file each time).
//!
//! Growing a table by one commit at a time takes the REST fixture over 30 minutes to
//! reach 10,000 snapshots (it rewrites the whole metadata file each time). So between ages
//! the table grows by FLOE_BENCH_GROW_BY snapshots per catalog request (default 500;
//! 1 grows it with real commits): copies of floe's last snapshot (same manifest list and
//! summary), so the snapshots kept and the metadata the catalog answers with grow, while
//! the head's manifests and files stay those of the real commits (merges of a long
//! history are not what this measures; FLOE_BENCH_GROW_BY=1 measures them). floe's first commit after
//! each growth finds the table moved, reloads it and retries; it is not measured.
//!
//! `cargo bench --bench commit_age` (FLOE_BENCH_AGES="1,1000", FLOE_BENCH_COMMITS,
//! FLOE_BENCH_ROWS rows per call, default 1, FLOE_BENCH_GROW_BY).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use floe::catalog::{Catalog, table_ident};
use floe::config::Config;
use floe::writer::{Message, Writer};
use iceberg::spec::{MAIN_BRANCH, Snapshot, SnapshotReference, SnapshotRetention};
use iceberg::{TableIdent, TableRequirement, TableUpdate};
use serde_json::json;

/// This process's CPU seconds so far (user + system, all threads).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Adds `count` copies of the table's head snapshot on top of it in one catalog request
/// (see the module's doc).
async fn grow_by_copies(catalog: &dyn Catalog, ident: &TableIdent, count: usize) {
    let table = catalog.load_table(ident).await.unwrap().unwrap();
    let metadata = &table.metadata;
    let head = metadata.current_snapshot().expect("a first commit").clone();
    let (mut parent, mut sequence) = (head.snapshot_id(), metadata.last_sequence_number());
    let mut next_id = metadata.snapshots().map(|s| s.snapshot_id()).max().unwrap();
    let mut updates = Vec::with_capacity(count + 1);
    for _ in 0..count {
        next_id += 1;
        sequence += 1;
        let copy = Snapshot::builder()
            .with_manifest_list(head.manifest_list())
            .with_snapshot_id(next_id)
            .with_parent_snapshot_id(Some(parent))
            .with_sequence_number(sequence)
            .with_summary(head.summary().clone())
            .with_schema_id(metadata.current_schema_id())
            .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
            .build();
        updates.push(TableUpdate::AddSnapshot { snapshot: copy });
        parent = next_id;
    }
    updates.push(TableUpdate::SetSnapshotRef {
        ref_name: MAIN_BRANCH.to_string(),
        reference: SnapshotReference::new(parent, SnapshotRetention::branch(None, None, None)),
    });
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_string(),
            snapshot_id: Some(head.snapshot_id()),
        },
    ];
    catalog.commit(ident, requirements, updates).await.unwrap();
}

/// The mean: what a commit costs on average, merges included (every 100th commit merges
/// manifests, which a median hides).
fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

fn spread(values: &mut [f64]) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "{:.2} [{:.2}–{:.2}]",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1]
    )
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: a short smoke run.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let ages = support::env_list(
        "FLOE_BENCH_AGES",
        if smoke { &[1, 10] } else { &[1, 1_000, 10_000] },
    );
    let commits = support::env_list("FLOE_BENCH_COMMITS", &[if smoke { 5 } else { 200 }])[0].max(1);
    let rows = support::env_list("FLOE_BENCH_ROWS", &[1])[0].max(1);
    let grow_by = support::env_list("FLOE_BENCH_GROW_BY", &[500])[0].max(1);
    let services = support::services();
    let rt = support::runtime();
    let mut cfg = services.floe_config();
    support::merge(
        &mut cfg,
        json!({
            "schema_evolution": {"enabled": true, "schema": support::bench_schema()},
            "commit": {"max_snapshot_age": "0s"},
            "max_in_flight": 1,
        }),
    );
    let table = format!("commit_age_{}", std::process::id());
    support::merge(&mut cfg, json!({"namespace": "bench", "table": table}));
    let writer = rt
        .block_on(Writer::open(Config::from_json(&cfg.to_string()).unwrap()))
        .unwrap();
    let ident = table_ident("bench", &table).unwrap();
    let events: Vec<String> = (0..rows).map(support::bench_event).collect();
    let call = |writer: &Writer| {
        let msgs: Vec<Message> = events
            .iter()
            .map(|e| Message::insert(e.as_bytes()))
            .collect();
        let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
        assert!(
            out.failures.iter().all(Option::is_none),
            "{:?}",
            out.failures
        );
    };
    eprintln!(
        "commit_age bench: {rows}-row calls, {commits} measured commits per age, REST fixture + SeaweedFS on loopback"
    );
    println!(
        "| snapshots retained | metadata JSON KB | floe CPU ms per commit median [min–max] | mean | call wall ms median [min–max] | REST fixture CPU ms per commit | SeaweedFS CPU ms per commit |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let services_cpu =
        || ["rest-fixture", "seaweedfs"].map(|s| services.cpu_seconds(s).unwrap_or(f64::NAN));
    let mut age = 0;
    let grow_started = Instant::now();
    for target in ages {
        let mut copied = false;
        while age < target {
            let step = match age {
                // The first snapshot is a real commit: the copies copy it.
                0 => 1,
                _ => grow_by.min(target - age),
            };
            match step {
                1 => call(&writer),
                _ => {
                    rt.block_on(grow_by_copies(writer.catalog().as_ref(), &ident, step));
                    copied = true;
                }
            }
            let before = age;
            age += step;
            if age / 1000 != before / 1000 {
                eprintln!(
                    "  grown to {age} snapshots in {:.0} s",
                    grow_started.elapsed().as_secs_f64()
                );
            }
        }
        if copied {
            // Not measured: finds the table moved under it and reloads it.
            call(&writer);
            age += 1;
        }
        let (mut cpu_ms, mut wall_ms) = (Vec::new(), Vec::new());
        let services_before = services_cpu();
        for _ in 0..commits {
            let (cpu, wall) = (cpu_seconds(), Instant::now());
            call(&writer);
            cpu_ms.push((cpu_seconds() - cpu) * 1e3);
            wall_ms.push(wall.elapsed().as_secs_f64() * 1e3);
        }
        // The services' clocks tick in 10 ms: only the mean over all commits is precise.
        let services_after = services_cpu();
        let per_commit = |i: usize| (services_after[i] - services_before[i]) * 1e3 / commits as f64;
        age += commits;
        let loaded = rt
            .block_on(writer.catalog().load_table(&ident))
            .unwrap()
            .unwrap();
        let snapshots = loaded.metadata.snapshots().len();
        assert_eq!(snapshots, age, "every commit kept its snapshot");
        let kb = serde_json::to_vec(&*loaded.metadata).unwrap().len() as f64 / 1024.0;
        println!(
            "| {target} | {kb:.0} | {} | {:.2} | {} | {:.1} | {:.1} |",
            spread(&mut cpu_ms),
            mean(&cpu_ms),
            spread(&mut wall_ms),
            per_commit(0),
            per_commit(1)
        );
    }
}
