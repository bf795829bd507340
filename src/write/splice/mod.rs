//! Page splicing: a Parquet file without some of its rows, made by copying every page
//! that holds none of them byte for byte and re-encoding only the pages that do.
//!
//! Copy-on-write removes a few rows from each file it touches; decoding and re-encoding
//! the whole file (a merging rewrite) spends nearly all its time on rows it keeps (a
//! profile of a 1 MiB rewrite: 64% reading and decoding, 25% encoding, 1% filtering).
//! Here the offset index (each page's first row) finds the pages that hold a removed row;
//! they are widened until every column's pages start and end on the same rows — a
//! *region* — and only regions are decoded, filtered and encoded again. The new file
//! keeps the old one's schema, row groups, codecs, `created_by` and key-value metadata.
//!
//! [`splice_without`] answers `None` for a file whose layout it does not splice (no
//! offset index, repeated columns, codecs that change between row groups, regions that
//! would replace more than half the bytes): the caller rewrites those by merging.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::BooleanArray;
use arrow_schema::Schema;
use arrow_select::filter::filter_record_batch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
use parquet::basic::{
    Compression, ConvertedType, Encoding, EncodingMask, LogicalType, Type as PhysicalType,
};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{
    ColumnChunkMetaData, PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData,
};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use parquet::file::reader::Length;
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnDescriptor, SchemaDescriptor};

use super::{FileSettings, created_by};
use crate::error::{Error, Result};

mod metrics;
mod pieces;

pub use metrics::{RemovedRows, spliced_data_file};
use pieces::Pieces;

/// A spliced file: its bytes and footer, the rows it kept, and what the removed rows
/// held (for the Iceberg metrics, see [`spliced_data_file`]).
pub struct Spliced {
    pub bytes: Bytes,
    pub metadata: ParquetMetaData,
    pub rows: u64,
    pub removed: RemovedRows,
    /// Where the new file's rows were in the old one: ranges of old positions in the
    /// new file's order, which may hold removed positions (see
    /// [`Spliced::kept_positions`]).
    order: Vec<Range<u64>>,
    /// The old file's positions the splice removed, ascending.
    removed_positions: Vec<u64>,
}

impl Spliced {
    /// The old file's position of each row of the new file, in the new file's order.
    /// The splice keeps each row group's rows outside its regions in place and moves
    /// the regions' kept rows to the row group's end, so a key index of the old file
    /// carries over to the new one without reading it.
    pub fn kept_positions(&self) -> impl Iterator<Item = u64> + '_ {
        self.order
            .iter()
            .flat_map(|r| r.clone())
            .filter(|p| self.removed_positions.binary_search(p).is_err())
    }

    /// How many rows of the old file the splice removed.
    pub fn removed_count(&self) -> u64 {
        self.removed_positions.len() as u64
    }
}

/// `file` without the rows at `removed_positions` (positions in the file, strictly ascending), or
/// `None` when its layout is not one this splices or it was not written in `schema`
/// (the table's current schema, in Arrow): a spliced file keeps its Parquet schema,
/// where the merging rewrite writes the current one (fields added since, widened
/// types), and the new file's bounds are the old file's.
pub fn splice_without(
    file: &Bytes,
    removed_positions: &[u64],
    settings: &FileSettings,
    schema: &Schema,
) -> Result<Option<Spliced>> {
    let Ok(metadata) = ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Optional)
        .parse_and_finish(file)
    else {
        // Unreadable here (e.g. encrypted): the merging rewrite reports why.
        return Ok(None);
    };
    if !written_in(&metadata, schema) {
        return Ok(None);
    }
    let metadata = Arc::new(metadata);
    let Some(mut plan) = plan(&metadata, removed_positions) else {
        return Ok(None);
    };
    let order = row_order(&metadata, &plan);
    let (temp, temp_metadata, removed) = encode_regions(file, &metadata, &mut plan, settings)?;
    let temp = Bytes::from(temp);
    let parts = Parts {
        file,
        metadata: &metadata,
        temp: &temp,
        temp_metadata: &temp_metadata,
    };
    let spliced = assemble(&parts, &plan, removed)?;
    Ok(spliced.map(|s| Spliced {
        order,
        removed_positions: removed_positions.to_vec(),
        ..s
    }))
}

/// The old file's positions of the new file's rows, in its order, as ranges that may
/// still hold removed rows: each row group's rows outside its regions, then each
/// region's, as [`spliced_chunk`] lays out every column's pages.
fn row_order(metadata: &ParquetMetaData, plan: &Plan) -> Vec<Range<u64>> {
    let touched: HashMap<usize, &Vec<Region>> = plan.iter().map(|(i, r)| (*i, r)).collect();
    let mut order = Vec::new();
    let mut first = 0u64;
    for (index, row_group) in metadata.row_groups().iter().enumerate() {
        let rows = row_group.num_rows().max(0) as u64;
        match touched.get(&index) {
            None => order.push(first..first + rows),
            Some(regions) => {
                let mut from = 0;
                for region in regions.iter() {
                    order.push(first + from..first + region.start);
                    from = region.end;
                }
                order.push(first + from..first + rows);
                order.extend(regions.iter().map(|r| first + r.start..first + r.end));
            }
        }
        first += rows;
    }
    order.retain(|r| !r.is_empty());
    order
}

/// Whether the file's Parquet schema is the one a writer of `schema` makes: the same
/// leaves, with the same names, field ids, repetition and types.
fn written_in(metadata: &ParquetMetaData, schema: &Schema) -> bool {
    let Ok(expected) = ArrowSchemaConverter::new().convert(schema) else {
        return false;
    };
    let actual = metadata.file_metadata().schema_descr();
    actual.num_columns() == expected.num_columns()
        && actual
            .columns()
            .iter()
            .zip(expected.columns())
            .all(|(a, e)| a.path() == e.path() && a.self_type() == e.self_type())
}

/// Rows `[start, end)` of a row group, starting and ending on a page boundary of every
/// column, and the removed rows among them (row-group positions, ascending).
#[derive(Debug, Clone, PartialEq)]
struct Region {
    start: u64,
    end: u64,
    removed: Vec<u64>,
    /// The temporary file's row group that holds the region's kept rows, once encoded.
    temp: Option<usize>,
}

impl Region {
    fn kept(&self) -> u64 {
        self.end - self.start - self.removed.len() as u64
    }
}

/// The touched row groups (by index, ascending) and their regions.
type Plan = Vec<(usize, Vec<Region>)>;

/// Where the removed rows' regions lie, or `None` when the file is not spliceable.
fn plan(metadata: &ParquetMetaData, removed: &[u64]) -> Option<Plan> {
    let offsets = metadata.offset_index()?;
    let schema = metadata.file_metadata().schema_descr();
    let flat = schema.columns().iter().all(|c| c.max_rep_level() == 0);
    let ascending = removed.windows(2).all(|w| w[0] < w[1]);
    let total_rows = metadata.file_metadata().num_rows().max(0) as u64;
    let all_removed = removed.len() as u64 >= total_rows;
    // Regions' rows move to the end of their row group (see `spliced_chunk`): a file
    // that declares its rows sorted keeps them where they are, rewritten by merging.
    let sorted = metadata
        .row_groups()
        .iter()
        .any(|g| g.sorting_columns().is_some_and(|c| !c.is_empty()));
    let declined = !flat || sorted || !ascending || all_removed;
    if declined || !same_codecs(metadata) || !schema.columns().iter().all(|c| round_trips(c)) {
        return None;
    }
    let mut plan = Vec::new();
    let mut copied = 0i64;
    let mut next = removed.iter().copied().peekable();
    let mut first_row = 0u64;
    for (index, row_group) in metadata.row_groups().iter().enumerate() {
        let rows = row_group.num_rows().max(0) as u64;
        let starts = page_starts(row_group, offsets.get(index)?)?;
        let mut here = Vec::new();
        while let Some(p) = next.next_if(|&p| p < first_row + rows) {
            here.push(p - first_row);
        }
        first_row += rows;
        if here.is_empty() {
            copied += row_group.compressed_size();
            continue;
        }
        let regions = regions(&starts, rows, &here);
        copied += bytes_copied(row_group, &offsets[index], &regions);
        plan.push((index, regions));
    }
    let total: i64 = metadata
        .row_groups()
        .iter()
        .map(|g| g.compressed_size())
        .sum();
    let pays = copied * 2 >= total;
    (next.peek().is_none() && pays).then_some(plan)
}

/// Whether a leaf's values come back unchanged from arrow-rs's reader through its
/// writer into the same Parquet type. Not so for INT96 (read as nanoseconds, which the
/// writer refuses), intervals (read as day-time, dropping months), decimals stored as
/// BYTE_ARRAY, or in a FIXED_LEN_BYTE_ARRAY wider than their precision needs (the writer
/// sizes values by precision).
fn round_trips(leaf: &ColumnDescriptor) -> bool {
    let decimal = leaf.logical_type_ref().and_then(|t| match t {
        LogicalType::Decimal { precision, .. } => Some(*precision),
        _ => None,
    });
    let decimal = decimal
        .or((leaf.converted_type() == ConvertedType::DECIMAL).then(|| leaf.type_precision()));
    match leaf.physical_type() {
        PhysicalType::INT96 => false,
        PhysicalType::BYTE_ARRAY => decimal.is_none(),
        PhysicalType::FIXED_LEN_BYTE_ARRAY => {
            let interval = leaf.converted_type() == ConvertedType::INTERVAL;
            let fits = decimal.is_none_or(|p| decimal_bytes(p) == Some(leaf.type_length()));
            !interval && fits
        }
        _ => true,
    }
}

/// The fewest bytes that hold every unscaled value of `precision` digits, as Parquet's
/// writers size a decimal's FIXED_LEN_BYTE_ARRAY.
fn decimal_bytes(precision: i32) -> Option<i32> {
    (1..=16).find(|&n| f64::from(8 * n - 1) * std::f64::consts::LOG10_2 >= f64::from(precision))
}

/// Whether each column has one codec in every row group: the regions are encoded by one
/// writer, whose codec per column must be the chunk's.
fn same_codecs(metadata: &ParquetMetaData) -> bool {
    let groups = metadata.row_groups();
    groups.iter().all(|g| {
        g.columns()
            .iter()
            .zip(groups[0].columns())
            .all(|(a, b)| a.compression() == b.compression())
    })
}

/// Each column's page first rows, or `None` when the offset index does not describe a
/// flat chunk (first page at row 0, rows ascending, one value per row).
fn page_starts(
    row_group: &RowGroupMetaData,
    offsets: &[OffsetIndexMetaData],
) -> Option<Vec<Vec<u64>>> {
    let rows = row_group.num_rows();
    if offsets.len() != row_group.num_columns() {
        return None;
    }
    let mut all = Vec::with_capacity(offsets.len());
    for (column, index) in row_group.columns().iter().zip(offsets) {
        let starts: Vec<u64> = index
            .page_locations
            .iter()
            .map(|p| p.first_row_index.max(0) as u64)
            .collect();
        let valid = starts.first() == Some(&0)
            && starts.windows(2).all(|w| w[0] < w[1])
            && *starts.last()? < rows as u64
            && column.num_values() == rows;
        if !valid {
            return None;
        }
        all.push(starts);
    }
    Some(all)
}

/// The regions of one row group of `rows` rows whose columns' pages start at `starts`,
/// for the removed rows `removed` (ascending).
fn regions(starts: &[Vec<u64>], rows: u64, removed: &[u64]) -> Vec<Region> {
    let mut out: Vec<Region> = Vec::new();
    for &row in removed {
        if let Some(last) = out.last_mut()
            && row < last.end
        {
            last.removed.push(row);
            continue;
        }
        let (start, end) = widen(starts, rows, row, row + 1);
        out.push(Region {
            start,
            end,
            removed: vec![row],
            temp: None,
        });
    }
    out
}

/// The smallest rows `[start, end)` holding `[from, to)` on which every column has a page
/// boundary. A region's ends are boundaries of every column, so the next removed row's
/// region never reaches back into it.
fn widen(starts: &[Vec<u64>], rows: u64, from: u64, to: u64) -> (u64, u64) {
    let (mut start, mut end) = (from, to);
    loop {
        let (mut s, mut e) = (start, end);
        for column in starts {
            let first = column.partition_point(|&p| p <= start) - 1;
            s = s.min(column[first]);
            let last = column.partition_point(|&p| p < end);
            e = e.max(column.get(last).copied().unwrap_or(rows));
        }
        if (s, e) == (start, end) {
            return (start, end);
        }
        (start, end) = (s, e);
    }
}

/// The bytes of a touched row group the splice copies: each column's pages outside the
/// regions, and its dictionary page when one of those survives.
fn bytes_copied(
    row_group: &RowGroupMetaData,
    offsets: &[OffsetIndexMetaData],
    regions: &[Region],
) -> i64 {
    let mut copied = 0;
    for (chunk, index) in row_group.columns().iter().zip(offsets) {
        let pages = &index.page_locations;
        let surviving: i64 = pages
            .iter()
            .filter(|p| region_of(regions, p.first_row_index as u64).is_none())
            .map(|p| p.compressed_page_size as i64)
            .sum();
        let dictionary = match (chunk.dictionary_page_offset(), pages.first()) {
            (Some(d), Some(first)) if surviving > 0 => first.offset - d,
            _ => 0,
        };
        copied += surviving + dictionary;
    }
    copied
}

fn region_of(regions: &[Region], row: u64) -> Option<&Region> {
    let i = regions.partition_point(|r| r.end <= row);
    regions.get(i).filter(|r| r.start <= row)
}

/// Decodes each region, drops its removed rows and encodes the rest as one row group of
/// a temporary file (in the original Parquet schema, so its chunks fit the original's);
/// records each region's row group in `plan`, and what the removed rows held.
fn encode_regions(
    file: &Bytes,
    metadata: &Arc<ParquetMetaData>,
    plan: &mut Plan,
    settings: &FileSettings,
) -> Result<(Vec<u8>, ParquetMetaData, RemovedRows)> {
    let failed = |e: parquet::errors::ParquetError| {
        Error::internal(format!("re-encoding the pages of removed rows: {e}"))
    };
    // Arrow types from the Parquet schema alone: an embedded Arrow schema could ask for
    // a conversion (say milliseconds read as nanoseconds) that the writer would then put
    // unconverted into the original column.
    let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    let reader = ArrowReaderMetadata::try_new(metadata.clone(), options).map_err(failed)?;
    let schema = SchemaDescriptor::new(metadata.file_metadata().schema_descr().root_schema_ptr());
    let options = ArrowWriterOptions::new()
        .with_properties(region_properties(file, metadata, settings))
        .with_parquet_schema(schema)
        .with_skip_arrow_metadata(true);
    // Sized up front: grown by doubling, the buffer was copied again and again (a tenth
    // of a 1 MiB splice's CPU). PLAIN pages can outgrow the dictionary-encoded ones.
    let buffer = Vec::with_capacity(2 * region_bytes(metadata, plan) + 4096);
    let mut writer = ArrowWriter::try_new_with_options(buffer, reader.schema().clone(), options)
        .map_err(failed)?;
    let mut temp_groups = 0;
    let mut removed_rows = Vec::with_capacity(plan.len());
    for (row_group, regions) in plan.iter_mut() {
        let mut removed_here = Vec::new();
        for region in regions.iter_mut() {
            let selection = RowSelection::from(vec![
                RowSelector::skip(region.start as usize),
                RowSelector::select((region.end - region.start) as usize),
            ]);
            let batches =
                ParquetRecordBatchReaderBuilder::new_with_metadata(file.clone(), reader.clone())
                    .with_row_groups(vec![*row_group])
                    .with_row_selection(selection)
                    .with_batch_size(8192)
                    .build()
                    .map_err(failed)?;
            let mut row = region.start;
            let mut removed = region.removed.iter().copied().peekable();
            for batch in batches {
                let batch = batch.map_err(|e| Error::internal(format!("decoding pages: {e}")))?;
                let n = batch.num_rows() as u64;
                let gone: Vec<bool> = (row..row + n)
                    .map(|r| removed.next_if_eq(&r).is_some())
                    .collect();
                row += n;
                let filter = |mask: BooleanArray| {
                    filter_record_batch(&batch, &mask)
                        .map_err(|e| Error::internal(format!("filtering pages: {e}")))
                };
                removed_here.push(filter(BooleanArray::from(gone.clone()))?);
                let keep = gone.iter().map(|g| !g).collect::<Vec<_>>();
                writer
                    .write(&filter(BooleanArray::from(keep))?)
                    .map_err(failed)?;
            }
            if row != region.end {
                return Err(Error::internal(format!(
                    "decoding rows {}..{} of a row group gave {} rows",
                    region.start,
                    region.end,
                    row - region.start
                )));
            }
            if region.kept() > 0 {
                writer.flush().map_err(failed)?;
                region.temp = Some(temp_groups);
                temp_groups += 1;
            }
        }
        removed_rows.push((*row_group, removed_here));
    }
    let temp_metadata = writer.finish().map_err(failed)?;
    let removed = RemovedRows::of(metadata, reader.schema(), removed_rows)?;
    // `finish` wrote the footer and flushed; `into_inner` would write another.
    Ok((std::mem::take(writer.inner_mut()), temp_metadata, removed))
}

/// The bytes of the pages the regions re-encode (those keeping a row), in every column.
fn region_bytes(metadata: &ParquetMetaData, plan: &Plan) -> usize {
    let Some(offsets) = metadata.offset_index() else {
        return 0;
    };
    let mut bytes = 0i64;
    for (index, regions) in plan {
        for column in &offsets[*index] {
            bytes += column
                .page_locations
                .iter()
                .filter(|p| {
                    region_of(regions, p.first_row_index as u64).is_some_and(|r| r.kept() > 0)
                })
                .map(|p| p.compressed_page_size as i64)
                .sum::<i64>();
        }
    }
    usize::try_from(bytes).unwrap_or(0)
}

/// The regions' writer: the data files' settings, without dictionaries (a region's pages
/// share the chunk's dictionary page, which the writer cannot reuse), PLAIN, and with each
/// column's codec as the file has it (the level from the settings when the codec is
/// theirs), in the file's Parquet version, one row group per flush.
fn region_properties(
    file: &Bytes,
    metadata: &ParquetMetaData,
    settings: &FileSettings,
) -> WriterProperties {
    let version = match first_data_page_kind(file, metadata) {
        Some(PAGE_TYPE_DATA_V2) => WriterVersion::PARQUET_2_0,
        _ => WriterVersion::PARQUET_1_0,
    };
    let mut builder = settings
        .properties
        .clone()
        .into_builder()
        .set_writer_version(version)
        .set_dictionary_enabled(false)
        // PLAIN, not the delta encodings a Parquet 2 writer falls back to: every reader
        // decodes it (Iceberg's vectorized Java reader took delta encodings late).
        .set_encoding(Encoding::PLAIN)
        .set_bloom_filter_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_max_row_group_row_count(None)
        .set_max_row_group_bytes(None);
    for column in metadata.row_group(0).columns() {
        let path = column.column_path().clone();
        let ours = settings.properties.compression(&path);
        let theirs = column.compression();
        let same_codec = std::mem::discriminant(&ours) == std::mem::discriminant(&theirs);
        let codec: Compression = if same_codec { ours } else { theirs };
        builder = builder.set_column_compression(path, codec);
    }
    builder.build()
}

/// The header type of the file's first data page: re-encoded pages take the same
/// version (a footer's version says less: pyarrow writes version 2 with v1 pages).
fn first_data_page_kind(file: &Bytes, metadata: &ParquetMetaData) -> Option<i32> {
    let first = metadata
        .offset_index()?
        .first()?
        .first()?
        .page_locations
        .first()?;
    let page = slice(file, first.offset, first.compressed_page_size as i64)?;
    page_sizes(&page).map(|(kind, _)| kind)
}

/// The original file, its footer, and the temporary file of re-encoded regions.
struct Parts<'a> {
    file: &'a Bytes,
    metadata: &'a ParquetMetaData,
    temp: &'a Bytes,
    temp_metadata: &'a ParquetMetaData,
}

/// Writes the new file: untouched row groups copied chunk by chunk with their page
/// indexes, touched ones spliced column by column.
fn assemble(parts: &Parts<'_>, plan: &Plan, removed: RemovedRows) -> Result<Option<Spliced>> {
    let failed = |e: parquet::errors::ParquetError| Error::internal(format!("splicing pages: {e}"));
    let original = parts.metadata.file_metadata();
    let properties = WriterProperties::builder()
        .set_writer_version(match original.version() {
            1 => WriterVersion::PARQUET_1_0,
            _ => WriterVersion::PARQUET_2_0,
        })
        .set_created_by(
            original
                .created_by()
                .map(str::to_string)
                .unwrap_or_else(created_by),
        )
        .set_key_value_metadata(original.key_value_metadata().cloned())
        .set_sorting_columns(parts.metadata.row_group(0).sorting_columns().cloned())
        .build();
    let root = original.schema_descr().root_schema_ptr();
    let mut out = SerializedFileWriter::new(
        Vec::with_capacity(parts.file.len()),
        root,
        Arc::new(properties),
    )
    .map_err(failed)?;
    let touched: HashMap<usize, &Vec<Region>> = plan.iter().map(|(i, r)| (*i, r)).collect();
    let mut rows = 0u64;
    for index in 0..parts.metadata.num_row_groups() {
        let chunks = match touched.get(&index) {
            None => copied_chunks(parts, index),
            Some(regions)
                if regions.iter().all(|r| r.kept() == 0)
                    && regions_cover(regions, parts.metadata.row_group(index)) =>
            {
                continue;
            }
            Some(regions) => match spliced_chunks(parts, index, regions, &removed)? {
                Some(chunks) => chunks,
                None => return Ok(None),
            },
        };
        let mut group = out.next_row_group().map_err(failed)?;
        for (bytes, close) in chunks {
            group.append_column(&bytes, close).map_err(failed)?;
        }
        rows += group.close().map_err(failed)?.num_rows() as u64;
    }
    let metadata = out.finish().map_err(failed)?;
    let bytes = Bytes::from(std::mem::take(out.inner_mut()));
    Ok(Some(Spliced {
        bytes,
        metadata,
        rows,
        removed,
        order: Vec::new(),
        removed_positions: Vec::new(),
    }))
}

/// Whether the regions cover every row of the row group (all of which they remove).
fn regions_cover(regions: &[Region], row_group: &RowGroupMetaData) -> bool {
    let covered: u64 = regions.iter().map(|r| r.end - r.start).sum();
    covered == row_group.num_rows() as u64
}

/// A column chunk to append: its bytes (from the offsets its metadata names) and what
/// closing it produced.
type Chunk = (Pieces, ColumnCloseResult);

/// An untouched row group's chunks, as they are, with their page indexes.
fn copied_chunks(parts: &Parts<'_>, index: usize) -> Vec<Chunk> {
    let row_group = parts.metadata.row_group(index);
    let offsets = &parts.metadata.offset_index().expect("planned with offsets")[index];
    let column_indexes = parts.metadata.column_index().map(|c| &c[index]);
    row_group
        .columns()
        .iter()
        .enumerate()
        .map(|(c, chunk)| {
            let close = ColumnCloseResult {
                bytes_written: chunk.compressed_size() as u64,
                rows_written: row_group.num_rows() as u64,
                metadata: chunk.clone(),
                bloom_filter: None,
                column_index: column_indexes
                    .map(|i| i[c].clone())
                    .filter(|i| !matches!(i, ColumnIndexMetaData::NONE)),
                offset_index: Some(offsets[c].clone()),
            };
            (Pieces::whole(parts.file.clone()), close)
        })
        .collect()
}

/// A touched row group's chunks: each column's pages outside the regions copied, each
/// region's pages replaced by its re-encoded ones; `None` if a page header is not one
/// this reads.
fn spliced_chunks(
    parts: &Parts<'_>,
    index: usize,
    regions: &[Region],
    removed: &RemovedRows,
) -> Result<Option<Vec<Chunk>>> {
    let columns = parts.metadata.row_group(index).num_columns();
    let mut chunks = Vec::with_capacity(columns);
    for column in 0..columns {
        match spliced_chunk(parts, (index, column), regions, removed)? {
            Some(chunk) => chunks.push(chunk),
            None => return Ok(None),
        }
    }
    Ok(Some(chunks))
}

/// One column's new chunk, built page by page; see [`spliced_chunks`].
fn spliced_chunk(
    parts: &Parts<'_>,
    (index, column): (usize, usize),
    regions: &[Region],
    removed: &RemovedRows,
) -> Result<Option<Chunk>> {
    let row_group = parts.metadata.row_group(index);
    let chunk = row_group.column(column);
    let pages =
        &parts.metadata.offset_index().expect("planned with offsets")[index][column].page_locations;
    let survives = pages
        .iter()
        .any(|p| region_of(regions, p.first_row_index as u64).is_none());
    let mut out = ChunkBuilder::default();
    let Some(first_page) = pages.first() else {
        return Ok(None);
    };
    // Bytes between the chunk's start and its first data page are a dictionary page,
    // named by the footer or not (parquet-mr 1.11 wrote some without its offset).
    let start = chunk.byte_range().0 as i64;
    let dictionary = match chunk.dictionary_page_offset() {
        Some(d) if d == start && d < first_page.offset => Some(d),
        None if first_page.offset == start => None,
        _ => return Ok(None),
    };
    if let (Some(dictionary), true) = (dictionary, survives) {
        let Some(page) = slice(parts.file, dictionary, first_page.offset - dictionary) else {
            return Ok(None);
        };
        if !out.push_page(page, PAGE_TYPE_DICTIONARY, None)? {
            return Ok(None);
        }
    }
    let mut encodings = if survives {
        chunk.encodings_mask().as_i32()
    } else {
        0
    };
    let rows = row_group.num_rows() as u64;
    // The pages outside the regions, in order.
    for (page, location) in pages.iter().enumerate() {
        let first = location.first_row_index as u64;
        if region_of(regions, first).is_some() {
            continue;
        }
        let next = pages
            .get(page + 1)
            .map_or(rows, |p| p.first_row_index as u64);
        let Some(bytes) = slice(
            parts.file,
            location.offset,
            location.compressed_page_size as i64,
        ) else {
            return Ok(None);
        };
        if !out.push_page(bytes, PAGE_TYPE_DATA, Some(next - first))? {
            return Ok(None);
        }
    }
    // Then the regions' kept rows, re-encoded without a dictionary: after every
    // dictionary-encoded page, as a writer that fell back from its dictionary lays a
    // chunk out. Readers expect that order (DuckDB 1.5.5 misread values of pages
    // encoded otherwise that came between dictionary-encoded ones).
    for region in regions {
        let Some(temp) = region.temp else { continue };
        let temp_chunk = parts.temp_metadata.row_group(temp).column(column);
        encodings |= temp_chunk.encodings_mask().as_i32();
        let temp_rows = parts.temp_metadata.row_group(temp).num_rows() as u64;
        let temp_pages = &parts
            .temp_metadata
            .offset_index()
            .ok_or_else(|| Error::internal("the re-encoded pages have no offset index"))?[temp]
            [column]
            .page_locations;
        for (n, p) in temp_pages.iter().enumerate() {
            let next = temp_pages
                .get(n + 1)
                .map_or(temp_rows, |q| q.first_row_index as u64);
            let Some(bytes) = slice(parts.temp, p.offset, p.compressed_page_size as i64) else {
                return Ok(None);
            };
            if !out.push_page(bytes, PAGE_TYPE_DATA, Some(next - p.first_row_index as u64))? {
                return Ok(None);
            }
        }
    }
    let Ok(encodings) = EncodingMask::try_new(encodings) else {
        return Ok(None);
    };
    // The chunk's nulls less the removed rows' (unknown when the chunk's are).
    let nulls = chunk
        .statistics()
        .and_then(Statistics::null_count_opt)
        .map(|n| n.saturating_sub(removed.chunk_nulls(index, column)));
    let bounds_hold = removed.chunk_bounds_hold(index, column);
    out.finish(chunk, encodings, (nulls, bounds_hold)).map(Some)
}

/// Page types as the Thrift `PageType` numbers them.
const PAGE_TYPE_DATA: i32 = 0;
const PAGE_TYPE_DATA_V2: i32 = 3;
const PAGE_TYPE_DICTIONARY: i32 = 2;

/// `len` bytes of `bytes` from `offset`, or `None` when a footer points outside them.
fn slice(bytes: &Bytes, offset: i64, len: i64) -> Option<Bytes> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= bytes.len()).then(|| bytes.slice(start..end))
}

/// A chunk being assembled: its pages' bytes, locations and sizes.
#[derive(Default)]
struct ChunkBuilder {
    bytes: Pieces,
    locations: Vec<PageLocation>,
    rows: u64,
    uncompressed: i64,
    dictionary: bool,
}

impl ChunkBuilder {
    /// Appends a page (header and body); `rows` for a data page. False when its header
    /// is not a page of the expected type.
    fn push_page(&mut self, page: Bytes, expected: i32, rows: Option<u64>) -> Result<bool> {
        let Some((kind, uncompressed)) = page_sizes(&page) else {
            return Ok(false);
        };
        let data = kind == PAGE_TYPE_DATA || kind == PAGE_TYPE_DATA_V2;
        if (expected == PAGE_TYPE_DATA) != data || (!data && kind != expected) {
            return Ok(false);
        }
        self.uncompressed += uncompressed;
        match rows {
            Some(rows) => {
                self.locations.push(PageLocation {
                    offset: Length::len(&self.bytes) as i64,
                    compressed_page_size: page.len() as i32,
                    first_row_index: self.rows as i64,
                });
                self.rows += rows;
            }
            None => self.dictionary = true,
        }
        self.bytes.push(page);
        Ok(true)
    }

    /// The chunk's bytes and close result: `original`'s codec and, where they still
    /// hold, bounds; `encodings`, and `nulls` when known.
    fn finish(
        self,
        original: &ColumnChunkMetaData,
        encodings: EncodingMask,
        (nulls, bounds_hold): (Option<u64>, bool),
    ) -> Result<Chunk> {
        let first_data = self.locations.first().map_or(0, |p| p.offset);
        let mut builder = ColumnChunkMetaData::builder(original.column_descr_ptr())
            .set_compression(original.compression())
            .set_encodings_mask(encodings)
            .set_total_compressed_size(Length::len(&self.bytes) as i64)
            .set_total_uncompressed_size(self.uncompressed)
            .set_num_values(self.rows as i64)
            .set_data_page_offset(first_data)
            .set_dictionary_page_offset(self.dictionary.then_some(0));
        let stats = original.statistics();
        if let Some(stats) = stats.and_then(|s| kept_statistics(s, nulls, bounds_hold)) {
            builder = builder.set_statistics(stats);
        }
        let metadata = builder
            .build()
            .map_err(|e| Error::internal(format!("spliced chunk metadata: {e}")))?;
        let close = ColumnCloseResult {
            bytes_written: Length::len(&self.bytes),
            rows_written: self.rows,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: Some(OffsetIndexMetaData {
                page_locations: self.locations,
                unencoded_byte_array_data_bytes: None,
            }),
        };
        Ok((self.bytes, close))
    }
}

/// A spliced chunk's statistics: `stats`' minimum and maximum while they still hold
/// (`bounds_hold`: no removed row held either), else none (readers take footer bounds
/// for exact: arrow-rs, parquet-mr and Arrow C++ ignore the exactness flags of numeric
/// ones); `nulls` as the null count; no distinct count.
fn kept_statistics(
    stats: &Statistics,
    nulls: Option<u64>,
    bounds_hold: bool,
) -> Option<Statistics> {
    fn bound<T: Clone>(
        s: &ValueStatistics<T>,
        nulls: Option<u64>,
        deprecated: bool,
        hold: bool,
    ) -> ValueStatistics<T> {
        let kept = |v: Option<&T>| v.filter(|_| hold).cloned();
        ValueStatistics::new(
            kept(s.min_opt()),
            kept(s.max_opt()),
            None,
            nulls,
            deprecated,
        )
        .with_min_is_exact(hold && s.min_is_exact())
        .with_max_is_exact(hold && s.max_is_exact())
        .with_backwards_compatible_min_max(s.is_min_max_backwards_compatible())
    }
    let (d, h) = (stats.is_min_max_deprecated(), bounds_hold);
    Some(match stats {
        Statistics::Boolean(s) => Statistics::Boolean(bound(s, nulls, d, h)),
        Statistics::Int32(s) => Statistics::Int32(bound(s, nulls, d, h)),
        Statistics::Int64(s) => Statistics::Int64(bound(s, nulls, d, h)),
        Statistics::Int96(s) => Statistics::Int96(bound(s, nulls, d, h)),
        Statistics::Float(s) => Statistics::Float(bound(s, nulls, d, h)),
        Statistics::Double(s) => Statistics::Double(bound(s, nulls, d, h)),
        Statistics::ByteArray(s) => Statistics::ByteArray(bound(s, nulls, d, h)),
        Statistics::FixedLenByteArray(s) => Statistics::FixedLenByteArray(bound(s, nulls, d, h)),
    })
}

/// A page's type and the bytes it adds to its chunk's `total_uncompressed_size` (header
/// plus uncompressed body), from `page` (header plus compressed body). Reads the first
/// three fields of the Thrift compact `PageHeader` — type, uncompressed_page_size,
/// compressed_page_size, all i32 and written first by every writer — and `None` for
/// anything else.
fn page_sizes(page: &[u8]) -> Option<(i32, i64)> {
    let mut at = 0usize;
    let mut fields = [0i64; 3];
    for field in &mut fields {
        // Field header: id delta 1 in the high nibble, compact type 5 (i32) in the low.
        if *page.get(at)? != 0x15 {
            return None;
        }
        at += 1;
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = *page.get(at)?;
            at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 35 {
                return None;
            }
        }
        // Zigzag.
        *field = ((value >> 1) as i64) ^ -((value & 1) as i64);
    }
    let [kind, uncompressed, compressed] = fields;
    let header = page.len() as i64 - compressed;
    let sane = uncompressed >= 0 && compressed >= 0 && header >= at as i64;
    sane.then_some((kind as i32, header + uncompressed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::test_files::{next, parquet_bytes};
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field};
    use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReader;

    fn settings() -> FileSettings {
        FileSettings {
            properties: WriterProperties::builder().build(),
            target_file_size: 1 << 29,
            dictionaries_by_sample: false,
        }
    }

    fn field(name: &str, id: i32, data_type: DataType) -> Field {
        Field::new(name, data_type, true).with_metadata(HashMap::from([(
            PARQUET_FIELD_ID_META_KEY.to_string(),
            id.to_string(),
        )]))
    }

    /// `rows` rows of a long id and a string with a null every seventh row, in pages of
    /// `page_rows` rows, row groups of `group_rows`.
    fn schema() -> Schema {
        Schema::new(vec![
            field("id", 1, DataType::Int64),
            field("s", 2, DataType::Utf8),
        ])
    }

    fn file(rows: i64, page_rows: usize, group_rows: usize) -> Bytes {
        let schema = Arc::new(schema());
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows));
        let strings: ArrayRef = Arc::new(StringArray::from_iter(
            (0..rows).map(|i| (i % 7 != 0).then(|| format!("v{}", i % 13))),
        ));
        let batch = RecordBatch::try_new(schema, vec![ids, strings]).unwrap();
        let props = WriterProperties::builder()
            .set_data_page_row_count_limit(page_rows)
            .set_write_batch_size(page_rows)
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        parquet_bytes(&batch, props)
    }

    fn ids(bytes: &Bytes) -> Vec<Option<i64>> {
        let reader = ParquetRecordBatchReader::try_new(bytes.clone(), 1024).unwrap();
        let mut out = Vec::new();
        for batch in reader {
            let batch = batch.unwrap();
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            out.extend(column.iter());
        }
        out
    }

    #[test]
    fn widening_reaches_a_boundary_of_every_column() {
        // Column a: pages at 0, 4, 8; column b: 0, 6, 8; common boundaries 0, 8, 10.
        let starts = vec![vec![0, 4, 8], vec![0, 6, 8]];
        assert_eq!(widen(&starts, 10, 1, 2), (0, 8));
        assert_eq!(widen(&starts, 10, 5, 6), (0, 8));
        assert_eq!(widen(&starts, 10, 9, 10), (8, 10));
        let found: Vec<_> = regions(&starts, 10, &[1, 3, 9])
            .into_iter()
            .map(|r| (r.start, r.end, r.removed))
            .collect();
        assert_eq!(found, vec![(0, 8, vec![1, 3]), (8, 10, vec![9])]);
        // No common boundary inside: one region of the whole row group.
        assert_eq!(widen(&[vec![0, 4], vec![0, 6]], 10, 9, 10), (0, 10));
    }

    #[test]
    fn page_sizes_read_the_writers_headers() {
        let bytes = file(1_000, 100, 1_000);
        let metadata = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Required)
            .parse_and_finish(&bytes)
            .unwrap();
        let chunk = metadata.row_group(0).column(1);
        let pages = &metadata.offset_index().unwrap()[0][1].page_locations;
        let mut total = 0;
        if let Some(d) = chunk.dictionary_page_offset() {
            let (kind, size) = page_sizes(&slice(&bytes, d, pages[0].offset - d).unwrap()).unwrap();
            assert_eq!(kind, PAGE_TYPE_DICTIONARY);
            total += size;
        }
        for p in pages {
            let (kind, size) =
                page_sizes(&slice(&bytes, p.offset, p.compressed_page_size as i64).unwrap())
                    .unwrap();
            assert!(kind == PAGE_TYPE_DATA || kind == PAGE_TYPE_DATA_V2);
            total += size;
        }
        assert_eq!(total, chunk.uncompressed_size());
    }

    #[test]
    fn a_spliced_file_holds_the_kept_rows_and_copies_the_rest() {
        let bytes = file(10_000, 100, 4_000);
        let removed = [0u64, 1, 150, 3_999, 4_000, 9_999];
        let spliced = splice_without(&bytes, &removed, &settings(), &schema())
            .unwrap()
            .unwrap();
        let expected: Vec<Option<i64>> = (0..10_000i64)
            .filter(|i| !removed.contains(&(*i as u64)))
            .map(Some)
            .collect();
        // Rows keep their row group; the regions' move to its end.
        let mut actual = ids(&spliced.bytes);
        actual.sort();
        assert_eq!(actual, expected);
        assert_eq!(spliced.rows, expected.len() as u64);
        // Nulls: every seventh row, less the removed ones among them (0 and 4,000... no:
        // 0 and 9,999 % 7 == 3; 4,000 % 7 == 3).
        let nulls: u64 = spliced
            .metadata
            .row_groups()
            .iter()
            .map(|g| g.column(1).statistics().unwrap().null_count_opt().unwrap())
            .sum();
        let actual = expected.iter().filter(|i| i.unwrap() % 7 == 0).count() as u64;
        assert_eq!(nulls, actual);
        // Most of the file is copied: within a few pages' size of the original.
        let grown = spliced.bytes.len() as f64 / bytes.len() as f64;
        assert!((0.9..1.1).contains(&grown), "{grown}");
    }

    /// A file whose id is each row's position, with strings of varying length in pages
    /// cut by size, so the two columns' pages start on different rows.
    fn file_by_page_bytes(rows: i64, page_bytes: usize, group_rows: usize, seed: u64) -> Bytes {
        let schema = Arc::new(schema());
        let mut rng = seed;
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows));
        let strings: ArrayRef = Arc::new(StringArray::from_iter((0..rows).map(|i| {
            let len = (next(&mut rng) % 40) as usize;
            (i % 11 != 0).then(|| "x".repeat(len))
        })));
        let batch = RecordBatch::try_new(schema, vec![ids, strings]).unwrap();
        let props = WriterProperties::builder()
            .set_dictionary_enabled(seed.is_multiple_of(5))
            .set_data_page_size_limit(page_bytes)
            .set_write_batch_size(16)
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        parquet_bytes(&batch, props)
    }

    /// `kept_positions` names, row by row, where each row of the spliced file was in the
    /// old one: checked against the ids (each row's old position) read back from the new
    /// file, over random layouts and removals, including whole row groups removed.
    #[test]
    fn kept_positions_follow_the_spliced_rows() {
        let (mut spliced_files, mut whole_groups, mut emptied_regions) = (0, 0, 0);
        for seed in 1..=120u64 {
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let rows = 200 + (next(&mut rng) % 3_000) as i64;
            let page_bytes = 128 + (next(&mut rng) % 1_024) as usize;
            let whole_group = seed % 4 == 0;
            let group_rows = match whole_group {
                true => rows as usize / 4,
                false => 100 + (next(&mut rng) % 2_000) as usize,
            };
            let bytes = file_by_page_bytes(rows, page_bytes, group_rows, seed);
            let mut removed: Vec<u64> = match whole_group {
                // The second row group whole, and a row of another.
                true => {
                    let g = group_rows as u64;
                    let mut rows: Vec<u64> = (g..2 * g).collect();
                    rows.push(next(&mut rng) % g);
                    rows
                }
                // A run of rows inside a row group: regions that keep nothing, in a row
                // group that survives.
                false if seed % 4 == 1 => {
                    let start = next(&mut rng) % (rows as u64 / 2);
                    (start..start + 60).collect()
                }
                false => (0..1 + next(&mut rng) % 12)
                    .map(|_| next(&mut rng) % rows as u64)
                    .collect(),
            };
            removed.sort_unstable();
            removed.dedup();
            let metadata = ParquetMetaDataReader::new()
                .with_page_index_policy(PageIndexPolicy::Required)
                .parse_and_finish(&bytes)
                .unwrap();
            let emptied = plan(&metadata, &removed).is_some_and(|p| {
                p.iter().any(|(index, regions)| {
                    regions.iter().any(|r| r.kept() == 0)
                        && !regions_cover(regions, metadata.row_group(*index))
                })
            });
            let Some(spliced) = splice_without(&bytes, &removed, &settings(), &schema()).unwrap()
            else {
                continue;
            };
            spliced_files += 1;
            whole_groups += usize::from(whole_group);
            emptied_regions += usize::from(emptied);
            let expected: Vec<Option<i64>> =
                spliced.kept_positions().map(|p| Some(p as i64)).collect();
            assert_eq!(ids(&spliced.bytes), expected, "seed {seed}");
            assert_eq!(spliced.rows, expected.len() as u64, "seed {seed}");
        }
        // Most layouts splice (the rest are declined as not paying): the property was
        // checked, not skipped.
        assert!(spliced_files > 60, "{spliced_files} of 120 spliced");
        assert!(
            whole_groups > 10,
            "{whole_groups} of 30 row groups removed whole"
        );
        assert!(
            emptied_regions >= 3,
            "{emptied_regions} files with a region that keeps nothing"
        );
    }

    #[test]
    fn columns_the_region_writer_cannot_round_trip_are_declined() {
        let schema = parquet::schema::parser::parse_message_type(
            "message m {
                required int96 legacy_ts;
                required fixed_len_byte_array(16) wide (DECIMAL(20, 2));
                required fixed_len_byte_array(9) snug (DECIMAL(20, 2));
                required binary big (DECIMAL(10, 2));
                required fixed_len_byte_array(12) span (INTERVAL);
                required fixed_len_byte_array(16) id (UUID);
                required int64 ts (TIMESTAMP(MICROS, true));
                required binary s (STRING);
            }",
        )
        .unwrap();
        let schema = SchemaDescriptor::new(Arc::new(schema));
        let verdicts: Vec<(String, bool)> = schema
            .columns()
            .iter()
            .map(|c| (c.name().to_string(), round_trips(c)))
            .collect();
        let expected = [
            ("legacy_ts", false),
            ("wide", false),
            ("snug", true),
            ("big", false),
            ("span", false),
            ("id", true),
            ("ts", true),
            ("s", true),
        ];
        let expected: Vec<(String, bool)> =
            expected.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        assert_eq!(verdicts, expected);
        assert_eq!(decimal_bytes(9), Some(4));
        assert_eq!(decimal_bytes(10), Some(5));
        assert_eq!(decimal_bytes(18), Some(8));
        assert_eq!(decimal_bytes(38), Some(16));
        assert_eq!(decimal_bytes(39), None);
    }

    #[test]
    fn a_file_with_one_page_per_column_is_left_to_the_merging_rewrite() {
        let bytes = file(500, 20_000, 500);
        assert!(
            splice_without(&bytes, &[3], &settings(), &schema())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_file_written_in_another_schema_is_left_to_the_merging_rewrite() {
        let bytes = file(1_000, 100, 1_000);
        let mut fields = schema().fields().to_vec();
        fields.push(Arc::new(field("added", 3, DataType::Int64)));
        let wider = Schema::new(fields);
        let retyped = Schema::new(vec![
            field("id", 1, DataType::Int32),
            field("s", 2, DataType::Utf8),
        ]);
        let renumbered = Schema::new(vec![
            field("id", 1, DataType::Int64),
            field("s", 7, DataType::Utf8),
        ]);
        for table in [wider, retyped, renumbered] {
            assert!(
                splice_without(&bytes, &[3], &settings(), &table)
                    .unwrap()
                    .is_none()
            );
        }
        assert!(
            splice_without(&bytes, &[3], &settings(), &schema())
                .unwrap()
                .is_some()
        );
    }
}
