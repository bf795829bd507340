//! Copy-on-write: upserts and deletes that rewrite the data files holding their keys, so
//! the table never has delete files (readable by engines that refuse them: pyiceberg,
//! Unity Catalog, Snowflake).
//!
//! Each file that holds a touched key (found by [`super::lookup`]) is rewritten without
//! those rows, and the snapshot removes it; a file all of whose rows are touched (as
//! upserts that replace a whole earlier batch make them) is removed without being read. A file whose pages the removed rows leave
//! mostly untouched is spliced ([`crate::write::splice`]: kept pages copied byte for
//! byte, only the removed rows' pages re-encoded; memory holds the file); any other is
//! streamed a batch at a time through one data-file sink shared by all such files, so
//! small remainders merge (memory holds one row group being read and the row groups
//! being written).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::table::manifest_cache::ManifestCache;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, BooleanArray, Int64Array, RecordBatch};
use arrow_schema::SchemaRef;
use arrow_select::filter::filter_record_batch;
use bytes::Bytes;
use futures::TryStreamExt;
use iceberg::io::FileIO;
use iceberg::spec::PartitionKey;
use iceberg::spec::{
    DataFile, DataFileFormat, FormatVersion, ManifestContentType, ManifestFile, TableMetadata,
};
use iceberg::writer::file_writer::location_generator::LocationGenerator;
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use uuid::Uuid;

use super::conform::conform;
use super::fingerprints::signature;
use super::keys::KeyColumns;
use super::lookup::{Hit, has_live_files, index_written, open_data_file, unreadable};
use super::removal::Written;
use super::removed::Removed;
use crate::error::{Error, Result};
use crate::table::key_index::KeyIndex;
use crate::table::merge::carried_without;
use crate::write::lineage::{LAST_UPDATED_FIELD_ID, ROW_ID_FIELD_ID, with_lineage_columns};
use crate::write::splice::{Spliced, splice_without, spliced_data_file};
use crate::write::{DataFileSink, FileSettings, in_partition_type};

/// Refuses tables copy-on-write cannot rewrite correctly.
pub fn check_table(carried: &[ManifestFile]) -> Result<()> {
    refuse_live_delete_files(carried)
}

/// Rewrites the files of `hits` without their touched rows; `carried` (the head's
/// manifests) comes back with each manifest that listed one replaced by a copy marking
/// it DELETED.
pub async fn rewrite(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    (snapshot_id, commit_id, attempt): (i64, Uuid, u32),
    carried: Vec<ManifestFile>,
    (hits, keys): (Vec<Hit>, &KeyColumns),
    settings: &FileSettings,
    out: Written<'_>,
) -> Result<Removed> {
    // Small rewrites go to scratch storage, uploaded with the attempt's manifests in
    // one round trip, and are indexed from their bytes there.
    let rewritten: u64 = hits
        .iter()
        .filter(|h| !h.removes_every_row())
        .map(|h| h.file.file_size_in_bytes())
        .sum();
    let stage = rewritten <= STAGE_MAX_REWRITE_BYTES;
    let write_io = if stage { out.stage_io } else { file_io };
    let written = out.all;
    let current = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(metadata.current_schema()).map_err(Error::from)?,
    );
    // v3: the kept rows keep their row ids and last-updated sequence numbers, written
    // into the new files (the splice copies pages as they are, so it cannot add them).
    let lineage = match metadata.format_version() >= FormatVersion::V3 {
        true => Some(Arc::new(
            iceberg::arrow::schema_to_arrow_schema(&*with_lineage_columns(
                metadata.current_schema(),
            )?)
            .map_err(Error::from)?,
        )),
        false => None,
    };
    // One sink for every remainder: small remainders of several files share a file.
    let mut sink = match lineage {
        Some(_) => DataFileSink::with_lineage(metadata, write_io, settings)?,
        None => DataFileSink::new(metadata, write_io, settings)?,
    };
    let started = std::time::Instant::now();
    let mut removed_by_manifest: BTreeMap<usize, HashSet<String>> = BTreeMap::new();
    let mut removed = Vec::with_capacity(hits.len());
    let mut added = Vec::new();
    let mut dropped = 0;
    for hit in hits {
        if lineage.is_some() && hit.sequence_number.is_none() {
            // As merging refuses it: its rows' last-updated sequence number is unknown.
            return Err(Error::internal(format!(
                "manifest {} has an EXISTING entry without a data sequence number ({})",
                carried[hit.manifest].manifest_path,
                hit.file.file_path()
            )));
        }
        // A file that keeps none of its rows goes without being read.
        let io = (file_io, write_io);
        let shape = (settings, &current, lineage.as_ref());
        if hit.removes_every_row() {
            dropped += 1;
        } else if let Some((file, spliced)) =
            write_kept(metadata, io, &hit, shape, written, &mut sink).await?
        {
            let signature = signature(keys);
            let carried = cache
                .keys()
                .get(&signature, &hit.file)
                .and_then(|old| spliced_index(&old, &spliced));
            match carried {
                Some(index) => cache.keys().remember(&signature, &file, index),
                None => remember_keys(keys, cache, &file, spliced.bytes),
            }
            if stage {
                out.staged.push(file.file_path().to_string());
            }
            added.push(*file);
        }
        removed_by_manifest
            .entry(hit.manifest)
            .or_default()
            .insert(hit.file.file_path().to_string());
        removed.push((hit.file, hit.spec_id));
    }
    let merged = sink.close().await?;
    written.extend(merged.iter().map(|f| f.file_path().to_string()));
    if stage {
        for file in &merged {
            let path = file.file_path();
            out.staged.push(path.to_string());
            let bytes = write_io
                .new_input(path)?
                .read()
                .await
                .map_err(Error::from)?;
            remember_keys(keys, cache, file, bytes);
        }
    }
    added.extend(merged);
    let files_done = started.elapsed();
    let ids = (snapshot_id, commit_id, attempt);
    let key = |f: &DataFile| f.file_path().to_string();
    let io = (file_io, cache);
    let manifests = carried_without(
        metadata,
        io,
        ids,
        "r",
        carried,
        &removed_by_manifest,
        &key,
        written,
    )
    .await?;
    tracing::debug!(
        "rewrote {} files (and dropped {dropped} unread) in {files_done:?}, their manifests in {:?}",
        removed.len() - dropped,
        started.elapsed() - files_done
    );
    Ok(Removed {
        manifests,
        removed,
        added,
        ..Removed::default()
    })
}

/// Writes the rows of `hit`'s file that it keeps: spliced into a file of their own
/// (answered with its entry and the spliced file), or streamed into `sink` (`None`),
/// in the current schema and, with `lineage`, the lineage columns.
async fn write_kept(
    metadata: &TableMetadata,
    (file_io, write_io): (&FileIO, &FileIO),
    hit: &Hit,
    (settings, current, lineage): (&FileSettings, &SchemaRef, Option<&SchemaRef>),
    written: &mut Vec<String>,
    sink: &mut DataFileSink,
) -> Result<Option<(Box<DataFile>, Box<Spliced>)>> {
    let spliced = match lineage {
        Some(_) => Splice::Declined(None),
        None => {
            let io = (file_io, write_io);
            splice(metadata, io, hit, (settings, current), written).await?
        }
    };
    match spliced {
        Splice::Done(file, spliced) => Ok(Some((file, spliced))),
        Splice::Declined(read) => {
            let kept = KeptRows::new(hit, current, lineage);
            stream_without(file_io, hit, kept, sink, read).await?;
            Ok(None)
        }
    }
}

/// The key index of a spliced file, carried over from the old file's exact index (the
/// lookup that found its rows made or used it) by where the splice put each kept row,
/// so the new file's keys are not read again; `None` for an index of hashes (it keeps
/// no positions) or one that does not count the old file's rows as the splice did.
fn spliced_index(old: &KeyIndex, spliced: &Spliced) -> Option<KeyIndex> {
    if !old.exact() {
        return None;
    }
    let mut new_position = vec![None; usize::try_from(old.rows()).ok()?];
    let mut kept = 0u64;
    for (new, p) in spliced.kept_positions().enumerate() {
        *new_position.get_mut(usize::try_from(p).ok()?)? = Some(u32::try_from(new).ok()?);
        kept += 1;
    }
    if kept != spliced.rows || kept + spliced.removed_count() != old.rows() {
        return None;
    }
    old.moved(&new_position, spliced.rows)
}

/// Indexes the keys of a spliced file from its bytes, so the next commit that touches
/// them need not read it back (see [`crate::table::key_index`]); a file that cannot be
/// indexed is read then instead.
fn remember_keys(keys: &KeyColumns, cache: &ManifestCache, file: &DataFile, bytes: Bytes) {
    match index_written(keys, bytes) {
        Ok(Some(index)) => cache.keys().remember(&signature(keys), file, index),
        Ok(None) => {}
        Err(e) => tracing::debug!("the keys of {} were not indexed: {e}", file.file_path()),
    }
}

/// The most bytes of data files one commit rewrites through scratch storage (see
/// [`rewrite`]); larger rewrites stream to storage as they are written.
const STAGE_MAX_REWRITE_BYTES: u64 = 16 << 20;

/// The largest data file spliced: the splice holds the file, the new file and the
/// re-encoded pages in memory at once, where the merging rewrite holds a row group.
const SPLICE_MAX_FILE_BYTES: u64 = 64 << 20;

/// What [`splice`] made of a file.
enum Splice {
    /// The spliced file's entry, written (to scratch storage when staged), and the file.
    Done(Box<DataFile>, Box<Spliced>),
    /// Left to the merging rewrite, with the file's bytes if they were read.
    Declined(Option<Bytes>),
}

/// `hit`'s file spliced without the rows at its positions, uploaded; declined when it
/// is the merging rewrite's: a file of another partition spec than the default
/// (added files are listed under the default spec), larger than
/// [`SPLICE_MAX_FILE_BYTES`], declaring a sort order (the splice moves re-encoded rows
/// to the end of their row group), written in another schema than the current one, or
/// one whose layout the splice declines or fails
/// on (a splice is only a faster way to the same rows: its failure is logged, and the
/// merging rewrite reports any fault of the file itself).
async fn splice(
    metadata: &TableMetadata,
    (file_io, write_io): (&FileIO, &FileIO),
    hit: &Hit,
    (settings, current): (&FileSettings, &SchemaRef),
    written: &mut Vec<String>,
) -> Result<Splice> {
    let sorted = hit.file.sort_order_id().is_some_and(|id| id != 0);
    if hit.spec_id != metadata.default_partition_spec_id()
        || hit.file.file_format() != DataFileFormat::Parquet
        || hit.file.file_size_in_bytes() > SPLICE_MAX_FILE_BYTES
        || sorted
    {
        return Ok(Splice::Declined(None));
    }
    let path = hit.file.file_path();
    let input = file_io.new_input(path).map_err(|e| unreadable(path, e))?;
    let bytes = input.read().await.map_err(|e| unreadable(path, e))?;
    let spliced = match splice_without(&bytes, &hit.positions, settings, current) {
        Ok(Some(spliced)) => spliced,
        Ok(None) => return Ok(Splice::Declined(Some(bytes))),
        Err(e) => {
            tracing::warn!(file = path, error = %e, "splicing a data file failed; rewriting it whole");
            return Ok(Splice::Declined(Some(bytes)));
        }
    };
    let new_path = spliced_path(metadata, hit)?;
    written.push(new_path.clone());
    let file = spliced_data_file(&spliced, new_path.clone(), &hit.file, hit.spec_id)?;
    write_io
        .new_output(&new_path)?
        .write(spliced.bytes.clone())
        .await
        .map_err(Error::from)?;
    Ok(Splice::Done(Box::new(file), Box::new(spliced)))
}

/// Where the splice of `hit`'s file goes: where the table's writers put a new data file
/// of its partition (`write.data.path`, else the table's `data/`), named for what made
/// it so that an operator (and the tests) can tell spliced files.
fn spliced_path(metadata: &TableMetadata, hit: &Hit) -> Result<String> {
    let spec = metadata.default_partition_spec();
    let partition = (!spec.is_unpartitioned()).then(|| {
        PartitionKey::new(
            spec.as_ref().clone(),
            metadata.current_schema().clone(),
            in_partition_type(spec, metadata.current_schema(), hit.file.partition()),
        )
    });
    let name = format!("00000-{}-spliced.parquet", Uuid::new_v4());
    let locations = crate::write::location::FileLocations::new(metadata);
    Ok(locations.generate_location(partition.as_ref(), &name))
}

/// Streams the rows of `hit`'s file, minus those at its positions, into `sink`: from
/// `read`, its bytes when the splice read them already, else from storage.
async fn stream_without(
    file_io: &FileIO,
    hit: &Hit,
    mut kept: KeptRows<'_>,
    sink: &mut DataFileSink,
    read: Option<Bytes>,
) -> Result<()> {
    let path = hit.file.file_path();
    let read_error = |e: parquet::errors::ParquetError| unreadable(path, e);
    if let Some(bytes) = read {
        let batches = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.build())
            .map_err(read_error)?;
        for batch in batches {
            let batch = batch.map_err(|e| unreadable(path, e))?;
            sink.write(&kept.of(&batch)?).await?;
        }
        return Ok(());
    }
    let mut stream = open_data_file(file_io, &hit.file)
        .await?
        .build()
        .map_err(read_error)?;
    while let Some(batch) = stream.try_next().await.map_err(read_error)? {
        sink.write(&kept.of(&batch)?).await?;
    }
    Ok(())
}

/// The rows of a file's batches, read in order, that are not at the hit's positions
/// (ascending, as the lookup finds them), in the current schema; with `lineage` (that
/// schema and the lineage columns), each with its row id and last-updated sequence
/// number.
struct KeptRows<'a> {
    hit: &'a Hit,
    current: &'a SchemaRef,
    lineage: Option<&'a SchemaRef>,
    next: usize,
    offset: u64,
}

impl<'a> KeptRows<'a> {
    fn new(hit: &'a Hit, current: &'a SchemaRef, lineage: Option<&'a SchemaRef>) -> Self {
        debug_assert!(
            hit.positions.windows(2).all(|w| w[0] < w[1]),
            "positions ascend"
        );
        Self {
            hit,
            current,
            lineage,
            next: 0,
            offset: 0,
        }
    }

    /// The kept rows of the file's next `batch`.
    fn of(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        let rows = batch.num_rows() as u64;
        let start = self.offset;
        let positions = &self.hit.positions;
        let keep: BooleanArray = (self.offset..self.offset + rows)
            .map(|pos| {
                let removed = positions.get(self.next) == Some(&pos);
                self.next += usize::from(removed);
                Some(!removed)
            })
            .collect();
        self.offset += rows;
        let error = |e| Error::internal(format!("rewriting {}: {e}", self.hit.file.file_path()));
        let rows = conform(batch, self.current)?;
        let rows = match self.lineage {
            Some(schema) => with_lineage(rows, batch, (self.hit, start), schema).map_err(error)?,
            None => rows,
        };
        filter_record_batch(&rows, &keep).map_err(error)
    }
}

/// `rows` (the conformed `read` batch, whose first row is at position `start` of `hit`'s
/// file) with each row's lineage: the file's own value where it has one, else what a
/// reader inherits (first row id + position; the file's data sequence number).
fn with_lineage(
    rows: RecordBatch,
    read: &RecordBatch,
    (hit, start): (&Hit, u64),
    schema: &SchemaRef,
) -> std::result::Result<RecordBatch, arrow_schema::ArrowError> {
    let own = |field_id: i32| {
        let id = field_id.to_string();
        let at = read
            .schema()
            .fields()
            .iter()
            .position(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&id));
        at.and_then(|i| read.column(i).as_primitive_opt::<Int64Type>().cloned())
    };
    let (own_ids, own_sequences) = (own(ROW_ID_FIELD_ID), own(LAST_UPDATED_FIELD_ID));
    let value = |column: &Option<Int64Array>, i: usize| {
        column
            .as_ref()
            .filter(|c| c.is_valid(i))
            .map(|c| c.value(i))
    };
    let n = rows.num_rows();
    let ids: Int64Array = (0..n)
        .map(|i| {
            let inherited = hit
                .first_row_id
                .map(|first| first + (start + i as u64) as i64);
            value(&own_ids, i).or(inherited)
        })
        .collect();
    let sequences: Int64Array = (0..n)
        .map(|i| value(&own_sequences, i).or(hit.sequence_number))
        .collect();
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(ids));
    columns.push(Arc::new(sequences));
    RecordBatch::try_new(schema.clone(), columns)
}

/// A rewritten file gets a new sequence number, so delete files (from a merge-on-read
/// writer) that applied to its rows would stop applying and resurrect them. Refused
/// until floe applies them while rewriting.
fn refuse_live_delete_files(carried: &[ManifestFile]) -> Result<()> {
    let live = |m: &&ManifestFile| m.content == ManifestContentType::Deletes && has_live_files(m);
    match carried.iter().find(live) {
        None => Ok(()),
        Some(m) => Err(Error::config(format!(
            "copy-on-write cannot rewrite this table: it has delete files (manifest {}), \
             written by merge-on-read, that rewritten rows would escape; compact the table \
             (rewrite_data_files with delete files applied) or keep merge-on-read",
            m.manifest_path
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use iceberg::spec::{NestedField, PrimitiveType, Type};
    use parquet::file::properties::WriterProperties;

    use super::*;
    use crate::write::test_files::{next, parquet_bytes};

    fn schema() -> Schema {
        let field = |name: &str, id: i32, t: DataType| {
            Field::new(name, t, true).with_metadata(HashMap::from([(
                PARQUET_FIELD_ID_META_KEY.to_string(),
                id.to_string(),
            )]))
        };
        Schema::new(vec![
            field("id", 1, DataType::Int64),
            field("s", 2, DataType::Utf8),
        ])
    }

    fn key_columns() -> KeyColumns {
        let table = iceberg::spec::Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "s", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        KeyColumns::for_table(&table, &["id".to_string()], true)
            .unwrap()
            .unwrap()
    }

    /// A data file of random keys (repeats and nulls among them) in small pages.
    fn data_file(rows: usize, group_rows: usize, rng: &mut u64) -> Bytes {
        let schema = Arc::new(schema());
        let ids: ArrayRef = Arc::new(Int64Array::from_iter((0..rows).map(|_| {
            let v = next(rng) % (rows as u64 * 2);
            (!v.is_multiple_of(17)).then_some(v as i64)
        })));
        let strings: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| "s".repeat(i % 23)),
        ));
        let batch = RecordBatch::try_new(schema, vec![ids, strings]).unwrap();
        let props = WriterProperties::builder()
            .set_dictionary_enabled(false)
            .set_data_page_size_limit(256)
            .set_write_batch_size(32)
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        parquet_bytes(&batch, props)
    }

    /// The index a splice carries over equals the one read from the spliced file's
    /// bytes, over random files and removals: a wrong position there would make a later
    /// commit remove another row.
    #[test]
    fn a_spliced_files_carried_index_is_the_one_its_bytes_give() {
        let keys = key_columns();
        let settings = FileSettings {
            properties: WriterProperties::builder().build(),
            target_file_size: 1 << 29,
            dictionaries_by_sample: false,
        };
        let mut checked = 0;
        for seed in 1..=60u64 {
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let rows = 300 + (next(&mut rng) % 2_000) as usize;
            let group_rows = 200 + (next(&mut rng) % 1_500) as usize;
            let bytes = data_file(rows, group_rows, &mut rng);
            let old = index_written(&keys, bytes.clone()).unwrap().unwrap();
            let mut removed: Vec<u64> = (0..1 + next(&mut rng) % 20)
                .map(|_| next(&mut rng) % rows as u64)
                .collect();
            removed.sort_unstable();
            removed.dedup();
            let Some(spliced) = splice_without(&bytes, &removed, &settings, &schema()).unwrap()
            else {
                continue;
            };
            checked += 1;
            let carried = spliced_index(&old, &spliced).expect("an exact index");
            let read = index_written(&keys, spliced.bytes.clone())
                .unwrap()
                .unwrap();
            assert_eq!(carried, read, "seed {seed}");
        }
        assert!(checked > 30, "{checked} of 60 spliced");
    }
}
