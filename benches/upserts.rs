//! What an upsert commit costs inside floe, per strategy, on the embedded catalog and a
//! local folder (so the figures are floe's own: no services share the cores).
//!
//! 1. **Memory** of one commit of a keyed batch (1,000 rows, 256-B payload) into a table
//!    of 20 files × 1,000 rows, the batch's keys spread over every file (copy-on-write's
//!    worst case: all 20 files rewritten), the writer's second upsert commit (its first
//!    read the table's manifests): the peak heap above the level before the call
//!    (what the commit holds at once) and the bytes allocated during it (transient
//!    churn), per row of the batch — counted by this binary's global allocator.
//! 2. **Copy-on-write rewrite throughput**: one key upserted into a table whose only data
//!    file is ~1, 2 or 4 MiB, written by one upsert call (so indexed, as a keyed stream's
//!    files are); MB/s = the file's size over the commit's wall time, and the
//!    same after subtracting a one-row insert commit on that table (the fixed cost of a
//!    commit: manifests, catalog); with the process's CPU time per commit, and per core:
//!    the file's size over the CPU time of the upsert commit less the insert's. Files of
//!    1,024-row pages (spliced) and of 20,000-row pages (rewritten whole) alternate.
//! 3. **Delete files against K** (keys upserted in one commit): the delete file bytes and
//!    the commit time, merge-on-read (equality deletes) and positional.
//! 4. **Memory per row in flight**: 64 calls of 1,000 keyed rows (256-B payload; each
//!    call its own keys, half of them in the table already) handed in at once, as a host
//!    at `max_in_flight` 64 does, into a table of 32 files × 1,000 rows; the
//!    heap's peak above its level before the calls (sampled every millisecond; keyed
//!    calls in arrival order, as the Go host hands them in), per row
//!    of all the calls: what floe holds for a row from its call until its commit (the
//!    host's own copy of the messages is not counted).
//! 5. **Pipeline CPU**: the keyed stream of `bench-configs/upserts.py` (clustered keys, 1
//!    in 10 a delete, 100-B rows) as calls of 1,000 messages, 4 in flight in arrival
//!    order, into an empty table: this process's CPU per row and rows/s, beside plain
//!    inserts of the same messages: floe's own share of what that pipeline bench
//!    measures with the services (and where, under callgrind, the difference goes).
//!
//! Prints median [min–max] over FLOE_BENCH_RUNS runs (default 3); each run is a fresh
//! table. `cargo bench --bench upserts` (FLOE_BENCH_SECTIONS="memory,rewrite,deletes" and
//! FLOE_BENCH_STRATEGIES="insert,copy-on-write" narrow it down). Figures only: nothing here is asserted beyond
//! the row counts the commits report.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::json;

/// Counts live bytes, their peak, and bytes allocated, for the whole process.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

fn grew(by: usize) {
    let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(live, Ordering::Relaxed);
    ALLOCATED.fetch_add(by as u64, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Peak heap above the starting level and bytes allocated while `f` runs.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize, u64) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let allocated = ALLOCATED.load(Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (out, peak, ALLOCATED.load(Ordering::Relaxed) - allocated)
}

/// A 256-character payload that compresses like real text does not (hex of a hash).
fn payload(i: u64) -> String {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut s = String::with_capacity(256);
    while s.len() < 256 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{x:016x}"));
    }
    s.truncate(256);
    s
}

fn row(id: u64, version: u64) -> String {
    format!(
        r#"{{"id":{id},"version":{version},"payload":"{}"}}"#,
        payload(id * 31 + version)
    )
}

fn config(dir: &std::path::Path, strategy: &str) -> Config {
    config_with_pages(dir, strategy, None)
}

/// [`config`] with `parquet.page_row_limit` set (`None`: floe's default).
fn config_with_pages(dir: &std::path::Path, strategy: &str, page_rows: Option<usize>) -> Config {
    let mut cfg = json!({
        "catalog": {"warehouse": dir.join("wh").to_str().unwrap()},
        "namespace": "bench", "table": "t",
        "identifier_fields": ["id"],
        "merge_strategy": strategy,
        "schema_evolution": {"enabled": true, "schema": {
            "type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"},
                {"id": 2, "name": "version", "required": false, "type": "long"},
                {"id": 3, "name": "payload", "required": false, "type": "string"}
            ]}},
    });
    if let Some(rows) = page_rows {
        cfg["parquet"] = json!({"page_row_limit": rows});
    }
    Config::from_json(&cfg.to_string()).unwrap()
}

/// Writes `rows` (JSON texts) as one call of `operation`; the rows committed.
fn call(rt: &tokio::runtime::Runtime, w: &Writer, operation: &str, rows: &[String]) -> usize {
    let msgs: Vec<Message> = rows
        .iter()
        .map(|r| Message {
            operation: Some(operation),
            ..Message::insert(r.as_bytes())
        })
        .collect();
    let out = rt.block_on(w.write_batch(&msgs)).expect("write call");
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures.iter().flatten().next()
    );
    out.rows_committed
}

/// The strategies FLOE_BENCH_STRATEGIES names (all when unset); `insert` is plain
/// inserts into a keyed table.
fn strategies() -> impl Iterator<Item = &'static str> {
    [
        "insert",
        "merge-on-read",
        "merge-on-read-positional",
        "copy-on-write",
    ]
    .into_iter()
    .filter(|s| wanted("FLOE_BENCH_STRATEGIES", s))
}

/// A writer for `strategy` (inserts: a merge-on-read table) on a table of [`filled`].
fn filled_writer(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    strategy: &str,
    files: u64,
    per_file: u64,
) -> Writer {
    let mode = if strategy == "insert" {
        "merge-on-read"
    } else {
        strategy
    };
    let w = rt.block_on(Writer::open(config(dir, mode))).unwrap();
    filled(rt, &w, files, per_file);
    w
}

/// A table of `files` data files of `per_file` rows each (keys 0.. in order).
fn filled(rt: &tokio::runtime::Runtime, w: &Writer, files: u64, per_file: u64) {
    filled_by(rt, w, "insert", files, per_file);
}

/// [`filled`], each file one call of `operation`.
fn filled_by(rt: &tokio::runtime::Runtime, w: &Writer, operation: &str, files: u64, per_file: u64) {
    for f in 0..files {
        let rows: Vec<String> = (f * per_file..(f + 1) * per_file)
            .map(|id| row(id, 0))
            .collect();
        call(rt, w, operation, &rows);
    }
}

fn summary(values: &mut [f64], digits: usize) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "{:.d$} [{:.d$}–{:.d$}]",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
        d = digits
    )
}

/// The files under `dir` whose names contain `marker`.
fn files_of(dir: &std::path::Path, marker: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().contains(marker) {
                found.push(p);
            }
        }
    }
    found
}

/// Sizes of the files under `dir` whose names contain `marker`.
fn sizes_of(dir: &std::path::Path, marker: &str) -> u64 {
    files_of(dir, marker)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

fn memory(rt: &tokio::runtime::Runtime, runs: usize, smoke: bool) {
    let (files, per_file, batch) = if smoke {
        (2, 50, 20)
    } else {
        (20, 1_000, 1_000)
    };
    println!(
        "\n## Memory of one commit: {batch} keyed rows (256-B payload) into {files} files × {per_file} rows, keys spread over every file (a writer's second upsert commit)\n"
    );
    println!(
        "| strategy | peak heap per batch row (B) | allocated per batch row (B) | peak MiB | allocated MiB | allocated per row handled (B) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let per_file_share = batch / files;
    let keys: Vec<u64> = (0..files)
        .flat_map(|f| {
            (0..per_file_share).map(move |i| f * per_file + i * (per_file / per_file_share))
        })
        .collect();
    for strategy in strategies() {
        let (mut peak, mut alloc) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let dir = tempfile::tempdir().unwrap();
            let w = filled_writer(rt, dir.path(), strategy, files, per_file);
            if strategy != "insert" {
                // A streaming writer's steady state: its first upsert commit has read the
                // table's manifests already.
                let warm: Vec<String> = keys.iter().map(|&id| row(id + 1, 1)).collect();
                call(rt, &w, "upsert", &warm);
            }
            let rows: Vec<String> = keys.iter().map(|&id| row(id, 2)).collect();
            let (op, ids) = if strategy == "insert" {
                // New keys: the same bytes appended.
                let rows: Vec<String> = keys.iter().map(|&id| row(id + 1_000_000, 1)).collect();
                ("insert", rows)
            } else {
                ("upsert", rows)
            };
            let (n, p, a) = measured(|| call(rt, &w, op, &ids));
            assert_eq!(n, keys.len());
            peak.push(p as f64 / keys.len() as f64);
            alloc.push(a as f64 / keys.len() as f64);
        }
        let mib = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2] * keys.len() as f64 / (1 << 20) as f64
        };
        let (pm, am) = (mib(&peak), mib(&alloc));
        // Rows the commit handles: the batch's, plus for a key lookup every row of the
        // files it reads (here all of them).
        let handled = keys.len() as u64
            + match strategy {
                "copy-on-write" | "merge-on-read-positional" => files * per_file,
                _ => 0,
            };
        println!(
            "| {strategy} | {} | {} | {pm:.1} | {am:.1} | {:.0} |",
            summary(&mut peak, 0),
            summary(&mut alloc, 0),
            am * (1 << 20) as f64 / handled as f64
        );
    }
}

/// One layout's figures over the runs of one file size.
#[derive(Default)]
struct RewriteRuns {
    commit_ms: Vec<f64>,
    insert_ms: Vec<f64>,
    cpu_ms: Vec<f64>,
    insert_cpu_ms: Vec<f64>,
    splice_ms: Vec<f64>,
    bytes: u64,
}

fn rewrite_throughput(rt: &tokio::runtime::Runtime, runs: usize, smoke: bool) {
    println!(
        "\n## Copy-on-write rewrite throughput: one key upserted into a table of one data file\n"
    );
    println!(
        "Pages of 1,024 rows (the default) are spliced: the pages without the key copied, \
         one page per column re-encoded. Pages of 20,000 rows (the earlier default, one page \
         per column here) leave nothing to copy: the file is rewritten whole. The two \
         alternate run by run. `splice alone`: `splice_without` on the file's bytes in \
         memory (one thread), MB/s of the file.\n"
    );
    let fill = std::env::var("FLOE_BENCH_REWRITE_FILL").unwrap_or_else(|_| "upsert".into());
    println!("The table's data file is written by one `{fill}` call.\n");
    println!(
        "| page rows | file MiB | rows | commit ms | MB/s (whole commit) | one-row insert commit ms | MB/s (rewrite alone) | CPU ms per commit | one-row insert CPU ms | MB/s per core (rewrite alone) | splice alone ms | MB/s (splice alone) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // Bytes per row on disk, from a calibration file.
    let dir = tempfile::tempdir().unwrap();
    let w = rt
        .block_on(Writer::open(config(dir.path(), "copy-on-write")))
        .unwrap();
    let calibration = if smoke { 200 } else { 10_000 };
    filled(rt, &w, 1, calibration);
    let per_row = sizes_of(&dir.path().join("wh"), ".parquet") as f64 / calibration as f64;
    drop(w);
    // FLOE_BENCH_REWRITE_MIB="1" and FLOE_BENCH_REWRITE_PAGES="1024" narrow it down (to
    // profile one case).
    let targets: Vec<f64> = if smoke {
        vec![0.1]
    } else {
        vec![1.0, 2.0, 4.0]
    };
    let targets: Vec<f64> = targets
        .into_iter()
        .filter(|t| wanted("FLOE_BENCH_REWRITE_MIB", &t.to_string()))
        .collect();
    let layouts: Vec<usize> = [1_024usize, 20_000]
        .into_iter()
        .filter(|p| wanted("FLOE_BENCH_REWRITE_PAGES", &p.to_string()))
        .collect();
    for &mib in &targets {
        let rows = ((mib * (1 << 20) as f64) / per_row) as u64;
        let mut measured: Vec<RewriteRuns> = layouts.iter().map(|_| Default::default()).collect();
        for _ in 0..runs {
            for (n, &page_rows) in layouts.iter().enumerate() {
                let dir = tempfile::tempdir().unwrap();
                let w = rt
                    .block_on(Writer::open(config_with_pages(
                        dir.path(),
                        "copy-on-write",
                        Some(page_rows),
                    )))
                    .unwrap();
                // Written by an upsert, as a keyed stream writes its files: the writer
                // indexes their keys as it stages them, so the commit below finds the
                // row without reading the key column back (FLOE_BENCH_REWRITE_FILL=insert:
                // written by an insert, read back once by the lookup).
                filled_by(rt, &w, &fill, 1, rows);
                let m = &mut measured[n];
                m.bytes = sizes_of(&dir.path().join("wh"), ".parquet");
                m.splice_ms
                    .push(splice_alone(&dir.path().join("wh"), rows / 2));
                let (t, cpu) = (Instant::now(), process_cpu_ms());
                call(rt, &w, "upsert", &[row(rows / 2, 1)]);
                m.commit_ms.push(t.elapsed().as_secs_f64() * 1e3);
                m.cpu_ms.push(process_cpu_ms() - cpu);
                let (t, cpu) = (Instant::now(), process_cpu_ms());
                call(rt, &w, "insert", &[row(rows + 1, 0)]);
                m.insert_ms.push(t.elapsed().as_secs_f64() * 1e3);
                m.insert_cpu_ms.push(process_cpu_ms() - cpu);
            }
        }
        for (n, m) in measured.iter_mut().enumerate() {
            m.commit_ms.sort_by(f64::total_cmp);
            m.insert_ms.sort_by(f64::total_cmp);
            m.splice_ms.sort_by(f64::total_cmp);
            m.cpu_ms.sort_by(f64::total_cmp);
            m.insert_cpu_ms.sort_by(f64::total_cmp);
            let (c, i, s) = (
                m.commit_ms[runs / 2],
                m.insert_ms[runs / 2],
                m.splice_ms[runs / 2],
            );
            let rewrite_cpu = m.cpu_ms[runs / 2] - m.insert_cpu_ms[runs / 2];
            let mb = m.bytes as f64 / 1e6;
            println!(
                "| {} | {:.1} | {rows} | {} | {:.0} | {} | {:.0} | {} | {} | {:.0} | {} | {} |",
                layouts[n],
                m.bytes as f64 / (1 << 20) as f64,
                summary(&mut m.commit_ms, 0),
                mb / (c / 1e3),
                summary(&mut m.insert_ms, 0),
                mb / ((c - i).max(0.001) / 1e3),
                summary(&mut m.cpu_ms, 1),
                summary(&mut m.insert_cpu_ms, 1),
                mb / (rewrite_cpu.max(0.001) / 1e3),
                if s.is_nan() {
                    "—".to_string()
                } else {
                    summary(&mut m.splice_ms, 1)
                },
                if s.is_nan() {
                    "declined".to_string()
                } else {
                    format!("{:.0}", mb / (s / 1e3))
                },
            );
        }
    }
}

/// Milliseconds `splice_without` takes to remove row `position` from the only data file
/// under `warehouse` (NaN when it declines the file).
fn splice_alone(warehouse: &std::path::Path, position: u64) -> f64 {
    let path = files_of(warehouse, ".parquet")
        .pop()
        .expect("one data file");
    let bytes = bytes::Bytes::from(std::fs::read(path).unwrap());
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .unwrap();
    let schema = reader.schema().clone();
    let settings = floe::write::FileSettings {
        properties: parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(
                parquet::basic::ZstdLevel::try_new(1).unwrap(),
            ))
            .build(),
        target_file_size: 512 << 20,
        dictionaries_by_sample: false,
    };
    let t = Instant::now();
    let spliced =
        floe::write::splice::splice_without(&bytes, &[position], &settings, &schema).unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if spliced.is_some() { ms } else { f64::NAN }
}

/// CPU time of this process so far (user + system), in milliseconds.
fn process_cpu_ms() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

fn delete_files(rt: &tokio::runtime::Runtime, runs: usize, smoke: bool) {
    let (files, per_file) = if smoke { (2, 50) } else { (20, 1_000) };
    let ks: &[u64] = if smoke {
        &[1, 10]
    } else {
        &[1, 100, 1_000, 10_000]
    };
    println!(
        "\n## Delete files against K keys upserted in one commit (table of {files} files × {per_file} rows)\n"
    );
    println!("| strategy | K | delete file bytes | commit ms |");
    println!("|---|---:|---:|---:|");
    for (strategy, marker) in [
        ("merge-on-read", "-deletes"),
        ("merge-on-read-positional", "-pos-deletes"),
    ] {
        for &k in ks {
            let (mut size, mut ms) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let dir = tempfile::tempdir().unwrap();
                let w = rt
                    .block_on(Writer::open(config(dir.path(), strategy)))
                    .unwrap();
                filled(rt, &w, files, per_file);
                let stride = (files * per_file / k).max(1);
                let rows: Vec<String> = (0..k).map(|i| row(i * stride, 1)).collect();
                let t = Instant::now();
                call(rt, &w, "upsert", &rows);
                ms.push(t.elapsed().as_secs_f64() * 1e3);
                let bytes = sizes_of(&dir.path().join("wh"), marker);
                let bytes = if marker == "-deletes" {
                    bytes - sizes_of(&dir.path().join("wh"), "-pos-deletes")
                } else {
                    bytes
                };
                size.push(bytes as f64);
            }
            println!(
                "| {strategy} | {k} | {} | {} |",
                summary(&mut size, 0),
                summary(&mut ms, 0)
            );
        }
    }
}

/// Whether the comma-separated list in `var` (all when unset) names `item`.
fn wanted(var: &str, item: &str) -> bool {
    std::env::var(var).map_or(true, |v| v.split(',').any(|x| x.trim() == item))
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: a tiny version
    // proves the bench works.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let runs = std::env::var("FLOE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke { 1 } else { 3usize })
        .max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "upserts bench: embedded catalog, local folder, {runs} runs per point (median [min–max])"
    );
    if wanted("FLOE_BENCH_SECTIONS", "memory") {
        memory(&rt, runs, smoke);
    }
    if wanted("FLOE_BENCH_SECTIONS", "rewrite") {
        rewrite_throughput(&rt, runs, smoke);
    }
    if wanted("FLOE_BENCH_SECTIONS", "deletes") {
        delete_files(&rt, runs, smoke);
    }
    if wanted("FLOE_BENCH_SECTIONS", "in-flight") {
        in_flight(&rt, runs, smoke);
    }
    if wanted("FLOE_BENCH_SECTIONS", "pipeline") {
        pipeline_cpu(&rt, runs, smoke);
    }
}

/// One message of `bench-configs/upserts.py`'s stream: its `n`th, clustered over `keys`.
fn stream_row(n: u64, keys: u64) -> String {
    format!(
        r#"{{"n":{n},"id":{},"user":"user-{}","payload":"abcdefghijklmnopqrstuvwxyz0123456789-{n}","value":{}}}"#,
        (n * 7919) % keys,
        n % 977,
        n % 1000
    )
}

/// Section 5 (see the module docs).
fn pipeline_cpu(rt: &tokio::runtime::Runtime, runs: usize, smoke: bool) {
    use futures::StreamExt;
    let (calls, batch, keys) = if smoke {
        (8, 100, 200)
    } else {
        (100u64, 1_000u64, 25_000)
    };
    println!(
        "\n## Pipeline CPU: {calls} calls of {batch} messages (1 in 10 a delete) over {keys} clustered keys, 4 in flight\n"
    );
    println!("| strategy | CPU µs per row | rows/s | commits |");
    println!("|---|---:|---:|---:|");
    let texts: Vec<String> = (0..calls * batch).map(|n| stream_row(n, keys)).collect();
    for strategy in strategies() {
        let (mut cpu, mut rate, mut commits) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let dir = tempfile::tempdir().unwrap();
            let w = rt
                .block_on(Writer::open(stream_config(dir.path(), strategy)))
                .unwrap();
            let messages: Vec<Vec<Message>> = texts
                .chunks(batch as usize)
                .enumerate()
                .map(|(c, call)| {
                    call.iter()
                        .enumerate()
                        .map(|(i, r)| Message {
                            operation: stream_operation(strategy, c as u64 * batch + i as u64),
                            ..Message::insert(r.as_bytes())
                        })
                        .collect()
                })
                .collect();
            let (started, cpu_before) = (Instant::now(), process_cpu_ms());
            let outs: Vec<_> = rt.block_on(
                // In arrival order, as the Go host hands them in (tickets).
                futures::stream::iter(messages.iter().map(|m| call_in_turn(&w, w.arrive(), m)))
                    .buffered(4)
                    .collect(),
            );
            let (secs, cpu_ms) = (
                started.elapsed().as_secs_f64(),
                process_cpu_ms() - cpu_before,
            );
            for out in outs {
                assert!(
                    out.expect("write call")
                        .failures
                        .iter()
                        .all(Option::is_none)
                );
            }
            let rows = (calls * batch) as f64;
            cpu.push(cpu_ms * 1e3 / rows);
            rate.push(rows / secs);
            commits.push(w.stats().snapshots as f64);
        }
        println!(
            "| {strategy} | {} | {} | {} |",
            summary(&mut cpu, 2),
            summary(&mut rate, 0),
            summary(&mut commits, 0)
        );
    }
}

/// The pipeline bench's operation for message `n` (`None`, an insert, for `insert`).
fn stream_operation(strategy: &str, n: u64) -> Option<&'static str> {
    match (strategy, n % 10) {
        ("insert", _) => None,
        (_, 0) => Some("delete"),
        _ => Some("upsert"),
    }
}

/// The pipeline bench's table: keyed by `id` unless `strategy` is `insert`.
fn stream_config(dir: &std::path::Path, strategy: &str) -> Config {
    let mut cfg = json!({
        "catalog": {"warehouse": dir.join("wh").to_str().unwrap()},
        "namespace": "bench", "table": "t",
        "schema_evolution": {"enabled": true},
    });
    if strategy != "insert" {
        cfg["identifier_fields"] = json!(["id"]);
        cfg["merge_strategy"] = json!(strategy);
    }
    Config::from_json(&cfg.to_string()).unwrap()
}

/// Section 4 (see the module docs).
fn in_flight(rt: &tokio::runtime::Runtime, runs: usize, smoke: bool) {
    let (calls, batch) = if smoke { (4, 50) } else { (64, 1_000) };
    // Each call upserts its own keys (calls on one key would wait for each other), half
    // of them in the table already.
    let files = calls / 2;
    let json_bytes = row(1, 1).len();
    println!(
        "\n## Memory per row in flight: {calls} calls of {batch} keyed rows ({json_bytes} B of JSON each) at once, into a table of {files} files × {batch} rows\n"
    );
    println!("| strategy | peak heap per row in flight (B) | peak MiB | wall ms |");
    println!("|---|---:|---:|---:|");
    for strategy in strategies() {
        let (mut per_row, mut mib, mut wall) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let dir = tempfile::tempdir().unwrap();
            let w = filled_writer(rt, dir.path(), strategy, files, batch);
            let op = if strategy == "insert" {
                "insert"
            } else {
                "upsert"
            };
            let texts: Vec<Vec<String>> = (0..calls)
                .map(|c| {
                    (0..batch)
                        .map(|i| match i % 2 {
                            0 => row(c * (batch / 2) + i / 2, 1),
                            _ => row(1_000_000 + c * batch + i, 1),
                        })
                        .collect()
                })
                .collect();
            let messages: Vec<Vec<Message>> = texts
                .iter()
                .map(|call| {
                    call.iter()
                        .map(|r| Message {
                            operation: Some(op),
                            ..Message::insert(r.as_bytes())
                        })
                        .collect()
                })
                .collect();
            let (peak, ms) = peak_while(|| {
                let started = Instant::now();
                // Keyed calls keep their arrival order, as the Go host's do.
                let calls = messages.iter().map(|m| {
                    let ticket = match op {
                        "insert" => floe::commit::order::UNORDERED,
                        _ => w.arrive(),
                    };
                    call_in_turn(&w, ticket, m)
                });
                for out in rt.block_on(futures::future::join_all(calls)) {
                    let out = out.expect("write call");
                    assert!(out.failures.iter().all(Option::is_none));
                }
                started.elapsed().as_secs_f64() * 1e3
            });
            let rows = (calls * batch) as f64;
            per_row.push(peak as f64 / rows);
            mib.push(peak as f64 / (1 << 20) as f64);
            wall.push(ms);
        }
        println!(
            "| {strategy} | {} | {} | {} |",
            summary(&mut per_row, 0),
            summary(&mut mib, 1),
            summary(&mut wall, 0)
        );
    }
}

/// One call under `ticket` (from [`Writer::arrive`], or unordered), given back once it
/// is over, as the Go host does.
async fn call_in_turn(
    w: &Writer,
    ticket: floe::commit::order::Ticket,
    messages: &[Message<'_>],
) -> floe::error::Result<floe::writer::BatchOutcome> {
    let out = w
        .write_call(ticket, messages, vec![None; messages.len()])
        .await;
    w.depart(ticket);
    out
}

/// The heap's peak above its level before `f`, sampled every millisecond by another
/// thread (the allocator's own peak counts transient buffers of one moment too; this is
/// what stays long enough to be seen), and `f`'s result.
fn peak_while<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let base = LIVE.load(Ordering::Relaxed);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            while !stop.load(Ordering::Relaxed) {
                most = most.max(LIVE.load(Ordering::Relaxed).saturating_sub(base));
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            most
        })
    };
    let out = f();
    stop.store(true, Ordering::Relaxed);
    (sampler.join().unwrap(), out)
}
