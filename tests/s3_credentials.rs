//! S3 credentials from AWS's default chain are fetched once per `FileIO` and kept while
//! they live, not fetched again for every file as iceberg-storage-opendal's storage
//! does, and fetched again when storage refuses them.
//!
//! No keys are configured; the container credentials endpoint (as ECS and EKS Pod
//! Identity set it, `AWS_CONTAINER_CREDENTIALS_FULL_URI`) is a local server that also
//! stands in for S3. SeaweedFS cannot serve here: it refuses its static keys when a
//! session token comes with them, and the container endpoint always hands one out.
//! This file holds one test, so its process's environment is its own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY_ID: &str = "ASIAFLOECONTAINERKEY";
const POD_TOKEN: &str = "pod-identity-token";

/// What the stand-in saw.
#[derive(Default)]
struct Seen {
    credential_fetches: AtomicUsize,
    puts: Mutex<Vec<String>>,
    /// How many of the next uploads to refuse as S3 refuses expired keys.
    refuse_puts: AtomicUsize,
}

/// One request: its first line and headers (lower-cased names), after reading its body.
async fn read_request(
    socket: &mut tokio::net::TcpStream,
) -> Option<(String, Vec<(String, String)>)> {
    let mut text = Vec::new();
    let mut buf = [0u8; 8192];
    let end = loop {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        text.extend_from_slice(&buf[..n]);
        if let Some(at) = text.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&text[..end]).to_string();
    let mut lines = head.split("\r\n");
    let first = lines.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = text.len() - end;
    while body < length {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        body += n;
    }
    Some((first, headers))
}

/// Serves the container credentials endpoint at `/creds` and accepts every S3 request.
async fn stand_in(seen: Arc<Seen>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let Some((first, headers)) = read_request(&mut socket).await else {
                    return;
                };
                let header = |name: &str| {
                    headers
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                let (status, body) = if first.starts_with("GET /creds ") {
                    seen.credential_fetches.fetch_add(1, Ordering::SeqCst);
                    if header("authorization") != POD_TOKEN {
                        ("403 Forbidden", String::new())
                    } else {
                        let expires = chrono::Utc::now() + chrono::Duration::hours(1);
                        let body = serde_json::json!({
                            "AccessKeyId": KEY_ID,
                            "SecretAccessKey": "container-secret",
                            "Token": "container-session-token",
                            "Expiration": expires.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                        });
                        ("200 OK", body.to_string())
                    }
                } else if first.starts_with("PUT ") {
                    let refuse = seen
                        .refuse_puts
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if refuse {
                        let code =
                            "<Error><Code>ExpiredToken</Code><Message>expired</Message></Error>";
                        ("400 Bad Request", code.to_string())
                    } else {
                        seen.puts.lock().unwrap().push(header("authorization"));
                        ("200 OK", String::new())
                    }
                } else {
                    ("200 OK", String::new())
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\netag: \"e\"\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    endpoint
}

#[tokio::test]
async fn container_credentials_are_fetched_once_for_many_files_and_again_after_a_refusal() {
    let seen = Arc::new(Seen::default());
    let endpoint = stand_in(seen.clone()).await;
    // SAFETY: this file's only test sets its process's environment before anything
    // reads it (no other test shares the process).
    unsafe {
        for name in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_ROLE_ARN",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        ] {
            std::env::remove_var(name);
        }
        std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials");
        std::env::set_var("AWS_CONFIG_FILE", "/nonexistent/config");
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
        std::env::set_var(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{endpoint}/creds"),
        );
        std::env::set_var("AWS_CONTAINER_AUTHORIZATION_TOKEN", POD_TOKEN);
    }
    let props: std::collections::HashMap<String, String> = [
        ("s3.endpoint", endpoint.as_str()),
        ("s3.region", "us-east-1"),
        ("s3.path-style-access", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();

    // iceberg-storage-opendal's own storage, for comparison: a fetch per file.
    let theirs = iceberg::io::FileIOBuilder::new(Arc::new(
        iceberg_storage_opendal::OpenDalResolvingStorageFactory::new(),
    ))
    .with_props(props.clone())
    .build();
    write_files(&theirs, "theirs").await;
    assert_eq!(seen.puts.lock().unwrap().len(), 11);
    assert_eq!(seen.credential_fetches.swap(0, Ordering::SeqCst), 11);
    seen.puts.lock().unwrap().clear();

    let file_io = floe::storage::build_file_io(props);
    write_files(&file_io, "floe").await;
    let puts = seen.puts.lock().unwrap().clone();
    assert_eq!(puts.len(), 11, "every file uploaded");
    assert!(
        puts.iter().all(|auth| auth.contains(KEY_ID)),
        "signed with the fetched keys: {puts:?}"
    );
    assert_eq!(
        seen.credential_fetches.load(Ordering::SeqCst),
        1,
        "fetched once, not per file"
    );

    // Storage refuses the keys (expired early, say): the refusal is floe's to see, and
    // the next upload fetches them again.
    seen.refuse_puts.store(1, Ordering::SeqCst);
    let refused = file_io
        .new_output("s3://lake/wh/t/data/refused.parquet")
        .unwrap()
        .write(Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    let refusal = floe::Error::from(refused);
    assert!(floe::storage::is_credential_refusal(&refusal), "{refusal}");
    let file = file_io
        .new_output("s3://lake/wh/t/data/after.parquet")
        .unwrap();
    file.write(Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(seen.credential_fetches.load(Ordering::SeqCst), 2);
}

/// Ten files by whole-object writes and one through a writer, under `dir`.
async fn write_files(file_io: &iceberg::io::FileIO, dir: &str) {
    for n in 0..10 {
        let path = format!("s3://lake/{dir}/t/data/{n}.parquet");
        let file = file_io.new_output(&path).unwrap();
        file.write(Bytes::from(vec![b'x'; 100])).await.unwrap();
    }
    let mut writer = file_io
        .new_output(format!("s3://lake/{dir}/t/metadata/m.avro"))
        .unwrap()
        .writer()
        .await
        .unwrap();
    writer.write(Bytes::from_static(b"manifest")).await.unwrap();
    writer.close().await.unwrap();
}
