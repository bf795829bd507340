//! What write calls need to know of the committer's table (schema, key, strategy, file
//! settings), shared read-only with them; and which upsert strategy a table takes. The
//! commit stage may know newer snapshots than the view shows (see `stage::KeptTable`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use iceberg::io::FileIO;
use iceberg::spec::{FormatVersion, Schema, TableMetadata};
use tokio::sync::watch;

use super::{CommitterOptions, Ledger};
use crate::catalog::LoadedTable;
use crate::commit::offsets::{OFFSETS_PROPERTY_PREFIX, committed_offsets};
use crate::config::MergeStrategy;
use crate::error::{Error, Result};
use crate::rowops::KeyColumns;
use crate::sync::LockExt;
use crate::table::merge::MergePolicy;
use crate::write::{FileSettings, file_settings};

/// The committer's table as write calls need it; shared read-only with them. Its
/// snapshots may be behind the commit stage's own (see `stage::KeptTable`).
pub struct TableView {
    pub table: LoadedTable,
    pub file_io: FileIO,
    pub settings: FileSettings,
    pub merge: MergePolicy,
    /// The key upserts and deletes match by; `None` for a table without one.
    pub keys: Option<Arc<KeyColumns>>,
    /// Why the table's own identifier fields cannot serve as the key (upserts and deletes
    /// then fail with this reason; inserts are unaffected).
    pub key_problem: Option<String>,
    /// How this table's upserts and deletes are written.
    pub strategy: MergeStrategy,
}

impl TableView {
    pub fn new(table: LoadedTable, file_io: FileIO, options: &CommitterOptions) -> Result<Self> {
        // Write modes floe cannot follow only matter for upserts and deletes.
        let (strategy, strategy_problem) = match merge_strategy(
            options.merge_strategy,
            &table.metadata,
            options.reads_delete_files,
        ) {
            Ok(s) => (s, None),
            Err(e) => (
                options.merge_strategy.unwrap_or_default(),
                Some(e.to_string()),
            ),
        };
        let keys = KeyColumns::for_table(
            table.metadata.current_schema(),
            &options.identifier_fields,
            options.case_sensitive_columns,
        )
        .and_then(|keys| match &keys {
            Some(k) if strategy == MergeStrategy::MergeOnRead => {
                check_merge_on_read(&table.metadata, k).map(|()| keys)
            }
            Some(_) if strategy == MergeStrategy::MergeOnReadPositional => {
                crate::rowops::positional::check_table(&table.metadata).map(|()| keys)
            }
            Some(_) => Ok(keys),
            None => Ok(None),
        });
        // A configured key must work; a key the table brings (set by another tool) only
        // matters once a message upserts or deletes, so inserts go on without it.
        let (keys, key_problem) = match keys {
            _ if strategy_problem.is_some() => (None, strategy_problem),
            Ok(keys) => (keys.map(Arc::new), None),
            Err(e) if options.identifier_fields.is_empty() => (None, Some(e.to_string())),
            Err(e) => return Err(e),
        };
        Ok(TableView {
            settings: file_settings(&options.parquet, &table.metadata)?,
            merge: MergePolicy::for_table(options.manifest_merge, &table.metadata)?,
            keys,
            key_problem,
            strategy,
            table,
            file_io,
        })
    }

    pub fn schema_id(&self) -> i32 {
        self.table.metadata.current_schema_id()
    }

    /// The same view reading and writing files through `file_io` (fresh credentials).
    pub fn with_file_io(&self, file_io: FileIO) -> TableView {
        TableView {
            table: self.table.clone(),
            file_io,
            settings: self.settings.clone(),
            merge: self.merge,
            keys: self.keys.clone(),
            key_problem: self.key_problem.clone(),
            strategy: self.strategy,
        }
    }
}

/// The strategy for a table: the configured one, else the table's write modes, else
/// merge-on-read. A configured strategy the table's write modes contradict is a config
/// error: another engine writing this table would do the opposite, and a reader
/// (Unity Catalog, Snowflake) may depend on copy-on-write.
pub(super) fn merge_strategy(
    configured: Option<MergeStrategy>,
    metadata: &TableMetadata,
    reads_delete_files: bool,
) -> Result<MergeStrategy> {
    let mode = |key: &str| -> Result<Option<MergeStrategy>> {
        match metadata
            .properties()
            .get(key)
            .map(|v| v.trim().to_ascii_lowercase())
        {
            None => Ok(None),
            Some(v) if v == "copy-on-write" => Ok(Some(MergeStrategy::CopyOnWrite)),
            Some(v) if v == "merge-on-read" => Ok(Some(MergeStrategy::MergeOnRead)),
            Some(v) => Err(Error::config(format!(
                "table property {key}={v:?} is neither copy-on-write nor merge-on-read"
            ))),
        }
    };
    let (update, delete) = (mode("write.update.mode")?, mode("write.delete.mode")?);
    let table = match (update, delete) {
        (Some(u), Some(d)) if u != d => {
            return Err(Error::config(
                "the table's write.update.mode and write.delete.mode differ; floe writes a \
                 commit's upserts and deletes with one strategy: set merge_strategy, or make \
                 them agree",
            ));
        }
        (u, d) => u.or(d),
    };
    match (configured, table) {
        (Some(c), Some(t)) if c.write_mode() != t.write_mode() => Err(Error::config(format!(
            "merge_strategy is {} but the table's write.update.mode / write.delete.mode say {}; \
             change one of them (or leave merge_strategy unset to follow the table)",
            c.name(),
            t.name()
        ))),
        (Some(c), _) => Ok(c),
        (None, Some(t)) if !reads_delete_files && t != MergeStrategy::CopyOnWrite => {
            Err(Error::config(format!(
                "the table's write.update.mode / write.delete.mode say {}, whose delete files \
                 Unity Catalog's readers do not apply; set them to copy-on-write",
                t.name()
            )))
        }
        (None, Some(t)) => {
            let positional = metadata
                .properties()
                .get(crate::config::MERGE_ON_READ_DELETES)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("position"));
            let t = match t {
                MergeStrategy::MergeOnRead if positional => MergeStrategy::MergeOnReadPositional,
                t => t,
            };
            // Debug: views are rebuilt whenever a setting changes.
            tracing::debug!(
                "upserts and deletes use {} (the table's write modes; merge_strategy is unset)",
                t.name()
            );
            Ok(t)
        }
        (None, None) if !reads_delete_files => Ok(MergeStrategy::CopyOnWrite),
        (None, None) => Ok(MergeStrategy::MergeOnRead),
    }
}

/// Merge-on-read writes equality deletes: they need format v2 or later, and floe scopes
/// them to the partition of their key, so the partition must follow from the key.
pub(super) fn check_merge_on_read(metadata: &TableMetadata, keys: &KeyColumns) -> Result<()> {
    if metadata.format_version() == FormatVersion::V1 {
        return Err(Error::config(
            "upserts and deletes (merge-on-read) need an Iceberg format v2 table; this one is v1",
        ));
    }
    let spec = metadata.default_partition_spec();
    check_merge_on_read_keys(
        metadata.current_schema(),
        spec.fields().iter().map(|f| (f.name.as_str(), f.source_id)),
        keys,
    )
}

/// Why equality deletes on a key column of type `ty` would be misread, if they would: a
/// reader that keeps rows a delete removed returns superseded values without an error.
fn unreadable_equality_key(ty: &iceberg::spec::Type) -> Option<&'static str> {
    use iceberg::spec::{PrimitiveType, Type};
    match ty {
        Type::Primitive(PrimitiveType::Uuid) => Some(
            "a uuid: equality deletes on uuid columns are not applied correctly by DuckDB \
             1.5.5 and iceberg-rust 0.10.1",
        ),
        Type::Primitive(PrimitiveType::Fixed(_)) => Some(
            "a fixed: Apache Iceberg's Java reader (1.10.1) keeps rows that equality deletes \
             on fixed columns remove",
        ),
        _ => None,
    }
}

/// Merge-on-read's constraints on a key and the `partition` fields (name, source
/// column id) of a table's spec; also checked before floe creates a table, so that it
/// never creates one it then refuses.
pub fn check_merge_on_read_keys<'a>(
    schema: &Schema,
    partition: impl IntoIterator<Item = (&'a str, i32)>,
    keys: &KeyColumns,
) -> Result<()> {
    if let Some((name, problem)) = keys
        .field_ids
        .iter()
        .zip(&keys.names)
        .find_map(|(&id, name)| {
            let field = schema.field_by_id(id)?;
            unreadable_equality_key(field.field_type.as_ref()).map(|p| (name, p))
        })
    {
        return Err(Error::config(format!(
            "identifier field {name:?} is {problem}, so merge-on-read refuses such keys \
             (copy-on-write and merge-on-read-positional write no equality deletes)"
        )));
    }
    if let Some((field, _)) = partition
        .into_iter()
        .find(|(_, source)| !keys.field_ids.contains(source))
    {
        return Err(Error::config(format!(
            "the table is partitioned by {field:?}, which is not derived from the identifier \
             fields ({}): merge-on-read deletes are scoped to the key's partition, so every \
             partition source column must be an identifier field",
            keys.names.join(", ")
        )));
    }
    Ok(())
}

/// Whether the two tables agree on what the view's settings are built from: the same
/// table (a table dropped and created again may have the same schema and spec ids, but
/// the key's field ids are the old one's), format version (it decides merging and row
/// lineage; another tool may upgrade it), schema, partition spec and properties.
fn same_shape(a: &LoadedTable, b: &LoadedTable) -> bool {
    a.metadata.uuid() == b.metadata.uuid()
        && a.metadata.format_version() == b.metadata.format_version()
        && a.metadata.current_schema_id() == b.metadata.current_schema_id()
        && a.metadata.default_partition_spec_id() == b.metadata.default_partition_spec_id()
        && same_settings(a.metadata.properties(), b.metadata.properties())
}

/// Whether two tables' properties agree on all but the exactly-once records
/// (`floe.offsets.*`), which an exactly-once writer's every commit rewrites and which no
/// setting is read from (the ledger takes them in, see [`take_in_offsets`]).
fn same_settings(a: &HashMap<String, String>, b: &HashMap<String, String>) -> bool {
    fn settings(p: &HashMap<String, String>) -> HashMap<&String, &String> {
        p.iter()
            .filter(|(k, _)| !k.starts_with(OFFSETS_PROPERTY_PREFIX))
            .collect()
    }
    // Most tables carry no records: equal maps need no filtered copies.
    a == b || settings(a) == settings(b)
}

/// Whether write calls, the encoder and the credentials' refresher would find nothing
/// new in `table` that the view's `current` lacks: the same table and location, shape
/// and storage properties. They read nothing else of the view's table (snapshots are
/// the commit stage's), so a commit of the stage's own that keeps all of these need not
/// be published (see `stage::KeptTable`).
pub(super) fn same_for_writers(current: &LoadedTable, table: &LoadedTable) -> bool {
    same_shape(current, table)
        && current.ident == table.ident
        && current.metadata.location() == table.metadata.location()
        && current.io_props == table.io_props
}

/// Takes the exactly-once record of a table into the ledger.
pub(super) fn take_in_offsets(
    ledger: &Mutex<Ledger>,
    options: &CommitterOptions,
    table: &LoadedTable,
) {
    if let Some(writer_id) = &options.writer_id {
        ledger
            .locked()
            .take_in(committed_offsets(&table.metadata, writer_id));
    }
}

/// Publishes a newer table to the committer's `view`, rebuilding settings when its
/// shape moved (see [`same_shape`]), and taking in its exactly-once record.
pub(super) fn publish_table(
    view: &watch::Sender<Arc<TableView>>,
    ledger: &Mutex<Ledger>,
    options: &CommitterOptions,
    table: LoadedTable,
) {
    let current = view.borrow().clone();
    let same_shape = same_shape(&current.table, &table);
    take_in_offsets(ledger, options, &table);
    let next = if same_shape {
        TableView {
            table,
            file_io: current.file_io.clone(),
            settings: current.settings.clone(),
            merge: current.merge,
            keys: current.keys.clone(),
            key_problem: current.key_problem.clone(),
            strategy: current.strategy,
        }
    } else {
        match TableView::new(table.clone(), current.file_io.clone(), options) {
            Ok(v) => v,
            // The head must move on regardless, or every later commit would conflict.
            Err(e) => {
                tracing::warn!("table properties unusable, keeping the previous settings: {e}");
                // The key was checked against the previous schema and spec: upserts
                // and deletes wait (failing with this reason, not as the messages'
                // fault) until the table is usable again.
                TableView {
                    table,
                    file_io: current.file_io.clone(),
                    settings: current.settings.clone(),
                    merge: current.merge,
                    keys: None,
                    key_problem: Some(e.to_string()),
                    strategy: current.strategy,
                }
            }
        }
    };
    // The refresher of vended credentials may have swapped the FileIO since `current`
    // was read: keep the newest one, under the watch's lock.
    view.send_modify(|newest| {
        let mut next = next;
        next.file_io = newest.file_io.clone();
        *newest = Arc::new(next);
    });
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

    fn table(json: serde_json::Value) -> LoadedTable {
        let ident = iceberg::TableIdent::from_strs(["ns", "t"]).unwrap();
        let metadata = serde_json::from_value(json).unwrap();
        LoadedTable::new(ident, None, Arc::new(metadata), HashMap::new())
    }

    #[test]
    fn a_table_created_again_is_not_the_same_shape() {
        let json: serde_json::Value =
            serde_json::from_str(include_str!("../../testdata/two_snapshots.json")).unwrap();
        let mut again = json.clone();
        again["table-uuid"] = "0b1a5e5e-0000-4000-8000-000000000001".into();
        assert!(same_shape(&table(json.clone()), &table(json.clone())));
        assert!(!same_shape(&table(json.clone()), &table(again.clone())));
        assert!(!same_for_writers(&table(json), &table(again)));
    }

    #[test]
    fn exactly_once_records_are_not_settings() {
        let base = props(&[("write.format.default", "parquet"), ("floe.offsets.w", "a")]);
        // An exactly-once writer's commit rewrites its record, or adds another writer's.
        let rewritten = props(&[("write.format.default", "parquet"), ("floe.offsets.w", "b")]);
        let added = props(&[
            ("write.format.default", "parquet"),
            ("floe.offsets.w", "a"),
            ("floe.offsets.v", "c"),
        ]);
        assert!(same_settings(&base, &rewritten));
        assert!(same_settings(&base, &added));
        assert!(same_settings(&added, &base));
        // Any other property is a setting: changed, added or removed.
        let changed = props(&[("write.format.default", "orc"), ("floe.offsets.w", "a")]);
        let removed = props(&[("floe.offsets.w", "a")]);
        let extra = props(&[
            ("write.format.default", "parquet"),
            ("write.update.mode", "copy-on-write"),
            ("floe.offsets.w", "a"),
        ]);
        for other in [changed, removed, extra] {
            assert!(!same_settings(&base, &other), "{other:?}");
            assert!(!same_settings(&other, &base), "{other:?}");
        }
    }
}
