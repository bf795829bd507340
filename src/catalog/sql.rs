//! The embedded catalog: SQLite tables in the layout of Iceberg's JDBC catalog.
//!
//! `iceberg_tables` maps (catalog, namespace, table) to the current metadata file;
//! `iceberg_namespace_properties` records namespaces. A commit writes the next metadata
//! file and swaps the pointer with `UPDATE … WHERE metadata_location = <expected>`, so
//! concurrent writers (threads or processes) never overwrite each other's snapshots.

use crate::sync::LockExt;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::{NamespaceIdent, TableCreation, TableIdent, TableRequirement, TableUpdate};
use rusqlite::{Connection, OptionalExtension, params};

use super::answer::apply_updates;
use super::{Catalog, LoadedTable, NewTable, TableChanges};
use crate::error::{Error, ErrorKind, Result};

const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255) NOT NULL,
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key)
);";

pub struct SqlCatalog {
    name: String,
    /// `file://…` or `s3://…` root under which new tables are placed.
    warehouse: String,
    conn: Arc<Mutex<Connection>>,
    file_io: FileIO,
    /// The metadata last read or written per table. Metadata files are immutable, so an
    /// entry is valid as long as the catalog row still points at its location; this
    /// spares every commit a read and parse of the current metadata file.
    cache: Mutex<HashMap<TableIdent, (String, Arc<TableMetadata>)>>,
}

impl SqlCatalog {
    pub fn open(database: &Path, name: &str, warehouse: &str, file_io: FileIO) -> Result<Self> {
        if let Some(dir) = database.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::config(format!(
                    "cannot create the embedded catalog's folder {} (catalog.url, or \
                     catalog.warehouse when catalog.url is unset): {e}",
                    dir.display()
                ))
            })?;
        }
        let conn = Connection::open(database).map_err(|e| {
            Error::config(format!(
                "cannot open the embedded catalog {} (catalog.url, or catalog.warehouse when \
                 catalog.url is unset): {e}",
                database.display()
            ))
        })?;
        // Other processes may hold the write lock briefly while they swap a pointer.
        conn.busy_timeout(Duration::from_secs(30))?;
        conn.execute_batch(SCHEMA_SQL)?;
        Ok(SqlCatalog {
            name: name.to_string(),
            warehouse: warehouse.trim_end_matches('/').to_string(),
            conn: Arc::new(Mutex::new(conn)),
            file_io,
            cache: Mutex::new(HashMap::new()),
        })
    }

    fn namespace_key(ns: &NamespaceIdent) -> String {
        ns.as_ref().join(".")
    }

    /// Runs a SQLite call. SQLite blocks (up to the 30 s busy timeout while another
    /// process holds the write lock), so on a multi-threaded runtime the worker hands its
    /// other tasks to another thread first (`block_in_place`) instead of stalling them.
    fn with_conn<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let call = || {
            let conn = self.conn.locked();
            f(&conn).map_err(Error::from)
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(call),
            _ => call(),
        }
    }

    fn current_location(&self, ident: &TableIdent) -> Result<Option<String>> {
        let ns = Self::namespace_key(ident.namespace());
        self.with_conn(|c| {
            c.query_row(
                "SELECT metadata_location FROM iceberg_tables
                 WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3
                   AND (iceberg_type IS NULL OR iceberg_type = 'TABLE')",
                params![self.name, ns, ident.name()],
                |row| row.get::<_, Option<String>>(0),
            )
            .optional()
            .map(Option::flatten)
        })
    }

    /// The metadata at `location`, from the cache when it holds that version.
    async fn metadata_at(&self, ident: &TableIdent, location: &str) -> Result<Arc<TableMetadata>> {
        if let Some((cached, metadata)) = self.cache.locked().get(ident)
            && cached == location
        {
            return Ok(metadata.clone());
        }
        let metadata = Arc::new(self.read_metadata(location).await?);
        self.remember(ident, location, &metadata);
        Ok(metadata)
    }

    fn remember(&self, ident: &TableIdent, location: &str, metadata: &Arc<TableMetadata>) {
        self.cache
            .locked()
            .insert(ident.clone(), (location.to_string(), metadata.clone()));
    }

    /// A file the catalog points at that cannot be read is a storage problem (an outage,
    /// a lost upload) that may pass: retryable, not the messages' fault.
    async fn read_metadata(&self, location: &str) -> Result<TableMetadata> {
        let bytes = match self.file_io.new_input(location)?.read().await {
            Ok(b) => b,
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("could not read table metadata {location}: {e:#}"),
                ));
            }
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::internal(format!("table metadata {location} is not valid: {e}")))
    }

    /// With `write.metadata.delete-after-commit.enabled`, deletes the metadata files
    /// that fell out of the table's metadata log (`write.metadata.previous-versions-max`
    /// long) with this commit, as Iceberg's own catalogs do. Nothing references them.
    async fn delete_dropped_metadata(
        &self,
        before: &TableMetadata,
        before_location: &str,
        after: &TableMetadata,
    ) {
        let enabled = after
            .properties()
            .get(DELETE_AFTER_COMMIT)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if !enabled {
            return;
        }
        let kept: std::collections::HashSet<&str> = after
            .metadata_log()
            .iter()
            .map(|e| e.metadata_file.as_str())
            .collect();
        let dropped = before
            .metadata_log()
            .iter()
            .map(|e| e.metadata_file.as_str())
            .chain([before_location])
            .filter(|f| !kept.contains(f));
        for file in dropped {
            if let Err(e) = self.file_io.delete(file).await {
                tracing::warn!("could not delete old table metadata {file}: {e}");
            }
        }
    }

    async fn write_metadata(&self, location: &str, metadata: &TableMetadata) -> Result<()> {
        let json = serde_json::to_vec(metadata)
            .map_err(|e| Error::internal(format!("cannot serialize table metadata: {e}")))?;
        self.file_io
            .new_output(location)?
            .write(json.into())
            .await?;
        Ok(())
    }

    fn loaded(ident: &TableIdent, location: String, metadata: Arc<TableMetadata>) -> LoadedTable {
        LoadedTable::new(ident.clone(), Some(location), metadata, Default::default())
    }
}

/// `<table>/metadata/<version>-<uuid>.metadata.json`, the version one past `previous`.
fn next_metadata_location(table_location: &str, previous: Option<&str>) -> String {
    let version = previous
        .and_then(|p| p.rsplit('/').next())
        .and_then(|name| name.split('-').next())
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |v| v + 1);
    format!(
        "{}/metadata/{version:05}-{}.metadata.json",
        table_location.trim_end_matches('/'),
        uuid::Uuid::new_v4()
    )
}

#[async_trait]
impl Catalog for SqlCatalog {
    async fn load_table(&self, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        let Some(location) = self.current_location(ident)? else {
            return Ok(None);
        };
        let metadata = self.metadata_at(ident, &location).await?;
        Ok(Some(Self::loaded(ident, location, metadata)))
    }

    async fn ensure_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        let ns = Self::namespace_key(namespace);
        self.with_conn(|c| {
            c.execute(
                "INSERT OR IGNORE INTO iceberg_namespace_properties
                 (catalog_name, namespace, property_key, property_value)
                 VALUES (?1, ?2, 'exists', 'true')",
                params![self.name, ns],
            )
        })?;
        Ok(())
    }

    async fn create_table(&self, ident: &TableIdent, table: NewTable) -> Result<LoadedTable> {
        let location = table.location.unwrap_or_else(|| {
            format!(
                "{}/{}/{}",
                self.warehouse,
                ident.namespace().as_ref().join("/"),
                ident.name()
            )
        });
        let creation = TableCreation::builder()
            .name(ident.name().to_string())
            .location(location.clone())
            .schema(table.schema)
            .partition_spec_opt(table.partition_spec)
            .properties(table.properties)
            .format_version(table.format_version)
            .build();
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = next_metadata_location(&location, None);
        self.write_metadata(&metadata_location, &metadata).await?;
        let ns = Self::namespace_key(ident.namespace());
        let inserted = self.with_conn(|c| {
            c.execute(
                "INSERT OR IGNORE INTO iceberg_tables
                 (catalog_name, table_namespace, table_name, metadata_location,
                  previous_metadata_location, iceberg_type)
                 VALUES (?1, ?2, ?3, ?4, NULL, 'TABLE')",
                params![self.name, ns, ident.name(), metadata_location],
            )
        })?;
        if inserted == 1 {
            return Ok(Self::loaded(ident, metadata_location, Arc::new(metadata)));
        }
        // Another writer created it first: ours was never visible, so remove it.
        let _ = self.file_io.delete(&metadata_location).await;
        self.load_table(ident)
            .await?
            .ok_or_else(|| Error::internal(format!("table {ident} vanished after creation")))
    }

    async fn commit(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<LoadedTable> {
        let change = self.prepare(ident, requirements, updates).await?;
        let swapped = self.with_conn(|c| change.swap(c, &self.name));
        match swapped {
            Ok(true) => Ok(self.applied(change).await),
            Ok(false) => {
                change.discard(&self.file_io).await;
                Err(changed_by_another(ident))
            }
            // The swap may have happened before the error surfaced: keep the file.
            Err(e) => Err(Error::new(
                ErrorKind::CommitStateUnknown,
                format!("embedded catalog commit of {ident}: {e}"),
            )),
        }
    }

    fn check_commit_tables(&self) -> Result<()> {
        Ok(())
    }

    /// Every table's pointer is swapped in one SQLite transaction, which holds the
    /// database's write lock from its start: each swap finds the metadata it was built
    /// on or the transaction rolls back, so readers see every table's new metadata or
    /// none of it.
    async fn commit_tables(&self, changes: Vec<TableChanges>) -> Result<()> {
        let mut prepared = Vec::with_capacity(changes.len());
        for c in changes {
            match self.prepare(&c.ident, c.requirements, c.updates).await {
                Ok(change) => prepared.push(change),
                Err(e) => {
                    discard_all(&prepared, &self.file_io).await;
                    return Err(e);
                }
            }
        }
        let swapped = self.with_conn(|c| Ok(swap_all(c, &self.name, &prepared)))?;
        let names = || {
            let names: Vec<String> = prepared.iter().map(|c| c.ident.to_string()).collect();
            names.join(", ")
        };
        match swapped {
            Ok(None) => {
                for change in prepared {
                    self.applied(change).await;
                }
                Ok(())
            }
            Ok(Some(ident)) => {
                discard_all(&prepared, &self.file_io).await;
                Err(changed_by_another(&ident))
            }
            Err(Swap::NotApplied(e)) => {
                discard_all(&prepared, &self.file_io).await;
                Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("embedded catalog commit of {}: {e}", names()),
                ))
            }
            // The commit may have been applied before the error surfaced: keep the files.
            Err(Swap::Unknown(e)) => Err(Error::new(
                ErrorKind::CommitStateUnknown,
                format!("embedded catalog commit of {}: {e}", names()),
            )),
        }
    }
}

/// Swaps every change's pointer in one transaction that holds the write lock from its
/// start; `Ok(Some(table))` when another writer moved that table (rolled back).
fn swap_all(
    c: &Connection,
    catalog: &str,
    prepared: &[PreparedChange],
) -> std::result::Result<Option<TableIdent>, Swap> {
    let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)
        .map_err(Swap::NotApplied)?;
    for change in prepared {
        // Dropping `tx` on return rolls it back.
        if !change.swap(&tx, catalog).map_err(Swap::NotApplied)? {
            return Ok(Some(change.ident.clone()));
        }
    }
    tx.commit().map_err(Swap::Unknown)?;
    Ok(None)
}

/// Why a multi-table swap failed: before its transaction committed (rolled back, nothing
/// applied), or at the commit itself (which may have been applied).
enum Swap {
    NotApplied(rusqlite::Error),
    Unknown(rusqlite::Error),
}

fn changed_by_another(ident: &TableIdent) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!("table {ident} was changed by another writer"),
    )
}

async fn discard_all(prepared: &[PreparedChange], file_io: &FileIO) {
    for change in prepared {
        change.discard(file_io).await;
    }
}

/// A commit's new metadata, written and waiting for its pointer to be swapped.
struct PreparedChange {
    ident: TableIdent,
    previous_metadata: Arc<TableMetadata>,
    previous_location: String,
    metadata: TableMetadata,
    location: String,
}

impl PreparedChange {
    /// Points the table at the new metadata if it still points at the metadata the
    /// change was built on; `false` when another writer moved it.
    fn swap(&self, c: &Connection, catalog: &str) -> rusqlite::Result<bool> {
        let ns = SqlCatalog::namespace_key(self.ident.namespace());
        let rows = c.execute(
            "UPDATE iceberg_tables
             SET metadata_location = ?1, previous_metadata_location = ?2
             WHERE catalog_name = ?3 AND table_namespace = ?4 AND table_name = ?5
               AND metadata_location = ?2",
            params![
                self.location,
                self.previous_location,
                catalog,
                ns,
                self.ident.name()
            ],
        )?;
        Ok(rows == 1)
    }

    /// Deletes the new metadata file of a change that was not applied.
    async fn discard(&self, file_io: &FileIO) {
        let _ = file_io.delete(&self.location).await;
    }
}

impl SqlCatalog {
    /// Checks the requirements against the table as it is, applies the updates and
    /// writes the new metadata file (not yet pointed at).
    async fn prepare(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<PreparedChange> {
        let current = self
            .load_table(ident)
            .await?
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("table {ident} not found")))?;
        for requirement in &requirements {
            requirement
                .check(Some(&current.metadata))
                .map_err(|e| Error::new(ErrorKind::Conflict, format!("{e}")))?;
        }
        let previous_location = current
            .metadata_location
            .clone()
            .expect("loaded tables have one");
        // An update the metadata refuses is the catalog refusing the commit (as a REST
        // catalog answers 400), never a message's fault.
        let metadata = apply_updates(
            current.metadata.clone(),
            Some(previous_location.clone()),
            updates,
        )
        .map_err(|e| {
            Error::new(
                ErrorKind::Rejected,
                format!("embedded catalog refused the commit to {ident}: {e}"),
            )
        })?;
        let location = next_metadata_location(metadata.location(), Some(&previous_location));
        self.write_metadata(&location, &metadata).await?;
        Ok(PreparedChange {
            ident: ident.clone(),
            previous_metadata: current.metadata,
            previous_location,
            metadata,
            location,
        })
    }

    /// Takes in a change whose swap was committed: old metadata files the table's log
    /// dropped are deleted, the new metadata is remembered.
    async fn applied(&self, change: PreparedChange) -> LoadedTable {
        self.delete_dropped_metadata(
            &change.previous_metadata,
            &change.previous_location,
            &change.metadata,
        )
        .await;
        let metadata = Arc::new(change.metadata);
        self.remember(&change.ident, &change.location, &metadata);
        Self::loaded(&change.ident, change.location, metadata)
    }
}

/// Table property: delete metadata files older than the metadata log keeps.
pub const DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";
/// Table property: how many previous metadata files the log keeps.
pub const PREVIOUS_VERSIONS_MAX: &str = "write.metadata.previous-versions-max";

/// Test support: an embedded catalog in `dir` holding namespace `ns` with one
/// `(id long)` table per name, for the unit tests of the layers above.
#[cfg(test)]
pub(crate) async fn catalog_with_tables(
    dir: &Path,
    names: &[&str],
) -> (SqlCatalog, Vec<TableIdent>) {
    use iceberg::spec::{FormatVersion, NestedField, PrimitiveType, Schema, Type};
    let warehouse = format!("file://{}", dir.join("wh").display());
    let io = crate::storage::build_file_io(HashMap::new());
    let catalog = SqlCatalog::open(&dir.join("catalog.db"), "floe", &warehouse, io).unwrap();
    let schema = Schema::builder()
        .with_fields([NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into()])
        .build()
        .unwrap();
    let ns = NamespaceIdent::new("ns".into());
    catalog.ensure_namespace(&ns).await.unwrap();
    let mut idents = Vec::new();
    for name in names {
        let ident = TableIdent::new(ns.clone(), name.to_string());
        let new = NewTable {
            schema: schema.clone(),
            partition_spec: None,
            location: None,
            properties: HashMap::new(),
            format_version: FormatVersion::V2,
        };
        catalog.create_table(&ident, new).await.unwrap();
        idents.push(ident);
    }
    (catalog, idents)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A multi-table swap whose second table moved since its change was prepared rolls
    /// back the first table's swap: neither points at its new metadata.
    #[tokio::test]
    async fn a_stale_table_rolls_the_whole_swap_back() {
        let dir = tempfile::tempdir().unwrap();
        let (cat, idents) = catalog_with_tables(dir.path(), &["a", "b"]).await;
        let (a, b) = (idents[0].clone(), idents[1].clone());
        let mark = |v: &str| {
            vec![TableUpdate::SetProperties {
                updates: HashMap::from([("mark".to_string(), v.to_string())]),
            }]
        };
        let pa = cat.prepare(&a, vec![], mark("1")).await.unwrap();
        let pb = cat.prepare(&b, vec![], mark("1")).await.unwrap();
        cat.commit(&b, vec![], mark("other")).await.unwrap(); // another writer moves b
        let before_a = cat.current_location(&a).unwrap();
        let swapped = cat.with_conn(|c| Ok(swap_all(c, &cat.name, &[pa, pb])));
        match swapped {
            Ok(Ok(Some(stale))) => assert_eq!(stale, b),
            _ => panic!("the swap did not report b stale"),
        }
        assert_eq!(
            cat.current_location(&a).unwrap(),
            before_a,
            "a was swapped alone"
        );
        let b_now = cat.load_table(&b).await.unwrap().unwrap();
        assert_eq!(b_now.metadata.properties()["mark"], "other");
    }

    #[test]
    fn metadata_versions_increase() {
        let first = next_metadata_location("file:///w/t", None);
        assert!(first.starts_with("file:///w/t/metadata/00000-"), "{first}");
        let second = next_metadata_location("file:///w/t/", Some(&first));
        assert!(
            second.starts_with("file:///w/t/metadata/00001-"),
            "{second}"
        );
    }
}
