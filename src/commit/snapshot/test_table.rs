//! A table in memory for the snapshot operations' unit tests: `id` (long, the key) and
//! `v` (string), unpartitioned, format v2 (or v3), committed by applying each prepared
//! commit's updates locally; and a small reader that applies position deletes,
//! deletion vectors and equality deletes by the spec's sequence-number rules, to say
//! which rows the table holds.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, ManifestContentType, ManifestStatus, NestedField, PrimitiveType,
    Schema, SortOrder, TableMetadataBuilder, Type, UnboundPartitionSpec,
};
use iceberg::{NamespaceIdent, TableIdent};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{Attempt, Cached, PreparedCommit, SnapshotChanges, current_manifests};
use crate::catalog::LoadedTable;
use crate::config::ParquetConfig;
use crate::rowops::keys::KeyColumns;
use crate::rowops::removal::{Removal, RemoveKeys};
use crate::table::manifest_cache::ManifestCache;
use crate::table::merge::MergePolicy;
use crate::write::deletion_vector::{is_deletion_vector, read_deletion_vector};
use crate::write::{FileSettings, file_settings};

pub(super) struct MemoryTable {
    pub(super) io: FileIO,
    pub(super) table: LoadedTable,
    pub(super) cache: ManifestCache,
    /// Manifest merging (off unless a test turns it on).
    pub(super) merge: MergePolicy,
}

impl MemoryTable {
    pub(super) fn new() -> Self {
        Self::of_version(iceberg::spec::FormatVersion::V2)
    }

    pub(super) fn of_version(version: iceberg::spec::FormatVersion) -> Self {
        let schema = Schema::builder()
            .with_schema_id(0)
            .with_identifier_field_ids([1])
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "v", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let metadata = TableMetadataBuilder::new(
            schema,
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "memory:/t".to_string(),
            version,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        let ident = TableIdent::new(NamespaceIdent::new("n".into()), "t".into());
        MemoryTable {
            io: FileIO::new_with_memory(),
            table: LoadedTable::new(ident, None, Arc::new(metadata), HashMap::new()),
            cache: ManifestCache::default(),
            merge: MergePolicy::DISABLED,
        }
    }

    fn settings(&self) -> FileSettings {
        file_settings(&ParquetConfig::default(), &self.table.metadata).unwrap()
    }

    fn keys(&self) -> Arc<KeyColumns> {
        let schema = self.table.metadata.current_schema();
        Arc::new(KeyColumns::for_table(schema, &[], true).unwrap().unwrap())
    }

    /// Rows `(id, v)` in the table's Arrow schema.
    pub(super) fn batch(&self, rows: &[(i64, &str)]) -> RecordBatch {
        let schema = self.table.metadata.current_schema();
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(schema).unwrap());
        let ids = Int64Array::from_iter_values(rows.iter().map(|(id, _)| *id));
        let values = StringArray::from_iter_values(rows.iter().map(|(_, v)| *v));
        RecordBatch::try_new(arrow, vec![Arc::new(ids), Arc::new(values)]).unwrap()
    }

    pub(super) async fn data_files(&self, rows: &[(i64, &str)]) -> Vec<DataFile> {
        let batch = self.batch(rows);
        let metadata = &self.table.metadata;
        crate::write::write_data_files(vec![batch], metadata, &self.io, &self.settings())
            .await
            .unwrap()
    }

    /// Equality-delete files on the key for `ids`.
    pub(super) async fn equality_deletes(&self, ids: &[i64]) -> Vec<DataFile> {
        let keys = self.keys();
        let rows: Vec<(i64, &str)> = ids.iter().map(|id| (*id, "")).collect();
        let touched = keys.project(&self.batch(&rows)).unwrap();
        let metadata = &self.table.metadata;
        let settings = self.settings();
        let (schema, field_ids) = (&keys.schema, &keys.field_ids);
        crate::write::write_equality_delete_files(
            &touched, schema, field_ids, metadata, &self.io, &settings,
        )
        .await
        .unwrap()
    }

    /// The keys `ids`, to remove by rewriting or by position deletes.
    pub(super) fn remove(&self, ids: &[i64], by: Removal) -> RemoveKeys {
        let keys = self.keys();
        let rows: Vec<(i64, &str)> = ids.iter().map(|id| (*id, "")).collect();
        RemoveKeys {
            touched: keys.project(&self.batch(&rows)).unwrap(),
            keys,
            settings: self.settings(),
            by,
        }
    }

    pub(super) fn changes(
        &self,
        data_files: Vec<DataFile>,
        delete_files: Vec<DataFile>,
        remove_keys: Option<RemoveKeys>,
    ) -> SnapshotChanges {
        let metadata = &self.table.metadata;
        SnapshotChanges {
            commit_id: uuid::Uuid::new_v4(),
            table_uuid: metadata.uuid(),
            data_files,
            delete_files,
            remove_keys,
            schema_id: metadata.current_schema_id(),
            spec_id: metadata.default_partition_spec_id(),
            properties: HashMap::new(),
            offsets: None,
            in_flight: Default::default(),
        }
    }

    /// Prepares `changes` on the current head as a commit stage does: the small files
    /// go to scratch storage, and what the attempt lists as staged is uploaded (a file
    /// written there but not listed never reaches the table's storage).
    pub(super) async fn prepare(&self, changes: &SnapshotChanges) -> crate::Result<PreparedCommit> {
        let cache = Cached {
            list: None,
            manifests: &self.cache,
        };
        let attempt = Attempt {
            number: 0,
            rebase: None,
        };
        let (table, io) = (&self.table, &self.io);
        let staging = crate::commit::staging::Staging::default();
        let scratch = staging.io();
        let prepared =
            super::prepare_snapshot(table, io, scratch, changes, &self.merge, cache, attempt)
                .await?;
        let files = staging.take(prepared.staged.clone()).await?;
        crate::commit::staging::upload(io, &files).await?;
        Ok(prepared)
    }

    /// Applies a prepared commit as a catalog would.
    pub(super) fn commit(&mut self, prepared: PreparedCommit) {
        let metadata = crate::catalog::answer::apply_updates(
            self.table.metadata.clone(),
            None,
            prepared.updates,
        )
        .unwrap();
        let ident = self.table.ident.clone();
        self.table = LoadedTable::new(ident, None, Arc::new(metadata), HashMap::new());
    }

    /// Prepares and commits `changes`.
    pub(super) async fn apply(&mut self, changes: SnapshotChanges) {
        let prepared = self.prepare(&changes).await.unwrap();
        self.commit(prepared);
    }

    /// Commits an append of `rows`.
    pub(super) async fn insert(&mut self, rows: &[(i64, &str)]) {
        let files = self.data_files(rows).await;
        self.apply(self.changes(files, Vec::new(), None)).await;
    }

    /// The head's live entries: (content, file, data sequence number).
    async fn live_files(&self) -> Vec<(DataContentType, DataFile, i64)> {
        let metadata = &self.table.metadata;
        let mut files = Vec::new();
        for m in current_manifests(metadata, &self.io, None).await.unwrap() {
            let manifest = m.load_manifest(&self.io).await.unwrap();
            for entry in manifest.entries() {
                if entry.status() == ManifestStatus::Deleted {
                    continue;
                }
                let sequence = entry.sequence_number().unwrap();
                files.push((entry.content_type(), entry.data_file().clone(), sequence));
            }
        }
        files
    }

    /// The rows the table holds, sorted by id: data files' rows less the position deletes
    /// of sequence numbers at or above theirs and the equality deletes above theirs.
    pub(super) async fn rows(&self) -> Vec<(i64, String)> {
        let files = self.live_files().await;
        let mut positions: HashMap<(String, i64), i64> = HashMap::new();
        let mut equality: Vec<(i64, i64)> = Vec::new();
        let mut vectors = std::collections::HashSet::new();
        for (content, file, sequence) in &files {
            if is_deletion_vector(file) {
                let target = file.referenced_data_file().unwrap();
                assert!(vectors.insert(target.clone()), "two vectors for {target}");
                let read = read_deletion_vector(&self.io, file).await.unwrap();
                assert_eq!(read.len(), file.record_count());
                for at in read {
                    let newest = positions
                        .entry((target.clone(), at as i64))
                        .or_insert(*sequence);
                    *newest = (*newest).max(*sequence);
                }
                continue;
            }
            let batches = self.read(file.file_path()).await;
            for batch in batches {
                match content {
                    DataContentType::PositionDeletes => {
                        let paths = column::<StringArray>(&batch, 0);
                        let at = column::<Int64Array>(&batch, 1);
                        for i in 0..batch.num_rows() {
                            let at = (paths.value(i).to_string(), at.value(i));
                            let newest = positions.entry(at).or_insert(*sequence);
                            *newest = (*newest).max(*sequence);
                        }
                    }
                    DataContentType::EqualityDeletes => {
                        let ids = column::<Int64Array>(&batch, 0);
                        equality.extend((0..ids.len()).map(|i| (ids.value(i), *sequence)));
                    }
                    DataContentType::Data => {}
                }
            }
        }
        let mut rows = Vec::new();
        for (content, file, sequence) in &files {
            if *content != DataContentType::Data {
                continue;
            }
            let mut position = 0i64;
            for batch in self.read(file.file_path()).await {
                let ids = column::<Int64Array>(&batch, 0);
                let values = column::<StringArray>(&batch, 1);
                for i in 0..batch.num_rows() {
                    let id = ids.value(i);
                    let at = (file.file_path().to_string(), position);
                    let by_position = positions.get(&at).is_some_and(|s| s >= sequence);
                    let by_key = equality.iter().any(|(k, s)| *k == id && s > sequence);
                    if !by_position && !by_key {
                        rows.push((id, values.value(i).to_string()));
                    }
                    position += 1;
                }
            }
        }
        rows.sort();
        rows
    }

    /// How many live files of each content the head has: (data, position, equality).
    pub(super) async fn file_counts(&self) -> (usize, usize, usize) {
        let files = self.live_files().await;
        let count = |c: DataContentType| files.iter().filter(|(k, _, _)| *k == c).count();
        (
            count(DataContentType::Data),
            count(DataContentType::PositionDeletes),
            count(DataContentType::EqualityDeletes),
        )
    }

    /// The positions the head's live position deletes (and deletion vectors) name.
    pub(super) async fn live_position_deletes(&self) -> u64 {
        let files = self.live_files().await;
        let deletes = files
            .iter()
            .filter(|(k, _, _)| *k == DataContentType::PositionDeletes);
        deletes.map(|(_, f, _)| f.record_count()).sum()
    }

    /// The head's live files' sizes, as Iceberg counts them (a deletion vector by its
    /// blob, not the Puffin file holding it).
    pub(super) async fn live_size(&self) -> u64 {
        let files = self.live_files().await;
        let size = |f: &DataFile| match is_deletion_vector(f) {
            true => f.content_size_in_bytes().unwrap() as u64,
            false => f.file_size_in_bytes(),
        };
        files.iter().map(|(_, f, _)| size(f)).sum()
    }

    /// Each live data file's first row id (its entry's, else inherited), by path.
    pub(super) async fn first_row_ids(&self) -> HashMap<String, Option<i64>> {
        let mut ids = HashMap::new();
        for m in self.manifests().await {
            if m.content != ManifestContentType::Data {
                continue;
            }
            let manifest = m.load_manifest(&self.io).await.unwrap();
            let entries = manifest.entries();
            let all = entries.iter().map(|e| (e.status(), e.data_file()));
            let inherited = crate::table::lineage::first_row_ids(&m, all);
            for (entry, id) in entries.iter().zip(inherited) {
                if entry.status() != ManifestStatus::Deleted {
                    ids.insert(entry.data_file().file_path().to_string(), id);
                }
            }
        }
        ids
    }

    /// The head's manifests, in list order.
    pub(super) async fn manifests(&self) -> Vec<iceberg::spec::ManifestFile> {
        current_manifests(&self.table.metadata, &self.io, None)
            .await
            .unwrap()
    }

    /// The contents of the head's manifests, in list order.
    pub(super) async fn manifest_contents(&self) -> Vec<ManifestContentType> {
        let metadata = &self.table.metadata;
        let list = current_manifests(metadata, &self.io, None).await.unwrap();
        list.iter().map(|m| m.content).collect()
    }

    async fn read(&self, path: &str) -> Vec<RecordBatch> {
        let bytes = self.io.new_input(path).unwrap().read().await.unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        reader.map(|b| b.unwrap()).collect()
    }
}

fn column<T: 'static>(batch: &RecordBatch, i: usize) -> &T {
    batch.column(i).as_any().downcast_ref::<T>().unwrap()
}

/// `(id, v)` rows as [`MemoryTable::rows`] gives them.
pub(super) fn rows(expected: &[(i64, &str)]) -> Vec<(i64, String)> {
    let mut rows: Vec<(i64, String)> = expected.iter().map(|(i, v)| (*i, v.to_string())).collect();
    rows.sort();
    rows
}

/// The operation a prepared commit's snapshot names.
pub(super) fn operation(prepared: &PreparedCommit) -> iceberg::spec::Operation {
    prepared
        .updates
        .iter()
        .find_map(|u| match u {
            iceberg::TableUpdate::AddSnapshot { snapshot } => {
                Some(snapshot.summary().operation.clone())
            }
            _ => None,
        })
        .unwrap()
}

/// A summary figure of a prepared commit's snapshot.
pub(super) fn figure(prepared: &PreparedCommit, key: &str) -> Option<String> {
    prepared.updates.iter().find_map(|u| match u {
        iceberg::TableUpdate::AddSnapshot { snapshot } => {
            snapshot.summary().additional_properties.get(key).cloned()
        }
        _ => None,
    })
}
