//! Copy-on-write: upserts and deletes that rewrite the data files holding their keys, so
//! the table never has delete files (readable by engines that refuse them: pyiceberg,
//! Unity Catalog, Snowflake).
//!
//! Planned per commit attempt against the head the attempt builds on: the live data
//! files whose key-column bounds may hold a touched key are read (key columns only) to
//! confirm; each file that does hold one is rewritten without those rows, and the
//! snapshot removes it. The commit requires the head to be unchanged, so a concurrent
//! commit (which may have added rows with these keys, or rewritten these files) makes
//! the next attempt plan again from the new head: a row is never lost or resurrected.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, new_null_array};
use arrow_row::Row;
use arrow_schema::{DataType, SchemaRef};
use arrow_select::filter::filter_record_batch;
use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, ManifestContentType, ManifestFile, PrimitiveLiteral,
    TableMetadata,
};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use uuid::Uuid;

use super::keys::KeyColumns;
use crate::commit::merge::rewrite;
use crate::error::{Error, Result};
use crate::write::{FileSettings, write_data_files};

/// What a copy-on-write commit removes: every row with one of `touched`'s keys.
#[derive(Clone)]
pub struct CopyOnWrite {
    pub keys: Arc<KeyColumns>,
    /// The keys the commit upserts or deletes (key schema, once each).
    pub touched: RecordBatch,
    pub settings: FileSettings,
}

/// One attempt's rewrite.
pub struct Rewrite {
    /// The head's manifests, with each one that held a removed file replaced by a copy
    /// marking it DELETED.
    pub manifests: Vec<ManifestFile>,
    /// Removed data files, with the partition spec id of the manifest that held them.
    pub removed: Vec<(DataFile, i32)>,
    /// The remaining rows of the removed files.
    pub added: Vec<DataFile>,
    /// Files this attempt wrote (data files and manifests), for cleanup if it is refused.
    pub written: Vec<String>,
}

/// Rewrites, for a snapshot `snapshot_id` on top of `metadata`'s head (whose manifests
/// are `carried`), the data files that hold any of the touched keys.
pub async fn rewrite_files(
    metadata: &TableMetadata,
    file_io: &FileIO,
    snapshot_id: i64,
    commit_id: Uuid,
    attempt: u32,
    carried: Vec<ManifestFile>,
    cow: &CopyOnWrite,
) -> Result<Rewrite> {
    let mut written = Vec::new();
    let planned = plan_and_rewrite(
        metadata,
        file_io,
        (snapshot_id, commit_id, attempt),
        carried,
        cow,
        &mut written,
    )
    .await;
    match planned {
        Ok(rewrite) => Ok(Rewrite { written, ..rewrite }),
        Err(e) => {
            // Nothing references what a failed plan wrote.
            for path in &written {
                if let Err(d) = file_io.delete(path).await {
                    tracing::warn!("could not delete {path} of a failed rewrite: {d}");
                }
            }
            Err(e)
        }
    }
}

/// [`rewrite_files`]'s work; every file it writes is recorded in `written` as soon as it
/// exists.
async fn plan_and_rewrite(
    metadata: &TableMetadata,
    file_io: &FileIO,
    (snapshot_id, commit_id, attempt): (i64, Uuid, u32),
    carried: Vec<ManifestFile>,
    cow: &CopyOnWrite,
    written: &mut Vec<String>,
) -> Result<Rewrite> {
    let keys = &cow.keys;
    let converter = keys.converter()?;
    let touched_rows = keys.rows(&converter, &cow.touched)?;
    let touched: HashSet<Row<'_>> = touched_rows.iter().collect();
    let ranges = KeyRanges::of(keys, &cow.touched);
    let current = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(metadata.current_schema()).map_err(Error::from)?,
    );
    let mut manifests = Vec::with_capacity(carried.len());
    let mut removed = Vec::new();
    let mut added = Vec::new();
    if metadata.format_version() == FormatVersion::V3 {
        // Copied manifests would give untouched files new row ids (iceberg-rust does not
        // read inherited first row ids back), as merging would (see commit::merge).
        return Err(Error::config(
            "copy-on-write does not rewrite Iceberg v3 tables yet (row lineage would change); \
             use merge-on-read",
        ));
    }
    refuse_live_delete_files(&carried)?;
    for (n, manifest) in carried.into_iter().enumerate() {
        if manifest.content != ManifestContentType::Data {
            manifests.push(manifest);
            continue;
        }
        let entries = manifest.load_manifest(file_io).await?;
        let mut removed_here = HashSet::new();
        for entry in entries.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            if !ranges.may_hold(file) {
                continue;
            }
            let bytes = file_io.new_input(file.file_path())?.read().await?;
            if !holds_any(&bytes, keys, &converter, &touched)? {
                continue;
            }
            let mut remainder = Vec::new();
            for batch in read_all(&bytes, &current)? {
                let rows = keys.rows(&converter, &keys.project(&batch)?)?;
                let keep: BooleanArray = (0..rows.num_rows())
                    .map(|r| Some(!touched.contains(&rows.row(r))))
                    .collect();
                let kept = filter_record_batch(&batch, &keep)
                    .map_err(|e| Error::internal(format!("rewriting {}: {e}", file.file_path())))?;
                if kept.num_rows() > 0 {
                    remainder.push(kept);
                }
            }
            drop(bytes);
            // One file at a time: memory holds one data file and its remainder.
            let rewritten = write_data_files(&remainder, metadata, file_io, &cow.settings).await?;
            written.extend(rewritten.iter().map(|f| f.file_path().to_string()));
            added.extend(rewritten);
            removed_here.insert(file.file_path().to_string());
            removed.push((file.clone(), manifest.partition_spec_id));
        }
        if removed_here.is_empty() {
            manifests.push(manifest);
            continue;
        }
        let path = format!(
            "{}/metadata/{commit_id}-{snapshot_id}-{attempt}-r{n}.avro",
            metadata.location()
        );
        written.push(path.clone());
        let rewritten = without_files(
            metadata,
            file_io,
            snapshot_id,
            &path,
            &manifest,
            &removed_here,
        )
        .await?;
        manifests.push(rewritten);
    }
    Ok(Rewrite {
        manifests,
        removed,
        added,
        written: Vec::new(),
    })
}

/// A rewritten file gets a new sequence number, so delete files (from a merge-on-read
/// writer) that applied to its rows would stop applying and resurrect them. Refused
/// until floe applies them while rewriting.
fn refuse_live_delete_files(carried: &[ManifestFile]) -> Result<()> {
    let live = |m: &ManifestFile| {
        m.content == ManifestContentType::Deletes
            && (m.added_files_count.unwrap_or(1) > 0 || m.existing_files_count.unwrap_or(1) > 0)
    };
    match carried.iter().find(|m| live(m)) {
        None => Ok(()),
        Some(m) => Err(Error::config(format!(
            "copy-on-write cannot rewrite this table: it has delete files (manifest {}), \
             written by merge-on-read, that rewritten rows would escape; compact the table \
             (rewrite_data_files with delete files applied) or keep merge-on-read",
            m.manifest_path
        ))),
    }
}

/// A copy of `source` in which the `removed` files are DELETED entries and every other
/// live file an EXISTING one (with its sequence numbers), under the source's own spec.
async fn without_files(
    metadata: &TableMetadata,
    file_io: &FileIO,
    snapshot_id: i64,
    path: &str,
    source: &ManifestFile,
    removed: &HashSet<String>,
) -> Result<ManifestFile> {
    let spec = metadata
        .partition_spec_by_id(source.partition_spec_id)
        .ok_or_else(|| {
            Error::internal(format!(
                "manifest {} names partition spec {}, which the table does not have",
                source.manifest_path, source.partition_spec_id
            ))
        })?;
    let content = (ManifestContentType::Data, spec.as_ref().clone());
    let bin = std::slice::from_ref(source);
    rewrite(metadata, file_io, snapshot_id, path, bin, content, removed).await
}

/// Whether a Parquet data file holds any touched key, reading its key columns only.
fn holds_any(
    bytes: &Bytes,
    keys: &KeyColumns,
    converter: &arrow_row::RowConverter,
    touched: &HashSet<Row<'_>>,
) -> Result<bool> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
        .map_err(|e| Error::internal(format!("reading a data file: {e}")))?;
    let fields = builder.parquet_schema().root_schema().get_fields();
    if !fields.iter().any(|f| f.get_basic_info().has_id()) {
        return Err(Error::config(
            "a data file has no Parquet field ids (written without Iceberg's ids, e.g. a \
             migrated table read through a name mapping): copy-on-write cannot match its keys",
        ));
    }
    let roots: Vec<usize> = fields
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            let info = f.get_basic_info();
            info.has_id() && keys.field_ids.contains(&info.id())
        })
        .map(|(i, _)| i)
        .collect();
    if roots.len() != keys.field_ids.len() {
        // A file without every key column (written before the key existed): its rows
        // have null keys, which no upsert or delete names.
        return Ok(false);
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| Error::internal(format!("reading a data file: {e}")))?;
    for batch in reader {
        let batch = batch.map_err(|e| Error::internal(format!("reading a data file: {e}")))?;
        let projected = conform(&batch, &keys.arrow)?;
        let rows = keys.rows(converter, &projected)?;
        if rows.iter().any(|r| touched.contains(&r)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Every row of a Parquet data file, in the table's current schema.
fn read_all(bytes: &Bytes, current: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
        .and_then(|b| b.build())
        .map_err(|e| Error::internal(format!("reading a data file: {e}")))?;
    reader
        .map(|batch| {
            let batch = batch.map_err(|e| Error::internal(format!("reading a data file: {e}")))?;
            conform(&batch, current)
        })
        .collect()
}

/// `batch` (as read from a file) in `target`'s shape, matching columns by field id:
/// columns the file lacks (added later) are null, types are cast where they differ.
fn conform(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    let by_id: HashMap<&str, usize> = batch
        .schema_ref()
        .fields()
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            f.metadata()
                .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
                .map(|id| (id.as_str(), i))
        })
        .collect();
    let columns = target
        .fields()
        .iter()
        .map(|field| {
            let id = field
                .metadata()
                .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
                .map(String::as_str)
                .unwrap_or_default();
            let column: ArrayRef = match by_id.get(id) {
                Some(&i) => {
                    let column = batch.column(i);
                    if column.data_type() == field.data_type() {
                        column.clone()
                    } else if column.data_type().is_nested() || field.data_type().is_nested() {
                        // Casts match nested fields by name or position, never by field
                        // id: a dropped and re-added field would take another's values.
                        return Err(Error::config(format!(
                            "copy-on-write cannot rewrite a data file whose nested column {} \
                             differs from the table's (the schema changed since it was \
                             written); compact the table first",
                            field.name()
                        )));
                    } else {
                        arrow_cast::cast(column, field.data_type())
                            .map_err(|e| Error::internal(format!("column {}: {e}", field.name())))?
                    }
                }
                None => new_null_array(field.data_type(), batch.num_rows()),
            };
            Ok(column)
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(target.clone(), columns)
        .map_err(|e| Error::internal(format!("a data file does not fit the table schema: {e}")))
}

/// The smallest and largest touched value per key column, to skip files whose column
/// bounds exclude them all.
struct KeyRanges(Vec<(i32, Option<(PrimitiveLiteral, PrimitiveLiteral)>)>);

impl KeyRanges {
    fn of(keys: &KeyColumns, touched: &RecordBatch) -> Self {
        let ranges = keys
            .field_ids
            .iter()
            .zip(touched.columns())
            .map(|(&id, column)| {
                let mut range: Option<(PrimitiveLiteral, PrimitiveLiteral)> = None;
                for row in 0..column.len() {
                    let Some(v) = literal(column, row) else {
                        // A type without comparable bounds here: no pruning on it.
                        return (id, None);
                    };
                    range = Some(match range {
                        None => (v.clone(), v),
                        Some((lo, hi)) => {
                            let lo = if v < lo { v.clone() } else { lo };
                            let hi = if v > hi { v } else { hi };
                            (lo, hi)
                        }
                    });
                }
                (id, range)
            })
            .collect();
        KeyRanges(ranges)
    }

    /// Whether a data file may hold a touched key: false only when some key column's
    /// bounds in the file exclude every touched value.
    fn may_hold(&self, file: &DataFile) -> bool {
        if file.content_type() != DataContentType::Data {
            return false;
        }
        self.0.iter().all(|(id, range)| {
            let Some((lo, hi)) = range else {
                return true;
            };
            let (Some(lower), Some(upper)) =
                (file.lower_bounds().get(id), file.upper_bounds().get(id))
            else {
                return true;
            };
            let (lower, upper) = (lower.literal(), upper.literal());
            // Bounds of another literal kind (a manifest written before the column was
            // promoted, e.g. int → long) do not compare by value: keep the file.
            let kind = std::mem::discriminant(lo);
            if std::mem::discriminant(lower) != kind || std::mem::discriminant(upper) != kind {
                return true;
            }
            !(hi < lower || lo > upper)
        })
    }
}

/// A key value as the literal Iceberg bounds use, for the types whose bounds compare
/// like their values (strings are truncated in bounds: only prefixes would compare, so
/// they are not pruned on).
fn literal(column: &ArrayRef, row: usize) -> Option<PrimitiveLiteral> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    if column.is_null(row) {
        return None;
    }
    Some(match column.data_type() {
        DataType::Int32 => PrimitiveLiteral::Int(column.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => PrimitiveLiteral::Long(column.as_primitive::<Int64Type>().value(row)),
        DataType::Date32 => PrimitiveLiteral::Int(column.as_primitive::<Date32Type>().value(row)),
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _) => {
            PrimitiveLiteral::Long(column.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        DataType::Decimal128(_, _) => {
            PrimitiveLiteral::Int128(column.as_primitive::<Decimal128Type>().value(row))
        }
        _ => return None,
    })
}
