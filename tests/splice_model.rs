//! Page splicing (`floe::write::splice`) against a model: seeded random Parquet files —
//! every flat column type floe writes, nulls, a struct, NaNs, dictionary fallback, pages
//! cut by rows and by bytes at different places in each column, data pages v1 and v2,
//! four codecs, page statistics or none, several row groups — each spliced without a
//! random set of rows (scattered rows, runs, whole row groups, all but one). The spliced
//! file must hold exactly the kept rows, with the same values, when read by
//! arrow-rs (with and without its page index) and, for a share of the seeds, by DuckDB
//! and pyarrow; its footer's row count, null counts and bounds must describe the kept
//! rows, and its Iceberg data file must count them. Rows stay in their row group (the
//! re-encoded ones move to its end). Declining a file is always safe (the merging rewrite
//! takes it); the run asserts a quarter of the seeds at least were spliced, and that no
//! file with a list column was.
//!
//! `FLOE_SPLICE_SEEDS` sets the number of seeds (default 300; `make reliability` runs
//! 30,000), `FLOE_SPLICE_READ_EVERY` how often a spliced file goes to DuckDB and pyarrow
//! (default every 10th); `FLOE_SPLICE_KEEP=1` keeps the last such file, its original and
//! the expected rows in `$TMPDIR/floe-splice-kept/`. A failure prints the seed and the
//! file's layout.

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, FixedSizeBinaryBuilder, Float64Builder,
    Int32Builder, Int64Builder, ListBuilder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use arrow_select::concat::concat_batches;
use arrow_select::filter::filter_record_batch;
use bytes::Bytes;
use floe::write::FileSettings;
use floe::write::splice::{Spliced, splice_without, spliced_data_file};
use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Datum, Struct};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use parquet::file::statistics::Statistics;
use serde_json::json;
use support::{Rng, read_back};

fn pick<T: Copy>(rng: &mut Rng, from: &[T]) -> T {
    from[rng.below(from.len() as u64) as usize]
}

fn field(name: &str, id: i32, data_type: DataType, nullable: bool) -> Field {
    Field::new(name, data_type, nullable).with_metadata(HashMap::from([(
        PARQUET_FIELD_ID_META_KEY.to_string(),
        id.to_string(),
    )]))
}

/// A random batch of `rows` rows: `id` is the row number, so a lost, kept or moved row
/// shows by its id; `repeated` adds a list column (which the splice must decline).
fn random_batch(rng: &mut Rng, rows: usize, repeated: bool) -> RecordBatch {
    let null_share = pick(rng, &[0u64, 5, 50, 95]);
    let null = |rng: &mut Rng| rng.below(100) < null_share;
    let struct_fields = Fields::from(vec![
        field("x", 20, DataType::Int32, true),
        field("y", 21, DataType::Utf8, false),
    ]);
    let mut fields = vec![
        field("id", 1, DataType::Int64, false),
        field("i", 2, DataType::Int32, true),
        field("low", 3, DataType::Utf8, true),
        field("high", 4, DataType::Utf8, true),
        field("b", 5, DataType::Boolean, true),
        field("d", 6, DataType::Decimal128(10, 2), true),
        field(
            "ts",
            7,
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            true,
        ),
        field("u", 8, DataType::FixedSizeBinary(16), true),
        field("f", 9, DataType::Float64, true),
        field("day", 10, DataType::Date32, true),
        field("st", 11, DataType::Struct(struct_fields.clone()), true),
    ];
    let mut id = Int64Builder::new();
    let mut i = Int32Builder::new();
    let mut low = StringBuilder::new();
    let mut high = StringBuilder::new();
    let mut b = BooleanBuilder::new();
    let mut d = Decimal128Builder::new().with_data_type(DataType::Decimal128(10, 2));
    let mut ts = TimestampMicrosecondBuilder::new().with_timezone("+00:00");
    let mut u = FixedSizeBinaryBuilder::new(16);
    let mut f = Float64Builder::new();
    let mut day = Date32Builder::new();
    let mut x = Int32Builder::new();
    let mut y = StringBuilder::new();
    let mut st_valid = Vec::new();
    let mut list = ListBuilder::new(Int32Builder::new()).with_field(field(
        "element",
        31,
        DataType::Int32,
        true,
    ));
    for row in 0..rows {
        id.append_value(row as i64);
        match null(rng) {
            true => i.append_null(),
            false => i.append_value(rng.next() as i32 % 1000),
        }
        match null(rng) {
            true => low.append_null(),
            false => low.append_value(["a", "bb", "Ä", ""][rng.below(4) as usize]),
        }
        match null(rng) {
            true => high.append_null(),
            false => {
                let len = rng.below(40) as usize;
                let text: String = (0..len)
                    .map(|_| char::from(b'a' + rng.below(26) as u8))
                    .collect();
                high.append_value(format!("{row}-{text}"));
            }
        }
        match null(rng) {
            true => b.append_null(),
            false => b.append_value(rng.below(2) == 0),
        }
        match null(rng) {
            true => d.append_null(),
            false => d.append_value(rng.below(2_000_000) as i128 - 1_000_000),
        }
        match null(rng) {
            true => ts.append_null(),
            false => ts.append_value(1_767_225_600_000_000 + rng.below(1 << 40) as i64),
        }
        match null(rng) {
            true => u.append_null(),
            false => u.append_value(rng.next().to_le_bytes().repeat(2)).unwrap(),
        }
        match (null(rng), rng.below(10)) {
            (true, _) => f.append_null(),
            (false, 0) => f.append_value(f64::NAN),
            (false, _) => f.append_value(rng.below(1000) as f64 / 7.0 - 50.0),
        }
        match null(rng) {
            true => day.append_null(),
            false => day.append_value(20_000 + rng.below(400) as i32),
        }
        let st_null = null(rng);
        st_valid.push(!st_null);
        match rng.below(3) {
            0 => x.append_null(),
            _ => x.append_value(rng.below(50) as i32),
        }
        y.append_value(format!("y{}", rng.below(8)));
        match null(rng) {
            true => list.append_null(),
            false => {
                for _ in 0..rng.below(3) {
                    list.values().append_value(rng.below(9) as i32);
                }
                list.append(true);
            }
        }
    }
    let st = StructArray::new(
        struct_fields,
        vec![Arc::new(x.finish()) as ArrayRef, Arc::new(y.finish())],
        Some(st_valid.into()),
    );
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(id.finish()),
        Arc::new(i.finish()),
        Arc::new(low.finish()),
        Arc::new(high.finish()),
        Arc::new(b.finish()),
        Arc::new(d.finish()),
        Arc::new(ts.finish()),
        Arc::new(u.finish()),
        Arc::new(f.finish()),
        Arc::new(day.finish()),
        Arc::new(st),
    ];
    if repeated {
        let array = list.finish();
        fields.push(field("l", 30, array.data_type().clone(), true));
        columns.push(Arc::new(array));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

fn random_codec(rng: &mut Rng) -> Compression {
    match rng.below(4) {
        0 => Compression::UNCOMPRESSED,
        1 => Compression::SNAPPY,
        2 => Compression::ZSTD(ZstdLevel::try_new(1).unwrap()),
        _ => Compression::LZ4_RAW,
    }
}

/// Writer properties as another writer, or floe with other table properties, may have
/// used; described in `layout` for the failure message.
fn random_properties(rng: &mut Rng, layout: &mut Vec<String>) -> WriterProperties {
    let version = pick(
        rng,
        &[WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0],
    );
    let page_rows = pick(rng, &[1usize, 2, 3, 7, 16, 64, 1024, 20_000]);
    let batch = pick(rng, &[1usize, 5, 13, 1024]).min(page_rows.max(5));
    let page_bytes = pick(rng, &[64usize, 512, 4096, 1 << 20]);
    let dictionary = rng.below(4) != 0;
    let dictionary_bytes = pick(rng, &[64usize, 1024, 1 << 20]);
    let statistics = pick(
        rng,
        &[
            EnabledStatistics::Page,
            EnabledStatistics::Chunk,
            EnabledStatistics::None,
        ],
    );
    let group_rows = pick(rng, &[50usize, 333, 1000, 1 << 20]);
    let header_statistics = rng.below(2) == 0;
    let offset_index_disabled = rng.below(20) == 0;
    let codec = random_codec(rng);
    let mut builder = WriterProperties::builder()
        .set_writer_version(version)
        .set_data_page_row_count_limit(page_rows)
        .set_write_batch_size(batch)
        .set_data_page_size_limit(page_bytes)
        .set_dictionary_enabled(dictionary)
        .set_dictionary_page_size_limit(dictionary_bytes)
        .set_statistics_enabled(statistics)
        .set_max_row_group_row_count(Some(group_rows))
        .set_write_page_header_statistics(header_statistics)
        .set_offset_index_disabled(offset_index_disabled)
        .set_compression(codec);
    // A column with its own codec (one codec per column across row groups still).
    if rng.below(3) == 0 {
        builder = builder.set_column_compression("high".into(), random_codec(rng));
    }
    layout.push(format!(
        "{version:?} page_rows={page_rows} batch={batch} page_bytes={page_bytes} \
         dictionary={dictionary} dictionary_bytes={dictionary_bytes} statistics={statistics:?} \
         group_rows={group_rows} header_statistics={header_statistics} \
         offset_index_disabled={offset_index_disabled} codec={codec:?}"
    ));
    builder.build()
}

/// floe's settings for the table the file belongs to: codec and encodings that may
/// differ from the file's.
fn random_settings(rng: &mut Rng, layout: &mut Vec<String>) -> FileSettings {
    let codec = random_codec(rng);
    let version = pick(
        rng,
        &[WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0],
    );
    layout.push(format!("settings: {codec:?} {version:?}"));
    FileSettings {
        properties: WriterProperties::builder()
            .set_compression(codec)
            .set_writer_version(version)
            .build(),
        target_file_size: 1 << 29,
        dictionaries_by_sample: false,
    }
}

fn write_file(batch: &RecordBatch, properties: WriterProperties) -> Bytes {
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    Bytes::from(out)
}

/// Positions to remove, in one of several shapes.
fn random_removals(rng: &mut Rng, rows: u64) -> Vec<u64> {
    let mut removed: Vec<u64> = match rng.below(6) {
        // A few scattered rows: copy-on-write's usual case.
        0 | 1 => (0..1 + rng.below(4)).map(|_| rng.below(rows)).collect(),
        // Many scattered rows.
        2 => (0..rows).filter(|_| rng.below(10) == 0).collect(),
        // A run.
        3 => {
            let start = rng.below(rows);
            (start..(start + 1 + rng.below(200)).min(rows)).collect()
        }
        // The first or last row.
        4 => vec![if rng.below(2) == 0 { 0 } else { rows - 1 }],
        // All rows but one.
        _ => {
            let kept = rng.below(rows);
            (0..rows).filter(|&r| r != kept).collect()
        }
    };
    removed.sort_unstable();
    removed.dedup();
    removed
}

fn read_all(bytes: &Bytes, page_index: bool) -> RecordBatch {
    let options = ArrowReaderOptions::new().with_page_index_policy(if page_index {
        PageIndexPolicy::Required
    } else {
        PageIndexPolicy::Skip
    });
    let builder =
        ParquetRecordBatchReaderBuilder::try_new_with_options(bytes.clone(), options).unwrap();
    let schema = builder.schema().clone();
    let reader = builder.with_batch_size(97).build().unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    concat_batches(&schema, &batches).unwrap()
}

fn without(batch: &RecordBatch, removed: &[u64]) -> RecordBatch {
    let mut next = removed.iter().peekable();
    let keep: BooleanArray = (0..batch.num_rows() as u64)
        .map(|r| Some(next.next_if(|&&p| p == r).is_none()))
        .collect();
    filter_record_batch(batch, &keep).unwrap()
}

/// `batch` ordered by its first column (`id`, unique).
fn by_id(batch: &RecordBatch) -> RecordBatch {
    let ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap();
    let mut positions: Vec<u32> = (0..batch.num_rows() as u32).collect();
    positions.sort_by_key(|&i| ids.value(i as usize));
    let order = arrow_array::UInt32Array::from(positions);
    let columns = batch
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c, &order, None).unwrap())
        .collect();
    RecordBatch::try_new(batch.schema(), columns).unwrap()
}

/// Rows stay in their row group (the splice may reorder them inside it): each spliced
/// row group holds the ids of its original one, less the removed.
fn check_row_groups(
    spliced: &Spliced,
    rows: &RecordBatch,
    file: &Bytes,
    removed: &[u64],
    context: &str,
) {
    let original = ParquetMetaDataReader::new().parse_and_finish(file).unwrap();
    let ids = rows
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap();
    let mut expected_groups: Vec<Vec<i64>> = Vec::new();
    let mut first = 0i64;
    for group in original.row_groups() {
        let kept: Vec<i64> = (first..first + group.num_rows())
            .filter(|r| removed.binary_search(&(*r as u64)).is_err())
            .collect();
        if !kept.is_empty() {
            expected_groups.push(kept);
        }
        first += group.num_rows();
    }
    let mut start = 0usize;
    let mut actual_groups = Vec::new();
    for group in spliced.metadata.row_groups() {
        let n = group.num_rows() as usize;
        let mut here: Vec<i64> = (start..start + n).map(|i| ids.value(i)).collect();
        here.sort_unstable();
        actual_groups.push(here);
        start += n;
    }
    assert_eq!(
        actual_groups, expected_groups,
        "{context}: rows per row group"
    );
}

/// The footer describes the kept rows: row counts, each chunk's null count, and bounds,
/// where present, equal to the least and greatest kept value (checked on the id column,
/// whose values are known).
fn check_footer(spliced: &Spliced, expected: &RecordBatch, context: &str) {
    let metadata = &spliced.metadata;
    let rows: i64 = metadata.row_groups().iter().map(|g| g.num_rows()).sum();
    assert_eq!(rows as usize, expected.num_rows(), "{context}: footer rows");
    assert_eq!(
        spliced.rows as usize,
        expected.num_rows(),
        "{context}: rows"
    );
    let leaves = metadata.file_metadata().schema_descr().num_columns();
    let mut start = 0usize;
    for group in metadata.row_groups() {
        let n = group.num_rows() as usize;
        let slice = expected.slice(start, n);
        for leaf in 0..leaves {
            let chunk = group.column(leaf);
            assert_eq!(
                chunk.num_values(),
                n as i64,
                "{context}: values of leaf {leaf}"
            );
            let Some(stats) = chunk.statistics() else {
                continue;
            };
            if let Some(nulls) = stats.null_count_opt() {
                assert_eq!(
                    nulls as usize,
                    leaf_nulls(&slice, leaf),
                    "{context}: null count of leaf {leaf} in a row group of {n} rows"
                );
            }
            if leaf == 0
                && let Statistics::Int64(s) = stats
                && n > 0
            {
                let ids = slice
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>()
                    .unwrap();
                // Exact where present: readers answer min and max from them.
                let lo = ids.iter().flatten().min().unwrap();
                let hi = ids.iter().flatten().max().unwrap();
                assert!(s.min_opt().is_none_or(|m| *m == lo), "{context}: id min");
                assert!(s.max_opt().is_none_or(|m| *m == hi), "{context}: id max");
            }
        }
        start += n;
    }
}

/// Nulls of the `leaf`-th Parquet leaf in `batch` (the struct's leaves are null where
/// the struct is).
fn leaf_nulls(batch: &RecordBatch, leaf: usize) -> usize {
    let mut leaves: Vec<(ArrayRef, Option<arrow_buffer::NullBuffer>)> = Vec::new();
    for column in batch.columns() {
        match column.as_any().downcast_ref::<StructArray>() {
            Some(st) => {
                for child in st.columns() {
                    let nulls =
                        arrow_buffer::NullBuffer::union(st.nulls(), child.logical_nulls().as_ref());
                    leaves.push((child.clone(), nulls));
                }
            }
            None => leaves.push((column.clone(), column.logical_nulls())),
        }
    }
    let (array, nulls) = &leaves[leaf];
    nulls
        .as_ref()
        .map_or(0, |n| n.null_count())
        .min(array.len())
}

/// Float NaNs in `batch`'s column `f`.
fn nans(batch: &RecordBatch) -> u64 {
    let f = batch
        .column_by_name("f")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow_array::Float64Array>()
        .unwrap();
    f.iter().filter(|v| v.is_some_and(f64::is_nan)).count() as u64
}

fn id_range(batch: &RecordBatch) -> (i64, i64) {
    let ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap();
    let min = ids.iter().flatten().min().unwrap();
    let max = ids.iter().flatten().max().unwrap();
    (min, max)
}

/// The Iceberg data file of the original, with exact metrics for `id` (bounds), `i`
/// (nulls) and `f` (NaNs).
fn old_data_file(batch: &RecordBatch) -> iceberg::spec::DataFile {
    let (min, max) = id_range(batch);
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path("old.parquet".into())
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .partition_spec_id(0)
        .record_count(batch.num_rows() as u64)
        .file_size_in_bytes(1)
        .null_value_counts(HashMap::from([(2, batch.column(1).null_count() as u64)]))
        .nan_value_counts(HashMap::from([(9, nans(batch))]))
        .lower_bounds(HashMap::from([(1, Datum::long(min))]))
        .upper_bounds(HashMap::from([(1, Datum::long(max))]))
        .build()
        .unwrap()
}

/// The spliced file's Iceberg metrics describe the kept rows: nulls and NaNs counted
/// exactly, and the id's bounds, if kept, the kept ids' least and greatest.
/// Returns whether the id's bounds were kept.
fn check_data_file(
    spliced: &Spliced,
    batch: &RecordBatch,
    expected: &RecordBatch,
    context: &str,
) -> bool {
    let data_file =
        spliced_data_file(spliced, "new.parquet".into(), &old_data_file(batch), 0).unwrap();
    assert_eq!(
        data_file.record_count() as usize,
        expected.num_rows(),
        "{context}"
    );
    assert_eq!(data_file.file_size_in_bytes() as usize, spliced.bytes.len());
    assert_eq!(
        data_file.value_counts().get(&1).copied(),
        Some(expected.num_rows() as u64),
        "{context}: value count of id"
    );
    assert_eq!(
        data_file.null_value_counts().get(&2).copied(),
        Some(expected.column(1).null_count() as u64),
        "{context}: nulls of i"
    );
    assert_eq!(
        data_file.nan_value_counts().get(&9).copied(),
        Some(nans(expected)),
        "{context}: NaNs of f"
    );
    let (min, max) = id_range(expected);
    let lower = data_file.lower_bounds().get(&1);
    let upper = data_file.upper_bounds().get(&1);
    assert_eq!(
        lower.is_some(),
        upper.is_some(),
        "{context}: one bound of id kept"
    );
    if let (Some(lower), Some(upper)) = (lower, upper) {
        assert_eq!(
            (lower, upper),
            (&Datum::long(min), &Datum::long(max)),
            "{context}: id bounds"
        );
    }
    lower.is_some()
}

#[test]
fn spliced_files_hold_exactly_the_kept_rows() {
    let seeds = std::env::var("FLOE_SPLICE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300u64);
    let dir = tempfile::tempdir().unwrap();
    let (mut spliced_count, mut by_readers, mut declined, mut bounds_kept) =
        (0u64, 0u64, 0u64, 0u64);
    for seed in 1..=seeds {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let rows = pick(&mut rng, &[1u64, 2, 17, 300, 1000, 2500]);
        let repeated = rng.below(10) == 0;
        let batch = random_batch(&mut rng, rows as usize, repeated);
        let mut layout = vec![format!("seed {seed}: {rows} rows, repeated={repeated}")];
        let file = write_file(&batch, random_properties(&mut rng, &mut layout));
        let settings = random_settings(&mut rng, &mut layout);
        let removed = random_removals(&mut rng, rows);
        let context = format!(
            "{}; removed {:?}",
            layout.join("; "),
            &removed[..removed.len().min(20)]
        );
        let result = splice_without(&file, &removed, &settings, &batch.schema())
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        let Some(spliced) = result else {
            // Declining is always safe (the merging rewrite takes the file); the run
            // asserts below that most files were spliced, and a repeated column must be.
            declined += 1;
            continue;
        };
        assert!(
            !repeated,
            "{context}: spliced a file with a repeated column"
        );
        spliced_count += 1;
        let expected = without(&batch, &removed);
        for page_index in [false, true] {
            let actual = by_id(&read_all(&spliced.bytes, page_index));
            assert_eq!(
                actual, expected,
                "{context}: rows read back (page index {page_index})"
            );
        }
        let in_file_order = read_all(&spliced.bytes, false);
        check_row_groups(&spliced, &in_file_order, &file, &removed, &context);
        check_footer(&spliced, &in_file_order, &context);
        if check_data_file(&spliced, &batch, &expected, &context) {
            bounds_kept += 1;
        }
        // Every tenth spliced file is read by DuckDB and pyarrow too, against the kept
        // rows written plainly by arrow-rs.
        let every = std::env::var("FLOE_SPLICE_READ_EVERY")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10u64);
        if spliced_count % every == 1 % every {
            let actual_path = dir.path().join(format!("{seed}-spliced.parquet"));
            let expected_path = dir.path().join(format!("{seed}-expected.parquet"));
            std::fs::write(&actual_path, &spliced.bytes).unwrap();
            std::fs::write(
                &expected_path,
                write_file(&expected, WriterProperties::builder().build()),
            )
            .unwrap();
            if std::env::var("FLOE_SPLICE_KEEP").is_ok() {
                std::fs::write(dir.path().join(format!("{seed}-original.parquet")), &file).unwrap();
                let kept = std::env::temp_dir().join("floe-splice-kept");
                let _ = std::fs::remove_dir_all(&kept);
                std::fs::create_dir_all(&kept).unwrap();
                for name in ["spliced", "expected", "original"] {
                    let from = dir.path().join(format!("{seed}-{name}.parquet"));
                    std::fs::copy(&from, kept.join(format!("{name}.parquet"))).unwrap();
                }
            }
            let answer = read_back(
                "parquet-compare",
                json!({"actual": actual_path, "expected": expected_path}),
            );
            assert_eq!(answer["differences"], json!([]), "{context}: {answer}");
            assert_eq!(answer["count"], json!(expected.num_rows()), "{context}");
            by_readers += 1;
        }
    }
    // A good share of the seeds must splice, or the test proves little (the rest are
    // declined by design: one page per column, removals that touch most pages, all rows
    // removed, a list column, no offset index).
    println!(
        "{spliced_count} of {seeds} files spliced ({declined} declined; id bounds kept in \
         {bounds_kept}), {by_readers} read by DuckDB and pyarrow"
    );
    // Both ways a bound goes must have been met: kept (exact still) and left out.
    assert!(
        bounds_kept > 0 && bounds_kept < spliced_count,
        "id bounds kept in {bounds_kept}"
    );
    assert!(
        spliced_count * 4 >= seeds,
        "only {spliced_count} of {seeds} files were spliced"
    );
    assert!(
        by_readers * 20 >= spliced_count.min(20),
        "{by_readers} read by the readers"
    );
}
