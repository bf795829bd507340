//! Typed writer configuration, parsed from the JSON the host hands over.
//!
//! Field names follow the Redpanda Connect `iceberg` output (see CONFIG-COMPAT.md) so a
//! YAML config carries over unchanged. Unknown fields are errors, never ignored, and
//! nothing is read from the environment behind the user's back.
//!
//! The module is in files of one job each: the sections' types ([`types`] for what
//! floe does, [`connection`] for how it reaches the catalog and storage), how field
//! values are read and written ([`fields`]: durations, blank-as-unset), the defaults
//! ([`defaults`]), and the checks of values that parse but cannot work ([`checks`]).

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod checks;
mod connection;
mod defaults;
mod fields;
#[cfg(test)]
mod tests;
mod types;

use checks::*;
pub use connection::*;
use defaults::*;
use fields::*;
pub use fields::{format_duration, parse_duration};
pub use types::*;

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

    /// The embedded warehouse root when no catalog is configured.
    pub const DEFAULT_WAREHOUSE: &'static str = "./warehouse";

    pub fn catalog_kind(&self) -> Result<CatalogKind> {
        match self.catalog.url.as_deref() {
            None => match self.remote_warehouse_without_database() {
                Some(warehouse) => Err(Error::config(format!(
                    "catalog.warehouse {:?} is not a local folder, and the embedded catalog \
                     (catalog.url unset) keeps its database in <warehouse>/catalog.db: give \
                     the database's local path as catalog.url: sqlite:<path>",
                    redact_user_info(warehouse)
                ))),
                None => Ok(CatalogKind::Embedded {
                    database: local_folder(self.warehouse_or_default()).join("catalog.db"),
                }),
            },
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
            Some(url) if url.starts_with("sqlite:") => Ok(CatalogKind::Embedded {
                database: sqlite_path(url)?,
            }),
            Some(url) => Err(Error::config(format!(
                "catalog.url {:?} must start with http://, https:// (REST) or sqlite: (embedded)",
                redact_user_info(url)
            ))),
        }
    }

    /// The embedded catalog's database when its warehouse is not a local folder: its
    /// default place (`<warehouse>/catalog.db`) would be a local folder named after the
    /// URL (`./s3:/…`), so such a warehouse needs `catalog.url: sqlite:<path>`.
    pub(crate) fn remote_warehouse_without_database(&self) -> Option<&str> {
        let warehouse = self.catalog.warehouse.as_deref()?;
        let remote = warehouse.contains("://") && !warehouse.starts_with("file:");
        (remote && self.catalog.url.as_deref().is_none_or(str::is_empty)).then_some(warehouse)
    }

    pub fn warehouse_or_default(&self) -> &str {
        self.catalog
            .warehouse
            .as_deref()
            .unwrap_or(Self::DEFAULT_WAREHOUSE)
    }
}

/// The database path of a `sqlite:` catalog URL. `sqlite:<path>` names it as it is
/// (`sqlite:/abs/catalog.db`, `sqlite:./catalog.db`); the URL form reads as SQLAlchemy
/// (and so pyiceberg) reads it, so one string serves both: `sqlite:///rel/catalog.db`
/// is relative, `sqlite:////abs/catalog.db` absolute, and a host is refused.
fn sqlite_path(url: &str) -> Result<PathBuf> {
    let rest = url.strip_prefix("sqlite:").unwrap_or(url);
    let path = match rest.strip_prefix("//") {
        None => rest,
        Some(after) => after.strip_prefix('/').ok_or_else(|| {
            Error::config(format!(
                "catalog.url {:?} names a host: write sqlite:<path>, or sqlite:///<relative \
                 path> or sqlite:////<absolute path> as SQLAlchemy and pyiceberg read them",
                redact_user_info(url)
            ))
        })?,
    };
    if path.is_empty() {
        return Err(Error::config("catalog.url sqlite: needs a database path"));
    }
    Ok(PathBuf::from(path))
}

/// The local path a warehouse or file names, written as a path or a `file:` URL
/// (`file:/a`, `file://a` and `file:///a` all name `/a`, as iceberg-storage-opendal
/// resolves them); the storage's own local reads and writes resolve them so too.
pub(crate) fn local_folder(warehouse: &str) -> PathBuf {
    match warehouse.strip_prefix("file:") {
        Some(rest) => PathBuf::from(format!("/{}", rest.trim_start_matches('/'))),
        None => PathBuf::from(warehouse),
    }
}
