//! Shred → encode throughput on 1,000,000 events of ~142 B (the reference shape).
//!
//! `cargo bench --bench shred_encode [-- --rows N --runs R --batch B]` prints, per stage, the
//! median [min–max] over R runs after one warm-up, in rows/s and MB/s of JSON, on one
//! core (everything runs on the calling thread). Nothing is asserted.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use floe::shred::{DecodeOptions, EpochUnit, Shredder};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

const TYPES: [&str; 5] = ["click", "view", "purchase", "signup", "logout"];

fn events(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                r#"{{"id":{i},"user_id":{},"event_type":"{}","value":{}.{},"info":"session-{}-abcdefghijklmnopq","ts":"2026-11-29T21:{:02}:{:02}.{:06}Z"}}"#,
                i % 10_000,
                TYPES[i % 5],
                i % 1000,
                i % 10,
                i % 977,
                (i / 60) % 60,
                i % 60,
                i % 1_000_000
            )
        })
        .collect()
}

fn schema() -> Arc<Schema> {
    let f = |id, name: &str, t| Arc::new(NestedField::optional(id, name, Type::Primitive(t)));
    Arc::new(
        Schema::builder()
            .with_fields(vec![
                f(1, "id", PrimitiveType::Long),
                f(2, "user_id", PrimitiveType::Long),
                f(3, "event_type", PrimitiveType::String),
                f(4, "value", PrimitiveType::Double),
                f(5, "info", PrimitiveType::String),
                f(6, "ts", PrimitiveType::Timestamptz),
            ])
            .build()
            .unwrap(),
    )
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn shred_all(shredder: &mut Shredder, msgs: &[String], batch: usize) -> Vec<RecordBatch> {
    msgs.chunks(batch)
        .map(|c| {
            let out = shredder.shred(c.iter().map(|m| m.as_bytes()));
            assert!(out.errors.is_empty());
            out.batch.unwrap()
        })
        .collect()
}

/// The peer: arrow-json's generic decoder on the same messages (newline-delimited), into
/// the same Arrow schema. It has no per-message error isolation.
fn arrow_json_all(
    schema: &arrow_schema::SchemaRef,
    msgs: &[String],
    batch: usize,
) -> Vec<RecordBatch> {
    msgs.chunks(batch)
        .map(|c| {
            let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
                .with_batch_size(batch)
                .build_decoder()
                .unwrap();
            for m in c {
                decoder.decode(m.as_bytes()).unwrap();
                decoder.decode(b"\n").unwrap();
            }
            decoder.flush().unwrap().unwrap()
        })
        .collect()
}

fn encode_all(batches: &[RecordBatch]) -> usize {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap()))
        .build();
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, batches[0].schema(), Some(props)).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
    buf.len()
}

fn summary(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: smoke-test only.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let rows = arg("--rows", if smoke { 2_000 } else { 1_000_000 });
    let runs = arg("--runs", if smoke { 1 } else { 5 });
    let batch = arg("--batch", 10_000);
    let msgs = events(rows);
    let bytes: usize = msgs.iter().map(String::len).sum();
    println!(
        "shred → encode: {rows} events, {:.1} B/event avg, batches of {batch}, {runs} runs after a warm-up, 1 thread",
        bytes as f64 / rows as f64
    );
    let opts = DecodeOptions {
        epoch_unit: EpochUnit::Ms,
        case_sensitive: true,
    };
    let mut shredder = Shredder::new(schema(), opts).unwrap();
    let arrow_schema = shredder.arrow_schema().clone();
    let stages = [
        "floe shred",
        "arrow-json decode",
        "encode (zstd-1)",
        "floe shred + encode",
        "arrow-json + encode",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); stages.len()];
    let mut parquet_bytes = 0;
    // floe and the peer run alternately within every run, so a drifting machine speed
    // affects both alike.
    for run in 0..=runs {
        let t0 = Instant::now();
        let batches = shred_all(&mut shredder, &msgs, batch);
        let t1 = Instant::now();
        let peer = arrow_json_all(&arrow_schema, &msgs, batch);
        let t2 = Instant::now();
        parquet_bytes = encode_all(&batches);
        let t3 = Instant::now();
        assert_eq!(peer.iter().map(RecordBatch::num_rows).sum::<usize>(), rows);
        if run > 0 {
            let shred = (t1 - t0).as_secs_f64();
            let decode = (t2 - t1).as_secs_f64();
            let encode = (t3 - t2).as_secs_f64();
            let all = [shred, decode, encode, shred + encode, decode + encode];
            for (slot, t) in times.iter_mut().zip(all) {
                slot.push(t);
            }
        }
    }
    let mut medians = Vec::new();
    for (name, stage_times) in stages.iter().zip(&times) {
        let rates: Vec<f64> = stage_times.iter().map(|t| rows as f64 / t).collect();
        let (med, lo, hi) = summary(rates);
        medians.push(med);
        println!(
            "{name:>20}: {:>6.2}M rows/s [{:.2}–{:.2}]  {:>6.1} MB/s of JSON",
            med / 1e6,
            lo / 1e6,
            hi / 1e6,
            med * bytes as f64 / rows as f64 / 1e6
        );
    }
    println!(
        "floe / arrow-json: shred {:.2}×, with encode {:.2}×",
        medians[0] / medians[1],
        medians[3] / medians[4]
    );
    println!(
        "parquet output: {:.1} MB ({:.1}× smaller than the JSON)",
        parquet_bytes as f64 / 1e6,
        bytes as f64 / parquet_bytes as f64
    );
}
