//! Typed writer configuration, parsed from the JSON the host hands over.
//!
//! Field names follow the Redpanda Connect `iceberg` output (see CONFIG-COMPAT.md) so a
//! YAML config carries over unchanged. Unknown fields are errors, never ignored, and
//! nothing is read from the environment behind the user's back.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How epoch numbers given for `timestamp`/`timestamptz` columns are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EpochUnit {
    S,
    #[default]
    Ms,
    Us,
    Ns,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub catalog: CatalogConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    /// Default namespace (dot-separated levels) for messages that name none.
    #[serde(default, deserialize_with = "non_empty")]
    pub namespace: Option<String>,
    /// Default table for messages that name none.
    #[serde(default, deserialize_with = "non_empty")]
    pub table: Option<String>,
    #[serde(default = "yes")]
    pub case_sensitive_columns: bool,
    #[serde(default)]
    pub schema_evolution: SchemaEvolution,
    #[serde(default)]
    pub parquet: ParquetConfig,
    #[serde(default)]
    pub json: JsonConfig,
    #[serde(default)]
    pub commit: CommitConfig,
    /// Worker threads of the process-wide runtime (set by the first writer opened;
    /// unset or 0: one per core).
    pub runtime_threads: Option<usize>,
    /// How many write calls the host runs at once (its `max_in_flight`). When known, a
    /// table's committer waits briefly for all of them before writing a group, instead
    /// of committing whichever arrived first (see `commit::committer`).
    pub max_in_flight: Option<usize>,
    /// The key that upserts and deletes match rows by (top-level columns). Empty: the
    /// table's own identifier fields.
    #[serde(default)]
    pub identifier_fields: Vec<String>,
    /// How upserts and deletes reach the table. Unset: the table's `write.update.mode` /
    /// `write.delete.mode`, else merge-on-read.
    pub merge_strategy: Option<MergeStrategy>,
}

/// Table property naming the kind of delete files merge-on-read writes on this table:
/// `position` for floe's positional strategy (Iceberg's write modes only say
/// merge-on-read), so a writer that follows the table keeps readers that apply position
/// deletes but not equality deletes (pyiceberg) able to read it.
pub const MERGE_ON_READ_DELETES: &str = "floe.merge-on-read-deletes";

/// How upserts and deletes are written.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub enum MergeStrategy {
    /// Equality-delete files on the key plus the new rows, in one row-delta snapshot:
    /// cheapest to write; readers apply the deletes.
    #[default]
    #[serde(rename = "merge-on-read")]
    MergeOnRead,
    /// Rewrite the data files holding the keys; no delete files, readable everywhere.
    #[serde(rename = "copy-on-write")]
    CopyOnWrite,
    /// Copy-on-write's key lookup, written as position-delete files.
    #[serde(rename = "merge-on-read-positional")]
    MergeOnReadPositional,
}

impl MergeStrategy {
    /// The name as configs and table properties spell it.
    pub fn name(self) -> &'static str {
        match self {
            MergeStrategy::MergeOnRead => "merge-on-read",
            MergeStrategy::CopyOnWrite => "copy-on-write",
            MergeStrategy::MergeOnReadPositional => "merge-on-read-positional",
        }
    }

    /// The value of Iceberg's `write.update.mode` / `write.delete.mode` that means this
    /// strategy (positional deletes are merge-on-read, as Spark writes it).
    pub fn write_mode(self) -> &'static str {
        match self {
            MergeStrategy::CopyOnWrite => "copy-on-write",
            MergeStrategy::MergeOnRead | MergeStrategy::MergeOnReadPositional => "merge-on-read",
        }
    }
}

fn yes() -> bool {
    true
}

/// Which catalog: `url` with `http(s)://` is a REST catalog; `sqlite:` (or no url) is the
/// embedded SQLite catalog.
#[derive(Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    #[serde(default, deserialize_with = "non_empty")]
    pub url: Option<String>,
    /// REST: warehouse name. Embedded: the folder (or `s3://bucket/prefix`) tables go in.
    #[serde(default, deserialize_with = "non_empty")]
    pub warehouse: Option<String>,
    /// Embedded: the catalog name stored in each row (pyiceberg's `SqlCatalog` name).
    #[serde(default, deserialize_with = "non_empty")]
    pub name: Option<String>,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub headers: HashMap<String, String>,
    #[serde(default)]
    pub tls_skip_verify: bool,
    /// A PEM file of CA certificates the catalog's TLS certificate may chain to, beside
    /// the system's roots and the bundled Mozilla roots (a private CA).
    #[serde(default, deserialize_with = "non_empty")]
    pub tls_root_cas_file: Option<String>,
}

#[derive(Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default, deserialize_with = "non_empty")]
    pub bearer: Option<String>,
    pub oauth2: Option<OAuth2Config>,
    pub aws_sigv4: Option<SigV4Config>,
}

/// AWS SigV4-signed catalog calls (Glue's and S3 Tables' Iceberg REST endpoints), with
/// the fields of Redpanda Connect's `aws_sigv4` section (its AWS session's).
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigV4Config {
    /// The region in the signature's scope; `AWS_REGION` when absent.
    #[serde(default, deserialize_with = "non_empty")]
    pub region: Option<String>,
    /// The service in the scope: `glue` (Glue), `s3tables` (S3 Tables), `execute-api`.
    #[serde(default = "default_sigv4_service", deserialize_with = "sigv4_service")]
    pub service: String,
    /// The AWS API endpoint of the calls floe makes for credentials: STS's, for
    /// `credentials.role` (AssumeRole) and web identity (AssumeRoleWithWebIdentity).
    /// Catalog requests go to `catalog.url` whatever it says (as in Redpanda Connect,
    /// where it is the AWS SDK's base endpoint, which only the role's STS client uses).
    #[serde(default, deserialize_with = "non_empty")]
    pub endpoint: Option<String>,
    /// TCP settings of the connections of those credential calls (STS, the container
    /// endpoint, instance metadata): the AWS session's HTTP client, as in Redpanda Connect.
    pub tcp: Option<TcpConfig>,
    /// Absent: the environment, then the shared credentials file, web identity, the
    /// container endpoint and the instance's role.
    pub credentials: Option<SigV4Credentials>,
}

/// Where SigV4 credentials come from, as Redpanda Connect's `credentials` section has it:
/// a profile's keys, else the keys given, else the default chain; then, with `role`, the
/// role those credentials assume; `from_ec2_role` takes the instance's role instead.
#[derive(Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SigV4Credentials {
    /// A profile of the shared credentials (or config) file, in place of `AWS_PROFILE`.
    #[serde(default, deserialize_with = "non_empty")]
    pub profile: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    pub secret: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    pub token: Option<String>,
    /// The credentials of the EC2 instance's role (instance metadata, IMDSv2).
    #[serde(default)]
    pub from_ec2_role: bool,
    /// A role (ARN) to assume through STS with the credentials above.
    #[serde(default, deserialize_with = "non_empty")]
    pub role: Option<String>,
    /// The external id the role's trust policy asks for.
    #[serde(default, deserialize_with = "non_empty")]
    pub role_external_id: Option<String>,
}

/// TCP settings of a client's connections, as Benthos' `tcp` section has them.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TcpConfig {
    /// The longest a connect may take; `0s`: floe's default for the client.
    #[serde(default, deserialize_with = "duration", serialize_with = "go_duration")]
    pub connect_timeout: std::time::Duration,
    /// Keep-alive probes; absent: the client's defaults.
    pub keep_alive: Option<KeepAliveConfig>,
    /// How long sent data may stay unacknowledged before the connection is dropped
    /// (Linux only; ignored elsewhere); `0s`: no limit.
    #[serde(default, deserialize_with = "duration", serialize_with = "go_duration")]
    pub tcp_user_timeout: std::time::Duration,
}

/// TCP keep-alive probes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeepAliveConfig {
    /// Idle time before the first probe (`0s`: 15 s); `None`: no probes (a negative
    /// duration, as in Benthos).
    #[serde(
        default = "default_keep_alive",
        deserialize_with = "keep_alive_idle",
        serialize_with = "keep_alive_idle_text"
    )]
    pub idle: Option<std::time::Duration>,
    /// Between probes (`0s`: 15 s).
    #[serde(default, deserialize_with = "duration", serialize_with = "go_duration")]
    pub interval: std::time::Duration,
    /// Unanswered probes before the connection is dropped (`0`: 9).
    #[serde(default)]
    pub count: u32,
}

impl KeepAliveConfig {
    /// Benthos' defaults for zero values: 15 s idle, 15 s between probes, 9 probes.
    pub fn effective(&self) -> Option<(std::time::Duration, std::time::Duration, u32)> {
        let or = |d: std::time::Duration| match d.is_zero() {
            true => std::time::Duration::from_secs(15),
            false => d,
        };
        let idle = self.idle?;
        let count = match self.count {
            0 => 9,
            n => n,
        };
        Some((or(idle), or(self.interval), count))
    }
}

fn default_keep_alive() -> Option<std::time::Duration> {
    Some(std::time::Duration::ZERO)
}

/// A keep-alive idle time: a negative one turns probes off.
fn keep_alive_idle<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<std::time::Duration>, D::Error> {
    let text = String::deserialize(d)?;
    match text.trim().strip_prefix('-') {
        Some(magnitude) => {
            let d = parse_duration(magnitude).map_err(serde::de::Error::custom)?;
            Ok((d.is_zero()).then_some(d))
        }
        None => parse_duration(&text)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

fn keep_alive_idle_text<S: serde::Serializer>(
    d: &Option<std::time::Duration>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match d {
        Some(d) => go_duration(d, s),
        None => s.serialize_str("-1s"),
    }
}

fn default_sigv4_service() -> String {
    "execute-api".into()
}

/// Empty means the default, as for text fields without one (`service: ${SERVICE:}`).
fn sigv4_service<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    Ok(non_empty(d)?.unwrap_or_else(default_sigv4_service))
}

impl std::fmt::Debug for SigV4Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigV4Config")
            .field("region", &self.region)
            .field("service", &self.service)
            .field("endpoint", &self.endpoint)
            .field("tcp", &self.tcp)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// Names the profile, key id and role; never the secret or the session token.
impl std::fmt::Debug for SigV4Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigV4Credentials")
            .field("profile", &self.profile)
            .field("id", &self.id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("from_ec2_role", &self.from_ec2_role)
            .field("role", &self.role)
            .field("role_external_id", &self.role_external_id)
            .finish()
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Config {
    /// Token endpoint; relative paths are resolved against `catalog.url`.
    #[serde(default = "default_oauth_uri", deserialize_with = "oauth_uri")]
    pub server_uri: String,
    pub client_id: String,
    pub client_secret: String,
    #[serde(default, deserialize_with = "non_empty")]
    pub scope: Option<String>,
}

fn default_oauth_uri() -> String {
    "/v1/oauth/tokens".into()
}

/// Empty means the default: an empty endpoint would post tokens to the catalog's root.
fn oauth_uri<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    Ok(non_empty(d)?.unwrap_or_else(default_oauth_uri))
}

/// A URL with any user info (`user:password@`) replaced by `<redacted>@`.
pub fn redact_user_info(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_password(None);
            let _ = u.set_username("redacted");
            u.to_string()
        }
        // Not a URL with a user part (`user:pw@host` parses with scheme `user`): whatever
        // precedes an `@` may still be a user and password.
        _ => match url.rsplit_once('@') {
            Some((before, host)) => {
                let scheme = before.find("://").map_or("", |i| &before[..i + 3]);
                format!("{scheme}redacted@{host}")
            }
            None => url.to_string(),
        },
    }
}

// Secrets stay out of Debug output (and so out of logs and error messages): header
// values (often `Authorization`) are named but not shown.
impl std::fmt::Debug for CatalogConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&String> = self.headers.keys().collect();
        f.debug_struct("CatalogConfig")
            .field("url", &self.url.as_deref().map(redact_user_info))
            .field("warehouse", &self.warehouse)
            .field("name", &self.name)
            .field("auth", &self.auth)
            .field("headers (values redacted)", &headers)
            .field("tls_skip_verify", &self.tls_skip_verify)
            .field("tls_root_cas_file", &self.tls_root_cas_file)
            .finish()
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .field("oauth2", &self.oauth2)
            .field("aws_sigv4", &self.aws_sigv4)
            .finish()
    }
}

impl std::fmt::Debug for OAuth2Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth2Config")
            .field("server_uri", &self.server_uri)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("scope", &self.scope)
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    pub aws_s3: Option<S3Config>,
    pub gcp_cloud_storage: Option<GcsConfig>,
    pub azure_blob_storage: Option<AzureConfig>,
}

/// Google Cloud Storage (`gs://` locations).
#[derive(Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GcsConfig {
    /// Tables must be in this bucket (as `storage.aws_s3.bucket`).
    #[serde(default, deserialize_with = "non_empty")]
    pub bucket: Option<String>,
    /// The JSON API's address (an emulator, a private endpoint); Google's by default.
    #[serde(default, deserialize_with = "non_empty")]
    pub endpoint: Option<String>,
    /// How floe authenticates; inferred from the fields below when unset.
    #[serde(default)]
    pub credentials_type: Option<GcsCredentialsType>,
    /// A service account key file (JSON).
    #[serde(default, deserialize_with = "non_empty")]
    pub credentials_file: Option<String>,
    /// A service account key (JSON, or base64 of it).
    #[serde(default, deserialize_with = "non_empty")]
    pub credentials_json: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GcsCredentialsType {
    /// Google's application default credentials: `GOOGLE_APPLICATION_CREDENTIALS`,
    /// gcloud's configuration, then the VM's metadata server.
    ApplicationDefault,
    /// The key in `credentials_file` or `credentials_json`.
    ServiceAccount,
    /// No credentials (an emulator, or a public bucket).
    None,
}

impl std::fmt::Debug for GcsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsConfig")
            .field("bucket", &self.bucket)
            .field("endpoint", &self.endpoint)
            .field("credentials_type", &self.credentials_type)
            .field("credentials_file", &self.credentials_file)
            .field(
                "credentials_json",
                &self.credentials_json.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Azure Data Lake Storage Gen2 (`abfss://container@account.dfs.core.windows.net/…`).
#[derive(Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AzureConfig {
    #[serde(default, deserialize_with = "non_empty")]
    pub storage_account: Option<String>,
    /// Tables must be in this container (as `storage.aws_s3.bucket`).
    #[serde(default, deserialize_with = "non_empty")]
    pub container: Option<String>,
    /// Only the account's own DFS endpoint (`https://<account>.dfs.core.windows.net`) is
    /// accepted: floe's Azure storage takes the endpoint from each `abfss://` location.
    #[serde(default, deserialize_with = "non_empty")]
    pub endpoint: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    pub storage_sas_token: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    pub storage_connection_string: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    pub storage_access_key: Option<String>,
}

impl std::fmt::Debug for AzureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("AzureConfig")
            .field("storage_account", &self.storage_account)
            .field("container", &self.container)
            .field("endpoint", &self.endpoint)
            .field("storage_sas_token", &secret(&self.storage_sas_token))
            .field(
                "storage_connection_string",
                &secret(&self.storage_connection_string),
            )
            .field("storage_access_key", &secret(&self.storage_access_key))
            .finish()
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    #[serde(default, deserialize_with = "non_empty")]
    pub bucket: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    pub region: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub force_path_style_urls: bool,
    pub credentials: Option<S3Credentials>,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Credentials {
    pub id: String,
    pub secret: String,
    #[serde(default, deserialize_with = "non_empty")]
    pub token: Option<String>,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("force_path_style_urls", &self.force_path_style_urls)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SchemaEvolution {
    /// Create the namespace and table when missing, and evolve its schema on write: new
    /// fields become optional columns (at any depth), required fields become optional
    /// when a message has them null, and types widen where Iceberg allows and a value
    /// needs it (see `crate::evolve`).
    #[serde(default)]
    pub enabled: bool,
    /// Without evolution: what a JSON field that is not a column does to its message.
    #[serde(default)]
    pub unknown_fields: UnknownFieldPolicy,
    /// The metadata key the host reads each message's explicit types from (the host
    /// hands them over with the message; named here for errors).
    #[serde(default, deserialize_with = "non_empty")]
    pub schema_metadata: Option<String>,
    /// A message without explicit types fails.
    #[serde(default)]
    pub require_schema_metadata: bool,
    /// Partition spec for new tables, e.g. `(day(ts), bucket(16, user_id))`.
    #[serde(default, deserialize_with = "non_empty")]
    pub partition_spec: Option<String>,
    /// Location prefix for new tables when the catalog assigns none.
    #[serde(default, deserialize_with = "non_empty")]
    pub table_location: Option<String>,
    /// Explicit schema for new tables (Iceberg schema JSON, as an object or as text);
    /// inferred when absent.
    #[serde(default, deserialize_with = "json_or_text")]
    pub schema: Option<serde_json::Value>,
}

impl SchemaEvolution {
    /// Settings that cannot work together, found without a catalog: the static schema
    /// must be an Iceberg schema floe can create, and the partition spec must parse
    /// (against the static schema, when there is one).
    fn problems(&self, case_sensitive: bool) -> Vec<String> {
        let mut problems = Vec::new();
        if self.require_schema_metadata && self.schema_metadata.is_none() {
            problems.push(
                "schema_evolution.require_schema_metadata needs schema_evolution.schema_metadata \
                 (the metadata key holding the types)"
                    .into(),
            );
        }
        let schema = match &self.schema {
            Some(json) => match serde_json::from_value::<iceberg::spec::Schema>(json.clone()) {
                Ok(schema) => Some(schema),
                Err(e) => {
                    problems.push(format!(
                        "schema_evolution.schema is not an Iceberg schema: {e}"
                    ));
                    None
                }
            },
            None => None,
        };
        if let Some(spec) = &self.partition_spec {
            let parsed = match &schema {
                Some(schema) => {
                    crate::partition_spec::parse_spec(spec, schema, case_sensitive).map(|_| ())
                }
                None => crate::partition_spec::check_syntax(spec),
            };
            if let Err(e) = parsed {
                problems.push(format!("schema_evolution.{}", e.message()));
            }
        }
        problems
    }
}

/// What a field that is not a column does when schema evolution is off.
///
/// `error` is the default: the message fails with an error naming the field, so a
/// producer that starts sending a new field is noticed (the message goes to the dead
/// letters or is retried) instead of the field being dropped without a trace. `ignore`
/// writes the rest of the message, for tables that deliberately keep a subset.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum UnknownFieldPolicy {
    #[default]
    Error,
    Ignore,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Zstd,
    Snappy,
    Lz4,
    Gzip,
    Uncompressed,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StringEncoding {
    DeltaLengthByteArray,
    Plain,
}

/// Parquet options. `None` means: the table's `write.parquet.*` property, else floe's default.
/// `0` and `""` also mean "not set" (the values configs written for earlier versions
/// carry as defaults), so no size here is ever 0.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ParquetConfig {
    #[serde(default, deserialize_with = "blank_as_none")]
    pub compression: Option<Compression>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub compression_level: Option<i32>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub row_group_size: Option<usize>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub page_size: Option<usize>,
    pub dictionary: Option<bool>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub target_file_size_bytes: Option<usize>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub string_encoding: Option<StringEncoding>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitConfig {
    /// Retries after a conflict (or an unknown outcome that turned out not committed),
    /// each rebuilt on the new table head after an exponential, jittered backoff.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// How long a commit keeps retrying conflicts with other writers before it fails.
    /// A conflict means another commit landed, so it is retried on the new head (a
    /// cheap rebase) until this much time has passed since the first attempt. Also how
    /// long floe keeps asking a catalog it cannot reach whether a commit of unknown
    /// outcome landed, before it reports the outcome unknown (which an at-least-once
    /// host answers by writing the rows again).
    #[serde(
        default = "default_retry_timeout",
        deserialize_with = "duration",
        serialize_with = "go_duration"
    )]
    pub retry_timeout: std::time::Duration,
    /// Delete the files of a commit the catalog definitively refused. Files of a commit
    /// whose outcome is unknown are never deleted.
    #[serde(default = "yes")]
    pub cleanup_on_failure: bool,
    /// Merge small manifests (the table's `commit.manifest.*` properties decide when), so
    /// planning stays fast after many small commits.
    #[serde(default = "yes")]
    pub manifest_merge_enabled: bool,
    /// Snapshots older than this are expired (refs' heads are kept) and files no longer
    /// reachable are deleted. `"0s"` turns expiry off.
    #[serde(
        default = "default_snapshot_age",
        deserialize_with = "duration",
        serialize_with = "go_duration"
    )]
    pub max_snapshot_age: std::time::Duration,
    /// Most snapshots a branch keeps under floe's defaults, whatever their age: every
    /// commit makes the catalog rewrite the whole table metadata, so a streaming table
    /// committing several times a second must not keep a day of snapshots. Ignored for
    /// a table (or branch) that sets its own max snapshot age.
    #[serde(default = "default_max_snapshots")]
    pub max_snapshots: usize,
    /// How long the committer waits for more batches before writing a group (0: writes
    /// as soon as the previous group is handed on; concurrency alone fills groups).
    #[serde(default, deserialize_with = "duration", serialize_with = "go_duration")]
    pub linger: std::time::Duration,
    /// Upper bounds on one commit group: rows, and JSON bytes handed in.
    #[serde(default = "default_group_rows")]
    pub max_group_rows: usize,
    #[serde(default = "default_group_bytes")]
    pub max_group_bytes: usize,
    /// Exactly-once across restarts: committed offsets per source are recorded in each
    /// snapshot under this writer id, and already committed messages are acknowledged
    /// without being written again.
    pub exactly_once: Option<ExactlyOnceConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExactlyOnceConfig {
    pub writer_id: String,
}

fn default_max_retries() -> u32 {
    3
}

fn default_max_snapshots() -> usize {
    500
}

fn default_retry_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(120)
}

fn default_snapshot_age() -> std::time::Duration {
    std::time::Duration::from_secs(24 * 3600)
}

fn default_group_rows() -> usize {
    2_000_000
}

fn default_group_bytes() -> usize {
    256 << 20
}

impl Default for CommitConfig {
    fn default() -> Self {
        CommitConfig {
            max_retries: default_max_retries(),
            retry_timeout: default_retry_timeout(),
            cleanup_on_failure: true,
            manifest_merge_enabled: true,
            max_snapshot_age: default_snapshot_age(),
            max_snapshots: default_max_snapshots(),
            linger: std::time::Duration::ZERO,
            max_group_rows: default_group_rows(),
            max_group_bytes: default_group_bytes(),
            exactly_once: None,
        }
    }
}

fn duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<std::time::Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// Parses Go-style durations (`24h`, `1h30m`, `500ms`, `0s`, `+5s`), as the host writes
/// them. Negative durations and ones longer than Go's (about 292 years) are refused.
pub fn parse_duration(text: &str) -> std::result::Result<std::time::Duration, String> {
    let bad = || format!("{text:?} is not a duration like 500ms, 30s, 24h or 1h30m");
    let mut rest = text.trim();
    let negative = rest.starts_with('-');
    rest = rest.strip_prefix(['-', '+']).unwrap_or(rest);
    if rest == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            // Go takes the micro sign and the Greek mu.
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    // Go's limit: a duration is i64 nanoseconds.
    if total > i64::MAX as f64 / 1e9 {
        return Err(format!(
            "{text:?} is longer than the longest duration (2562047h)"
        ));
    }
    if negative && total > 0.0 {
        return Err(format!("{text:?} is negative"));
    }
    Ok(std::time::Duration::from_secs_f64(total))
}

/// Writes a duration the way Go prints it and [`parse_duration`] reads it back.
fn go_duration<S: serde::Serializer>(
    d: &std::time::Duration,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*d))
}

/// `24h`, `2m`, `30s`, `250ms`, `0s`: the largest unit that divides the duration.
pub fn format_duration(d: std::time::Duration) -> String {
    let nanos = d.as_nanos();
    let units: [(u128, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    match units
        .iter()
        .find(|(size, _)| nanos > 0 && nanos.is_multiple_of(*size))
    {
        Some((size, unit)) => format!("{}{unit}", nanos / size),
        None => "0s".into(),
    }
}

/// An optional text field where an empty string means "not set", so a config can say
/// `url: ${CATALOG_URL:}` and fall back to the default when the variable is unset.
fn non_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// An optional setting where `null`, `""` and `0` mean "not set".
fn blank_as_none<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde_json::Value;
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// A JSON document given either as a value or as its text (YAML users write both).
fn json_or_text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<serde_json::Value>, D::Error> {
    match Option::<serde_json::Value>::deserialize(d)? {
        Some(serde_json::Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(serde_json::Value::String(text)) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("not JSON: {e}"))),
        other => Ok(other.filter(|v| !v.is_null())),
    }
}

/// A type error with the path of the field at fault (`commit.max_retries: invalid
/// value: integer `-1`, expected u32`). A secret field's error never quotes the value
/// it was given.
fn describe_type_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    match path.as_str() {
        "" | "." => e.inner().to_string(),
        _ if is_secret_path(&path) => format!("{path}: must be a string"),
        // A field in a section holding secrets, given a value of another type (a section
        // given as text, `credentials: "id/secret"`): serde's message would quote the value.
        _ if holds_secrets(&path) && e.inner().to_string().starts_with("invalid type") => {
            format!(
                "{path}: must be {} (its value is not shown)",
                expected_type(e.inner())
            )
        }
        _ => format!("{path}: {}", e.inner()),
    }
}

/// What a type error says was expected (`a boolean`, `a string`), with a struct or map
/// named as `a map`: the words a YAML user knows.
fn expected_type(e: &serde_json::Error) -> String {
    let text = e.to_string();
    // The last ", expected": the value quoted before it may hold the words too.
    let expected = text
        .rsplit_once(", expected ")
        .map(|(_, expected)| expected)
        .unwrap_or("another type");
    // serde_json appends " at line 1 column 5" when it read from text.
    let expected = expected.split(" at line ").next().unwrap_or(expected);
    match expected.starts_with("struct ") || expected == "a map" {
        true => "a map".into(),
        false => expected.into(),
    }
}

/// Fields whose values are secrets (header values are often `Authorization`).
fn is_secret_path(path: &str) -> bool {
    const SECRETS: [&str; 10] = [
        "catalog.auth.bearer",
        "catalog.auth.oauth2.client_secret",
        "catalog.auth.aws_sigv4.credentials.secret",
        "catalog.auth.aws_sigv4.credentials.token",
        "storage.aws_s3.credentials.secret",
        "storage.aws_s3.credentials.token",
        "storage.gcp_cloud_storage.credentials_json",
        "storage.azure_blob_storage.storage_sas_token",
        "storage.azure_blob_storage.storage_connection_string",
        "storage.azure_blob_storage.storage_access_key",
    ];
    SECRETS.contains(&path) || path.starts_with("catalog.headers")
}

/// Sections whose fields are secrets.
fn holds_secrets(path: &str) -> bool {
    [
        "catalog.auth",
        "storage.aws_s3.credentials",
        "storage.aws_s3",
        "storage.gcp_cloud_storage",
        "storage.azure_blob_storage",
    ]
    .iter()
    .any(|section| path == *section || path.starts_with(&format!("{section}.")))
}

fn strip_nulls(tree: &mut serde_json::Value) {
    if let serde_json::Value::Object(fields) = tree {
        fields.retain(|_, v| !v.is_null());
        fields.values_mut().for_each(strip_nulls);
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct JsonConfig {
    /// Unit of epoch numbers given for timestamp columns (default milliseconds).
    #[serde(default)]
    pub epoch_unit: EpochUnit,
}

/// What cannot work in `catalog.auth.aws_sigv4`: where Redpanda Connect would silently
/// take one of two sources of credentials, floe asks for one.
fn sigv4_problems(sigv4: &SigV4Config) -> Vec<String> {
    let mut problems = Vec::new();
    const AT: &str = "catalog.auth.aws_sigv4.credentials";
    if let Some(c) = &sigv4.credentials {
        let keys = c.id.is_some() || c.secret.is_some() || c.token.is_some();
        if keys && (c.id.is_none() || c.secret.is_none()) {
            problems.push(format!(
                "{AT}: id and secret must both be set (leave credentials out to use the \
                 environment or ~/.aws/credentials)"
            ));
        } else if !keys && c.profile.is_none() && c.role.is_none() && !c.from_ec2_role {
            problems.push(format!(
                "{AT}: id and secret must both be set, or profile, role or from_ec2_role \
                 (leave credentials out to use the environment or ~/.aws/credentials)"
            ));
        }
        if keys && c.profile.is_some() {
            problems.push(format!(
                "{AT}: set profile or id and secret, not both (Redpanda Connect would take \
                 the profile and ignore the keys)"
            ));
        }
        if c.from_ec2_role && (keys || c.profile.is_some() || c.role.is_some()) {
            problems.push(format!(
                "{AT}.from_ec2_role: the instance's role replaces every other source of \
                 credentials; leave out profile, id, secret and role (Redpanda Connect would \
                 ignore them)"
            ));
        }
        if c.role_external_id.is_some() && c.role.is_none() {
            problems.push(format!(
                "{AT}.role_external_id: only a role assumed (role) sends it; set role or \
                 leave it out"
            ));
        }
    }
    if let Some(endpoint) = &sigv4.endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        problems.push(format!(
            "catalog.auth.aws_sigv4.endpoint {:?} is not an http:// or https:// URL",
            redact_user_info(endpoint)
        ));
    }
    if let Some(tcp) = &sigv4.tcp
        && !tcp.tcp_user_timeout.is_zero()
        && let Some((idle, _, _)) = tcp.keep_alive.as_ref().and_then(KeepAliveConfig::effective)
        && idle <= tcp.tcp_user_timeout
    {
        problems.push(format!(
            "catalog.auth.aws_sigv4.tcp: keep_alive.idle ({}) must be greater than \
             tcp_user_timeout ({}) (RFC 5482)",
            format_duration(idle),
            format_duration(tcp.tcp_user_timeout)
        ));
    }
    problems
}

/// The catalog a config selects, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogKind {
    Rest { url: String },
    Embedded { database: PathBuf },
}

impl Config {
    /// Parses a config and checks what it alone can say (see [`Self::problems`]); the
    /// error lists every problem. The whole check, also of what the catalog and storage
    /// code must say (names, CA files, buckets), is `crate::validate::config_from_json`.
    pub fn from_json(text: &str) -> Result<Self> {
        Self::parse(text)
            .map_err(|problems| Error::config(format!("invalid config: {}", problems.join("; "))))
    }

    /// Every problem with a config, one line each, naming the field: unsupported fields,
    /// values of the wrong type, and invalid values. Empty when the config is valid. The
    /// host's lint and its start-up both print these lines, so they never disagree.
    pub fn problems(text: &str) -> Vec<String> {
        Self::parse(text).err().unwrap_or_default()
    }

    fn parse(text: &str) -> std::result::Result<Self, Vec<String>> {
        let (config, problems) = Self::parse_with_problems(text)?;
        match problems.is_empty() {
            true => Ok(config),
            false => Err(problems),
        }
    }

    /// The config as parsed, with the problems its values have that need nothing but
    /// the config to see (checks that need the catalog or storage code are in
    /// `crate::validate`); `Err` when it does not parse at all.
    pub fn parse_with_problems(
        text: &str,
    ) -> std::result::Result<(Self, Vec<String>), Vec<String>> {
        let tree: serde_json::Value =
            serde_json::from_str(text).map_err(|e| vec![format!("the config is not JSON: {e}")])?;
        match serde_path_to_error::deserialize::<_, Config>(tree) {
            Ok(config) => {
                let problems = config.invalid_values();
                Ok((config, problems))
            }
            Err(e) => Err(vec![describe_type_error(&e)]),
        }
    }

    /// The defaults floe applies to fields a config leaves out, as a config document
    /// (durations in Go's text form). The Go output shows them as its fields' defaults,
    /// so the host's docs and floe cannot drift apart. Sections that exist only when
    /// given (`catalog.auth.oauth2`, `catalog.auth.aws_sigv4`, `storage.aws_s3`) carry
    /// their fields' defaults too.
    pub fn defaults() -> serde_json::Value {
        let config = Config::from_json("{}").expect("the empty config is valid");
        let mut tree = serde_json::to_value(&config).expect("a config serialises");
        strip_nulls(&mut tree);
        tree["catalog"]["auth"]["oauth2"] =
            serde_json::json!({ "server_uri": default_oauth_uri() });
        // `tcp` as Benthos' section has it (zero values mean the client's defaults).
        tree["catalog"]["auth"]["aws_sigv4"] = serde_json::json!({
            "service": default_sigv4_service(),
            "tcp": {
                "connect_timeout": "0s",
                "keep_alive": { "idle": "15s", "interval": "15s", "count": 9 },
                "tcp_user_timeout": "0s",
            },
        });
        tree["storage"]["aws_s3"] = serde_json::json!({ "force_path_style_urls": false });
        tree
    }

    /// Values that parse but cannot work, each named by its field.
    fn invalid_values(&self) -> Vec<String> {
        let mut problems = Vec::new();
        // Headers the HTTP client cannot send fail every connect; named, never quoted.
        for (name, value) in &self.catalog.headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problems.push(format!("catalog.headers: {name:?} is not a header name"));
            } else if reqwest::header::HeaderValue::from_str(value).is_err() {
                problems.push(format!(
                    "catalog.headers: the value of {name:?} is not a valid header value \
                     (a line break or control character)"
                ));
            }
        }
        // Storage speaks with keys, never with a URL's user: a password there would
        // reach logs in the storage client's error texts.
        let storage = &self.storage;
        let endpoints = [
            (
                "aws_s3",
                storage.aws_s3.as_ref().and_then(|c| c.endpoint.as_ref()),
            ),
            (
                "gcp_cloud_storage",
                storage
                    .gcp_cloud_storage
                    .as_ref()
                    .and_then(|c| c.endpoint.as_ref()),
            ),
            (
                "azure_blob_storage",
                storage
                    .azure_blob_storage
                    .as_ref()
                    .and_then(|c| c.endpoint.as_ref()),
            ),
        ];
        for (section, endpoint) in endpoints {
            if endpoint.is_some_and(|e| redact_user_info(e) != *e) {
                problems.push(format!(
                    "storage.{section}.endpoint must not hold a user name or password; \
                     give credentials in storage.{section}'s own fields"
                ));
            }
        }
        if let Err(e) = self.catalog_kind() {
            problems.push(e.message().to_string());
        }
        let parquet = &self.parquet;
        if let Some(level) = parquet.compression_level {
            // Unset compression is zstd, unless a table says otherwise.
            let (codec, levels) = match parquet.compression {
                None | Some(Compression::Zstd) => ("zstd", Some(1..=22)),
                Some(Compression::Gzip) => ("gzip", Some(1..=9)),
                Some(Compression::Snappy) => ("snappy", None),
                Some(Compression::Lz4) => ("lz4", None),
                Some(Compression::Uncompressed) => ("uncompressed", None),
            };
            match levels {
                Some(range) if !range.contains(&level) => problems.push(format!(
                    "parquet.compression_level {level} is outside {codec}'s {}..={} (0: the codec's default)",
                    range.start(),
                    range.end()
                )),
                None => problems.push(format!(
                    "parquet.compression_level: {codec} has no levels; leave it out"
                )),
                _ => {}
            }
        }
        let sizes = [
            ("commit.max_group_rows", self.commit.max_group_rows),
            ("commit.max_group_bytes", self.commit.max_group_bytes),
            ("commit.max_snapshots", self.commit.max_snapshots),
        ];
        for (name, _) in sizes.iter().filter(|(_, size)| *size == 0) {
            problems.push(format!("{name} must be greater than 0"));
        }
        if let Some(c) = self
            .storage
            .aws_s3
            .as_ref()
            .and_then(|s| s.credentials.as_ref())
            && (c.id.is_empty() || c.secret.is_empty())
        {
            problems.push(
                "storage.aws_s3.credentials: id and secret must both be set (leave credentials \
                 out for none)"
                    .into(),
            );
        }
        if let Some(sigv4) = &self.catalog.auth.aws_sigv4 {
            problems.extend(sigv4_problems(sigv4));
        }
        let auths = [
            self.catalog.auth.bearer.is_some(),
            self.catalog.auth.oauth2.is_some(),
            self.catalog.auth.aws_sigv4.is_some(),
        ];
        if auths.iter().filter(|set| **set).count() > 1 {
            problems.push("catalog.auth: set one of bearer, oauth2 and aws_sigv4".into());
        }
        if let Some(o) = &self.catalog.auth.oauth2
            && (o.client_id.is_empty() || o.client_secret.is_empty())
        {
            problems
                .push("catalog.auth.oauth2: client_id and client_secret must both be set".into());
        }
        if let Some(eo) = &self.commit.exactly_once
            && eo.writer_id.trim().is_empty()
        {
            problems.push("commit.exactly_once.writer_id must not be empty".into());
        }
        if let Some(name) = self.identifier_fields.iter().find(|n| n.trim().is_empty()) {
            problems.push(format!("identifier_fields: {name:?} is not a column name"));
        }
        problems.extend(self.schema_evolution.problems(self.case_sensitive_columns));
        match self.catalog_kind() {
            Ok(CatalogKind::Embedded { .. }) => {
                problems.extend(self.rest_only_settings().into_iter().map(|field| {
                    format!(
                        "catalog.{field}: only a REST catalog uses it, and catalog.url names \
                         none (unset or empty: the embedded catalog)"
                    )
                }));
            }
            Ok(CatalogKind::Rest { .. }) if self.catalog.name.is_some() => problems.push(
                "catalog.name: only the embedded catalog uses it (a REST catalog is named by \
                 its url)"
                    .into(),
            ),
            _ => {}
        }
        problems
    }

    /// Catalog settings given that only a REST catalog acts on. Given with the embedded
    /// catalog they would be ignored: most likely `catalog.url` came out empty (an unset
    /// environment variable), and the rows would go to a local folder instead.
    fn rest_only_settings(&self) -> Vec<&'static str> {
        let c = &self.catalog;
        [
            ("auth.bearer", c.auth.bearer.is_some()),
            ("auth.oauth2", c.auth.oauth2.is_some()),
            ("auth.aws_sigv4", c.auth.aws_sigv4.is_some()),
            ("headers", !c.headers.is_empty()),
            ("tls_skip_verify", c.tls_skip_verify),
            ("tls_root_cas_file", c.tls_root_cas_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect()
    }

    /// The embedded warehouse root when no catalog is configured.
    pub const DEFAULT_WAREHOUSE: &'static str = "./warehouse";

    pub fn catalog_kind(&self) -> Result<CatalogKind> {
        match self.catalog.url.as_deref() {
            None => Ok(CatalogKind::Embedded {
                database: PathBuf::from(self.warehouse_or_default()).join("catalog.db"),
            }),
            Some(url)
                if (url.starts_with("http://") || url.starts_with("https://"))
                    && url.contains(['?', '#']) =>
            {
                // Not quoted: a query often holds a token.
                Err(Error::config(
                    "catalog.url must not have a query string or fragment: floe appends the \
                     API's paths to it; give a token as catalog.auth.bearer or in catalog.headers",
                ))
            }
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(CatalogKind::Rest {
                    url: url.trim_end_matches('/').to_string(),
                })
            }
            Some(url) if url.starts_with("sqlite:") => {
                let path = url.trim_start_matches("sqlite:").trim_start_matches("//");
                if path.is_empty() {
                    return Err(Error::config("catalog.url sqlite: needs a database path"));
                }
                Ok(CatalogKind::Embedded {
                    database: PathBuf::from(path),
                })
            }
            Some(url) => Err(Error::config(format!(
                "catalog.url {:?} must start with http://, https:// (REST) or sqlite: (embedded)",
                redact_user_info(url)
            ))),
        }
    }

    pub fn warehouse_or_default(&self) -> &str {
        self.catalog
            .warehouse
            .as_deref()
            .unwrap_or(Self::DEFAULT_WAREHOUSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_is_the_embedded_default() {
        let c = Config::from_json("{}").unwrap();
        assert_eq!(
            c.catalog_kind().unwrap(),
            CatalogKind::Embedded {
                database: PathBuf::from("./warehouse/catalog.db")
            }
        );
        assert!(c.case_sensitive_columns);
    }

    #[test]
    fn rest_and_sqlite_urls() {
        let c = Config::from_json(r#"{"catalog": {"url": "http://127.0.0.1:8181/"}}"#).unwrap();
        assert_eq!(
            c.catalog_kind().unwrap(),
            CatalogKind::Rest {
                url: "http://127.0.0.1:8181".into()
            }
        );
        let c = Config::from_json(r#"{"catalog": {"url": "sqlite:///tmp/c.db"}}"#).unwrap();
        assert_eq!(
            c.catalog_kind().unwrap(),
            CatalogKind::Embedded {
                database: PathBuf::from("/tmp/c.db")
            }
        );
    }

    #[test]
    fn bad_configs_say_why() {
        let e = Config::from_json(r#"{"catalog": {"url": "ftp://x"}}"#).unwrap_err();
        assert!(e.to_string().contains("must start with"), "{e}");
        let e = Config::from_json(r#"{"tabel": "x"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `tabel`"), "{e}");
        let e =
            Config::from_json(r#"{"parquet": {"compression": "zstd", "compression_level": 99}}"#)
                .unwrap_err();
        assert!(e.to_string().contains("1..=22"), "{e}");
    }

    #[test]
    fn durations_in_go_form() {
        let d = |t| parse_duration(t).unwrap();
        assert_eq!(d("24h0m0s"), std::time::Duration::from_secs(86_400));
        assert_eq!(d("1h30m"), std::time::Duration::from_secs(5_400));
        assert_eq!(d("250ms"), std::time::Duration::from_millis(250));
        assert_eq!(d("0s"), std::time::Duration::ZERO);
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("").is_err());
        let c = Config::from_json(r#"{"commit": {"linger": "20ms", "max_snapshot_age": "1h"}}"#)
            .unwrap();
        assert_eq!(c.commit.linger, std::time::Duration::from_millis(20));
        let e = Config::from_json(r#"{"commit": {"linger": "soon"}}"#).unwrap_err();
        assert!(e.to_string().contains("not a duration"), "{e}");
    }

    #[test]
    fn defaults_parse_back_to_the_same_config() {
        let defaults = Config::defaults();
        assert_eq!(defaults["commit"]["max_snapshot_age"], "24h");
        assert_eq!(defaults["schema_evolution"]["unknown_fields"], "error");
        assert_eq!(defaults["json"]["epoch_unit"], "ms");
        let config = Config::from_json(&defaults.to_string()).unwrap_err();
        // The optional sections carry their defaults only; they are not a config alone.
        assert!(config.to_string().contains("client_id"), "{config}");
        let mut tree = defaults.clone();
        tree["catalog"]["auth"] = serde_json::json!({});
        tree["storage"] = serde_json::json!({});
        let mut again =
            serde_json::to_value(Config::from_json(&tree.to_string()).unwrap()).unwrap();
        strip_nulls(&mut again);
        assert_eq!(again, tree);
    }

    #[test]
    fn durations_print_in_go_form_and_read_back() {
        for text in ["24h", "2m", "90s", "250ms", "0s", "1500us", "7ns"] {
            let d = parse_duration(text).unwrap();
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "{text}");
        }
        assert_eq!(
            format_duration(std::time::Duration::from_secs(86_400)),
            "24h"
        );
        assert_eq!(format_duration(std::time::Duration::from_secs(90)), "90s");
    }

    #[test]
    fn problems_name_their_fields_and_are_all_reported() {
        let problems = Config::problems(
            r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"aws_sigv4": {"region": "x", "credentials": {"id": "", "secret": "s"}}}},
                "commit": {"max_snapshots": 0}}"#,
        );
        assert_eq!(
            problems,
            [
                "commit.max_snapshots must be greater than 0",
                "catalog.auth.aws_sigv4.credentials: id and secret must both be set (leave credentials out to use the environment or ~/.aws/credentials)",
            ]
        );
        let problems = Config::problems(r#"{"commit": {"max_group_rows": 0, "linger": "soon"}}"#);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("commit.linger: "), "{problems:?}");
        let problems = Config::problems(
            r#"{"commit": {"max_group_rows": 0}, "parquet": {"page_size": 0},
                "schema_evolution": {"require_schema_metadata": true, "partition_spec": "(bucket(x, id))"}}"#,
        );
        assert_eq!(
            problems,
            [
                "commit.max_group_rows must be greater than 0",
                "schema_evolution.require_schema_metadata needs schema_evolution.schema_metadata \
                 (the metadata key holding the types)",
                "schema_evolution.partition_spec term \"bucket(x, id)\": bucket count is not a number",
            ]
        );
        assert!(Config::problems(r#"{"storage": {"gcp_cloud_storage": null}}"#).is_empty());
    }

    #[test]
    fn durations_go_accepts_and_refuses() {
        let d = |t| parse_duration(t).unwrap();
        assert_eq!(d("+5s"), std::time::Duration::from_secs(5));
        assert_eq!(d("-0s"), std::time::Duration::ZERO);
        assert_eq!(d("1\u{3bc}s"), std::time::Duration::from_micros(1));
        assert_eq!(d("1.5h"), std::time::Duration::from_secs(5_400));
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_duration("2562048h").unwrap_err().contains("longest"));
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_duration("2562047h").is_ok());
    }

    #[test]
    fn blank_parquet_settings_are_unset_and_levels_fit_their_codec() {
        let c = Config::from_json(
            r#"{"parquet": {"compression": "", "string_encoding": "", "compression_level": 0,
                "row_group_size": 0, "page_size": 0, "target_file_size_bytes": 0}}"#,
        )
        .unwrap();
        assert!(c.parquet.compression.is_none() && c.parquet.compression_level.is_none());
        assert!(c.parquet.row_group_size.is_none() && c.parquet.string_encoding.is_none());
        let problems = |json: &str| Config::problems(json);
        assert!(problems(r#"{"parquet": {"compression_level": -3}}"#)[0].contains("zstd's 1..=22"));
        assert!(
            problems(r#"{"parquet": {"compression": "gzip", "compression_level": 10}}"#)[0]
                .contains("gzip's 1..=9")
        );
        assert!(
            problems(r#"{"parquet": {"compression": "snappy", "compression_level": 3}}"#)[0]
                .contains("no levels")
        );
        assert!(
            problems(r#"{"parquet": {"compression": "gzip", "compression_level": 9}}"#).is_empty()
        );
    }

    #[test]
    fn a_schema_may_be_given_as_text() {
        let text = r#"{"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"}]}"#;
        let c = Config::from_json(
            &serde_json::json!({"schema_evolution": {"schema": text}}).to_string(),
        )
        .unwrap();
        assert_eq!(
            c.schema_evolution.schema.unwrap()["fields"][0]["name"],
            "id"
        );
        let problems = Config::problems(r#"{"schema_evolution": {"schema": "{nope"}}"#);
        assert!(
            problems[0].starts_with("schema_evolution.schema: not JSON"),
            "{problems:?}"
        );
    }

    #[test]
    fn empty_credentials_are_refused() {
        let problems = Config::problems(
            r#"{"storage": {"aws_s3": {"credentials": {"id": "", "secret": ""}}},
                "catalog": {"url": "http://127.0.0.1:1", "auth": {"oauth2": {"client_id": "", "client_secret": ""}}}}"#,
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn problems_never_quote_secrets() {
        let problems = Config::problems(
            r#"{"catalog": {"url": "ftp://user:hunter2@host", "auth": {"bearer": 987654321},
                "headers": {"Authorization": 987654321}}}"#,
        );
        assert_eq!(problems, ["catalog.auth.bearer: must be a string"]);
        let problems = Config::problems(
            r#"{"catalog": {"url": "ftp://user:hunter2@host"},
                "storage": {"aws_s3": {"credentials": {"id": "k", "secret": 987654321}}}}"#,
        );
        assert_eq!(
            problems,
            ["storage.aws_s3.credentials.secret: must be a string"]
        );
        for url in [
            "ftp://user:hunter2@host",
            "user:hunter2@catalog.example:8181",
            "https//user:hunter2@host",
        ] {
            let problems =
                Config::problems(&serde_json::json!({"catalog": {"url": url}}).to_string());
            assert!(!problems[0].contains("hunter2"), "{problems:?}");
        }
    }

    #[test]
    fn a_static_schema_is_checked_with_its_partition_spec() {
        let schema = r#"{"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"}]}"#;
        let config = |spec: &str| {
            format!(r#"{{"schema_evolution": {{"schema": {schema}, "partition_spec": "{spec}"}}}}"#)
        };
        assert!(Config::problems(&config("(bucket(4, id))")).is_empty());
        let problems = Config::problems(&config("(day(ts))"));
        assert_eq!(
            problems,
            ["schema_evolution.partition_spec: column \"ts\" is not in the table schema"]
        );
        let problems = Config::problems(r#"{"schema_evolution": {"schema": {"type": "list"}}}"#);
        assert!(
            problems[0].starts_with("schema_evolution.schema is not an Iceberg schema"),
            "{problems:?}"
        );
    }

    #[test]
    fn empty_text_is_unset_so_env_defaults_work() {
        let c = Config::from_json(r#"{"catalog": {"url": "", "warehouse": ""}, "namespace": ""}"#)
            .unwrap();
        assert_eq!(c.catalog.url, None);
        assert_eq!(c.namespace, None);
        assert_eq!(c.warehouse_or_default(), Config::DEFAULT_WAREHOUSE);
    }

    #[test]
    fn urls_holding_secrets_where_floe_cannot_keep_them_out_of_logs_are_refused() {
        let problems = Config::problems(
            r#"{"catalog": {"url": "http://127.0.0.1:9/api?token=QUERYTOKEN55"}}"#,
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("query string") && !problems[0].contains("QUERYTOKEN55"));
        let problems = Config::problems(
            r#"{"storage": {"aws_s3": {"bucket": "b", "endpoint": "http://u:PASSWORD99@127.0.0.1:9"}},
                "catalog": {"url": "http://127.0.0.1:9", "warehouse": "s3://b/wh"}}"#,
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("storage.aws_s3.endpoint") && !problems[0].contains("PASSWORD99")
        );
        assert!(
            Config::problems(r#"{"storage": {"aws_s3": {"bucket": "b", "endpoint": "http://127.0.0.1:9"}}, "catalog": {"url": "http://127.0.0.1:9", "warehouse": "s3://b/wh"}}"#)
                .is_empty()
        );
    }

    #[test]
    fn headers_the_client_cannot_send_are_config_problems() {
        let problems = Config::problems(
            r#"{"catalog": {"url": "http://127.0.0.1:9",
                "headers": {"Bad Header": "v", "X-Ok": "a\nSECRET"}}}"#,
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems.iter().all(|p| !p.contains("SECRET")),
            "{problems:?}"
        );
    }

    /// Redpanda Connect's `aws_sigv4` fields: its page's values parse, and where it would
    /// silently take one of two sources of credentials floe says so.
    #[test]
    fn sigv4_takes_redpanda_connects_fields() {
        let with = |sigv4: &str| {
            Config::problems(&format!(
                r#"{{"catalog": {{"url": "http://127.0.0.1:1", "auth": {{"aws_sigv4": {sigv4}}}}}}}"#
            ))
        };
        let rpcn = r#"{"region": "us-east-1", "endpoint": "https://sts.us-east-1.amazonaws.com",
            "tcp": {"connect_timeout": "0s", "keep_alive": {"idle": "15s", "interval": "15s", "count": 9}, "tcp_user_timeout": "0s"},
            "credentials": {"profile": "", "id": "AKID", "secret": "SECRET9", "token": "", "from_ec2_role": false,
                            "role": "arn:aws:iam::1:role/r", "role_external_id": "x"}, "service": "glue"}"#;
        assert_eq!(with(rpcn), Vec::<String>::new());
        let config = Config::from_json(&format!(
            r#"{{"catalog": {{"url": "http://127.0.0.1:1", "auth": {{"aws_sigv4": {rpcn}}}}}}}"#
        ))
        .unwrap();
        let sigv4 = config.catalog.auth.aws_sigv4.unwrap();
        let c = sigv4.credentials.as_ref().unwrap();
        assert_eq!((c.profile.as_deref(), c.token.as_deref()), (None, None));
        assert_eq!(c.role_external_id.as_deref(), Some("x"));
        assert!(!format!("{sigv4:?}").contains("SECRET9"));
        let keep_alive = sigv4.tcp.unwrap().keep_alive.unwrap();
        assert_eq!(
            keep_alive
                .effective()
                .map(|(idle, _, count)| (idle.as_secs(), count)),
            Some((15, 9))
        );
        for (sigv4, problem) in [
            (
                r#"{"credentials": {"profile": "p", "id": "a", "secret": "b"}}"#,
                "set profile or id and secret, not both",
            ),
            (
                r#"{"credentials": {"from_ec2_role": true, "role": "r"}}"#,
                "the instance's role replaces every other source",
            ),
            (
                r#"{"credentials": {"role_external_id": "x", "profile": "p"}}"#,
                "only a role assumed (role) sends it",
            ),
            (
                r#"{"credentials": {"id": "", "secret": ""}}"#,
                "id and secret must both be set, or profile, role or from_ec2_role",
            ),
            (
                r#"{"endpoint": "sts.amazonaws.com"}"#,
                "is not an http:// or https:// URL",
            ),
            (
                r#"{"tcp": {"keep_alive": {"idle": "5s"}, "tcp_user_timeout": "10s"}}"#,
                "keep_alive.idle (5s) must be greater than tcp_user_timeout (10s)",
            ),
        ] {
            let problems = with(sigv4);
            assert!(
                problems.len() == 1 && problems[0].contains(problem),
                "{sigv4}: {problems:?}"
            );
        }
        // A negative idle turns probes off, and then no user timeout is compared with it.
        assert_eq!(
            with(r#"{"tcp": {"keep_alive": {"idle": "-1s"}, "tcp_user_timeout": "10s"}}"#),
            Vec::<String>::new()
        );
        assert_eq!(
            with(r#"{"tcp": {"connect_timeout": "soon"}}"#),
            [
                r#"catalog.auth.aws_sigv4.tcp.connect_timeout: "soon" is not a duration like 500ms, 30s, 24h or 1h30m"#
            ]
        );
    }

    #[test]
    fn settings_of_the_other_catalog_kind_are_refused() {
        let problems = Config::problems(
            r#"{"catalog": {"url": "", "auth": {"bearer": "t0ken"}, "headers": {"X-A": "b"},
                "tls_skip_verify": true}}"#,
        );
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].starts_with("catalog.auth.bearer: only a REST catalog uses it"),
            "{problems:?}"
        );
        assert!(
            problems.iter().all(|p| !p.contains("t0ken")),
            "{problems:?}"
        );
        let problems =
            Config::problems(r#"{"catalog": {"url": "http://127.0.0.1:1", "name": "lake"}}"#);
        assert_eq!(
            problems,
            [
                "catalog.name: only the embedded catalog uses it (a REST catalog is named by its url)"
            ]
        );
        assert!(Config::problems(r#"{"catalog": {"name": "lake"}}"#).is_empty());
    }

    #[test]
    fn empty_text_with_a_default_takes_the_default() {
        let auth = |section: &str| {
            let text =
                format!(r#"{{"catalog": {{"url": "http://127.0.0.1:1", "auth": {section}}}}}"#);
            Config::from_json(&text).unwrap().catalog.auth
        };
        let oauth2 =
            auth(r#"{"oauth2": {"server_uri": "", "client_id": "i", "client_secret": "s"}}"#);
        assert_eq!(oauth2.oauth2.unwrap().server_uri, default_oauth_uri());
        let sigv4 = auth(r#"{"aws_sigv4": {"service": ""}}"#);
        assert_eq!(sigv4.aws_sigv4.unwrap().service, default_sigv4_service());
    }

    #[test]
    fn a_scalar_of_the_wrong_type_in_a_section_with_secrets_says_what_it_must_be() {
        let problems =
            Config::problems(r#"{"storage": {"aws_s3": {"force_path_style_urls": "yes"}}}"#);
        assert_eq!(
            problems,
            ["storage.aws_s3.force_path_style_urls: must be a boolean (its value is not shown)"]
        );
        let problems = Config::problems(
            r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"aws_sigv4": {"region": 5}}}}"#,
        );
        assert_eq!(
            problems,
            ["catalog.auth.aws_sigv4.region: must be a string (its value is not shown)"]
        );
        let problems = Config::problems(
            r#"{"storage": {"aws_s3": {"credentials": "AKIA, expected hunter2"}}}"#,
        );
        assert_eq!(
            problems,
            ["storage.aws_s3.credentials: must be a map (its value is not shown)"]
        );
        let problems = Config::problems(
            r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"oauth2": "id:hunter2"}}}"#,
        );
        assert_eq!(
            problems,
            ["catalog.auth.oauth2: must be a map (its value is not shown)"]
        );
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        for auth in [
            r#"{"bearer": "tok-SECRET"}"#,
            r#"{"oauth2": {"client_id": "id", "client_secret": "SECRET2"}}"#,
            r#"{"aws_sigv4": {"region": "r", "credentials": {"id": "AKIA", "secret": "SECRET4", "token": "SECRET5"}}}"#,
        ] {
            let c = Config::from_json(&format!(
                r#"{{"catalog": {{"url": "http://127.0.0.1:1", "auth": {auth}}},
                    "storage": {{"aws_s3": {{"credentials": {{"id": "AKIA", "secret": "SECRET3"}}}}}}}}"#
            ))
            .unwrap();
            let dbg = format!("{c:?}");
            assert!(!dbg.contains("SECRET"), "{dbg}");
        }
        for wrong in [
            r#"{"catalog": {"auth": {"aws_sigv4": {"credentials": "AKIA/SECRET6"}}}}"#,
            r#"{"catalog": {"auth": {"aws_sigv4": "SECRET6"}}}"#,
            r#"{"storage": {"aws_s3": {"credentials": "AKIA/SECRET6"}}}"#,
        ] {
            let problems = Config::problems(wrong);
            assert!(
                problems.len() == 1 && !problems[0].contains("SECRET"),
                "{problems:?}"
            );
        }
        let two = Config::problems(
            r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"bearer": "t", "aws_sigv4": {}}}}"#,
        );
        assert_eq!(
            two,
            ["catalog.auth: set one of bearer, oauth2 and aws_sigv4"]
        );
    }
}
