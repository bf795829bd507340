//! The sections of a config that say how floe reaches the catalog and the storage,
//! with `Debug` forms that never show a secret.

use super::*;

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

#[derive(Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default, deserialize_with = "non_empty")]
    pub bearer: Option<String>,
    pub oauth2: Option<OAuth2Config>,
    pub aws_sigv4: Option<SigV4Config>,
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
