//! Helpers shared by the integration tests: running the independent Python readers.

#![allow(dead_code)]

use std::process::Command;

use tokio::io::AsyncReadExt;

use futures::TryStreamExt;
use serde_json::{Value, json};

/// The sorted `id` column of a REST table, read back by pyiceberg.
pub fn ids_read_back(table: &str) -> Vec<i64> {
    let out = read_back("pyiceberg-rest", services().pyiceberg_args(table));
    let mut ids: Vec<i64> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    ids
}

/// Rows of `id` (long) and `v` (string), sorted, as a reader answered them.
pub fn id_values(rows: impl IntoIterator<Item = Value>) -> Vec<(i64, String)> {
    let mut pairs: Vec<(i64, String)> = rows
        .into_iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["v"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    pairs.sort();
    pairs
}

/// Inserts of `texts` into the config's table, one message each.
pub fn messages(texts: &[String]) -> Vec<floe::writer::Message<'_>> {
    texts
        .iter()
        .map(|t| floe::writer::Message::insert(t.as_bytes()))
        .collect()
}

/// Inserts `texts` in one call, every message of which must be written; returns the
/// rows committed.
pub fn write_ok(
    rt: &tokio::runtime::Runtime,
    writer: &floe::writer::Writer,
    texts: &[String],
) -> usize {
    write_messages_ok(rt, writer, &messages(texts))
}

/// Writes `msgs` in one call, every one of which must be written; returns the rows
/// committed.
pub fn write_messages_ok(
    rt: &tokio::runtime::Runtime,
    writer: &floe::writer::Writer,
    msgs: &[floe::writer::Message<'_>],
) -> usize {
    let out = rt.block_on(writer.write_batch(msgs)).expect("write call");
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    out.rows_committed
}

/// Asks `tests/support/read_table.py` and returns its JSON answer; panics, naming the
/// reader, when the reader fails.
pub fn read_back(reader: &str, args: Value) -> Value {
    let mut server = ReadServer::take();
    let answer = server.ask(reader, &args);
    match answer {
        Ok(Ok(value)) => {
            server.give_back();
            value
        }
        Ok(Err(traceback)) => {
            server.give_back();
            panic!("{reader} failed: {traceback}")
        }
        Err(e) => panic!("{reader} failed: the reader process broke off ({e})"),
    }
}

/// `read_back`'s arguments for pyiceberg's SQL catalog reading `table` of the embedded
/// catalog in `warehouse` (its folder: `catalog.db` and the files).
pub fn pyiceberg_sql_args(warehouse: &std::path::Path, table: &str) -> Value {
    json!({
        "uri": format!("sqlite:///{}", warehouse.join("catalog.db").display()),
        "warehouse": format!("file://{}", warehouse.display()),
        "table": table
    })
}

/// The Python with the test packages: `$PYTHON` (the Makefile exports its virtual
/// environment's), else `.venv` in the repository (after `make py-deps`), else `python3`.
pub fn python() -> String {
    if let Ok(python) = std::env::var("PYTHON") {
        return python;
    }
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python3");
    if std::path::Path::new(venv).exists() {
        return venv.into();
    }
    "python3".into()
}

/// A `read_table.py --serve` process. Its imports of DuckDB and pyiceberg take about
/// 1.7 s, paid once per process instead of once per read; test threads take an idle
/// one or start their own, so reads still run side by side. A server exits when its
/// stdin closes, which happens at the latest when the test binary exits.
struct ReadServer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

static IDLE_READ_SERVERS: std::sync::Mutex<Vec<ReadServer>> = std::sync::Mutex::new(Vec::new());

impl ReadServer {
    fn take() -> Self {
        let idle = IDLE_READ_SERVERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        idle.unwrap_or_else(Self::start)
    }

    fn start() -> Self {
        use std::process::Stdio;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/read_table.py");
        let mut child = Command::new(python())
            .arg(script)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        ReadServer {
            child,
            stdin,
            stdout,
        }
    }

    /// One request and its answer: `Ok(Err(traceback))` when the reader raised.
    fn ask(&mut self, reader: &str, args: &Value) -> std::io::Result<Result<Value, String>> {
        use std::io::{BufRead, Write};
        let request = serde_json::json!({"reader": reader, "args": args});
        writeln!(self.stdin, "{request}")?;
        self.stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("it exited"));
        }
        let mut reply: Value = serde_json::from_str(&line).map_err(std::io::Error::other)?;
        Ok(match reply.get("error") {
            Some(traceback) => Err(traceback.as_str().unwrap_or_default().to_string()),
            None => Ok(reply["ok"].take()),
        })
    }

    fn give_back(self) {
        IDLE_READ_SERVERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self);
    }
}

impl Drop for ReadServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A benchmark's list setting from the environment (`FLOE_BENCH_BATCHES="100,1000"`), or
/// `default`.
pub fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// The benchmarks' event `i`, ~148 B: the shape of `bench-configs/events.yaml`, with its keys
/// sorted as Benthos writes them.
pub fn bench_event(i: usize) -> String {
    const TYPES: [&str; 5] = ["click", "view", "purchase", "signup", "logout"];
    format!(
        r#"{{"event_type":"{}","id":{i},"info":"session-{}-abcdefghijklmnopqrstuvwxyz0123","ts":"2026-11-30T01:{:02}:{:02}.{:06}Z","user_id":{},"value":{}.{}}}"#,
        TYPES[i % 5],
        i % 977,
        (i / 60_000) % 60,
        (i / 1000) % 60,
        i % 1_000_000,
        i % 10_000,
        i % 1000,
        i % 10
    )
}

/// The benchmarks' table schema (Iceberg JSON), the one the sink peers create too.
pub fn bench_schema() -> Value {
    serde_json::json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": false, "type": "long"},
        {"id": 2, "name": "user_id", "required": false, "type": "long"},
        {"id": 3, "name": "event_type", "required": false, "type": "string"},
        {"id": 4, "name": "value", "required": false, "type": "double"},
        {"id": 5, "name": "info", "required": false, "type": "string"},
        {"id": 6, "name": "ts", "required": false, "type": "timestamptz"}
    ]})
}

/// Merges JSON objects deeply: `more`'s values win, nested objects merge.
pub fn merge(into: &mut Value, more: Value) {
    match (into, more) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Endpoints of the SeaweedFS + REST fixture instance shared by one test binary.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Services {
    pub s3_endpoint: String,
    pub rest_url: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    /// Service name (`seaweedfs`, `rest-fixture`) → PID, for CPU accounting.
    #[serde(default)]
    pub pids: std::collections::HashMap<String, u32>,
}

/// Starts (once per test binary) `e2e/services.py serve`, which installs what is
/// missing, starts SeaweedFS and the REST fixture on 127.0.0.1, and stops them by PID
/// when this process exits.
pub fn services() -> &'static Services {
    use std::io::BufRead;
    use std::sync::OnceLock;
    static SERVICES: OnceLock<Services> = OnceLock::new();
    SERVICES.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/services.py");
        let mut child = Command::new(python())
            .arg(script)
            .arg("serve")
            .arg("--parent-pid")
            .arg(std::process::id().to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 e2e/services.py starts");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        assert!(
            !line.is_empty(),
            "services did not start (see output above)"
        );
        // The child outlives this function; it stops itself when this process exits.
        std::mem::forget(child);
        serde_json::from_str(&line).expect("services print their endpoints")
    })
}

impl Services {
    /// CPU seconds a service's process has used so far (user + system, all threads,
    /// from `/proc/PID/stat`; 10 ms ticks); `None` if unknown.
    pub fn cpu_seconds(&self, service: &str) -> Option<f64> {
        let pid = self.pids.get(service)?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: f64 =
            fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(ticks / 100.0)
    }

    /// floe config fragment for this REST catalog + S3.
    pub fn floe_config(&self) -> Value {
        serde_json::json!({
            "catalog": {"url": self.rest_url},
            "storage": {"aws_s3": {
                "bucket": self.bucket, "region": self.region, "endpoint": self.s3_endpoint,
                "force_path_style_urls": true,
                "credentials": {"id": self.access_key, "secret": self.secret_key}
            }}
        })
    }

    pub fn pyiceberg_args(&self, table: &str) -> Value {
        serde_json::json!({
            "uri": self.rest_url,
            "table": table,
            "props": {
                "s3.endpoint": self.s3_endpoint, "s3.access-key-id": self.access_key,
                "s3.secret-access-key": self.secret_key, "s3.region": self.region,
                "s3.path-style-access": "true"
            }
        })
    }

    pub fn duckdb_s3(&self) -> Value {
        serde_json::json!({"key": self.access_key, "secret": self.secret_key,
                           "endpoint": self.s3_endpoint, "region": self.region})
    }
}

/// Reads one HTTP/1.1 request (head and `Content-Length` body) for the test proxies, and
/// returns its first line and its bytes with `Connection: close` added, so the upstream
/// answer ends at EOF.
pub async fn read_request(
    client: &mut tokio::net::TcpStream,
) -> std::io::Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())
                .flatten()
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    // Ask upstream to close after answering so its response ends at EOF.
    let head = head.replacen("\r\n", "\r\nConnection: close\r\n", 1);
    let mut request = head.into_bytes();
    request.extend_from_slice(&buf[head_end..]);
    let first_line = String::from_utf8_lossy(&request)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    Ok((first_line, request))
}

/// A small deterministic generator (xorshift64*), so a failure replays exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The table's `columns` as iceberg-rust's scan reads them (it applies delete files).
pub fn scan_columns(
    rt: &tokio::runtime::Runtime,
    writer: &floe::writer::Writer,
    io: &floe::config::Config,
    columns: &[&str],
) -> Vec<Value> {
    let ident = floe::catalog::table_ident(
        io.namespace.as_deref().unwrap(),
        io.table.as_deref().unwrap(),
    )
    .unwrap();
    let loaded = rt
        .block_on(writer.catalog().load_table(&ident))
        .unwrap()
        .unwrap();
    let mut props = floe::storage::file_io_props(&io.storage).unwrap();
    props.extend(loaded.io_props.clone());
    let table = iceberg::table::Table::builder()
        .metadata(loaded.metadata.clone())
        .identifier(ident)
        .file_io(floe::storage::build_file_io(props))
        .metadata_location(loaded.metadata_location.clone().unwrap())
        .runtime(iceberg::Runtime::new(rt))
        .build()
        .unwrap();
    // iceberg-rust 0.10.1's scan was seen to hang (parked, no CPU) on a table with many
    // small delete files, about once in a dozen suite runs, and once to fail when its
    // equality-delete loader task panicked (delete_filter.rs:259, a dropped sender); the
    // same scan started again finishes. One more try, then fail instead of stalling the
    // suite. The retry reads the same committed snapshot, so it hides no writer fault.
    let batches: Vec<arrow_array::RecordBatch> = rt.block_on(async {
        for attempt in 0..2 {
            let scan = async {
                table
                    .scan()
                    .select(columns.iter().copied())
                    .build()
                    .unwrap()
                    .to_arrow()
                    .await?
                    .try_collect::<Vec<_>>()
                    .await
            };
            match tokio::time::timeout(std::time::Duration::from_secs(60), scan).await {
                Ok(Ok(batches)) => return batches,
                Ok(Err(e)) if attempt == 0 => {
                    eprintln!("iceberg-rust's scan failed ({e}); scanning again")
                }
                Ok(Err(e)) => panic!("iceberg-rust's scan failed twice: {e}"),
                Err(_) => eprintln!("iceberg-rust's scan hung (attempt {attempt}); scanning again"),
            }
        }
        panic!("iceberg-rust's scan did not finish twice within 60 s");
    });
    let mut rows = Vec::new();
    for b in batches {
        let mut buf = Vec::new();
        let mut w = arrow_json::ArrayWriter::new(&mut buf);
        w.write(&b).unwrap();
        w.finish().unwrap();
        if !buf.is_empty() {
            rows.extend(serde_json::from_slice::<Vec<Value>>(&buf).unwrap());
        }
    }
    rows
}

/// Runs `calls` at once on `rt`, each under a ticket taken in the order given (the
/// order they arrive), through `write` (the call's ticket and messages → its outcome);
/// the first call's error, once every call is over.
#[allow(dead_code)]
pub fn write_calls_in_arrival_order<T, F, Fut>(
    rt: &tokio::runtime::Runtime,
    writer: &std::sync::Arc<floe::writer::Writer>,
    calls: Vec<T>,
    write: F,
) -> Result<(), String>
where
    F: Fn(std::sync::Arc<floe::writer::Writer>, u64, T) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|call| {
            let ticket = writer.arrive();
            rt.spawn(write(writer.clone(), ticket, call))
        })
        .collect();
    // A call that never returns (a deadlock) fails the test instead of hanging it.
    let bound = std::time::Duration::from_secs(300);
    let outcomes: Vec<Result<(), String>> = tasks
        .into_iter()
        .map(
            |t| match rt.block_on(async { tokio::time::timeout(bound, t).await }) {
                Ok(outcome) => outcome.unwrap(),
                Err(_) => Err(format!("a call did not return within {bound:?}")),
            },
        )
        .collect();
    outcomes.into_iter().collect()
}

/// Writes one ordered call (`ticket`, from `Writer::arrive`) as the Go shim does: the
/// messages that failed not at their own fault are sent again under the same ticket
/// (`on_retry` sees each attempt's failures first) until all are written or acknowledged;
/// then the ticket is given back. Fails on a message at its own fault, or after 2,000 tries.
#[allow(dead_code)]
pub async fn write_ordered_call(
    writer: &floe::writer::Writer,
    ticket: u64,
    messages: &[floe::writer::Message<'_>],
    mut on_retry: impl FnMut(&[Option<floe::error::Error>]),
) -> Result<(), String> {
    let mut left: Vec<usize> = (0..messages.len()).collect();
    let outcome = loop_until_written(writer, ticket, messages, &mut left, &mut on_retry).await;
    writer.depart(ticket);
    outcome
}

async fn loop_until_written(
    writer: &floe::writer::Writer,
    ticket: u64,
    messages: &[floe::writer::Message<'_>],
    left: &mut Vec<usize>,
    on_retry: &mut impl FnMut(&[Option<floe::error::Error>]),
) -> Result<(), String> {
    for _ in 0..2000 {
        let batch: Vec<floe::writer::Message<'_>> = left.iter().map(|&i| messages[i]).collect();
        let failures = match writer
            .write_call(ticket, &batch, vec![None; batch.len()])
            .await
        {
            Ok(out) => out.failures,
            Err(e) => vec![Some(e); batch.len()],
        };
        if let Some(e) = failures
            .iter()
            .flatten()
            .find(|e| e.kind() == floe::error::ErrorKind::Data)
        {
            return Err(format!("a message failed at its own fault: {e}"));
        }
        *left = left
            .iter()
            .zip(&failures)
            .filter(|(_, f)| f.is_some())
            .map(|(&i, _)| i)
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        on_retry(&failures);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    Err(format!(
        "{} messages still failing after 2000 tries",
        left.len()
    ))
}
