//! S3 through one opendal operator per bucket, kept as long as the `FileIO` that made it.
//!
//! iceberg-storage-opendal builds a new operator for every file operation: a new S3
//! backend, credential chain and request signer, dropped after the one request. At
//! floe's three uploads per commit, building and dropping them was about a quarter of
//! the CPU floe spent in S3 (perf, 2026-12-02), and credentials that are not static keys
//! (instance metadata, profiles, web identity, assumed roles) were fetched again for
//! every file. [`FloeStorage`] builds each bucket's operator once, with the timeout and
//! retry layers iceberg-storage-opendal puts on its own, from the very `S3Config` that
//! crate derives from the FileIO properties: read back through its serialised form, so
//! the two cannot drift apart. Paths of other schemes go to iceberg-storage-opendal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use iceberg_storage_opendal::{OpenDalResolvingStorageFactory, OpenDalStorageFactory};
use opendal::Operator;
use opendal::layers::{RetryLayer, TimeoutLayer};
use opendal::services::S3Config;
use serde::{Deserialize, Serialize};

/// Builds a [`FloeStorage`] per `FileIO`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FloeStorageFactory;

#[typetag::serde]
impl StorageFactory for FloeStorageFactory {
    fn build(&self, config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(FloeStorage::new(config.props().clone())))
    }
}

/// S3 paths through cached per-bucket operators; other paths through
/// iceberg-storage-opendal. Cheap to clone: every file handed out shares the cache.
#[derive(Clone, Serialize, Deserialize)]
#[serde(from = "StorageProps", into = "StorageProps")]
pub struct FloeStorage {
    shared: Arc<Shared>,
}

struct Shared {
    props: HashMap<String, String>,
    /// iceberg-storage-opendal's storage, for paths that are not S3.
    others: OnceLock<Arc<dyn Storage>>,
    /// The S3 settings iceberg-storage-opendal reads from `props`.
    s3_config: OnceLock<S3Config>,
    /// Operators by bucket.
    operators: Mutex<HashMap<String, Operator>>,
}

/// The serialised form: the FileIO properties, from which the rest is rebuilt.
#[derive(Serialize, Deserialize)]
struct StorageProps {
    props: HashMap<String, String>,
}

impl From<StorageProps> for FloeStorage {
    fn from(form: StorageProps) -> Self {
        FloeStorage::new(form.props)
    }
}

impl From<FloeStorage> for StorageProps {
    fn from(storage: FloeStorage) -> Self {
        StorageProps {
            props: storage.shared.props.clone(),
        }
    }
}

/// Names the properties only: their values hold credentials.
impl std::fmt::Debug for FloeStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<&String> = self.shared.props.keys().collect();
        keys.sort();
        f.debug_struct("FloeStorage")
            .field("props (values redacted)", &keys)
            .finish()
    }
}

/// Where an S3 file is.
#[derive(Debug, PartialEq)]
struct S3Path<'p> {
    bucket: &'p str,
    key: &'p str,
}

/// `path` split as iceberg-storage-opendal splits it, for the schemes it serves as S3;
/// `None` for other paths. Its rule: the path starts with `{scheme}://{host}/` as a URL
/// parser reads them, or is refused.
fn s3_path(path: &str) -> Option<Result<S3Path<'_>>> {
    let url = url::Url::parse(path).ok()?;
    let scheme = url.scheme();
    if !matches!(scheme, "s3" | "s3a" | "s3n") {
        return None;
    }
    let Some(bucket) = url.host_str().filter(|b| !b.is_empty()) else {
        return Some(Err(Error::new(
            ErrorKind::DataInvalid,
            format!("Invalid s3 url: {path}, missing bucket"),
        )));
    };
    let prefix = format!("{scheme}://{bucket}/");
    Some(match path.strip_prefix(&prefix) {
        Some(key) => Ok(S3Path {
            // The host as it stands in `path` (the parser's copy lives only as long as
            // `url`): between `{scheme}://` and the `/` that ends the prefix.
            bucket: &path[scheme.len() + 3..prefix.len() - 1],
            key,
        }),
        None => Err(Error::new(
            ErrorKind::DataInvalid,
            format!("Invalid s3 url: {path}, should start with {prefix}"),
        )),
    })
}

/// An opendal error as iceberg-storage-opendal reports it, so floe's classification of
/// storage failures (e.g. credential refusals) reads the same text.
fn io_error(e: opendal::Error) -> Error {
    Error::new(ErrorKind::Unexpected, "Failure in doing io operation").with_source(e)
}

/// Where a path's requests go.
enum Route<'p> {
    /// An S3 file: its bucket's operator and its key there.
    S3 {
        op: Operator,
        key: &'p str,
        bucket: Bucket,
    },
    /// Any other path: iceberg-storage-opendal.
    Other(Arc<dyn Storage>),
}

/// A bucket whose operator is kept, for reporting its errors.
struct Bucket {
    shared: Arc<Shared>,
    name: String,
}

impl Bucket {
    /// `e` as iceberg's error. A refusal of the credentials also drops the bucket's
    /// operator, so the next request builds one that reads them again: keys without an
    /// expiry (a credentials file rewritten by another tool, say) would otherwise be
    /// kept for good, where iceberg-storage-opendal read them anew for every file.
    fn failed(&self, e: opendal::Error) -> Error {
        if super::is_credential_refusal_text(&e.to_string()) {
            self.shared
                .operators
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&self.name);
        }
        io_error(e)
    }
}

impl FloeStorage {
    fn new(props: HashMap<String, String>) -> Self {
        FloeStorage {
            shared: Arc::new(Shared {
                props,
                others: OnceLock::new(),
                s3_config: OnceLock::new(),
                operators: Mutex::default(),
            }),
        }
    }

    fn others(&self) -> Result<Arc<dyn Storage>> {
        if let Some(storage) = self.shared.others.get() {
            return Ok(storage.clone());
        }
        let config = StorageConfig::from_props(self.shared.props.clone());
        let storage = OpenDalResolvingStorageFactory::new().build(&config)?;
        Ok(self.shared.others.get_or_init(|| storage).clone())
    }

    fn s3_config(&self) -> Result<&S3Config> {
        if let Some(config) = self.shared.s3_config.get() {
            return Ok(config);
        }
        let config = parsed_s3_config(&self.shared.props)?;
        Ok(self.shared.s3_config.get_or_init(|| config))
    }

    fn route<'p>(&self, path: &'p str) -> Result<Route<'p>> {
        let Some(at) = s3_path(path) else {
            return Ok(Route::Other(self.others()?));
        };
        let at = at?;
        Ok(Route::S3 {
            op: self.operator(at.bucket)?,
            key: at.key,
            bucket: Bucket {
                shared: self.shared.clone(),
                name: at.bucket.to_string(),
            },
        })
    }

    fn operator(&self, bucket: &str) -> Result<Operator> {
        let mut operators = self
            .shared
            .operators
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(op) = operators.get(bucket) {
            return Ok(op.clone());
        }
        let mut config = self.s3_config()?.clone();
        config.bucket = bucket.to_string();
        let op = Operator::from_config(config)
            .map_err(io_error)?
            .finish()
            .layer(TimeoutLayer::new())
            .layer(RetryLayer::new());
        operators.insert(bucket.to_string(), op.clone());
        Ok(op)
    }
}

/// The `S3Config` iceberg-storage-opendal derives from FileIO properties. It keeps the
/// parse private, but its storage serialises the result.
fn parsed_s3_config(props: &HashMap<String, String>) -> Result<S3Config> {
    let factory = OpenDalStorageFactory::S3 {
        customized_credential_load: None,
    };
    let storage = factory.build(&StorageConfig::from_props(props.clone()))?;
    // serde's messages may quote a value, and these are credentials: not passed on.
    let unreadable = |why: &str| {
        Error::new(
            ErrorKind::Unexpected,
            format!("the S3 settings iceberg-storage-opendal derived cannot be read: {why}"),
        )
    };
    let form =
        serde_json::to_value(&storage).map_err(|_| unreadable("its storage did not serialise"))?;
    let config = form
        .get("S3")
        .and_then(|s3| s3.get("config"))
        .ok_or_else(|| unreadable("no S3.config in its serialised form"))?;
    S3Config::deserialize(config).map_err(|_| unreadable("not opendal's S3Config"))
}

/// An opendal reader as iceberg's `FileRead`.
struct S3Reader(opendal::Reader, Bucket);

#[async_trait::async_trait]
impl FileRead for S3Reader {
    async fn read(&self, range: std::ops::Range<u64>) -> Result<Bytes> {
        let bytes = self.0.read(range).await.map_err(|e| self.1.failed(e))?;
        Ok(bytes.to_bytes())
    }
}

/// An opendal writer as iceberg's `FileWrite`.
struct S3Writer(opendal::Writer, Bucket);

#[async_trait::async_trait]
impl FileWrite for S3Writer {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        self.0.write(bs).await.map_err(|e| self.1.failed(e))
    }

    async fn close(&mut self) -> Result<()> {
        self.0.close().await.map_err(|e| self.1.failed(e))?;
        Ok(())
    }
}

#[typetag::serde]
#[async_trait::async_trait]
impl Storage for FloeStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.route(path)? {
            Route::S3 { op, key, bucket } => op.exists(key).await.map_err(|e| bucket.failed(e)),
            Route::Other(other) => other.exists(path).await,
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        match self.route(path)? {
            Route::S3 { op, key, bucket } => {
                let meta = op.stat(key).await.map_err(|e| bucket.failed(e))?;
                Ok(FileMetadata {
                    size: meta.content_length(),
                })
            }
            Route::Other(other) => other.metadata(path).await,
        }
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        match self.route(path)? {
            Route::S3 { op, key, bucket } => {
                let bytes = op.read(key).await.map_err(|e| bucket.failed(e))?;
                Ok(bytes.to_bytes())
            }
            Route::Other(_) if super::local::is_local(path) => super::local::read(path).await,
            Route::Other(other) => other.read(path).await,
        }
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        match self.route(path)? {
            Route::S3 { op, key, bucket } => {
                let reader = op.reader(key).await.map_err(|e| bucket.failed(e))?;
                Ok(Box::new(S3Reader(reader, bucket)))
            }
            Route::Other(_) if super::local::is_local(path) => super::local::reader(path).await,
            Route::Other(other) => other.reader(path).await,
        }
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        match self.route(path)? {
            Route::S3 { op, key, bucket } => {
                op.write(key, bs).await.map_err(|e| bucket.failed(e))?;
                Ok(())
            }
            Route::Other(_) if super::local::is_local(path) => super::local::write(path, bs).await,
            Route::Other(other) => other.write(path, bs).await,
        }
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        match self.route(path)? {
            Route::S3 { op, key, bucket } => {
                let writer = op.writer(key).await.map_err(|e| bucket.failed(e))?;
                Ok(Box::new(S3Writer(writer, bucket)))
            }
            Route::Other(_) if super::local::is_local(path) => Ok(super::local::writer(path)),
            Route::Other(other) => other.writer(path).await,
        }
    }

    async fn delete(&self, path: &str) -> Result<()> {
        match self.route(path)? {
            Route::S3 { op, key, bucket } => op.delete(key).await.map_err(|e| bucket.failed(e)),
            Route::Other(other) => other.delete(path).await,
        }
    }

    /// Rare (dropping a table's files): left to iceberg-storage-opendal.
    async fn delete_prefix(&self, path: &str) -> Result<()> {
        self.others()?.delete_prefix(path).await
    }

    /// Rare (cleaning up after failures): left to iceberg-storage-opendal.
    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        self.others()?.delete_stream(paths).await
    }

    /// An S3 path is only checked here: the file's reads route it again. So are local
    /// paths, read here (see [`super::local`]).
    fn new_input(&self, path: &str) -> Result<InputFile> {
        match s3_path(path) {
            Some(at) => at.map(|_| InputFile::new(Arc::new(self.clone()), path.to_string())),
            None if super::local::is_local(path) => {
                Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
            }
            None => self.others()?.new_input(path),
        }
    }

    /// An S3 path is only checked here: the file's writes route it again. So are local
    /// paths, written here (see [`super::local`]).
    fn new_output(&self, path: &str) -> Result<OutputFile> {
        match s3_path(path) {
            Some(at) => at.map(|_| OutputFile::new(Arc::new(self.clone()), path.to_string())),
            None if super::local::is_local(path) => {
                Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
            }
            None => self.others()?.new_output(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn s3_paths_split_as_iceberg_storage_opendal_splits_them() {
        for scheme in ["s3", "s3a", "s3n"] {
            let path = format!("{scheme}://lake.eu/wh/ns/t/data/f%201?.parquet");
            let at = s3_path(&path).unwrap().unwrap();
            assert_eq!(
                at,
                S3Path {
                    bucket: "lake.eu",
                    key: "wh/ns/t/data/f%201?.parquet"
                }
            );
        }
        for other in [
            "file:///tmp/wh/f.parquet",
            "gs://lake/f",
            "/tmp/wh/f",
            "minio://b/k",
        ] {
            assert!(s3_path(other).is_none(), "{other}");
        }
        // What iceberg-storage-opendal refuses is refused: no bucket, no key, a scheme
        // the URL parser rewrites, a user, port, query or fragment beside the host.
        for refused in [
            "s3:///f",
            "s3://lake",
            "S3://lake/k",
            "s3://u@lake/k",
            "s3://lake:9000/k",
            "s3://lake?x/k",
            "s3://lake#x/k",
        ] {
            assert!(s3_path(refused).unwrap().is_err(), "{refused}");
        }
    }

    #[test]
    fn the_s3_settings_are_those_iceberg_storage_opendal_derives() {
        let config = parsed_s3_config(&props(&[
            ("s3.endpoint", "http://127.0.0.1:9000"),
            ("s3.region", "eu-west-3"),
            ("s3.access-key-id", "AKID"),
            ("s3.secret-access-key", "SECRET"),
            ("s3.session-token", "TOKEN"),
            ("s3.path-style-access", "true"),
            ("s3.sse.type", "kms"),
            ("s3.sse.key", "key-arn"),
            ("s3.disable-ec2-metadata", "true"),
        ]))
        .unwrap();
        assert_eq!(config.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(config.region.as_deref(), Some("eu-west-3"));
        assert_eq!(config.access_key_id.as_deref(), Some("AKID"));
        assert_eq!(config.secret_access_key.as_deref(), Some("SECRET"));
        assert_eq!(config.session_token.as_deref(), Some("TOKEN"));
        assert!(!config.enable_virtual_host_style);
        assert_eq!(config.server_side_encryption.as_deref(), Some("aws:kms"));
        assert_eq!(
            config.server_side_encryption_aws_kms_key_id.as_deref(),
            Some("key-arn")
        );
        assert!(config.disable_ec2_metadata);
        // Iceberg's default is virtual-host-style addressing, and no credentials.
        let plain = parsed_s3_config(&props(&[("client.region", "us-east-1")])).unwrap();
        assert!(plain.enable_virtual_host_style);
        assert_eq!(plain.region.as_deref(), Some("us-east-1"));
        assert!(plain.access_key_id.is_none());
        // What iceberg-storage-opendal refuses is refused.
        let e = parsed_s3_config(&props(&[("s3.sse.type", "rot13")])).unwrap_err();
        assert!(e.to_string().contains("s3.sse.type"), "{e}");
    }

    #[test]
    fn one_operator_serves_each_bucket() {
        let storage = FloeStorage::new(props(&[
            ("s3.endpoint", "http://127.0.0.1:9"),
            ("s3.region", "us-east-1"),
            ("s3.access-key-id", "AKID"),
            ("s3.secret-access-key", "SECRET"),
        ]));
        let s3 = |storage: &FloeStorage, path| match storage.route(path).unwrap() {
            Route::S3 { op, key, .. } => (op.info().name().to_string(), key.to_string()),
            Route::Other(_) => panic!("{path} is an S3 path"),
        };
        assert_eq!(
            s3(&storage, "s3://lake/wh/f1"),
            ("lake".into(), "wh/f1".into())
        );
        s3(&storage, "s3a://lake/wh/f2");
        assert_eq!(s3(&storage, "s3://other/f").0, "other");
        assert_eq!(storage.shared.operators.lock().unwrap().len(), 2);
        // Files handed out share the cache.
        let copy = storage.clone();
        s3(&copy, "s3://lake/wh/f3");
        assert_eq!(storage.shared.operators.lock().unwrap().len(), 2);
        assert!(matches!(
            storage.route("file:///tmp/f").unwrap(),
            Route::Other(_)
        ));
    }

    /// An S3 endpoint on 127.0.0.1 that answers every request with `status` and an S3
    /// error `code`.
    async fn refusing_endpoint(status: &'static str, code: &'static str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0u8; 8192];
                let _ = socket.read(&mut request).await;
                let body = format!("<Error><Code>{code}</Code><Message>no</Message></Error>");
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/xml\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        endpoint
    }

    fn storage_at(endpoint: &str) -> FloeStorage {
        FloeStorage::new(props(&[
            ("s3.endpoint", endpoint),
            ("s3.region", "us-east-1"),
            ("s3.path-style-access", "true"),
            ("s3.access-key-id", "AKID"),
            ("s3.secret-access-key", "SECRET"),
        ]))
    }

    fn cached(storage: &FloeStorage) -> usize {
        storage.shared.operators.lock().unwrap().len()
    }

    #[tokio::test]
    async fn a_refusal_of_the_credentials_drops_the_buckets_operator() {
        let storage = storage_at(&refusing_endpoint("403 Forbidden", "AccessDenied").await);
        let e = storage
            .write("s3://lake/wh/f", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(
            super::super::is_credential_refusal_text(&format!("{e:#}")),
            "{e:#}"
        );
        // The next request builds a new operator, which reads the credentials again.
        assert_eq!(cached(&storage), 0);
        let mut writer = storage.writer("s3://lake/wh/g").await.unwrap();
        writer.write(Bytes::from_static(b"x")).await.unwrap();
        assert_eq!(cached(&storage), 1);
        assert!(writer.close().await.is_err());
        assert_eq!(cached(&storage), 0, "refused at close, through the writer");
    }

    #[tokio::test]
    async fn other_failures_keep_the_operator() {
        let storage = storage_at(&refusing_endpoint("404 Not Found", "NoSuchKey").await);
        assert!(storage.read("s3://lake/wh/missing").await.is_err());
        assert!(!storage.exists("s3://lake/wh/missing").await.unwrap());
        assert_eq!(cached(&storage), 1);
    }

    #[test]
    fn its_debug_form_names_no_credential() {
        let storage = FloeStorage::new(props(&[("s3.secret-access-key", "SECRET")]));
        let text = format!("{storage:?}");
        assert!(text.contains("s3.secret-access-key") && !text.contains("SECRET"));
    }
}
