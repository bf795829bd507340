//! Key lookup: which rows of the table's live data files hold the keys a commit upserts
//! or deletes. Copy-on-write rewrites those files without the rows; positional
//! merge-on-read writes their positions as position deletes.
//!
//! Column bounds prune the files first (for key types whose bounds compare by value);
//! each remaining file is then read by its key columns only, streamed a batch at a time.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::{Row, RowConverter, Rows};
use arrow_schema::DataType;
use futures::TryStreamExt;
use iceberg::arrow::ArrowFileReader;
use iceberg::io::{FileIO, FileMetadata};
use iceberg::spec::{
    DataContentType, DataFile, Manifest, ManifestContentType, ManifestFile, PrimitiveLiteral,
};
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;

use super::conform::conform;
use super::fingerprints;
use super::keys::KeyColumns;
use crate::error::{Error, ErrorKind, Result};
use crate::table::key_index::KeyIndex;
use crate::table::lineage::first_row_ids;
use crate::table::manifest_cache::ManifestCache;

/// The touched keys, as rows of `converter`, and how to find them in a data file.
pub struct KeyProbe<'a> {
    pub keys: &'a KeyColumns,
    pub converter: &'a RowConverter,
    /// The touched keys, encoded.
    pub touched: &'a Rows,
    /// The same as a set, made when a file is first read (exact indexes read none).
    pub touched_set: OnceLock<HashSet<Row<'a>>>,
    /// The touched keys' fingerprints, ascending (see [`fingerprints`]).
    pub fingerprints: &'a [u64],
    pub ranges: &'a KeyRanges,
}

/// A live data file holding touched keys.
pub struct Hit {
    /// Index of the manifest (among those searched) that lists the file.
    pub manifest: usize,
    pub spec_id: i32,
    pub file: DataFile,
    /// Positions of the rows with touched keys, ascending.
    pub positions: Vec<u64>,
    /// The rows the file holds, counted in the file itself (by this lookup or when the
    /// file was indexed), not taken from its manifest entry.
    pub rows: u64,
    /// The file's first row id, its own or inherited (v3 row lineage; `None` before).
    pub first_row_id: Option<i64>,
    /// The file's data sequence number (its rows' last-updated sequence number, unless
    /// the file says otherwise).
    pub sequence_number: Option<i64>,
}

impl Hit {
    /// Whether every row of the file holds a touched key: positions are distinct and
    /// below `rows`, so as many of them as rows are all of them. The manifest's count
    /// must agree too, so that a cached index of another file at the same path, size
    /// and count (never one floe wrote: its names are new) cannot drop a file unread.
    pub fn removes_every_row(&self) -> bool {
        self.positions.len() as u64 == self.rows && self.rows == self.file.record_count()
    }
}

/// The live data files of `manifests` that hold touched keys, with the rows' positions.
///
/// A file whose key index the cache holds (see [`crate::table::key_index`]) is not read
/// when the index is exact, nor when none of its fingerprints is a touched key's; any
/// other file is read by its key columns, which also indexes it (once).
pub async fn find_touched_rows(
    file_io: &FileIO,
    manifests: &[ManifestFile],
    cache: &ManifestCache,
    probe: &KeyProbe<'_>,
) -> Result<Vec<Hit>> {
    let signature = fingerprints::signature(probe.keys);
    let indexes = cache.keys();
    let mut live = HashSet::new();
    let mut hits = Vec::new();
    for (n, manifest) in manifests.iter().enumerate() {
        if manifest.content != ManifestContentType::Data {
            continue;
        }
        let entries = load(cache, file_io, manifest).await?;
        let all = entries.entries().iter();
        let ids = first_row_ids(manifest, all.map(|e| (e.status(), e.data_file())));
        for (entry, first_row_id) in entries.entries().iter().zip(ids) {
            if !entry.is_alive() {
                continue;
            }
            let file = entry.data_file();
            live.insert(file.file_path().to_string());
            if !probe.ranges.may_hold(file) {
                continue;
            }
            let found = match indexes.get(&signature, file) {
                Some(index) if index.exact() => Found {
                    positions: index.positions_of(probe.fingerprints),
                    rows: index.rows(),
                },
                Some(index) if !index.holds_any(probe.fingerprints) => continue,
                Some(_) => touched_positions(file_io, file, probe, None).await?,
                None if !indexes.fits(file) => {
                    touched_positions(file_io, file, probe, None).await?
                }
                None => {
                    let mut keys = Vec::with_capacity(file.record_count() as usize);
                    let found = touched_positions(file_io, file, probe, Some(&mut keys)).await?;
                    let exact = fingerprints::is_exact(probe.keys);
                    if let Some(index) = KeyIndex::new(exact, keys, found.rows) {
                        indexes.remember(&signature, file, index);
                    }
                    found
                }
            };
            if !found.positions.is_empty() {
                hits.push(Hit {
                    manifest: n,
                    spec_id: manifest.partition_spec_id,
                    file: file.clone(),
                    positions: found.positions,
                    rows: found.rows,
                    first_row_id,
                    sequence_number: entry.sequence_number(),
                });
            }
        }
    }
    indexes.keep(&live);
    Ok(hits)
}

/// The key index of a data file this writer wrote, from its bytes (still in memory), so
/// the first commit that touches its keys need not read it back; `None` when the file
/// has no key columns or is too large to index.
pub fn index_written(keys: &KeyColumns, bytes: bytes::Bytes) -> Result<Option<KeyIndex>> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let unreadable = |e: parquet::errors::ParquetError| Error::internal(format!("{e}"));
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(unreadable)?;
    let Some(mask) = key_projection(builder.parquet_schema(), keys)? else {
        return Ok(None);
    };
    let converter = keys.converter()?;
    let mut pairs = Vec::new();
    let mut offset = 0u64;
    for batch in builder.with_projection(mask).build().map_err(unreadable)? {
        let batch = batch.map_err(|e| Error::internal(format!("{e}")))?;
        let projected = conform(&batch, &keys.arrow)?;
        let found = fingerprints::of_batch(keys, &converter, &projected)?;
        add_fingerprints(found, offset, &mut pairs);
        offset += batch.num_rows() as u64;
    }
    Ok(KeyIndex::new(fingerprints::is_exact(keys), pairs, offset))
}

/// Adds each found fingerprint with its position (`offset` + row); `None` (a null key)
/// is left out.
fn add_fingerprints(found: Vec<Option<u64>>, offset: u64, pairs: &mut Vec<(u64, u64)>) {
    for (i, fingerprint) in found.into_iter().enumerate() {
        if let Some(f) = fingerprint {
            pairs.push((f, offset + i as u64));
        }
    }
}

/// The projection of a data file's Parquet schema onto the key columns, by field id;
/// `None` for a file without every key column (written before the key existed: its rows
/// have null keys, which no upsert or delete names).
fn key_projection(
    parquet: &parquet::schema::types::SchemaDescriptor,
    keys: &KeyColumns,
) -> Result<Option<ProjectionMask>> {
    let fields = parquet.root_schema().get_fields();
    if !fields.iter().any(|f| f.get_basic_info().has_id()) {
        return Err(Error::config(
            "a data file has no Parquet field ids (written without Iceberg's ids, e.g. a \
             migrated table read through a name mapping): floe cannot match its keys",
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
        return Ok(None);
    }
    Ok(Some(ProjectionMask::roots(parquet, roots)))
}

/// A manifest's entries, through the cache; unreadable is retryable (see [`unreadable`]).
pub async fn load(
    cache: &ManifestCache,
    file_io: &FileIO,
    manifest: &ManifestFile,
) -> Result<Arc<Manifest>> {
    cache
        .load(file_io, manifest)
        .await
        .map_err(|e| unreadable(&manifest.manifest_path, e))
}

/// A streaming Parquet reader of a data file: the footer first, then the column chunks
/// of one row group at a time, fetched by range.
pub async fn open_data_file(
    file_io: &FileIO,
    file: &DataFile,
) -> Result<ParquetRecordBatchStreamBuilder<ArrowFileReader>> {
    let path = file.file_path();
    let input = file_io.new_input(path).map_err(|e| unreadable(path, e))?;
    let meta = FileMetadata {
        size: file.file_size_in_bytes(),
    };
    let reader = input.reader().await.map_err(|e| unreadable(path, e))?;
    ParquetRecordBatchStreamBuilder::new(ArrowFileReader::new(meta, reader))
        .await
        .map_err(|e| unreadable(path, e))
}

/// A file the plan cannot read: retryable, since storage may be out for a moment or the
/// file may have been removed by a commit the next attempt's head shows (never the
/// messages' fault, so a host retries them rather than dead-letters them).
pub fn unreadable(path: &str, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("could not read {path} to find the rows of the keys to replace: {e}"),
    )
}

/// What a lookup found in one data file: the positions of its rows with touched keys,
/// ascending, and how many rows it holds.
struct Found {
    positions: Vec<u64>,
    rows: u64,
}

/// The rows of a Parquet data file whose key is touched, reading its key columns only;
/// with `index`, also every row's key fingerprint and position.
async fn touched_positions(
    file_io: &FileIO,
    file: &DataFile,
    probe: &KeyProbe<'_>,
    mut index: Option<&mut Vec<(u64, u64)>>,
) -> Result<Found> {
    let keys = probe.keys;
    let builder = open_data_file(file_io, file).await?;
    let Some(mask) = key_projection(builder.parquet_schema(), keys)? else {
        // Without the key columns its rows' keys are null: none is touched.
        let rows = builder.metadata().file_metadata().num_rows() as u64;
        return Ok(Found {
            positions: Vec::new(),
            rows,
        });
    };
    let path = file.file_path();
    let mut stream = builder
        .with_projection(mask)
        .build()
        .map_err(|e| unreadable(path, e))?;
    let mut positions = Vec::new();
    let mut offset = 0u64;
    let exact = fingerprints::is_exact(keys);
    while let Some(batch) = stream.try_next().await.map_err(|e| unreadable(path, e))? {
        let projected = conform(&batch, &keys.arrow)?;
        // A key that is its own fingerprint is looked up among the touched ones as is,
        // without encoding rows.
        if let Some(values) = exact.then(|| fingerprints::values(&projected)).flatten() {
            for (i, value) in values.iter().enumerate() {
                if value.is_some_and(|v| probe.fingerprints.binary_search(&v).is_ok()) {
                    positions.push(offset + i as u64);
                }
            }
            if let Some(index) = index.as_mut() {
                add_fingerprints(values, offset, index);
            }
            offset += batch.num_rows() as u64;
            continue;
        }
        let rows = keys.rows(probe.converter, &projected)?;
        let touched = probe
            .touched_set
            .get_or_init(|| probe.touched.iter().collect());
        for (i, row) in rows.iter().enumerate() {
            if touched.contains(&row) {
                positions.push(offset + i as u64);
            }
        }
        if let Some(index) = index.as_mut() {
            let found = fingerprints::of_encoded(keys, &projected, &rows);
            add_fingerprints(found, offset, index);
        }
        offset += batch.num_rows() as u64;
    }
    Ok(Found {
        positions,
        rows: offset,
    })
}

/// Whether a delete manifest still lists live files.
pub fn has_live_files(m: &ManifestFile) -> bool {
    m.added_files_count.unwrap_or(1) > 0 || m.existing_files_count.unwrap_or(1) > 0
}

/// The smallest and largest touched value per key column, to skip files whose column
/// bounds exclude them all.
pub struct KeyRanges(Vec<(i32, Option<(PrimitiveLiteral, PrimitiveLiteral)>)>);

impl KeyRanges {
    pub fn of(keys: &KeyColumns, touched: &RecordBatch) -> Self {
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
    pub fn may_hold(&self, file: &DataFile) -> bool {
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

#[cfg(test)]
mod tests;
