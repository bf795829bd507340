//! The Iceberg metrics of a spliced file, from the old file's and what the removed rows
//! held.
//!
//! Readers take a data file's metrics at their word: Spark answers `max(v)` from the
//! upper bound alone when a file has no deletes, and Java's and pyiceberg's strict
//! evaluators read a missing null or NaN count as "none", so a delete by filter may drop
//! a whole file. A spliced file therefore keeps the old file's bound of a column only
//! while it is still exact — no removed row held the minimum or maximum of its row group
//! — and leaves it out otherwise (unknown: no pruning, no answer from metadata); its null
//! and NaN counts are the old file's less the removed rows'.

use std::collections::{HashMap, HashSet};

use arrow_array::{Array, Float32Array, Float64Array, RecordBatch, StructArray};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, SchemaRef};
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat};
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use parquet::basic::Compression;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::statistics::Statistics;
use parquet::schema::types::SchemaDescriptor;

use super::Spliced;
use crate::error::{Error, Result};

/// What the removed rows held, by field id.
#[derive(Debug, Default)]
pub struct RemovedRows {
    nulls: HashMap<i32, u64>,
    nans: HashMap<i32, u64>,
    /// Fields whose old bounds are still exact: in no touched row group did a removed
    /// row hold the minimum or maximum of the column chunk.
    bounds_kept: HashSet<i32>,
    /// The touched column chunks (row group, leaf) whose minimum and maximum still
    /// hold exactly.
    chunks_exact: HashSet<(usize, usize)>,
    /// Nulls among the removed rows of each touched column chunk (row group, leaf).
    chunk_nulls: HashMap<(usize, usize), u64>,
}

impl RemovedRows {
    /// From the removed rows of each touched row group (`(row group, batches)`) of the
    /// file whose footer is `metadata`, decoded in `arrow`.
    pub(super) fn of(
        metadata: &ParquetMetaData,
        arrow: &SchemaRef,
        by_group: Vec<(usize, Vec<RecordBatch>)>,
    ) -> Result<Self> {
        let mut removed = RemovedRows::default();
        for batch in by_group.iter().flat_map(|(_, b)| b) {
            count_nans(batch, &mut removed.nans);
        }
        let (groups, stats) = chunk_statistics(metadata, arrow, &by_group)?;
        let schema = metadata.file_metadata().schema_descr();
        let mut lost = HashSet::new();
        for (leaf, column) in schema.columns().iter().enumerate() {
            let info = column.self_type().get_basic_info();
            let id = info.has_id().then(|| info.id());
            for (group, removed_group) in groups.iter().zip(stats.row_groups()) {
                let removed_chunk = removed_group.column(leaf).statistics();
                let nulls = removed_chunk.and_then(Statistics::null_count_opt);
                removed
                    .chunk_nulls
                    .insert((*group, leaf), nulls.unwrap_or(0));
                let original = metadata.row_group(*group).column(leaf).statistics();
                let exact = still_exact(original, removed_chunk);
                if exact {
                    removed.chunks_exact.insert((*group, leaf));
                }
                if let Some(id) = id {
                    *removed.nulls.entry(id).or_default() += nulls.unwrap_or(0);
                    if !exact {
                        lost.insert(id);
                    }
                }
            }
            if let Some(id) = id.filter(|id| !lost.contains(id)) {
                removed.bounds_kept.insert(id);
            }
        }
        Ok(removed)
    }
}

impl RemovedRows {
    /// Whether the minimum and maximum of leaf `leaf` in row group `group` (a touched
    /// one) still hold exactly: no removed row held either.
    pub(super) fn chunk_bounds_hold(&self, group: usize, leaf: usize) -> bool {
        self.chunks_exact.contains(&(group, leaf))
    }

    /// Nulls among the removed rows of leaf `leaf` in row group `group`.
    pub(super) fn chunk_nulls(&self, group: usize, leaf: usize) -> u64 {
        self.chunk_nulls.get(&(group, leaf)).copied().unwrap_or(0)
    }
}

/// The removed rows' column chunk statistics, one row group per touched row group
/// (which comes with it), written in the file's Parquet schema with exact, untruncated
/// bounds.
fn chunk_statistics(
    metadata: &ParquetMetaData,
    arrow: &SchemaRef,
    by_group: &[(usize, Vec<RecordBatch>)],
) -> Result<(Vec<usize>, ParquetMetaData)> {
    let failed = |e: parquet::errors::ParquetError| {
        Error::internal(format!("statistics of the removed rows: {e}"))
    };
    let properties = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_statistics_truncate_length(None)
        .set_max_row_group_row_count(None)
        .set_max_row_group_bytes(None)
        .build();
    let schema = SchemaDescriptor::new(metadata.file_metadata().schema_descr().root_schema_ptr());
    let options = ArrowWriterOptions::new()
        .with_properties(properties)
        .with_parquet_schema(schema)
        .with_skip_arrow_metadata(true);
    let mut writer =
        ArrowWriter::try_new_with_options(Vec::new(), arrow.clone(), options).map_err(failed)?;
    let mut groups = Vec::with_capacity(by_group.len());
    for (group, batches) in by_group {
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if rows == 0 {
            continue;
        }
        for batch in batches {
            writer.write(batch).map_err(failed)?;
        }
        writer.flush().map_err(failed)?;
        groups.push(*group);
    }
    let stats = writer.finish().map_err(failed)?;
    Ok((groups, stats))
}

/// Whether a chunk's bounds (`original`) still hold exactly without the removed rows,
/// whose own statistics are `removed`: they are exact, and the removed rows held
/// neither the minimum nor the maximum (or only nulls). Bounds compare by value in the
/// column's order, so a removed row holding the minimum makes the removed rows' minimum
/// equal to it.
fn still_exact(original: Option<&Statistics>, removed: Option<&Statistics>) -> bool {
    let Some(removed) = removed else {
        return false;
    };
    if removed.min_bytes_opt().is_none() && removed.max_bytes_opt().is_none() {
        return true;
    }
    let Some(original) = original else {
        return false;
    };
    let exact = original.min_is_exact()
        && original.max_is_exact()
        && !original.is_min_max_deprecated()
        && original.min_bytes_opt().is_some()
        && original.max_bytes_opt().is_some();
    if !exact {
        return false;
    }
    let differ = |a: Option<&[u8]>, b: Option<&[u8]>| a != b;
    match (original, removed) {
        // Floats by value: -0.0 and +0.0 are one value with two spellings.
        (Statistics::Float(o), Statistics::Float(r)) => {
            o.min_opt() != r.min_opt() && o.max_opt() != r.max_opt()
        }
        (Statistics::Double(o), Statistics::Double(r)) => {
            o.min_opt() != r.min_opt() && o.max_opt() != r.max_opt()
        }
        _ => {
            differ(original.min_bytes_opt(), removed.min_bytes_opt())
                && differ(original.max_bytes_opt(), removed.max_bytes_opt())
        }
    }
}

/// Adds the NaNs of `batch`'s float columns, at any struct depth, to `nans` by field id.
fn count_nans(batch: &RecordBatch, nans: &mut HashMap<i32, u64>) {
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        count_nans_in(
            field,
            column.as_ref(),
            column.logical_nulls().as_ref(),
            nans,
        );
    }
}

fn count_nans_in(
    field: &Field,
    array: &dyn Array,
    nulls: Option<&NullBuffer>,
    nans: &mut HashMap<i32, u64>,
) {
    let valid = |i: usize| nulls.is_none_or(|n| n.is_valid(i));
    let count = match field.data_type() {
        DataType::Float32 => {
            let values = array.as_any().downcast_ref::<Float32Array>();
            values.map(|v| {
                (0..v.len())
                    .filter(|&i| valid(i) && v.value(i).is_nan())
                    .count()
            })
        }
        DataType::Float64 => {
            let values = array.as_any().downcast_ref::<Float64Array>();
            values.map(|v| {
                (0..v.len())
                    .filter(|&i| valid(i) && v.value(i).is_nan())
                    .count()
            })
        }
        DataType::Struct(children) => {
            if let Some(st) = array.as_any().downcast_ref::<StructArray>() {
                for (child_field, child) in children.iter().zip(st.columns()) {
                    let child_nulls = NullBuffer::union(nulls, child.logical_nulls().as_ref());
                    count_nans_in(child_field, child.as_ref(), child_nulls.as_ref(), nans);
                }
            }
            None
        }
        _ => None,
    };
    let id = field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)
        .and_then(|id| id.parse::<i32>().ok());
    if let (Some(count), Some(id)) = (count, id) {
        *nans.entry(id).or_default() += count as u64;
    }
}

/// The Iceberg data file of a spliced file written at `path`, replacing `old`: counts
/// and sizes from the new footer; the old file's null and NaN counts less the removed
/// rows'; the old file's bounds of the columns where they are still exact (see the
/// module's doc).
pub fn spliced_data_file(
    spliced: &Spliced,
    path: String,
    old: &DataFile,
    spec_id: i32,
) -> Result<DataFile> {
    let mut sizes = HashMap::new();
    let mut values = HashMap::new();
    for group in spliced.metadata.row_groups() {
        for chunk in group.columns() {
            let info = chunk.column_descr().self_type().get_basic_info();
            if !info.has_id() {
                continue;
            }
            *sizes.entry(info.id()).or_insert(0u64) += chunk.compressed_size() as u64;
            *values.entry(info.id()).or_insert(0u64) += chunk.num_values() as u64;
        }
    }
    let removed = &spliced.removed;
    let less = |counts: &HashMap<i32, u64>, gone: &HashMap<i32, u64>| -> HashMap<i32, u64> {
        counts
            .iter()
            .map(|(id, n)| (*id, n.saturating_sub(gone.get(id).copied().unwrap_or(0))))
            .collect()
    };
    let kept = |bounds: &HashMap<i32, iceberg::spec::Datum>| {
        bounds
            .iter()
            .filter(|(id, _)| removed.bounds_kept.contains(id))
            .map(|(id, d)| (*id, d.clone()))
            .collect::<HashMap<_, _>>()
    };
    let split_offsets = spliced
        .metadata
        .row_groups()
        .iter()
        .filter_map(|g| g.file_offset())
        .collect();
    let mut builder = DataFileBuilder::default();
    builder
        .content(DataContentType::Data)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(old.partition().clone())
        .partition_spec_id(spec_id)
        .record_count(spliced.rows)
        .file_size_in_bytes(spliced.bytes.len() as u64)
        .column_sizes(sizes)
        .value_counts(values.clone())
        .null_value_counts(less(old.null_value_counts(), &removed.nulls))
        .nan_value_counts(nan_counts(
            less(old.nan_value_counts(), &removed.nans),
            &less(old.null_value_counts(), &removed.nulls),
            &values,
        ))
        .lower_bounds(kept(old.lower_bounds()))
        .upper_bounds(kept(old.upper_bounds()))
        .split_offsets(Some(split_offsets));
    if let Some(order) = old.sort_order_id() {
        builder.sort_order_id(order);
    }
    builder
        .build()
        .map_err(|e| Error::internal(format!("spliced data file: {e}")))
}

/// `nans` where they fit beside the nulls in the values; a count that does not
/// (iceberg-rust counts NaNs under a null struct, which its null count includes too)
/// is left out rather than let a reader take every value for NaN.
fn nan_counts(
    nans: HashMap<i32, u64>,
    nulls: &HashMap<i32, u64>,
    values: &HashMap<i32, u64>,
) -> HashMap<i32, u64> {
    nans.into_iter()
        .filter(|(id, n)| {
            let nulls = nulls.get(id).copied().unwrap_or(0);
            values.get(id).is_some_and(|v| n + nulls <= *v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::statistics::ValueStatistics;

    fn ints(min: i64, max: i64, exact: bool) -> Statistics {
        Statistics::Int64(
            ValueStatistics::new(Some(min), Some(max), None, Some(0), false)
                .with_min_is_exact(exact)
                .with_max_is_exact(exact),
        )
    }

    #[test]
    fn nan_counts_that_do_not_fit_beside_the_nulls_are_left_out() {
        let values = HashMap::from([(1, 2), (2, 2)]);
        let nulls = HashMap::from([(1, 1), (2, 0)]);
        let nans = nan_counts(HashMap::from([(1, 2), (2, 2)]), &nulls, &values);
        assert_eq!(nans, HashMap::from([(2, 2)]));
    }

    #[test]
    fn bounds_stay_exact_only_while_no_removed_row_held_one() {
        let original = ints(1, 9, true);
        assert!(still_exact(Some(&original), Some(&ints(3, 5, true))));
        assert!(!still_exact(Some(&original), Some(&ints(1, 5, true))));
        assert!(!still_exact(Some(&original), Some(&ints(3, 9, true))));
        assert!(!still_exact(
            Some(&ints(1, 9, false)),
            Some(&ints(3, 5, true))
        ));
        assert!(!still_exact(None, Some(&ints(3, 5, true))));
        assert!(!still_exact(Some(&original), None));
        // Only nulls removed: nothing a bound could depend on.
        let nulls = Statistics::Int64(ValueStatistics::new(None, None, None, Some(2), false));
        assert!(still_exact(None, Some(&nulls)));
        // -0.0 is the +0.0 a bound holds.
        let doubles = |min: f64, max: f64| {
            Statistics::Double(ValueStatistics::new(
                Some(min),
                Some(max),
                None,
                Some(0),
                false,
            ))
        };
        assert!(!still_exact(
            Some(&doubles(0.0, 4.0)),
            Some(&doubles(-0.0, 2.0))
        ));
        assert!(still_exact(
            Some(&doubles(0.0, 4.0)),
            Some(&doubles(1.0, 2.0))
        ));
    }
}
