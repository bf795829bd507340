use super::*;
use iceberg_catalog_rest::StorageCredential;

fn credential(prefix: &str, key: &str) -> StorageCredential {
    StorageCredential {
        prefix: prefix.into(),
        config: [("s3.access-key-id".to_string(), key.to_string())].into(),
    }
}

/// A commit answer of `snapshots` snapshots after the checked fields, as Java's
/// catalogs order them.
fn big_answer(snapshots: usize) -> String {
    let snapshot = r#"{"snapshot-id":5,"summary":{"operation":"append"}}"#;
    format!(
        r#"{{"metadata-location":"l","metadata":{{"format-version":2,"table-uuid":"u","location":"l","current-snapshot-id":5,"properties":{{}},"refs":{{}},"last-sequence-number":123,"snapshots":[{}]}}}}"#,
        vec![snapshot; snapshots].join(",")
    )
}

/// How a served answer says where its body ends.
#[derive(Clone, Copy)]
enum Framing {
    ContentLength,
    Chunked,
    /// No length: the body ends where the server closes the connection.
    CloseDelimited,
}

/// Serves `body` once on 127.0.0.1 in 1 KB writes, then, if `cut`, closes the
/// connection 64 KB into the body; returns the answer as floe reads it.
async fn served_answer(body: String, cut: bool) -> CommitAnswer {
    served_answer_framed(body, cut, Framing::ContentLength).await
}

async fn served_answer_framed(body: String, cut: bool, framing: Framing) -> CommitAnswer {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 4096];
        let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut request).await;
        let length = match framing {
            Framing::ContentLength => format!("content-length: {}", body.len()),
            Framing::Chunked => "transfer-encoding: chunked".to_string(),
            Framing::CloseDelimited => "connection: close".to_string(),
        };
        let header =
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{length}\r\n\r\n");
        socket.write_all(header.as_bytes()).await.unwrap();
        for (n, piece) in body.as_bytes().chunks(1024).enumerate() {
            if cut && n == 64 {
                return;
            }
            let framed = match framing {
                Framing::ContentLength | Framing::CloseDelimited => piece.to_vec(),
                Framing::Chunked => {
                    [format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat()
                }
            };
            if socket.write_all(&framed).await.is_err() {
                return;
            }
        }
        if let Framing::Chunked = framing {
            let _ = socket.write_all(b"0\r\n\r\n").await;
        }
    });
    CommitAnswer::new(reqwest::get(url).await.unwrap())
}

/// Bytes of the answer taken from the connection so far.
fn taken(answer: &CommitAnswer) -> usize {
    answer.read.len() + answer.past_head.iter().map(|c| c.len()).sum::<usize>()
}

#[tokio::test]
async fn a_long_answer_is_read_only_to_its_checked_fields_and_whole_on_demand() {
    let body = big_answer(40_000);
    assert!(body.len() > 1 << 20);
    let mut answer = served_answer(body.clone(), false).await;
    let head = answer.head(true).await.unwrap().unwrap();
    assert_eq!(head, AnswerHead::scan(body.as_bytes()).unwrap());
    assert_eq!(head.last_sequence_number, Some(123));
    // Its length said more than READ_ON_AFTER_HEAD was left: nothing is read on.
    assert!(answer.past_head.is_empty());
    assert!(taken(&answer) < 64 << 10, "read {} B", taken(&answer));
    // Disagreeing with the answer needs all of it: still there to read.
    assert_eq!(answer.whole().await.unwrap(), body.as_bytes());
}

#[tokio::test]
async fn a_long_answer_of_unknown_length_is_read_on_only_so_far() {
    let body = big_answer(40_000);
    let mut answer = served_answer_framed(body.clone(), false, Framing::Chunked).await;
    assert!(answer.head(true).await.unwrap().is_some());
    let past_head = taken(&answer) - answer.read.len();
    assert!(
        (READ_ON_AFTER_HEAD..READ_ON_AFTER_HEAD + (64 << 10)).contains(&past_head),
        "read on {past_head} B"
    );
    assert!(answer.rest.is_some(), "the rest is left unread");
    assert_eq!(answer.whole().await.unwrap(), body.as_bytes());
}

#[tokio::test]
async fn an_answer_its_table_says_is_long_is_not_read_on() {
    let body = big_answer(40_000);
    let mut answer = served_answer_framed(body.clone(), false, Framing::Chunked).await;
    // As commit_on asks for a table whose snapshots say so.
    assert!(answer.head(false).await.unwrap().is_some());
    assert!(answer.past_head.is_empty());
    assert_eq!(answer.whole().await.unwrap(), body.as_bytes());
}

/// The fixture table with `count` snapshots, each the child of the one before.
fn table_with_snapshots(count: usize) -> LoadedTable {
    let mut json: serde_json::Value =
        serde_json::from_str(include_str!("../../testdata/two_snapshots.json")).unwrap();
    let first = json["snapshots"][0].clone();
    let base_id = first["snapshot-id"].as_i64().unwrap();
    let snapshots: Vec<serde_json::Value> = (0..count as i64)
        .map(|n| {
            let mut s = first.clone();
            s["snapshot-id"] = (base_id + n).into();
            s["sequence-number"] = (n + 1).into();
            if n == 0 {
                s.as_object_mut().unwrap().remove("parent-snapshot-id");
            } else {
                s["parent-snapshot-id"] = (base_id + n - 1).into();
            }
            s
        })
        .collect();
    json["snapshots"] = snapshots.into();
    json["current-snapshot-id"] = (base_id + count as i64 - 1).into();
    json["last-sequence-number"] = (count as i64).into();
    json["refs"] =
        serde_json::json!({"main": {"snapshot-id": base_id + count as i64 - 1, "type": "branch"}});
    let metadata: iceberg::spec::TableMetadata = serde_json::from_value(json).unwrap();
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    LoadedTable::new(ident, None, std::sync::Arc::new(metadata), HashMap::new())
}

#[test]
fn a_table_of_many_snapshots_answers_beyond_what_is_read_on() {
    assert!(!answer_outgrows_read_on(&table_with_snapshots(2)));
    assert!(!answer_outgrows_read_on(&table_with_snapshots(1_600)));
    let long = table_with_snapshots(1_700);
    assert!(answer_outgrows_read_on(&long));
    // The bound holds for the fixture's minimal snapshots: its answer is longer.
    let answer = serde_json::to_string(long.metadata.as_ref()).unwrap();
    assert!(answer.len() > READ_ON_AFTER_HEAD, "{} B", answer.len());
}

#[tokio::test]
async fn a_short_answer_is_read_to_its_end() {
    // Past its checked fields, less than READ_ON_AFTER_HEAD is left: read to the end
    // (its connection is reused), whether or not its length was given.
    let body = big_answer(4_000);
    assert!(body.len() > 128 << 10 && body.len() < READ_ON_AFTER_HEAD);
    for framing in [Framing::ContentLength, Framing::Chunked] {
        let mut answer = served_answer_framed(body.clone(), false, framing).await;
        assert!(answer.head(true).await.unwrap().is_some());
        assert!(answer.rest.is_none(), "a small answer is read to its end");
        assert_eq!(answer.whole().await.unwrap(), body.as_bytes());
    }
}

#[tokio::test]
async fn an_answer_cut_short_is_an_unknown_outcome() {
    // Cut before the checked fields end: no head, and the outcome is unknown.
    let mut answer = served_answer(" ".repeat(100_000) + &big_answer(10), true).await;
    let e = answer.head(true).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CommitStateUnknown);
    // Cut after them: the head stands; the whole answer is unknown, and says why.
    let mut answer = served_answer(big_answer(40_000), true).await;
    assert!(answer.head(true).await.unwrap().is_some());
    let e = answer.whole().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CommitStateUnknown);
    assert!(e.message().contains("commit"), "{e}");
}

#[tokio::test]
async fn an_answer_ending_inside_a_checked_number_is_no_answer() {
    // Without a length, a connection cut inside `"last-sequence-number":123` looks
    // like the answer's end: 12 must not be taken for the catalog's word.
    let whole = big_answer(0);
    let cut = &whole[..whole.find("123").unwrap() + 2];
    let mut answer = served_answer_framed(cut.to_string(), false, Framing::CloseDelimited).await;
    assert_eq!(answer.head(true).await.unwrap(), None);
    // The same framing, uncut, is read as usual.
    let mut answer = served_answer_framed(whole.clone(), false, Framing::CloseDelimited).await;
    assert_eq!(
        answer
            .head(true)
            .await
            .unwrap()
            .unwrap()
            .last_sequence_number,
        Some(123)
    );
    assert_eq!(answer.whole().await.unwrap(), whole.as_bytes());
}

#[test]
fn the_longest_prefix_of_the_table_location_picks_the_credentials() {
    let config: HashMap<String, String> =
        [("s3.endpoint".to_string(), "http://s3".to_string())].into();
    let offered = vec![
        credential("s3://lake/", "bucket-wide"),
        credential("s3://lake/wh/ns/t", "table"),
        credential("s3://other/", "elsewhere"),
    ];
    let props = table_io_props(config.clone(), offered, "s3://lake/wh/ns/t");
    assert_eq!(props["s3.access-key-id"], "table");
    assert_eq!(props["s3.endpoint"], "http://s3");
    assert!(covers("s3://lake/wh/ns/t/", "s3://lake/wh/ns/t"));
    assert!(covers("s3a://lake/wh", "s3://lake/wh/ns/t"));
    assert!(!covers("s3://lake/wh/ns/t", "s3://lake/wh/ns/tx"));
    assert!(covers("", "s3://lake/t"));
    let none_fits = table_io_props(config, vec![credential("s3://other/", "x")], "s3://lake/t");
    assert!(!none_fits.contains_key("s3.access-key-id"));
}

#[test]
fn refused_properties_are_those_the_refusal_names() {
    let asked: HashMap<String, String> = [
        "write.update.mode",
        "write.metadata.delete-after-commit.enabled",
        "write.metadata.delete-after-commit.enabled.x",
    ]
    .iter()
    .map(|k| (k.to_string(), "v".to_string()))
    .collect();
    let message = "create table t: HTTP 400 Bad Request: Table properties \
                   ['write.metadata.delete-after-commit.enabled'] are prohibited";
    assert_eq!(
        refused_properties(message, &asked),
        vec!["write.metadata.delete-after-commit.enabled".to_string()]
    );
    assert!(refused_properties("Invalid schema", &asked).is_empty());
}

#[test]
fn vended_credentials_are_asked_for_unless_the_config_says_otherwise() {
    let mut headers = reqwest::header::HeaderMap::new();
    ask_for_vended_credentials(&mut headers);
    assert_eq!(headers[ACCESS_DELEGATION], "vended-credentials");
    let mut own = reqwest::header::HeaderMap::new();
    own.insert(
        "X-Iceberg-Access-Delegation",
        "remote-signing".parse().unwrap(),
    );
    ask_for_vended_credentials(&mut own);
    assert_eq!(own[ACCESS_DELEGATION], "remote-signing");
    let mut off = reqwest::header::HeaderMap::new();
    off.insert("X-Iceberg-Access-Delegation", "".parse().unwrap());
    ask_for_vended_credentials(&mut off);
    assert!(off.get(ACCESS_DELEGATION).is_none());
}

#[test]
fn multi_table_commits_are_offered_when_listed_or_when_no_endpoints_are() {
    let listed = |e: &[&str]| e.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(offers_commit_transaction(None).is_ok());
    let fixture = listed(&[
        "GET /v1/{prefix}/namespaces",
        "POST  /v1/{prefix}/transactions/commit",
    ]);
    assert!(offers_commit_transaction(Some(&fixture)).is_ok());
    let without = listed(&[
        "GET /v1/{prefix}/namespaces",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    ]);
    let e = offers_commit_transaction(Some(&without)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("commit.atomic_tables"), "{e}");
}
