//! The fast component loop: shred, encode and commit timed on their own, in seconds, to
//! iterate on the hot path. Everything is local (an embedded catalog in a temp folder),
//! so a run needs no services.
//!
//! ```text
//! cargo bench --bench components                        # prints, saves target/components/latest.jsonl
//! cargo bench --bench components -- --baseline saved.jsonl   # + ratio per stage to that run
//! cargo bench --bench components -- --rows 200000 --runs 7 --commits 300
//! ```
//!
//! Stages, each on one thread:
//! - `shred`: floe's JSON → Arrow over `--rows` events of ~148 B, in batches of `--batch`;
//! - `arrow-json`: arrow-json's decoder on the same input, the reference for `shred`;
//! - `encode`: floe's data-file writer (Parquet, zstd, statistics) on the shredded
//!   batches, into the table's folder;
//! - `commit`: `--commits` calls of 10 rows each through `Writer::write_batch`, one at a
//!   time, so each is a snapshot of its own: shred + encode + manifests + catalog. Each
//!   run starts a fresh table.
//! - `write`: `--write-batches` calls of `--write-rows` events through
//!   `Writer::write_batch` into a fresh table (shred + encode + commit), and
//!   `write-evolving`: the same, but every `--evolve-every` calls the events gain a field
//!   the table lacks, so the writer evolves the schema (one schema commit) and shreds
//!   that call again. Their ratio is the cost of schema evolution at that rate.
//!
//! Every run executes the stages in a rotated order (so a machine that drifts in speed
//! does not favour one), after one warm-up run. Each observation is a JSON line
//! `{"stage", "run", "items", "unit", "seconds", "rev"}`; `--save` chooses the file.
//! Nothing is asserted about time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use arrow_array::RecordBatch;
use floe::catalog::{LoadedTable, table_ident};
use floe::config::{Config, ParquetConfig};
use floe::shred::{DecodeOptions, EpochUnit, Shredder, UnknownFields};
use floe::storage::build_file_io;
use floe::write::{FileSettings, file_settings, write_data_files};
use floe::writer::{Message, Writer};
use iceberg::io::FileIO;
use serde_json::{Value, json};
use support::{bench_event, bench_schema};

#[path = "../tests/support/mod.rs"]
mod support;

const STAGES: [&str; 6] = [
    "shred",
    "arrow-json",
    "encode",
    "commit",
    "write",
    "write-evolving",
];

struct Args {
    rows: usize,
    batch: usize,
    runs: usize,
    commits: usize,
    write_batches: usize,
    write_rows: usize,
    evolve_every: usize,
    save: PathBuf,
    baseline: Option<PathBuf>,
}

fn parse_args() -> Args {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let number =
        |name: &str, default: usize| value(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    // `cargo test --all-targets` runs bench binaries without `--bench`: a smoke test.
    let smoke = !args.iter().any(|a| a == "--bench");
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/components");
    Args {
        rows: number("--rows", if smoke { 2_000 } else { 200_000 }),
        batch: number("--batch", 10_000),
        runs: number("--runs", if smoke { 1 } else { 5 }),
        commits: number("--commits", if smoke { 5 } else { 200 }),
        write_batches: number("--write-batches", if smoke { 4 } else { 300 }),
        write_rows: number("--write-rows", if smoke { 10 } else { 1_000 }),
        evolve_every: number("--evolve-every", if smoke { 2 } else { 100 }),
        save: value("--save")
            .map(PathBuf::from)
            .unwrap_or_else(|| target.join(if smoke { "smoke.jsonl" } else { "latest.jsonl" })),
        baseline: value("--baseline").map(PathBuf::from),
    }
}

/// One timed stage: how many items it handled and how long it took.
struct Observation {
    stage: &'static str,
    run: usize,
    items: usize,
    seconds: f64,
}

impl Observation {
    fn unit(&self) -> &'static str {
        if self.stage == "commit" {
            "commits"
        } else {
            "rows"
        }
    }
}

/// What every stage needs: the events, a table to write into and a runtime.
struct Bench {
    rt: tokio::runtime::Runtime,
    events: Vec<String>,
    batch: usize,
    commits: usize,
    shredder: Shredder,
    writer: Writer,
    table: LoadedTable,
    file_io: FileIO,
    settings: FileSettings,
    /// Paths of the files the last `encode` wrote.
    encoded: Vec<String>,
    /// Shredded batches from the last `shred` run, the input of `encode`.
    shredded: Vec<RecordBatch>,
    commit_table: String,
    /// The calls of the next `write` or `write-evolving` run (made untimed).
    write_calls: Vec<Vec<String>>,
    write_batches: usize,
    write_rows: usize,
    evolve_every: usize,
}

impl Bench {
    fn new(args: &Args, dir: &Path) -> Bench {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let config = json!({
            "catalog": {"warehouse": dir.to_str().unwrap()},
            "namespace": "bench", "table": "events",
            "schema_evolution": {"enabled": true, "schema": bench_schema()},
            "commit": {"max_snapshot_age": "0s"}
        });
        let writer = rt
            .block_on(Writer::open(
                Config::from_json(&config.to_string()).unwrap(),
            ))
            .unwrap();
        let events: Vec<String> = (0..args.rows).map(bench_event).collect();
        // The first call creates the table.
        let first = rt
            .block_on(writer.write_batch(&[Message::insert(events[0].as_bytes())]))
            .expect("write call");
        assert!(
            first.failures.iter().all(Option::is_none),
            "{:?}",
            first.failures
        );
        let ident = table_ident("bench", "events").unwrap();
        let table = rt
            .block_on(writer.catalog().load_table(&ident))
            .unwrap()
            .unwrap();
        let options = DecodeOptions {
            epoch_unit: EpochUnit::Ms,
            case_sensitive: true,
            unknown_fields: UnknownFields::Reject,
        };
        let shredder = Shredder::new(table.metadata.current_schema().clone(), options).unwrap();
        Bench {
            rt,
            events,
            batch: args.batch,
            commits: args.commits,
            shredder,
            writer,
            file_io: build_file_io(HashMap::new()),
            settings: file_settings(&ParquetConfig::default(), &table.metadata).unwrap(),
            table,
            encoded: Vec::new(),
            shredded: Vec::new(),
            commit_table: String::new(),
            write_calls: Vec::new(),
            write_batches: args.write_batches,
            write_rows: args.write_rows,
            evolve_every: args.evolve_every,
        }
    }

    fn run(&mut self, stage: &str) -> usize {
        match stage {
            "shred" => self.shred(),
            "arrow-json" => self.arrow_json(),
            "encode" => self.encode(),
            "commit" => self.commit(),
            "write" | "write-evolving" => self.write(),
            _ => unreachable!("unknown stage {stage}"),
        }
    }

    fn shred(&mut self) -> usize {
        self.shredded = self
            .events
            .chunks(self.batch)
            .map(|c| {
                let out = self.shredder.shred(c.iter().map(|m| m.as_bytes()));
                assert!(out.errors.is_empty());
                out.batch.unwrap()
            })
            .collect();
        self.shredded.iter().map(RecordBatch::num_rows).sum()
    }

    fn arrow_json(&mut self) -> usize {
        let schema = self.shredder.arrow_schema().clone();
        let mut rows = 0;
        for chunk in self.events.chunks(self.batch) {
            let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
                .with_batch_size(self.batch)
                .build_decoder()
                .unwrap();
            for m in chunk {
                decoder.decode(m.as_bytes()).unwrap();
                decoder.decode(b"\n").unwrap();
            }
            rows += decoder.flush().unwrap().unwrap().num_rows();
        }
        rows
    }

    fn encode(&mut self) -> usize {
        let files = self
            .rt
            .block_on(write_data_files(
                self.shredded.clone(),
                &self.table.metadata,
                &self.file_io,
                &self.settings,
            ))
            .unwrap();
        self.encoded = files.iter().map(|f| f.file_path().to_string()).collect();
        files.iter().map(|f| f.record_count() as usize).sum()
    }

    /// Untimed set-up. `commit` writes each run into a table of its own (created here),
    /// so the metadata of earlier runs does not slow later ones.
    fn prepare(&mut self, stage: &str, run: usize) {
        match stage {
            "encode" => {
                if self.shredded.is_empty() {
                    self.shred();
                }
                // The last run's files were never committed: remove them, untimed, so
                // runs do not fill the disk.
                for path in self.encoded.drain(..) {
                    let _ = std::fs::remove_file(path.trim_start_matches("file://"));
                }
            }
            "commit" => {
                self.commit_table = format!("commit_{run}");
                self.write_to_commit_table(0);
            }
            "write" | "write-evolving" => {
                self.commit_table = format!("{}_{run}", stage.replace('-', "_"));
                self.write_calls = self.write_calls(stage == "write-evolving");
            }
            _ => {}
        }
    }

    /// `write_batches` calls of `write_rows` events; evolving, the events of call `b`
    /// also carry fields `x1`…`x{b / evolve_every}`, one more every `evolve_every` calls.
    fn write_calls(&self, evolving: bool) -> Vec<Vec<String>> {
        let mut events = self.events.iter().cycle();
        (0..self.write_batches)
            .map(|b| {
                let added = if evolving { b / self.evolve_every } else { 0 };
                let extra: String = (1..=added).map(|x| format!(r#","x{x}":{x}"#)).collect();
                (0..self.write_rows)
                    .map(|_| {
                        let e = events.next().expect("cycled");
                        format!("{}{extra}}}", &e[..e.len() - 1])
                    })
                    .collect()
            })
            .collect()
    }

    fn write(&mut self) -> usize {
        let calls = std::mem::take(&mut self.write_calls);
        let rows = calls.iter().map(|call| self.write_call(call)).sum();
        self.write_calls = calls;
        rows
    }

    fn commit(&mut self) -> usize {
        for k in 0..self.commits {
            self.write_to_commit_table(k);
        }
        self.commits
    }

    fn write_to_commit_table(&self, k: usize) {
        self.write_call(&self.events[k * 10 % (self.events.len() - 10)..][..10]);
    }

    /// One write call of `events` into the commit table; every row must be written.
    fn write_call(&self, events: &[String]) -> usize {
        let msgs: Vec<Message> = events
            .iter()
            .map(|e| Message {
                table: Some(&self.commit_table),
                ..Message::insert(e.as_bytes())
            })
            .collect();
        let out = self
            .rt
            .block_on(self.writer.write_batch(&msgs))
            .expect("write call");
        assert!(
            out.failures.iter().all(Option::is_none),
            "{:?}",
            out.failures
        );
        out.rows_committed
    }
}

fn rev() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn save(path: &Path, observations: &[Observation]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let rev = rev();
    let lines: Vec<String> = observations
        .iter()
        .map(|o| {
            json!({"stage": o.stage, "run": o.run, "items": o.items, "unit": o.unit(),
                   "seconds": o.seconds, "rev": rev})
            .to_string()
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Median, min and max of items/s per stage.
fn rates(observations: impl Iterator<Item = (String, f64)>) -> HashMap<String, (f64, f64, f64)> {
    let mut by_stage: HashMap<String, Vec<f64>> = HashMap::new();
    for (stage, rate) in observations {
        by_stage.entry(stage).or_default().push(rate);
    }
    by_stage
        .into_iter()
        .map(|(stage, mut xs)| {
            xs.sort_by(f64::total_cmp);
            (stage, (xs[xs.len() / 2], xs[0], xs[xs.len() - 1]))
        })
        .collect()
}

fn load_baseline(path: &Path) -> HashMap<String, (f64, f64, f64)> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read baseline {}: {e}", path.display()));
    rates(text.lines().filter(|l| !l.is_empty()).map(|l| {
        let v: Value = serde_json::from_str(l).expect("baseline line is JSON");
        let stage = v["stage"].as_str().unwrap_or_default().to_string();
        (
            stage,
            v["items"].as_f64().unwrap() / v["seconds"].as_f64().unwrap(),
        )
    }))
}

fn main() {
    let args = parse_args();
    let dir = tempfile::tempdir().unwrap();
    let mut bench = Bench::new(&args, dir.path());
    let mut observations = Vec::new();
    for run in 0..=args.runs {
        for k in 0..STAGES.len() {
            let stage = STAGES[(k + run) % STAGES.len()];
            bench.prepare(stage, run);
            let t0 = Instant::now();
            let items = bench.run(stage);
            let seconds = t0.elapsed().as_secs_f64();
            if run > 0 {
                observations.push(Observation {
                    stage,
                    run,
                    items,
                    seconds,
                });
            }
        }
    }
    save(&args.save, &observations);
    let now = rates(
        observations
            .iter()
            .map(|o| (o.stage.to_string(), o.items as f64 / o.seconds)),
    );
    let baseline = args.baseline.as_deref().map(load_baseline);
    println!(
        "components: {} events of {} B on average in batches of {}, {} commits of 10 rows, {} runs after a warm-up, 1 thread",
        args.rows,
        bench.events.iter().map(String::len).sum::<usize>() / bench.events.len(),
        args.batch,
        args.commits,
        args.runs
    );
    for stage in STAGES {
        let (med, lo, hi) = now[stage];
        let unit = if stage == "commit" {
            "commits/s"
        } else {
            "rows/s"
        };
        let mut line = format!("{stage:>14}: {med:>12.0} {unit:<9} [{lo:.0}–{hi:.0}]");
        if let Some((base, _, _)) = baseline.as_ref().and_then(|b| b.get(stage)) {
            line += &format!("   {:.2}× baseline ({base:.0})", med / base);
        }
        println!("{line}");
    }
    println!(
        "floe shred / arrow-json: {:.2}×; write-evolving / write: {:.3}× (a schema change \
         every {} calls of {} rows); saved to {}",
        now["shred"].0 / now["arrow-json"].0,
        now["write-evolving"].0 / now["write"].0,
        args.evolve_every,
        args.write_rows,
        args.save.display()
    );
}
