//! Typed writer configuration, parsed from the JSON the host hands over.
//!
//! Field names follow the Redpanda Connect `iceberg` output (see CONFIG-COMPAT.md) so a
//! YAML config carries over unchanged. Unknown fields are errors, never ignored, and
//! nothing is read from the environment behind the user's back.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::shred::EpochUnit;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub catalog: CatalogConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    /// Default namespace (dot-separated levels) for messages that name none.
    pub namespace: Option<String>,
    /// Default table for messages that name none.
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
    /// Worker threads of the process-wide runtime (set by the first writer opened).
    pub runtime_threads: Option<usize>,
}

fn yes() -> bool {
    true
}

/// Which catalog: `url` with `http(s)://` is a REST catalog; `sqlite:` (or no url) is the
/// embedded SQLite catalog.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    pub url: Option<String>,
    /// REST: warehouse name. Embedded: the folder (or `s3://bucket/prefix`) tables go in.
    pub warehouse: Option<String>,
    /// Embedded: the catalog name stored in each row (pyiceberg's `SqlCatalog` name).
    pub name: Option<String>,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub headers: HashMap<String, String>,
    #[serde(default)]
    pub tls_skip_verify: bool,
}

#[derive(Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    pub bearer: Option<String>,
    pub oauth2: Option<OAuth2Config>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Config {
    /// Token endpoint; relative paths are resolved against `catalog.url`.
    #[serde(default = "default_oauth_uri")]
    pub server_uri: String,
    pub client_id: String,
    pub client_secret: String,
    pub scope: Option<String>,
}

fn default_oauth_uri() -> String {
    "/v1/oauth/tokens".into()
}

// Secrets stay out of Debug output (and so out of logs and error messages).
impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .field("oauth2", &self.oauth2)
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

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    pub aws_s3: Option<S3Config>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    pub bucket: Option<String>,
    pub region: Option<String>,
    pub endpoint: Option<String>,
    #[serde(default)]
    pub force_path_style_urls: bool,
    pub credentials: Option<S3Credentials>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Credentials {
    pub id: String,
    pub secret: String,
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

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SchemaEvolution {
    /// Create the namespace and table when missing. (Adding columns is a later feature.)
    #[serde(default)]
    pub enabled: bool,
    /// Partition spec for new tables, e.g. `(day(ts), bucket(16, user_id))`.
    pub partition_spec: Option<String>,
    /// Location prefix for new tables when the catalog assigns none.
    pub table_location: Option<String>,
    /// Explicit schema for new tables (Iceberg schema JSON); inferred when absent.
    pub schema: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Zstd,
    Snappy,
    Lz4,
    Gzip,
    Uncompressed,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StringEncoding {
    DeltaLengthByteArray,
    Plain,
}

/// Parquet options. `None` means: the table's `write.parquet.*` property, else floe's default.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ParquetConfig {
    pub compression: Option<Compression>,
    pub compression_level: Option<i32>,
    pub row_group_size: Option<usize>,
    pub page_size: Option<usize>,
    pub dictionary: Option<bool>,
    pub target_file_size_bytes: Option<usize>,
    pub string_encoding: Option<StringEncoding>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitConfig {
    /// Retries after a conflict (or an unknown outcome that turned out not committed),
    /// each rebuilt on the new table head after an exponential, jittered backoff.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
}

fn default_max_retries() -> u32 {
    3
}

impl Default for CommitConfig {
    fn default() -> Self {
        CommitConfig {
            max_retries: default_max_retries(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct JsonConfig {
    /// Unit of epoch numbers given for timestamp columns (default milliseconds).
    #[serde(default)]
    pub epoch_unit: EpochUnit,
}

/// The catalog a config selects, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogKind {
    Rest { url: String },
    Embedded { database: PathBuf },
}

impl Config {
    pub fn from_json(text: &str) -> Result<Self> {
        let config: Config = serde_json::from_str(text)
            .map_err(|e| Error::config(format!("invalid config: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        self.catalog_kind()?;
        if let Some(level) = self.parquet.compression_level
            && self.parquet.compression == Some(Compression::Zstd)
            && !(1..=22).contains(&level)
        {
            return Err(Error::config(format!(
                "parquet.compression_level {level} is outside zstd's 1..=22"
            )));
        }
        if self.parquet.row_group_size == Some(0) || self.parquet.page_size == Some(0) {
            return Err(Error::config("parquet sizes must be greater than 0"));
        }
        Ok(())
    }

    /// The embedded warehouse root when no catalog is configured.
    pub const DEFAULT_WAREHOUSE: &'static str = "./warehouse";

    pub fn catalog_kind(&self) -> Result<CatalogKind> {
        match self.catalog.url.as_deref() {
            None => Ok(CatalogKind::Embedded {
                database: PathBuf::from(self.warehouse_or_default()).join("catalog.db"),
            }),
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
                "catalog.url {url:?} must start with http://, https:// (REST) or sqlite: (embedded)"
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
    fn secrets_stay_out_of_debug_output() {
        let c = Config::from_json(
            r#"{"catalog": {"auth": {"bearer": "tok-SECRET", "oauth2": {"client_id": "id", "client_secret": "SECRET2"}}},
                "storage": {"aws_s3": {"credentials": {"id": "AKIA", "secret": "SECRET3"}}}}"#,
        )
        .unwrap();
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("SECRET"), "{dbg}");
    }
}
