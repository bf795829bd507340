//! Catalogs: one trait, two implementations.
//!
//! - [`rest::RestCatalog`]: floe's own thin client for the Iceberg REST protocol.
//! - [`sql::SqlCatalog`]: an embedded SQLite catalog in the layout of Iceberg's JDBC
//!   catalog, so pyiceberg's `SqlCatalog` and Java's `JdbcCatalog` can open it.
//!
//! Both commit the same way: floe produces the snapshot and the metadata updates itself
//! (see `commit`), and the catalog applies them atomically or reports a conflict.

pub mod answer;
mod aws_chain;
pub mod refs;
pub mod rest;
mod sigv4;
pub mod sql;

use std::collections::HashMap;
use std::sync::OnceLock;

use async_trait::async_trait;
use iceberg::spec::{
    FormatVersion, Schema, SnapshotReference, TableMetadataRef, UnboundPartitionSpec,
};
use iceberg::{NamespaceIdent, TableIdent, TableRequirement, TableUpdate};

use crate::Result;

/// A table's branches and tags by name.
pub type Refs = HashMap<String, SnapshotReference>;

/// A table as the catalog last reported it.
#[derive(Clone)]
pub struct LoadedTable {
    pub ident: TableIdent,
    pub metadata_location: Option<String>,
    pub metadata: TableMetadataRef,
    /// FileIO properties the catalog supplied for this table (e.g. vended credentials).
    pub io_props: HashMap<String, String>,
    /// The metadata's refs, once known (see [`Self::refs`]).
    refs: OnceLock<Option<Refs>>,
}

/// Without the FileIO properties' values: vended credentials are among them.
impl std::fmt::Debug for LoadedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut props: Vec<&String> = self.io_props.keys().collect();
        props.sort();
        f.debug_struct("LoadedTable")
            .field("ident", &self.ident)
            .field("metadata_location", &self.metadata_location)
            .field("metadata", &self.metadata)
            .field("io_props (values redacted)", &props)
            .finish()
    }
}

impl LoadedTable {
    pub fn new(
        ident: TableIdent,
        metadata_location: Option<String>,
        metadata: TableMetadataRef,
        io_props: HashMap<String, String>,
    ) -> Self {
        LoadedTable {
            ident,
            metadata_location,
            metadata,
            io_props,
            refs: OnceLock::new(),
        }
    }

    /// The table with its refs already known (e.g. read from a catalog's answer); they
    /// must be the metadata's own.
    pub fn with_refs(self, refs: Option<Refs>) -> Self {
        LoadedTable {
            refs: OnceLock::from(refs),
            ..self
        }
    }

    /// The table's refs (`None`: the metadata has none, as v1 metadata may). iceberg-rust
    /// keeps them private, so the first call reads them through a serialisation of the
    /// whole metadata (see `commit::refs`); a commit applied locally carries them over.
    pub fn refs(&self) -> Option<&Refs> {
        self.refs
            .get_or_init(|| crate::catalog::refs::table_refs(&self.metadata))
            .as_ref()
    }
}

/// What a new table should look like.
#[derive(Debug, Clone)]
pub struct NewTable {
    pub schema: Schema,
    pub partition_spec: Option<UnboundPartitionSpec>,
    /// Where to put it; `None` lets the catalog choose.
    pub location: Option<String>,
    pub properties: HashMap<String, String>,
    /// The table's Iceberg format version.
    pub format_version: FormatVersion,
}

#[async_trait]
pub trait Catalog: Send + Sync {
    /// Loads a table; `Ok(None)` when it does not exist.
    async fn load_table(&self, ident: &TableIdent) -> Result<Option<LoadedTable>>;

    /// Creates the namespace unless it already exists.
    async fn ensure_namespace(&self, namespace: &NamespaceIdent) -> Result<()>;

    /// Creates a table. If another writer created it first, loads and returns that one.
    async fn create_table(&self, ident: &TableIdent, table: NewTable) -> Result<LoadedTable>;

    /// Whether the engines reading this catalog's tables apply v2 delete files. Unity
    /// Catalog's do not, so upserts and deletes there must be copy-on-write.
    fn reads_delete_files(&self) -> bool {
        true
    }

    /// Applies `updates` if every requirement holds, atomically. Fails with
    /// `ErrorKind::Conflict` when a requirement does not hold (nothing changed) and with
    /// `ErrorKind::CommitStateUnknown` when the outcome cannot be known.
    async fn commit(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<LoadedTable>;

    /// Like [`Self::commit`] for a commit built on `base`, whose requirements pin its
    /// uuid, main branch head, schema and spec. The table returned may be `base` with
    /// `updates` applied locally, checked against the catalog's answer, instead of the
    /// table the catalog sent back (see [`answer`]): cheaper for long histories, but
    /// blind to what the check does not cover (snapshots another tool removed,
    /// statistics, schemas and specs that are not current, the logs), which the caller
    /// reloads to see. `base` is taken so that its metadata, if held nowhere else, is
    /// changed in place rather than copied (see [`answer::apply_updates`]).
    async fn commit_on(
        &self,
        base: LoadedTable,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<LoadedTable> {
        self.commit(&base.ident, requirements, updates).await
    }

    /// `Ok` when [`Self::commit_tables`] is offered, else a config error saying why not
    /// (asked once, when `commit.atomic_tables` is on).
    fn check_commit_tables(&self) -> Result<()> {
        Err(crate::Error::config(
            "commit.atomic_tables: this catalog cannot commit several tables at once",
        ))
    }

    /// Applies each table's updates if every requirement of every table holds, as one
    /// transaction: all tables change or none does. Errors as [`Self::commit`]'s, for the
    /// whole: a conflict on any table refuses every table's changes. Callers load the
    /// tables afterwards (a REST catalog answers without them).
    async fn commit_tables(&self, changes: Vec<TableChanges>) -> Result<()> {
        let _ = changes;
        self.check_commit_tables()
    }
}

/// One table's part of a multi-table commit (see [`Catalog::commit_tables`]).
#[derive(Debug)]
pub struct TableChanges {
    pub ident: TableIdent,
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
}

/// Splits a dotted namespace (`a.b`) into levels, refusing empty levels.
pub fn parse_namespace(text: &str) -> Result<NamespaceIdent> {
    let levels: Vec<String> = text.split('.').map(str::to_string).collect();
    if text.is_empty() || levels.iter().any(String::is_empty) {
        return Err(crate::Error::config(format!(
            "namespace {text:?} must be dot-separated non-empty levels"
        )));
    }
    for level in &levels {
        check_folder_name("namespace level", level)?;
    }
    NamespaceIdent::from_vec(levels).map_err(crate::Error::from)
}

pub fn table_ident(namespace: &str, table: &str) -> Result<TableIdent> {
    if table.is_empty() {
        return Err(crate::Error::config("table name is empty"));
    }
    check_folder_name("table name", table)?;
    Ok(TableIdent::new(
        parse_namespace(namespace)?,
        table.to_string(),
    ))
}

/// The longest name most file systems (and object-store key segments floe writes) take.
const MAX_NAME_BYTES: usize = 255;

/// Namespace levels and table names become folders of table locations (the embedded
/// catalog's, and many REST catalogs' defaults), and interpolated ones come from
/// messages: a name must be one folder name, so that no message writes outside the
/// warehouse (`..`, `a/../b`) or names a table no storage can hold.
fn check_folder_name(what: &str, name: &str) -> Result<()> {
    let problem = if name == "." || name == ".." {
        Some("is not a folder name")
    } else if name.contains(['/', '\\']) {
        Some("holds a path separator")
    } else if name.chars().any(char::is_control) {
        Some("holds a control character")
    } else if name.len() > MAX_NAME_BYTES {
        Some("is longer than 255 bytes")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(why) => {
            let shown: String = name.chars().take(64).collect();
            Err(crate::Error::config(format!("{what} {shown:?} {why}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_single_folder_names() {
        assert!(table_ident("a.b", "events-2026_v1 ü").is_ok());
        for bad in ["..", ".", "a/b", "a\\b", "x\u{0}", "t\n", &"x".repeat(256)] {
            let e = table_ident("ns", bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Config, "{bad:?}: {e}");
        }
        assert!(table_ident("ns", &"x".repeat(255)).is_ok());
        assert!(parse_namespace("a.b/c").is_err());
        assert!(parse_namespace("a..b").is_err());
        let e = table_ident("ns", &"y".repeat(1000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 200, "the name is shown cut short: {e}");
    }
}
