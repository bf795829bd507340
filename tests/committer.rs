//! The committer on real services: group commit under concurrency, commits whose answer
//! is lost or throttled, exactly-once replays, and metadata that stays bounded.
//! SeaweedFS + Apache's REST fixture, and the embedded catalog; pyiceberg and DuckDB
//! read back what was written.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use floe::catalog::table_ident;
use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::{Value, json};
use support::{
    ids_read_back, merge, messages, read_back, read_request, runtime, services, write_messages_ok,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn rest_config(extra: Value) -> Config {
    let mut c = services().floe_config();
    merge(&mut c, extra);
    Config::from_json(&c.to_string()).unwrap()
}

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "kind", "required": false, "type": "string"}
    ]})
}

fn rows(from: i64, to: i64) -> Vec<String> {
    (from..to)
        .map(|i| format!(r#"{{"id": {i}, "kind": "k{}"}}"#, i % 5))
        .collect()
}

/// Snapshot count and the head's summary, as the catalog reports them.
fn table_stats(writer: &Writer, rt: &tokio::runtime::Runtime, table: &str) -> (usize, Value) {
    let (ns, name) = table.rsplit_once('.').unwrap();
    let t = rt
        .block_on(writer.catalog().load_table(&table_ident(ns, name).unwrap()))
        .unwrap()
        .unwrap();
    let summary = t
        .metadata
        .current_snapshot()
        .map(|s| json!(s.summary().additional_properties))
        .unwrap_or(Value::Null);
    (t.metadata.snapshots().count(), summary)
}

#[test]
fn group_commit_shares_snapshots_across_16_concurrent_callers() {
    let rt = runtime();
    let cfg = rest_config(json!({"namespace": "committer", "table": "group",
        "schema_evolution": {"enabled": true, "schema": schema()}}));
    let writer = Arc::new(rt.block_on(Writer::open(cfg)).unwrap());
    let (callers, batches_per_caller, rows_per_batch) = (16i64, 20i64, 50i64);
    rt.block_on(async {
        let tasks: Vec<_> = (0..callers)
            .map(|c| {
                let writer = writer.clone();
                tokio::spawn(async move {
                    for b in 0..batches_per_caller {
                        let first = (c * batches_per_caller + b) * rows_per_batch;
                        let texts = rows(first, first + rows_per_batch);
                        let msgs = messages(&texts);
                        let out = writer.write_batch(&msgs).await.expect("write call");
                        assert!(
                            out.failures.iter().all(Option::is_none),
                            "{:?}",
                            out.failures
                        );
                        assert_eq!(out.rows_committed, rows_per_batch as usize);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let batches = (callers * batches_per_caller) as usize;
    let total = callers * batches_per_caller * rows_per_batch;
    let (snapshots, summary) = table_stats(&writer, &rt, "committer.group");
    let files: usize = summary["total-data-files"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    eprintln!("{batches} batches → {snapshots} snapshots, {files} data files");
    assert!(
        snapshots * 2 <= batches,
        "{snapshots} snapshots for {batches} batches"
    );
    assert!(files * 2 <= batches, "{files} files for {batches} batches");
    assert_eq!(summary["total-records"], json!(total.to_string()));
    assert_eq!(
        ids_read_back("committer.group"),
        (0..total).collect::<Vec<_>>()
    );
}

/// What the fault proxy does to the next matching commit request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    /// Forward it, then drop the connection without answering.
    LoseResponse,
    /// Forward it, then answer 503 as an overloaded gateway would.
    Answer503AfterApplying,
    /// Do not forward; answer 429.
    Throttle,
    /// Do not forward; answer 400 (a definite refusal).
    Reject,
    /// Forward it (the catalog applies it), answer 429 as a proxy that re-sent the POST
    /// would, and answer every request of the next 5 s with 503 (the catalog is down).
    ApplyThen429AndGoDown,
    /// Forward it (the catalog applies it), drop the connection without answering, and
    /// answer every request of the next 3 s with 503: the catalog went down right after
    /// applying the commit, and comes back.
    LoseResponseThenGoDown,
    /// Do not forward; answer 302 pointing at the table's own URL, as a misconfigured
    /// gateway does (a client following it GETs the table: 200).
    Redirect,
    /// Forward it (the catalog applies it); before answering, let another tool (pyiceberg)
    /// append a row and expire every snapshot but its own; then answer 409 as a proxy that
    /// re-sent the POST would. The commit landed, but its snapshot id and commit id are
    /// gone from the table's history.
    ApplyThenForeignExpiryThen409,
    /// Forward it unchanged (lets earlier commits through).
    Pass,
    /// Do not forward; answer 503, and every request of the next 4 s too: the catalog
    /// went down before it saw the commit.
    RefuseThenGoDown,
    /// Do not forward; answer 409 `CommitFailedException`, as the catalog does when
    /// another writer's commit came first.
    Conflict,
}

/// A small HTTP/1.1 proxy in front of the REST catalog that injects `faults`, in order,
/// into table commits (POST …/tables/<name>). One request per connection.
struct FaultProxy {
    url: String,
    injected: Arc<AtomicUsize>,
    /// Commit requests that reached the catalog.
    forwarded: Arc<AtomicUsize>,
}

impl FaultProxy {
    async fn start(upstream: String, faults: Vec<Fault>) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let faults = Arc::new(std::sync::Mutex::new(faults.into_iter()));
        let injected = Arc::new(AtomicUsize::new(0));
        let forwarded = Arc::new(AtomicUsize::new(0));
        let upstream_addr = upstream.trim_start_matches("http://").to_string();
        let count = injected.clone();
        let sent = forwarded.clone();
        // Set by the faults that take the catalog down: until then, every request fails.
        let down_until = Arc::new(std::sync::Mutex::new(None));
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let (faults, count, sent, upstream_addr, down) = (
                    faults.clone(),
                    count.clone(),
                    sent.clone(),
                    upstream_addr.clone(),
                    down_until.clone(),
                );
                tokio::spawn(async move {
                    let counters = (&*count, &*sent);
                    let _ = proxy_one(client, &upstream_addr, &faults, counters, &down).await;
                });
            }
        });
        FaultProxy {
            url,
            injected,
            forwarded,
        }
    }
}

async fn proxy_one(
    mut client: tokio::net::TcpStream,
    upstream: &str,
    faults: &std::sync::Mutex<std::vec::IntoIter<Fault>>,
    (injected, forwarded): (&AtomicUsize, &AtomicUsize),
    down_until: &std::sync::Mutex<Option<std::time::Instant>>,
) -> std::io::Result<()> {
    let (first_line, request) = read_request(&mut client).await?;
    let is_commit = first_line.starts_with("POST ") && {
        let path = first_line.split(' ').nth(1).unwrap_or_default();
        path.rsplit_once("/tables/")
            .is_some_and(|(_, name)| !name.contains('/'))
    };
    let fault = if is_commit {
        faults.lock().unwrap().next()
    } else {
        None
    };
    let down = |d: std::time::Duration| {
        *down_until.lock().unwrap() = Some(std::time::Instant::now() + d);
    };
    if down_until
        .lock()
        .unwrap()
        .is_some_and(|until| std::time::Instant::now() < until)
    {
        let answer =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        return client.write_all(answer.as_bytes()).await;
    }
    if fault == Some(Fault::Conflict) {
        injected.fetch_add(1, Ordering::SeqCst);
        let body = r#"{"error":{"message":"Requirement failed: branch main has changed","type":"CommitFailedException","code":409}}"#;
        let answer = format!(
            "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return client.write_all(answer.as_bytes()).await;
    }
    let refusal = match fault {
        Some(Fault::Throttle) => Some((429, "Too Many Requests", "slow down")),
        Some(Fault::Reject) => Some((400, "Bad Request", "refused by the test proxy")),
        _ => None,
    };
    if fault == Some(Fault::RefuseThenGoDown) {
        injected.fetch_add(1, Ordering::SeqCst);
        down(std::time::Duration::from_secs(4));
        let answer =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        return client.write_all(answer.as_bytes()).await;
    }
    if fault == Some(Fault::Redirect) {
        injected.fetch_add(1, Ordering::SeqCst);
        let path = first_line.split(' ').nth(1).unwrap_or_default();
        let answer = format!(
            "HTTP/1.1 302 Found\r\nLocation: http://{upstream}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        return client.write_all(answer.as_bytes()).await;
    }
    if let Some((code, reason, message)) = refusal {
        injected.fetch_add(1, Ordering::SeqCst);
        let body = format!(r#"{{"error":{{"message":"{message}","type":"Test","code":{code}}}}}"#);
        let answer = format!(
            "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return client.write_all(answer.as_bytes()).await;
    }
    if is_commit {
        forwarded.fetch_add(1, Ordering::SeqCst);
    }
    let mut up = tokio::net::TcpStream::connect(upstream).await?;
    up.write_all(&request).await?;
    let mut response = Vec::new();
    up.read_to_end(&mut response).await?;
    match fault {
        Some(Fault::LoseResponse) => {
            injected.fetch_add(1, Ordering::SeqCst);
            Ok(()) // the commit was applied; the client never hears of it
        }
        Some(Fault::LoseResponseThenGoDown) => {
            injected.fetch_add(1, Ordering::SeqCst);
            down(std::time::Duration::from_secs(3));
            Ok(())
        }
        Some(Fault::ApplyThen429AndGoDown) => {
            injected.fetch_add(1, Ordering::SeqCst);
            down(std::time::Duration::from_secs(5));
            let answer =
                "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            client.write_all(answer.as_bytes()).await
        }
        Some(Fault::ApplyThenForeignExpiryThen409) => {
            injected.fetch_add(1, Ordering::SeqCst);
            let path = first_line.split(' ').nth(1).unwrap_or_default();
            let (ns, name) = table_of(path);
            let mut args = services().pyiceberg_args(&format!("{ns}.{name}"));
            args["rows"] = json!([{"id": FOREIGN_ID, "kind": "pyiceberg"}]);
            tokio::task::spawn_blocking(move || read_back("foreign-append-and-expire", args))
                .await
                .expect("the foreign commit ran");
            let body = r#"{"error":{"message":"requirement failed","type":"CommitFailedException","code":409}}"#;
            let answer = format!(
                "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            client.write_all(answer.as_bytes()).await
        }
        Some(Fault::Answer503AfterApplying) => {
            injected.fetch_add(1, Ordering::SeqCst);
            let answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            client.write_all(answer.as_bytes()).await
        }
        _ => client.write_all(&response).await,
    }
}

/// The row another tool appends in `Fault::ApplyThenForeignExpiryThen409`.
const FOREIGN_ID: i64 = 100_000;

/// Namespace and table of a commit's path, `/v1/namespaces/<ns>/tables/<name>`.
fn table_of(path: &str) -> (String, String) {
    let (before, name) = path.rsplit_once("/tables/").expect("a table path");
    let ns = before.rsplit('/').next().unwrap_or_default();
    (ns.to_string(), name.to_string())
}

#[test]
fn lost_or_throttled_commit_answers_never_duplicate_rows() {
    let rt = runtime();
    let faults = vec![
        Fault::LoseResponse,
        Fault::Answer503AfterApplying,
        Fault::Throttle,
        Fault::LoseResponse,
    ];
    let proxy = rt.block_on(FaultProxy::start(services().rest_url.clone(), faults));
    let cfg = rest_config(
        json!({"catalog": {"url": proxy.url}, "namespace": "committer",
        "table": "faults", "commit": {"max_retries": 5},
        "schema_evolution": {"enabled": true, "schema": schema()}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    for b in 0..6 {
        let texts = rows(b * 10, b * 10 + 10);
        let msgs = messages(&texts);
        let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
        assert!(
            out.failures.iter().all(Option::is_none),
            "batch {b}: {:?}",
            out.failures
        );
    }
    assert_eq!(
        proxy.injected.load(Ordering::SeqCst),
        4,
        "every fault was injected"
    );
    let (snapshots, summary) = table_stats(&writer, &rt, "committer.faults");
    assert_eq!(snapshots, 6, "one snapshot per batch, none doubled");
    assert_eq!(summary["total-records"], json!("60"));
    assert_eq!(
        ids_read_back("committer.faults"),
        (0..60).collect::<Vec<_>>()
    );
}

/// Regression (reliability issue, item 1): a commit answered with a redirect was taken
/// as committed (the client followed it to the table, 200) and its rows were lost.
#[test]
fn redirected_commits_are_not_taken_as_committed() {
    let rt = runtime();
    let faults = vec![Fault::Redirect, Fault::Redirect, Fault::Redirect];
    let proxy = rt.block_on(FaultProxy::start(services().rest_url.clone(), faults));
    let cfg = rest_config(
        json!({"catalog": {"url": proxy.url}, "namespace": "committer",
        "table": "redirects", "schema_evolution": {"enabled": true, "schema": schema()}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    let mut refused = 0;
    for b in 0..5 {
        let texts = rows(b * 1000, b * 1000 + 1000);
        let msgs = messages(&texts);
        // Acknowledged means in the table; a failed call is retried as the host would.
        loop {
            match rt.block_on(writer.write_batch(&msgs)) {
                Ok(out) => {
                    assert!(
                        out.failures.iter().all(Option::is_none),
                        "{:?}",
                        out.failures
                    );
                    break;
                }
                Err(e) => {
                    refused += 1;
                    assert!(e.to_string().contains("redirects to http://"), "{e}");
                }
            }
        }
    }
    assert_eq!(
        proxy.injected.load(Ordering::SeqCst),
        3,
        "every redirect was served"
    );
    println!("calls failed by a redirect and retried: {refused}");
    assert_eq!(
        ids_read_back("committer.redirects"),
        (0..5000).collect::<Vec<_>>(),
        "every acknowledged row once"
    );
}

/// A writer on `committer.<table>` behind a fault proxy that injects `faults`.
fn writer_behind(
    rt: &tokio::runtime::Runtime,
    faults: Vec<Fault>,
    table: &str,
) -> (FaultProxy, Writer) {
    writer_behind_with(rt, faults, table, json!({}))
}

/// [`writer_behind`] with a `commit` section.
fn writer_behind_with(
    rt: &tokio::runtime::Runtime,
    faults: Vec<Fault>,
    table: &str,
    commit: serde_json::Value,
) -> (FaultProxy, Writer) {
    let proxy = rt.block_on(FaultProxy::start(services().rest_url.clone(), faults));
    let cfg = rest_config(
        json!({"catalog": {"url": proxy.url}, "namespace": "committer", "table": table,
        "commit": commit, "schema_evolution": {"enabled": true, "schema": schema()}}),
    );
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    (proxy, writer)
}

/// Writes `texts` as one call that must fail as a whole, and returns its error.
fn expect_failed_call(
    rt: &tokio::runtime::Runtime,
    writer: &Writer,
    texts: &[String],
) -> floe::Error {
    let msgs = messages(texts);
    match rt.block_on(writer.write_batch(&msgs)) {
        Err(e) => e,
        Ok(out) => panic!("the call should have failed as a whole, yet returned {out:?}"),
    }
}

/// Regression (attack on the commit path): a "definite" refusal sent after the catalog
/// applied the commit (a proxy re-sending the POST), then a failed reload, deleted the
/// files of the snapshot main pointed at. Until a reload shows the commit absent, its
/// files stay and the outcome is unknown (here the catalog stays down past
/// `retry_timeout`, so floe cannot look).
#[test]
fn a_refusal_that_cannot_be_checked_keeps_the_files() {
    let rt = runtime();
    let (proxy, writer) = writer_behind_with(
        &rt,
        vec![Fault::ApplyThen429AndGoDown],
        "refused_applied",
        json!({"retry_timeout": "2s"}),
    );
    let texts = rows(0, 10);
    let error = expect_failed_call(&rt, &writer, &texts);
    assert_eq!(error.kind(), floe::ErrorKind::CommitStateUnknown, "{error}");
    assert_eq!(proxy.injected.load(Ordering::SeqCst), 1);
    // The commit landed: its rows are readable, so its files are all still there.
    assert_eq!(
        ids_read_back("committer.refused_applied"),
        (0..10).collect::<Vec<_>>()
    );
}

/// Regression (attack on keeping the committer's own table out of the view): a commit
/// that failed while the catalog was down used up the table the committer kept, and the
/// view it fell back to was its table as last published, commits behind. The next call
/// then met a conflict before landing. After such a failure the table is loaded again
/// before the next commit is built.
#[test]
fn a_commit_failed_in_an_outage_is_followed_by_one_on_the_tables_head() {
    commit_after_an_outage("outage_head", None);
}

/// The same with exactly-once, whose commits (each rewriting the writer's record, a
/// table property) the committer now keeps too: the retried call, checked against the
/// record, lands once and on the table's head.
#[test]
fn an_exactly_once_commit_failed_in_an_outage_is_followed_by_one_on_the_tables_head() {
    commit_after_an_outage("outage_head_once", Some("outage-writer"));
}

/// Two commits, a third refused while the catalog goes down for 4 s (the call fails as
/// unknown), then that call retried by the host and one more.
fn commit_after_an_outage(table: &str, writer_id: Option<&str>) {
    let rt = runtime();
    let faults = vec![Fault::Pass, Fault::Pass, Fault::RefuseThenGoDown];
    let mut commit = json!({"retry_timeout": "2s"});
    if let Some(id) = writer_id {
        commit["exactly_once"] = json!({"writer_id": id});
    }
    let (proxy, writer) = writer_behind_with(&rt, faults, table, commit);
    let texts: Vec<Vec<String>> = (0..4).map(|b| rows(b * 10, b * 10 + 10)).collect();
    let batch = |b: usize| match writer_id {
        Some(_) => positioned(&texts[b], "topic/0", b as i64 * 10),
        None => messages(&texts[b]),
    };
    let write = |b: usize| write_messages_ok(&rt, &writer, &batch(b));
    write(0);
    write(1);
    let error = match rt.block_on(writer.write_batch(&batch(2))) {
        Err(e) => e,
        Ok(out) => panic!("the call should have failed as a whole, yet returned {out:?}"),
    };
    assert_eq!(error.kind(), floe::ErrorKind::CommitStateUnknown, "{error}");
    assert_eq!(proxy.injected.load(Ordering::SeqCst), 1);
    std::thread::sleep(std::time::Duration::from_millis(4_500));
    let before = proxy.forwarded.load(Ordering::SeqCst);
    // The host retries the failed call, then goes on.
    write(2);
    write(3);
    assert_eq!(
        proxy.forwarded.load(Ordering::SeqCst) - before,
        2,
        "each commit after the outage sent once, none refused as built on an old head"
    );
    let name = format!("committer.{table}");
    let (snapshots, summary) = table_stats(&writer, &rt, &name);
    assert_eq!(snapshots, 4);
    assert_eq!(summary["total-records"], json!("40"));
    assert_eq!(ids_read_back(&name), (0..40).collect::<Vec<_>>());
}

/// Regression (fault matrix: the REST fixture SIGKILLed mid-run, at-least-once): the
/// catalog applied a commit and went down before answering. floe's one look for the
/// commit failed, the call reported its outcome unknown, and the host wrote the rows
/// again: 400 rows twice. floe now keeps looking, within `commit.retry_timeout`, until
/// the catalog is back, and finds its commit.
#[test]
fn a_commit_applied_before_the_catalog_went_down_is_found_once_it_is_back() {
    let rt = runtime();
    let (proxy, writer) = writer_behind(&rt, vec![Fault::LoseResponseThenGoDown], "went_down");
    let texts = rows(0, 10);
    let out = rt
        .block_on(writer.write_batch(&messages(&texts)))
        .expect("the commit is found once the catalog answers again");
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    assert_eq!(proxy.injected.load(Ordering::SeqCst), 1);
    let (snapshots, summary) = table_stats(&writer, &rt, "committer.went_down");
    assert_eq!(snapshots, 1, "one commit, not retried");
    assert_eq!(summary["total-records"], json!("10"));
    assert_eq!(
        ids_read_back("committer.went_down"),
        (0..10).collect::<Vec<_>>()
    );
}

#[test]
fn files_of_a_refused_commit_are_deleted() {
    let rt = runtime();
    // Refused twice: the first refusal may come from a stale view, so floe reloads and
    // tries once more; the second is final.
    let (proxy, writer) = writer_behind(&rt, vec![Fault::Reject, Fault::Reject], "cleanup");
    let texts = rows(0, 10);
    let msgs = messages(&texts);
    // A refused commit is not the messages' fault: the call fails as a whole.
    let error = expect_failed_call(&rt, &writer, &texts);
    assert!(
        error.to_string().contains("refused by the test proxy"),
        "{error}"
    );
    let location = rt
        .block_on(
            writer
                .catalog()
                .load_table(&table_ident("committer", "cleanup").unwrap()),
        )
        .unwrap()
        .unwrap()
        .metadata
        .location()
        .to_string();
    let list = |dir: &str| -> Vec<String> {
        let out = read_back(
            "s3-list",
            json!({"prefix": format!("{location}/{dir}"), "s3": services().duckdb_s3()}),
        );
        serde_json::from_value(out["rows"].clone()).unwrap()
    };
    assert_eq!(
        list("data"),
        Vec::<String>::new(),
        "data files of the refused commit"
    );
    let avro: Vec<String> = list("metadata")
        .into_iter()
        .filter(|k| k.ends_with(".avro"))
        .collect();
    assert_eq!(
        avro,
        Vec::<String>::new(),
        "manifests of the refused commit"
    );
    // The next batch commits normally, and its files are there.
    let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    assert_eq!(list("data").len(), 1);
    assert_eq!(proxy.injected.load(Ordering::SeqCst), 2);
}

fn positioned<'a>(texts: &'a [String], source: &'a str, first: i64) -> Vec<Message<'a>> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| Message {
            source: Some(source),
            offset: Some(first + i as i64),
            ..Message::insert(t.as_bytes())
        })
        .collect()
}

#[test]
fn exactly_once_replays_write_only_what_is_missing() {
    let rt = runtime();
    let cfg = || {
        rest_config(json!({"namespace": "committer", "table": "exactly_once",
            "commit": {"exactly_once": {"writer_id": "pipeline-a"}},
            "schema_evolution": {"enabled": true, "schema": schema()}}))
    };
    let texts = rows(0, 100);
    {
        let writer = rt.block_on(Writer::open(cfg())).unwrap();
        // Out of order, as under max_in_flight > 1: 50..100 lands before 0..30.
        let out = rt
            .block_on(writer.write_batch(&positioned(&texts[50..], "orders/0", 50)))
            .expect("write call");
        assert_eq!(out.rows_committed, 50);
        let out = rt
            .block_on(writer.write_batch(&positioned(&texts[..30], "orders/0", 0)))
            .expect("write call");
        assert_eq!(out.rows_committed, 30);
        // A repeat within one batch is written once, and both copies are acknowledged.
        let mut twice = positioned(&texts[30..35], "orders/0", 30);
        twice.extend(positioned(&texts[30..35], "orders/0", 30));
        let out = rt.block_on(writer.write_batch(&twice)).expect("write call");
        assert!(
            out.failures.iter().all(Option::is_none),
            "{:?}",
            out.failures
        );
        assert_eq!(out.rows_committed, 5);
    }
    // "Restart": a new writer replays everything from offset 0.
    let writer = rt.block_on(Writer::open(cfg())).unwrap();
    let out = rt
        .block_on(writer.write_batch(&positioned(&texts, "orders/0", 0)))
        .expect("write call");
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    assert_eq!(out.rows_committed, 15, "only 35..50 were missing");
    // The same offsets from another source are other messages.
    let out = rt
        .block_on(writer.write_batch(&positioned(&texts[..3], "orders/1", 0)))
        .expect("write call");
    assert_eq!(out.rows_committed, 3);
    // The record is a table property, committed with the snapshot.
    let table = rt
        .block_on(
            writer
                .catalog()
                .load_table(&table_ident("committer", "exactly_once").unwrap()),
        )
        .unwrap()
        .unwrap();
    let record: Value =
        serde_json::from_str(&table.metadata.properties()["floe.offsets.pipeline-a"]).unwrap();
    assert_eq!(
        record["offsets"],
        json!({"orders/0": [[0, 99]], "orders/1": [[0, 2]]})
    );
    assert_eq!(
        record["snapshot-id"],
        json!(table.metadata.current_snapshot_id().unwrap())
    );
    let ids = ids_read_back("committer.exactly_once");
    let mut want: Vec<i64> = (0..100).chain(0..3).collect();
    want.sort();
    assert_eq!(ids, want);
}

/// Sizes of what a reader must open to plan a scan: the metadata JSON and the head's
/// manifest list, the number of manifests it lists, and the snapshots the table keeps.
fn metadata_footprint(table_dir: &std::path::Path) -> (u64, u64, usize, usize) {
    let metadata_dir = table_dir.join("metadata");
    let mut newest: Option<(std::time::SystemTime, std::path::PathBuf)> = None;
    for e in std::fs::read_dir(&metadata_dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let m = std::fs::metadata(&p).unwrap().modified().unwrap();
            if newest.as_ref().is_none_or(|(t, _)| m > *t) {
                newest = Some((m, p));
            }
        }
    }
    let path = newest.unwrap().1;
    let text = std::fs::read_to_string(&path).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let head = v["current-snapshot-id"].as_i64().unwrap();
    let list = v["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["snapshot-id"].as_i64() == Some(head))
        .unwrap()["manifest-list"]
        .as_str()
        .unwrap()
        .trim_start_matches("file://")
        .to_string();
    let list_size = std::fs::metadata(&list).unwrap().len();
    let manifests = read_back(
        "duckdb-file",
        json!({"metadata": path.display().to_string(),
               "sql": format!("SELECT count(*) AS n FROM read_avro('{list}')")}),
    )["rows"][0]["n"]
        .as_i64()
        .unwrap() as usize;
    let snapshots = v["snapshots"].as_array().unwrap().len();
    (text.len() as u64, list_size, manifests, snapshots)
}

/// Many small commits on the embedded catalog: with manifest merging and snapshot
/// expiry the metadata stops growing, and every row is still there once.
#[test]
fn metadata_stays_bounded_over_many_small_commits() {
    let commits: usize = std::env::var("FLOE_TEST_COMMITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let cfg = json!({
        "catalog": {"warehouse": wh.display().to_string()},
        "namespace": "bounded", "table": "t",
        "schema_evolution": {"enabled": true, "schema": schema()},
        "commit": {"max_snapshot_age": "2s"}
    });
    let rt = runtime();
    let writer = rt
        .block_on(Writer::open(Config::from_json(&cfg.to_string()).unwrap()))
        .unwrap();
    let table_dir = wh.join("bounded").join("t");
    let mut footprints = Vec::new();
    let mut latencies_ms: Vec<f64> = Vec::with_capacity(commits);
    for i in 0..commits as i64 {
        let text = format!(r#"{{"id": {i}, "kind": "k"}}"#);
        let started = std::time::Instant::now();
        let out = rt
            .block_on(writer.write_batch(&[Message::insert(text.as_bytes())]))
            .expect("write call");
        latencies_ms.push(started.elapsed().as_secs_f64() * 1e3);
        assert!(out.failures[0].is_none(), "commit {i}: {:?}", out.failures);
        let done = i as usize + 1;
        if done == commits / 10 || done == commits / 2 || done == commits {
            footprints.push((done, metadata_footprint(&table_dir)));
        }
    }
    let median = |s: &[f64]| {
        let mut v = s.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let first = &latencies_ms[..commits / 10];
    let last = &latencies_ms[commits - commits / 10..];
    eprintln!(
        "commit latency p50: first {}: {:.2} ms, last {}: {:.2} ms",
        first.len(),
        median(first),
        last.len(),
        median(last)
    );
    for (done, (json_bytes, list_bytes, manifests, snapshots)) in &footprints {
        eprintln!(
            "after {done} commits: metadata.json {json_bytes} B, manifest list {list_bytes} B, {manifests} manifests, {snapshots} snapshots kept"
        );
    }
    // Bounded, not growing with the commit count: merges by level cap the manifests at
    // the table's min-count-to-merge (100) plus 9 per level above it (two levels up to
    // 10,000 one-file commits); expiry caps the snapshots kept to those of the last 2 s
    // plus at most 100 waiting for the next expiry round.
    for (done, (json_bytes, list_bytes, manifests, snapshots)) in &footprints {
        assert!(
            *manifests <= 100 + 9 * 2,
            "after {done}: {manifests} manifests"
        );
        assert!(
            *snapshots <= 1_000,
            "after {done}: {snapshots} snapshots kept"
        );
        assert!(
            *json_bytes < 1 << 20,
            "after {done}: metadata.json {json_bytes} B"
        );
        assert!(
            *list_bytes < 64 << 10,
            "after {done}: manifest list {list_bytes} B"
        );
    }
    // Expiry deleted what no kept snapshot reaches: manifest lists and merged-away
    // manifests on disk stay near what the kept snapshots reference.
    let avro_files = std::fs::read_dir(table_dir.join("metadata"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "avro")
        })
        .count();
    eprintln!("{avro_files} manifest and manifest-list files on disk after {commits} commits");
    assert!(
        avro_files < 2_500,
        "{avro_files} avro files left after {commits} commits"
    );
    let count = read_back(
        "pyiceberg-sql",
        json!({"uri": format!("sqlite:///{}", wh.join("catalog.db").display()),
               "warehouse": format!("file://{}", wh.display()), "table": "bounded.t"}),
    )["count"]
        .as_u64()
        .unwrap();
    assert_eq!(count as usize, commits);
}

/// Regression (reliability issue, item 2): offset records were found by walking parent
/// links, so another tool's commit followed by its snapshot expiry erased them and a
/// replay wrote everything again (reproduced: 10,000 rows → 20,001). The record is a
/// table property now.
#[test]
fn exactly_once_survives_another_tools_commit_and_expiry() {
    let rt = runtime();
    let cfg = || {
        rest_config(json!({"namespace": "committer", "table": "eo_foreign",
            "commit": {"exactly_once": {"writer_id": "replayer"}},
            "schema_evolution": {"enabled": true, "schema": schema()}}))
    };
    let texts = rows(0, 1000);
    let write_all = |writer: &Writer| -> usize {
        texts
            .chunks(100)
            .enumerate()
            .map(|(b, chunk)| {
                let out = rt
                    .block_on(writer.write_batch(&positioned(chunk, "events/0", b as i64 * 100)))
                    .expect("write call");
                assert!(
                    out.failures.iter().all(Option::is_none),
                    "{:?}",
                    out.failures
                );
                out.rows_committed
            })
            .sum()
    };
    let writer = rt.block_on(Writer::open(cfg())).unwrap();
    assert_eq!(write_all(&writer), 1000);
    drop(writer);
    let mut args = services().pyiceberg_args("committer.eo_foreign");
    args["rows"] = json!([{"id": 100_000, "kind": "pyiceberg"}]);
    let after = read_back("foreign-append-and-expire", args);
    assert_eq!(
        after["snapshots"],
        json!(1),
        "only pyiceberg's snapshot is left"
    );
    // A restarted pipeline replays its whole input: nothing is written again.
    let writer = rt.block_on(Writer::open(cfg())).unwrap();
    assert_eq!(write_all(&writer), 0, "the replay wrote rows again");
    let mut want: Vec<i64> = (0..1000).collect();
    want.push(100_000);
    assert_eq!(ids_read_back("committer.eo_foreign"), want);
}

/// Writes rows 0..10 through a proxy that applies the first commit, lets another tool
/// commit and expire it, and answers 409; then replays the batch as a host would after
/// an error. Returns the ids in the table and the calls it took.
fn commit_expired_behind_a_conflict(table: &str, exactly_once: bool) -> (Vec<i64>, usize) {
    let rt = runtime();
    let proxy = rt.block_on(FaultProxy::start(
        services().rest_url.clone(),
        vec![Fault::ApplyThenForeignExpiryThen409],
    ));
    let mut extra = json!({"catalog": {"url": proxy.url}, "namespace": "committer",
        "table": table, "schema_evolution": {"enabled": true, "schema": schema()}});
    if exactly_once {
        extra["commit"] = json!({"exactly_once": {"writer_id": "w"}});
    }
    let writer = rt.block_on(Writer::open(rest_config(extra))).unwrap();
    let texts = rows(0, 10);
    let msgs = positioned(&texts, "events/0", 0);
    let mut calls = 0;
    while calls < 3 {
        calls += 1;
        match rt.block_on(writer.write_batch(&msgs)) {
            Ok(out) if out.failures.iter().all(Option::is_none) => break,
            Ok(out) => println!("call {calls}: {:?}", out.failures),
            Err(e) => println!("call {calls}: {e}"),
        }
    }
    assert_eq!(proxy.injected.load(Ordering::SeqCst), 1);
    (ids_read_back(&format!("committer.{table}")), calls)
}

/// Attack on the commit path: the catalog applied a commit but the answer was a
/// "definite" 409, and before floe looked, another tool committed on top and expired
/// floe's snapshot. With exactly-once, the retry found its offsets recorded, took that
/// for another process's commit and deleted the data files the table references.
#[test]
fn an_applied_commit_expired_before_the_retry_keeps_its_files() {
    let mut want: Vec<i64> = (0..10).collect();
    want.push(FOREIGN_ID);
    // The landed commit is found by its files: the first call is acknowledged.
    assert_eq!(
        commit_expired_behind_a_conflict("expired_applied_eo", true),
        (want, 1)
    );
}

/// The same without exactly-once: the retry could not find its expired commit and
/// appended the rows a second time.
#[test]
fn an_applied_commit_expired_before_the_retry_is_not_appended_twice() {
    let mut want: Vec<i64> = (0..10).collect();
    want.push(FOREIGN_ID);
    assert_eq!(
        commit_expired_behind_a_conflict("expired_applied", false),
        (want, 1)
    );
}

/// Regression (reliability issue, item 8): the manifest lists of attempts the catalog
/// refused stayed in storage for good once a later attempt committed. They are deleted;
/// the data files and their manifest, reused by the rebased attempt, stay.
#[test]
fn files_of_refused_attempts_are_deleted_once_a_later_one_lands() {
    let rt = runtime();
    let (proxy, writer) = writer_behind(&rt, vec![Fault::Throttle, Fault::Throttle], "rebased");
    let texts = rows(0, 10);
    let msgs = messages(&texts);
    let out = rt.block_on(writer.write_batch(&msgs)).expect("write call");
    assert!(
        out.failures.iter().all(Option::is_none),
        "{:?}",
        out.failures
    );
    assert_eq!(proxy.injected.load(Ordering::SeqCst), 2);
    let table = rt
        .block_on(
            writer
                .catalog()
                .load_table(&table_ident("committer", "rebased").unwrap()),
        )
        .unwrap()
        .unwrap();
    let listed = read_back(
        "s3-list",
        json!({"prefix": format!("{}/metadata", table.metadata.location()), "s3": services().duckdb_s3()}),
    );
    let keys: Vec<String> = serde_json::from_value(listed["rows"].clone()).unwrap();
    let avro: Vec<String> = keys.into_iter().filter(|k| k.ends_with(".avro")).collect();
    let lists: Vec<&String> = avro.iter().filter(|k| k.contains("/snap-")).collect();
    let head_list = table.metadata.current_snapshot().unwrap().manifest_list();
    assert_eq!(
        lists.len(),
        1,
        "only the committed manifest list is left: {avro:?}"
    );
    assert!(head_list.ends_with(lists[0].rsplit('/').next().unwrap()));
    assert_eq!(
        avro.len(),
        2,
        "the committed list and the data manifest: {avro:?}"
    );
    assert_eq!(
        ids_read_back("committer.rebased"),
        (0..10).collect::<Vec<_>>()
    );
}

/// A catalog that refuses a merge-on-read commit (some refuse equality-delete files, e.g.
/// Unity Catalog) gets an error that names the way out: copy-on-write.
#[test]
fn a_refused_equality_delete_commit_names_copy_on_write() {
    let rt = runtime();
    let proxy = rt.block_on(FaultProxy::start(
        services().rest_url.clone(),
        vec![Fault::Reject, Fault::Reject],
    ));
    let cfg = rest_config(json!({
        "catalog": {"url": proxy.url}, "namespace": "committer", "table": "refused_mor",
        "identifier_fields": ["id"], "merge_strategy": "merge-on-read",
        "schema_evolution": {"enabled": true, "schema": schema()}}));
    let writer = rt.block_on(Writer::open(cfg)).unwrap();
    let texts = rows(0, 3);
    let msgs: Vec<Message> = texts
        .iter()
        .map(|t| Message {
            operation: Some("upsert"),
            ..Message::insert(t.as_bytes())
        })
        .collect();
    let error = match rt.block_on(writer.write_batch(&msgs)) {
        Err(e) => e,
        Ok(out) => panic!("the call should have failed as a whole, yet returned {out:?}"),
    };
    assert_eq!(error.kind(), floe::ErrorKind::Rejected, "{error}");
    assert!(
        error.to_string().contains("merge_strategy: copy-on-write"),
        "{error}"
    );
    // Inserts are not told to change strategy.
    let (_proxy, writer) = writer_behind(&rt, vec![Fault::Reject, Fault::Reject], "refused_insert");
    let error = expect_failed_call(&rt, &writer, &rows(0, 3));
    assert!(!error.to_string().contains("copy-on-write"), "{error}");
}

/// Commits update floe's view of the table locally, so a tag another tool made mid-run
/// is not in it. floe's next expiry round must still see the tag (it reloads first):
/// expiring the tagged snapshot would make the catalog drop the tag and floe delete its
/// files.
#[test]
fn a_tag_made_by_another_tool_mid_run_survives_floes_expiry() {
    let rt = runtime();
    let table = &format!("committer.tagged_mid_run_{}", std::process::id());
    let writer = rt
        .block_on(Writer::open(rest_config(json!({
            "namespace": "committer", "table": format!("tagged_mid_run_{}", std::process::id()),
            "commit": {"max_snapshots": 2},
            "schema_evolution": {"enabled": true, "schema": schema()}}))))
        .unwrap();
    let write = |from: i64| {
        support::write_ok(&rt, &writer, &rows(from, from + 10));
    };
    // Past floe's cap of 2 snapshots: the writer's first expiry round runs in here, so
    // the next one waits for 100 snapshots due (or a minute).
    for call in 0..3 {
        write(call * 10);
    }
    let mut args = services().pyiceberg_args(table);
    args["tag"] = json!("keep");
    let tagged = read_back("tag-head", args.clone())["snapshot_id"].clone();
    let calls = 106;
    for call in 3..calls {
        write(call * 10);
    }
    let (snapshots, _) = table_stats(&writer, &rt, table);
    assert!(
        snapshots < 100,
        "the second expiry round did not run ({snapshots} snapshots)"
    );
    args["ref"] = json!("keep");
    let after = read_back("at-ref", args);
    assert_eq!(after["refs"]["keep"], tagged, "the tag is gone: {after}");
    assert_eq!(after["ids"], json!((0..30).collect::<Vec<_>>()), "{after}");
    assert_eq!(ids_read_back(table), (0..calls * 10).collect::<Vec<i64>>());
}

/// Another tool moves the table's location mid-run. floe's first commit after the move
/// is built on its view from before (nothing told it yet), but that commit's answer
/// states the new location, so the next snapshot's manifests go under it.
#[test]
fn a_location_moved_by_another_tool_mid_run_is_followed() {
    let rt = runtime();
    let name = format!("moved_mid_run_{}", std::process::id());
    let table = &format!("committer.{name}");
    let writer = rt
        .block_on(Writer::open(rest_config(json!({
            "namespace": "committer", "table": name,
            "schema_evolution": {"enabled": true, "schema": schema()}}))))
        .unwrap();
    support::write_ok(&rt, &writer, &rows(0, 10));
    let mut args = services().pyiceberg_args(table);
    let before = read_back("head-manifest-list", args.clone());
    let moved = format!("{}_moved", before["location"].as_str().unwrap());
    args["location"] = json!(moved);
    assert_eq!(
        read_back("move-location", args.clone())["location"],
        json!(moved)
    );
    support::write_ok(&rt, &writer, &rows(10, 20));
    support::write_ok(&rt, &writer, &rows(20, 30));
    let after = read_back("head-manifest-list", args);
    let list = after["manifest_list"].as_str().unwrap();
    assert!(
        list.starts_with(&format!("{moved}/")),
        "the manifest list {list} is not under the moved location {moved}"
    );
    assert_eq!(ids_read_back(table), (0..30).collect::<Vec<i64>>());
}

/// Regression (scale-out bench): a writer retrying after conflicts loaded the head, then
/// waited its backoff (up to a second), then built on that head. With other writers
/// committing every few tens of milliseconds, every attempt built on a stale head
/// conflicted again: four writers took turns, each starved for up to 26 s. The wait now
/// comes before the look, so each attempt builds on a head loaded just before it.
#[test]
fn a_writer_retrying_conflicts_is_not_starved_by_steady_competitors() {
    let rt = runtime();
    let name = format!("steady_competitors_{}", std::process::id());
    let table = format!("committer.{name}");
    let open = |retry_timeout: &str| {
        rt.block_on(Writer::open(rest_config(json!({
            "namespace": "committer", "table": name,
            "schema_evolution": {"enabled": true, "schema": schema()},
            "commit": {"retry_timeout": retry_timeout}}))))
            .unwrap()
    };
    let subject = open("20s");
    support::write_ok(&rt, &subject, &rows(0, 1));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Three writers, each committing a row about every 30 ms (plus its commit's time).
    let competitors: Vec<_> = (0..3i64)
        .map(|c| {
            let (competitor, stop) = (open("2m"), stop.clone());
            rt.spawn(async move {
                let first = 1_000_000 * (c + 1);
                let mut next = first;
                while !stop.load(Ordering::SeqCst) {
                    let texts = rows(next, next + 1);
                    let out = competitor.write_batch(&messages(&texts)).await.unwrap();
                    assert!(
                        out.failures.iter().all(Option::is_none),
                        "{:?}",
                        out.failures
                    );
                    next += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                }
                first..next
            })
        })
        .collect();
    let mut conflicts = 0u32;
    let started = std::time::Instant::now();
    for call in 0..8i64 {
        let texts = rows(1 + call * 10, 11 + call * 10);
        match rt.block_on(subject.write_batch(&messages(&texts))) {
            Ok(out) if out.failures.iter().all(Option::is_none) => {}
            other => panic!("call {call} failed beside steady competitors: {other:?}"),
        }
        conflicts += subject
            .drain_events(1000)
            .iter()
            .map(|e| e.conflicts)
            .sum::<u32>();
    }
    let took = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let mut want: Vec<i64> = (0..81).collect();
    let mut competed = 0;
    for c in competitors {
        let ids = rt.block_on(c).unwrap();
        competed += ids.end - ids.start;
        want.extend(ids);
    }
    println!("8 calls in {took:?} beside {competed} competing commits: {conflicts} conflicts");
    assert_eq!(ids_read_back(&table), want);
}

/// A writer whose table another writer keeps committing to loads the head before each
/// commit instead of building on its own last one, which the catalog would refuse for
/// certain. The two take strict turns, so the count is exact: one conflict, the first.
#[test]
fn a_writer_loads_the_head_first_while_another_keeps_committing() {
    let rt = runtime();
    let name = format!("takes_turns_{}", std::process::id());
    let table = format!("committer.{name}");
    let open = || {
        rt.block_on(Writer::open(rest_config(json!({
            "namespace": "committer", "table": name,
            "schema_evolution": {"enabled": true, "schema": schema()}}))))
            .unwrap()
    };
    let (subject, other) = (open(), open());
    support::write_ok(&rt, &subject, &rows(0, 1));
    subject.drain_events(1000);
    let mut conflicts = Vec::new();
    for turn in 1..=10i64 {
        support::write_ok(&rt, &other, &rows(1000 + turn, 1001 + turn));
        support::write_ok(&rt, &subject, &rows(turn, turn + 1));
        let events = subject.drain_events(1000);
        conflicts.push(events.iter().map(|e| e.conflicts).sum::<u32>());
    }
    // The first turn finds out that another writer commits; every later one loads first.
    assert_eq!(conflicts, [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut want: Vec<i64> = (0..=10).chain(1001..=1010).collect();
    want.sort();
    assert_eq!(ids_read_back(&table), want);
}

/// Upserts of `texts`, one message each.
fn upserts(texts: &[String]) -> Vec<Message<'_>> {
    texts
        .iter()
        .map(|t| Message {
            operation: Some("upsert"),
            ..Message::insert(t.as_bytes())
        })
        .collect()
}

/// Regression (scale-out bench, issue 39): a writer paced by conflicts holds its next
/// commit, but upsert calls that arrived during the hold were each encoded as a group
/// of their own, and groups carrying deletes cannot share a snapshot. The hold then ended
/// in a burst of one commit per call, each one another writer could refuse, so pacing
/// did nothing for upserts. Now the encoder gathers the calls of a hold into one group.
///
/// The proxy refuses each of the first commits four times (as a crowd of other writers
/// would), which paces the writer; six ordered calls then arrive 40 ms apart inside the
/// hold, each upserting key 0 and a key of its own.
#[test]
fn upserts_held_by_commit_pacing_land_as_one_snapshot() {
    let rt = runtime();
    const PRIMING: i64 = 7;
    let mut faults = Vec::new();
    for _ in 0..PRIMING {
        faults.extend([Fault::Conflict; 4]);
        faults.push(Fault::Pass);
    }
    let proxy = rt.block_on(FaultProxy::start(services().rest_url.clone(), faults));
    let name = format!("paced_upserts_{}", std::process::id());
    let table = format!("committer.{name}");
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "v", "required": false, "type": "string"}
    ]});
    let cfg = rest_config(
        json!({"catalog": {"url": proxy.url}, "namespace": "committer",
        "table": name, "identifier_fields": ["id"], "merge_strategy": "merge-on-read",
        "commit": {"retry_timeout": "60s"},
        "schema_evolution": {"enabled": true, "schema": schema}}),
    );
    let writer = Arc::new(rt.block_on(Writer::open(cfg)).unwrap());
    for i in 0..PRIMING {
        let texts = [format!(r#"{{"id": {i}, "v": "primed-{i}"}}"#)];
        write_messages_ok(&rt, &writer, &upserts(&texts));
    }
    // Six ordered calls, 10 ms apart: far more than an unheld gathering waits for (1 ms),
    // and all in well within the hold (at least 1 s after the last commit started).
    const HELD: i64 = 6;
    let calls: Vec<_> = (0..HELD)
        .map(|k| {
            let ticket = writer.arrive();
            let writer = writer.clone();
            rt.spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(10 * k as u64)).await;
                let texts = [
                    format!(r#"{{"id": 0, "v": "held-{k}"}}"#),
                    format!(r#"{{"id": {}, "v": "held-{k}"}}"#, 1 + k),
                ];
                support::write_ordered_call(&writer, ticket, &upserts(&texts), |_| {}).await
            })
        })
        .collect();
    for call in calls {
        rt.block_on(call).unwrap().unwrap();
    }
    let events: Vec<_> = writer
        .drain_events(1000)
        .into_iter()
        .filter(|e| e.kind == floe::stats::EventKind::Committed)
        .collect();
    let conflicts: Vec<_> = events.iter().map(|e| e.conflicts).collect();
    let paced: Vec<_> = events.iter().map(|e| e.paced).collect();
    // Each priming commit met its four conflicts: the writer's spacing is at its cap.
    assert_eq!(conflicts[..PRIMING as usize], [4; PRIMING as usize]);
    // Then one commit, held by pacing, for the six calls.
    assert_eq!(
        events.len(),
        PRIMING as usize + 1,
        "the six held calls landed as one snapshot (conflicts {conflicts:?}, paced {paced:?})"
    );
    assert!(!paced[PRIMING as usize].is_zero(), "{paced:?}");
    let (snapshots, _) = table_stats(&writer, &rt, &table);
    assert_eq!(snapshots, PRIMING as usize + 1);
    // Every key once, with its last value; key 0 with the last call's.
    let loaded = rt
        .block_on(
            writer
                .catalog()
                .load_table(&table_ident("committer", &name).unwrap()),
        )
        .unwrap()
        .unwrap();
    let duck = json!({"metadata": loaded.metadata_location.unwrap(),
        "s3": services().duckdb_s3(), "sql": "SELECT id, v FROM $T"});
    let mut want: Vec<(i64, String)> = vec![(0, format!("held-{}", HELD - 1))];
    want.extend((1..=HELD).map(|i| (i, format!("held-{}", i - 1))));
    want.extend((HELD + 1..PRIMING).map(|i| (i, format!("primed-{i}"))));
    let rows = |out: Value| support::id_values(out["rows"].as_array().unwrap().clone());
    assert_eq!(rows(read_back("duckdb-s3", duck)), want, "DuckDB");
    let java = read_back("java-rest", services().pyiceberg_args(&table));
    assert_eq!(rows(java), want, "Iceberg's Java reader");
}
