//! Writing: Arrow batches → Parquet data files with Iceberg field ids and statistics.
//!
//! iceberg-rust's writer stack does the file work (Parquet with field ids, rolling at the
//! target size, `DataFile`s with value/null counts, bounds, sizes and split offsets);
//! this module chooses its settings (config first, then the table's `write.*`
//! properties, then floe's defaults) and fans rows out by partition.

pub mod deletion_vector;
pub mod dictionary;
pub mod lineage;
pub mod location;
pub mod splice;
#[cfg(test)]
pub(crate) mod test_files;

use std::collections::HashMap;

use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, DataFileFormat, PartitionSpec, PrimitiveLiteral, Schema, Struct, TableMetadata,
};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::base_writer::equality_delete_writer::{
    EqualityDeleteFileWriterBuilder, EqualityDeleteWriterConfig,
};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::DefaultFileNameGenerator;
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use location::FileLocations;
use parquet::basic::{Compression as PqCompression, Encoding, GzipLevel, ZstdLevel};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::schema::types::ColumnPath;

use crate::config::{Compression, ParquetConfig, StringEncoding};
use crate::error::{Error, Result};

/// Default zstd level: level 1 keeps encoding off the critical path of a stream writer
/// while still compressing typical event data 3–5×.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;
/// Iceberg's default target file size (`write.target-file-size-bytes`).
pub const DEFAULT_TARGET_FILE_SIZE: usize = 512 * 1024 * 1024;

/// Rows per data page unless `parquet.page_row_limit` or the table's
/// `write.parquet.page-row-limit` says otherwise (Iceberg's Java default is 20,000):
/// copy-on-write re-encodes only the pages that hold a removed row ([`splice`]), so
/// smaller pages mean less to re-encode per key.
pub const DEFAULT_PAGE_ROW_LIMIT: usize = 1024;
/// arrow-rs's write batch size, the granularity at which it checks page limits.
const DEFAULT_WRITE_BATCH_ROWS: usize = 1024;

/// The Parquet settings for one table, resolved once per table version.
#[derive(Debug, Clone)]
pub struct FileSettings {
    pub properties: WriterProperties,
    pub target_file_size: usize,
    /// Each group's data files get a dictionary only on the columns whose values it
    /// shrinks ([`dictionary`]); off when `parquet.dictionary` says what to do.
    pub dictionaries_by_sample: bool,
}

fn table_prop<T: std::str::FromStr>(
    props: &HashMap<String, String>,
    key: &str,
) -> Result<Option<T>> {
    props
        .get(key)
        .map(|v| {
            v.parse()
                .map_err(|_| Error::config(format!("table property {key}={v:?} is not valid")))
        })
        .transpose()
}

fn compression_from_table(codec: &str) -> Result<Compression> {
    Ok(match codec.to_ascii_lowercase().as_str() {
        "zstd" => Compression::Zstd,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "gzip" => Compression::Gzip,
        "uncompressed" | "none" => Compression::Uncompressed,
        other => {
            return Err(Error::config(format!(
                "table property write.parquet.compression-codec={other:?} is not supported"
            )));
        }
    })
}

fn parquet_compression(codec: Compression, level: Option<i32>) -> Result<PqCompression> {
    let bad = |e: parquet::errors::ParquetError| Error::config(format!("compression level: {e}"));
    Ok(match codec {
        Compression::Zstd => PqCompression::ZSTD(
            ZstdLevel::try_new(level.unwrap_or(DEFAULT_ZSTD_LEVEL)).map_err(bad)?,
        ),
        Compression::Gzip => PqCompression::GZIP(match level {
            Some(l) => GzipLevel::try_new(l as u32).map_err(bad)?,
            None => GzipLevel::default(),
        }),
        Compression::Snappy => PqCompression::SNAPPY,
        Compression::Lz4 => PqCompression::LZ4_RAW,
        Compression::Uncompressed => PqCompression::UNCOMPRESSED,
    })
}

/// The `created_by` of floe's Parquet files, in the form parquet-mr's version parser
/// reads (`<application> version <semver>`): Iceberg's Java reader (Spark, Trino, Flink)
/// logs a warning per file and ignores its binary column statistics when it cannot parse
/// it.
pub fn created_by() -> String {
    format!("floe version {}", env!("CARGO_PKG_VERSION"))
}

/// Resolves the Parquet settings: `config` wins, then the table's properties, then defaults.
pub fn file_settings(config: &ParquetConfig, metadata: &TableMetadata) -> Result<FileSettings> {
    let props = metadata.properties();
    let codec = match (
        config.compression,
        props.get("write.parquet.compression-codec"),
    ) {
        (Some(c), _) => c,
        (None, Some(t)) => compression_from_table(t)?,
        (None, None) => Compression::Zstd,
    };
    let level = match config.compression_level {
        Some(l) => Some(l),
        None => table_prop(props, "write.parquet.compression-level")?,
    };
    let mut builder = WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_2_0)
        .set_compression(parquet_compression(codec, level)?)
        .set_created_by(created_by())
        // Exact column statistics, as Java's Parquet writer keeps them: iceberg-rust
        // builds a file's bounds from the row groups whose statistics are exact, so with
        // arrow-rs's default (values cut at 64 bytes, marked inexact) a row group holding
        // a long maximum was left out and the file's bound fell below a row it holds.
        .set_statistics_truncate_length(None);
    if let Some(rows) = config.row_group_size {
        builder = builder.set_max_row_group_row_count(Some(rows));
    }
    if let Some(bytes) = table_prop::<usize>(props, "write.parquet.row-group-size-bytes")? {
        builder = builder.set_max_row_group_bytes(Some(bytes.max(1)));
    }
    let page_size = match config.page_size {
        Some(p) => Some(p),
        None => table_prop(props, "write.parquet.page-size-bytes")?,
    };
    if let Some(bytes) = page_size {
        builder = builder.set_data_page_size_limit(bytes);
    }
    let page_rows = match config.page_row_limit {
        Some(rows) => Some(rows),
        None => table_prop::<usize>(props, "write.parquet.page-row-limit")?,
    };
    let page_rows = page_rows.unwrap_or(DEFAULT_PAGE_ROW_LIMIT).max(1);
    // The writer checks the row limit once per write batch (1,024 rows by default): a
    // smaller limit needs smaller batches to hold.
    builder = builder
        .set_data_page_row_count_limit(page_rows)
        .set_write_batch_size(page_rows.min(DEFAULT_WRITE_BATCH_ROWS));
    if let Some(bytes) = table_prop::<usize>(props, "write.parquet.dict-size-bytes")? {
        builder = builder.set_dictionary_page_size_limit(bytes);
    }
    if let Some(enabled) = config.dictionary {
        builder = builder.set_dictionary_enabled(enabled);
    }
    // Unset, the writer chooses (dictionary, else DELTA_BYTE_ARRAY in Parquet 2).
    let string_encoding = config.string_encoding.map(|e| match e {
        StringEncoding::DeltaLengthByteArray => Encoding::DELTA_LENGTH_BYTE_ARRAY,
        StringEncoding::Plain => Encoding::PLAIN,
    });
    if let Some(encoding) = string_encoding {
        for path in string_column_paths(metadata) {
            builder = builder.set_column_encoding(path, encoding);
        }
    }
    let target_file_size = match config.target_file_size_bytes {
        Some(t) => t,
        None => {
            table_prop(props, "write.target-file-size-bytes")?.unwrap_or(DEFAULT_TARGET_FILE_SIZE)
        }
    };
    Ok(FileSettings {
        properties: builder.build(),
        target_file_size,
        dictionaries_by_sample: config.dictionary.is_none(),
    })
}

/// Parquet paths of string columns outside lists and maps (whose leaf paths carry
/// writer-specific group names), for per-column encodings.
fn string_column_paths(metadata: &TableMetadata) -> Vec<ColumnPath> {
    use iceberg::spec::{PrimitiveType, Type};
    fn walk(
        fields: &[iceberg::spec::NestedFieldRef],
        prefix: &[String],
        out: &mut Vec<ColumnPath>,
    ) {
        for f in fields {
            let mut path = prefix.to_vec();
            path.push(f.name.clone());
            match f.field_type.as_ref() {
                Type::Primitive(PrimitiveType::String) => out.push(ColumnPath::new(path)),
                Type::Struct(s) => walk(s.fields(), &path, out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(
        metadata.current_schema().as_struct().fields(),
        &[],
        &mut out,
    );
    out
}

type RollingParquet =
    RollingFileWriterBuilder<ParquetWriterBuilder, FileLocations, DefaultFileNameGenerator>;

/// Parquet files of `schema` under the table's data location, rolled at the target size;
/// `suffix` tells delete files from data files by name.
fn rolling_parquet(
    schema: &iceberg::spec::SchemaRef,
    suffix: &str,
    metadata: &TableMetadata,
    file_io: &FileIO,
    settings: &FileSettings,
) -> Result<RollingParquet> {
    Ok(FilePlace::new(schema, metadata, file_io)?.rolling(suffix, settings))
}

/// Where a sink's files go and what they hold, to open its writers with settings chosen
/// later (see [`DataFileSink::choose_settings`]).
struct FilePlace {
    schema: iceberg::spec::SchemaRef,
    location: FileLocations,
    file_io: FileIO,
}

impl FilePlace {
    fn new(
        schema: &iceberg::spec::SchemaRef,
        metadata: &TableMetadata,
        file_io: &FileIO,
    ) -> Result<Self> {
        Ok(FilePlace {
            schema: schema.clone(),
            location: FileLocations::new(metadata),
            file_io: file_io.clone(),
        })
    }

    fn rolling(&self, suffix: &str, settings: &FileSettings) -> RollingParquet {
        let parquet = ParquetWriterBuilder::new(settings.properties.clone(), self.schema.clone());
        let names = DefaultFileNameGenerator::new(
            format!("00000-{}{suffix}", uuid::Uuid::new_v4()),
            None,
            DataFileFormat::Parquet,
        );
        RollingFileWriterBuilder::new(
            parquet,
            settings.target_file_size,
            self.file_io.clone(),
            self.location.clone(),
            names,
        )
    }
}

/// Writes `batches` (already in the table's current schema) as data files: the rows of
/// all of them go through one rolling writer per partition of the table's default spec,
/// so a commit group of many small batches becomes as few files as the target size allows.
pub async fn write_data_files(
    batches: Vec<RecordBatch>,
    metadata: &TableMetadata,
    file_io: &FileIO,
    settings: &FileSettings,
) -> Result<Vec<DataFile>> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Ok(Vec::new());
    }
    let mut sink = DataFileSink::new(metadata, file_io, settings)?;
    // The whole group is the sample, not only its first batch.
    sink.choose_settings(&batches);
    // Each batch is given up once written: a group's rows are not held as Arrow and as
    // Parquet at once (unless the caller keeps them).
    for batch in batches {
        sink.write(&batch).await?;
    }
    sink.close().await
}

type DataWriter = iceberg::writer::base_writer::data_file_writer::DataFileWriter<
    ParquetWriterBuilder,
    FileLocations,
    DefaultFileNameGenerator,
>;

type DataWriterBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, FileLocations, DefaultFileNameGenerator>;

/// Data files fed batch by batch: one rolling writer per partition of the table's default
/// spec, opened when its first row arrives. Memory holds each open file's current row
/// group (encoded), never the rows already written; copy-on-write streams rewritten files
/// through it.
pub struct DataFileSink {
    builder: Built,
    splitter: Option<RecordBatchPartitionSplitter>,
    /// One writer per partition key, in first-seen order.
    writers: Vec<DataWriter>,
    index: HashMap<iceberg::spec::Struct, usize>,
}

/// A sink's writer settings: chosen, or to be chosen from its first rows.
enum Built {
    Now(DataWriterBuilder),
    /// With [`FileSettings::dictionaries_by_sample`]: from the group, when the caller
    /// has one ([`write_data_files`]); a sink fed a stream (a copy-on-write rewrite) has
    /// none before its files open, so its first batch is the sample.
    AtFirstRows(FilePlace, FileSettings),
}

impl DataFileSink {
    pub fn new(
        metadata: &TableMetadata,
        file_io: &FileIO,
        settings: &FileSettings,
    ) -> Result<Self> {
        Self::of_schema(
            metadata.current_schema().clone(),
            metadata,
            file_io,
            settings,
        )
    }

    /// A sink of rows in the table's current schema followed by the two row lineage
    /// columns ([`lineage`]), for rows that keep their lineage.
    pub fn with_lineage(
        metadata: &TableMetadata,
        file_io: &FileIO,
        settings: &FileSettings,
    ) -> Result<Self> {
        let schema = lineage::with_lineage_columns(metadata.current_schema())?;
        Self::of_schema(schema, metadata, file_io, settings)
    }

    fn of_schema(
        schema: iceberg::spec::SchemaRef,
        metadata: &TableMetadata,
        file_io: &FileIO,
        settings: &FileSettings,
    ) -> Result<Self> {
        let place = FilePlace::new(&schema, metadata, file_io)?;
        let builder = match settings.dictionaries_by_sample {
            true => Built::AtFirstRows(place, settings.clone()),
            false => Built::Now(DataFileWriterBuilder::new(place.rolling("", settings))),
        };
        let spec = metadata.default_partition_spec();
        let splitter = if spec.is_unpartitioned() {
            None
        } else {
            Some(RecordBatchPartitionSplitter::try_new_with_computed_values(
                schema,
                spec.clone(),
            )?)
        };
        Ok(DataFileSink {
            builder,
            splitter,
            writers: Vec::new(),
            index: HashMap::new(),
        })
    }

    /// Chooses the writers' settings from `batches` (the first rows, or all of them when
    /// known up front), unless they are chosen already.
    fn choose_settings(&mut self, batches: &[RecordBatch]) {
        if let Built::AtFirstRows(place, settings) = &self.builder {
            let sampled = FileSettings {
                properties: dictionary::without_needless_dictionaries(
                    &settings.properties,
                    batches,
                ),
                ..settings.clone()
            };
            self.builder = Built::Now(DataFileWriterBuilder::new(place.rolling("", &sampled)));
        }
    }

    /// Writes `batch`'s rows (in the table's current schema).
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.choose_settings(std::slice::from_ref(batch));
        let Built::Now(builder) = &self.builder else {
            return Err(Error::internal(
                "a data file sink's settings were not chosen",
            ));
        };
        let Some(splitter) = &self.splitter else {
            if self.writers.is_empty() {
                self.writers.push(builder.build(None).await?);
            }
            return Ok(self.writers[0].write(batch.clone()).await?);
        };
        for (key, part) in splitter.split(batch)? {
            let slot = match self.index.get(key.data()) {
                Some(&i) => i,
                None => {
                    self.writers.push(builder.build(Some(key.clone())).await?);
                    self.index
                        .insert(key.data().clone(), self.writers.len() - 1);
                    self.writers.len() - 1
                }
            };
            self.writers[slot].write(part).await?;
        }
        Ok(())
    }

    /// Closes every file; the data files written, none for no rows.
    pub async fn close(self) -> Result<Vec<DataFile>> {
        let mut files = Vec::new();
        for mut writer in self.writers {
            files.extend(writer.close().await?);
        }
        Ok(files)
    }
}

/// Writes `keys` (a batch in `key_schema`, the key columns alone) as equality-delete
/// files on the key's field ids (`equality_ids`), fanned out like data files: a table partitioned by key columns gets one delete
/// file per partition, so a delete applies only where its key's rows can be.
pub async fn write_equality_delete_files(
    keys: &RecordBatch,
    key_schema: &iceberg::spec::SchemaRef,
    equality_ids: &[i32],
    metadata: &TableMetadata,
    file_io: &FileIO,
    settings: &FileSettings,
) -> Result<Vec<DataFile>> {
    if keys.num_rows() == 0 {
        return Ok(Vec::new());
    }
    let keys = &sorted_by_key(keys)?;
    let settings = &delete_file_settings(settings);
    let schema = key_schema.clone();
    let config = EqualityDeleteWriterConfig::new(equality_ids.to_vec(), schema.clone())?;
    // The key schema itself, not one converted back from Arrow: that round trip turns
    // uuid into fixed(16), and readers then cannot compare the keys with the data.
    let rolling = rolling_parquet(&schema, "-deletes", metadata, file_io, settings)?;
    let builder = EqualityDeleteFileWriterBuilder::new(rolling, config);
    let spec = metadata.default_partition_spec();
    if spec.is_unpartitioned() {
        let mut writer = builder.build(None).await?;
        writer.write(keys.clone()).await?;
        return Ok(writer.close().await?);
    }
    let splitter =
        RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec.clone())?;
    let mut files = Vec::new();
    for (key, part) in splitter.split(keys)? {
        let mut writer = builder.build(Some(key)).await?;
        writer.write(part).await?;
        files.extend(writer.close().await?);
    }
    Ok(files)
}

/// The settings of equality-delete files: the data files' without a dictionary. A delete
/// file holds each key about once, so a dictionary only adds a copy of every value (at
/// 10,000 long keys the dictionary page was nine tenths of a 27 KB file); without one,
/// Parquet 2 stores the sorted keys delta-encoded, in a few bits each when they are close.
fn delete_file_settings(settings: &FileSettings) -> FileSettings {
    FileSettings {
        properties: settings
            .properties
            .clone()
            .into_builder()
            .set_dictionary_enabled(false)
            .build(),
        target_file_size: settings.target_file_size,
        dictionaries_by_sample: false,
    }
}

/// `keys` sorted by all their columns, in the order the row format compares them: the
/// delta encodings then see small steps, and each file's and page's bounds are tight.
fn sorted_by_key(keys: &RecordBatch) -> Result<RecordBatch> {
    let columns: Vec<arrow_ord::sort::SortColumn> = keys
        .columns()
        .iter()
        .map(|c| arrow_ord::sort::SortColumn {
            values: c.clone(),
            options: None,
        })
        .collect();
    // Sorted by value where arrow can (a long key: a tenth of the time of comparing
    // row-encoded keys), else by the row format.
    let indices = match arrow_ord::sort::lexsort_to_indices(&columns, None) {
        Ok(indices) => indices,
        Err(_) => sorted_by_rows(keys)?,
    };
    arrow_select::take::take_record_batch(keys, &indices).map_err(arrow_error)
}

/// The order of `keys` by their row-encoded form, which every key type has.
fn sorted_by_rows(keys: &RecordBatch) -> Result<arrow_array::UInt32Array> {
    let fields = keys
        .schema()
        .fields()
        .iter()
        .map(|f| arrow_row::SortField::new(f.data_type().clone()))
        .collect();
    let converter = arrow_row::RowConverter::new(fields).map_err(arrow_error)?;
    let rows = converter
        .convert_columns(keys.columns())
        .map_err(arrow_error)?;
    let mut order: Vec<u32> = (0..keys.num_rows() as u32).collect();
    order.sort_unstable_by_key(|&i| rows.row(i as usize));
    Ok(arrow_array::UInt32Array::from(order))
}

fn arrow_error(e: arrow_schema::ArrowError) -> Error {
    Error::internal(format!("sorting the keys of a delete file: {e}"))
}

/// Iceberg's reserved field ids of a position-delete file's two columns.
pub(crate) const DELETE_FILE_PATH_FIELD_ID: i32 = 2147483546;
pub(crate) const DELETE_POS_FIELD_ID: i32 = 2147483545;

/// The rows to delete in one data file: its partition (under the table's default spec),
/// its path, and the positions, ascending.
pub struct DeletedRows {
    pub partition: iceberg::spec::Struct,
    pub path: String,
    pub positions: Vec<u64>,
}

/// Writes position-delete files: one per data file named ("file-scoped", as Spark
/// writes them with `write.delete.granularity=file`), in that file's partition, its
/// positions ascending, and `referenced_data_file` set — so a reader, and floe's next
/// lookup, opens only the delete files of the data files it reads (file-path bounds do
/// not help: Parquet statistics drop paths longer than 64 bytes).
pub async fn write_position_delete_files(
    mut deleted: Vec<DeletedRows>,
    metadata: &TableMetadata,
    file_io: &FileIO,
    settings: &FileSettings,
) -> Result<Vec<DataFile>> {
    use iceberg::spec::{DataContentType, NestedField, PartitionKey, PrimitiveType, Type};
    deleted.retain(|d| !d.positions.is_empty());
    deleted.sort_by(|a, b| a.path.cmp(&b.path));
    let schema = std::sync::Arc::new(
        Schema::builder()
            .with_fields(vec![
                NestedField::required(
                    DELETE_FILE_PATH_FIELD_ID,
                    "file_path",
                    Type::Primitive(PrimitiveType::String),
                )
                .into(),
                NestedField::required(
                    DELETE_POS_FIELD_ID,
                    "pos",
                    Type::Primitive(PrimitiveType::Long),
                )
                .into(),
            ])
            .build()?,
    );
    let arrow = std::sync::Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
    let rolling = rolling_parquet(&schema, "-pos-deletes", metadata, file_io, settings)?;
    let spec = metadata.default_partition_spec();
    let mut files = Vec::new();
    for d in &deleted {
        let paths: arrow_array::StringArray =
            d.positions.iter().map(|_| Some(d.path.as_str())).collect();
        let positions: arrow_array::Int64Array =
            d.positions.iter().map(|&p| Some(p as i64)).collect();
        let batch = RecordBatch::try_new(
            arrow.clone(),
            vec![std::sync::Arc::new(paths), std::sync::Arc::new(positions)],
        )
        .map_err(|e| Error::internal(format!("position deletes: {e}")))?;
        let partition = in_partition_type(spec, metadata.current_schema(), &d.partition);
        let key = (!spec.is_unpartitioned()).then(|| {
            PartitionKey::new(
                spec.as_ref().clone(),
                metadata.current_schema().clone(),
                partition.clone(),
            )
        });
        let mut writer = rolling.build();
        writer.write(&key, &batch).await?;
        for mut file in writer.close().await? {
            file.content(DataContentType::PositionDeletes)
                .partition(partition.clone())
                .partition_spec_id(spec.spec_id())
                .referenced_data_file(Some(d.path.clone()));
            files.push(
                file.build()
                    .map_err(|e| Error::internal(format!("position delete file: {e}")))?,
            );
        }
    }
    Ok(files)
}

/// A partition's `values` as `spec` types them under `schema`. A value written before
/// its source column was widened (int to long, float to double) is of the narrower kind;
/// iceberg-rust cannot name a partition's path from a value whose kind is not its type's
/// (it panics), so files written for that partition now (position deletes, rewrites)
/// take the wider kind, as their manifests store it anyway, and so do the files a
/// snapshot summary counts by partition.
pub fn in_partition_type(spec: &PartitionSpec, schema: &Schema, values: &Struct) -> Struct {
    use iceberg::spec::{Literal, PrimitiveType as T};
    let Ok(partition_type) = spec.partition_type(schema) else {
        return values.clone();
    };
    let fields = partition_type.fields();
    if fields.len() != values.fields().len() {
        return values.clone();
    }
    let typed = fields.iter().zip(values.iter()).map(|(field, value)| {
        let wide = matches!(
            field.field_type.as_primitive_type(),
            Some(T::Long | T::Double)
        );
        match value {
            Some(Literal::Primitive(v)) if wide => Some(Literal::Primitive(widened(v))),
            value => value.cloned(),
        }
    });
    Struct::from_iter(typed)
}

/// `value` as the wider kind a widening gives its column (int to long, float to
/// double); any other value as it is. Two values of one partition field are the same
/// value when their widened forms are equal (NaN included).
pub fn widened(value: &PrimitiveLiteral) -> PrimitiveLiteral {
    match value {
        PrimitiveLiteral::Int(n) => PrimitiveLiteral::Long(i64::from(*n)),
        PrimitiveLiteral::Float(f) => PrimitiveLiteral::Double(f64::from(f.0).into()),
        v => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture table with a string column `s` besides `id`.
    fn with_string_column() -> TableMetadata {
        let table = crate::fixture::table("{}", 2, "", "");
        let mut json = serde_json::to_value(&table).unwrap();
        json["schemas"][0]["fields"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"id": 2, "name": "s", "required": false, "type": "string"}));
        json["last-column-id"] = 2.into();
        serde_json::from_value(json).unwrap()
    }

    /// `string_encoding: plain` wrote DELTA_BYTE_ARRAY (the Parquet 2 writer's fallback
    /// once dictionaries are off): each choice must reach the string columns.
    #[test]
    fn each_string_encoding_reaches_string_columns() {
        let table = with_string_column();
        for (choice, encoding) in [
            (StringEncoding::Plain, Encoding::PLAIN),
            (
                StringEncoding::DeltaLengthByteArray,
                Encoding::DELTA_LENGTH_BYTE_ARRAY,
            ),
        ] {
            let config = ParquetConfig {
                string_encoding: Some(choice),
                dictionary: Some(false),
                ..ParquetConfig::default()
            };
            let settings = file_settings(&config, &table).unwrap();
            let s = ColumnPath::new(vec!["s".into()]);
            assert_eq!(
                settings.properties.encoding(&s),
                Some(encoding),
                "{choice:?}"
            );
            let id = ColumnPath::new(vec!["id".into()]);
            assert_eq!(settings.properties.encoding(&id), None);
        }
    }

    /// A sink fed a stream (copy-on-write's merging rewrite) chooses its dictionaries
    /// from its first rows, as a group's data files do from the group: a column of
    /// distinct values is written without one, a column of few values keeps it.
    #[tokio::test]
    async fn a_streamed_sink_chooses_its_dictionaries_from_its_first_rows() {
        let mut json = serde_json::to_value(crate::fixture::table("{}", 2, "", "")).unwrap();
        json["location"] = "memory:/t".into();
        json["schemas"][0] = serde_json::json!({"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "distinct", "required": true, "type": "string"},
            {"id": 2, "name": "few", "required": true, "type": "string"}]});
        json["last-column-id"] = 2.into();
        let table: TableMetadata = serde_json::from_value(json).unwrap();
        let arrow = std::sync::Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.current_schema()).unwrap(),
        );
        let batch = |from: usize| {
            let distinct: Vec<String> = (from..from + 1_000)
                .map(|i| format!("row-{i:08}"))
                .collect();
            let few: Vec<&str> = (0..1_000).map(|i| ["a", "b"][i % 2]).collect();
            RecordBatch::try_new(
                arrow.clone(),
                vec![
                    std::sync::Arc::new(arrow_array::StringArray::from(distinct)),
                    std::sync::Arc::new(arrow_array::StringArray::from(few)),
                ],
            )
            .unwrap()
        };
        let settings = file_settings(&ParquetConfig::default(), &table).unwrap();
        assert!(settings.dictionaries_by_sample);
        let io = FileIO::new_with_memory();
        let mut sink = DataFileSink::new(&table, &io, &settings).unwrap();
        sink.write(&batch(0)).await.unwrap();
        sink.write(&batch(1_000)).await.unwrap();
        let files = sink.close().await.unwrap();
        assert_eq!(files.len(), 1);
        let bytes = io
            .new_input(files[0].file_path())
            .unwrap()
            .read()
            .await
            .unwrap();
        let reader = parquet::file::reader::SerializedFileReader::new(bytes).unwrap();
        use parquet::file::reader::FileReader;
        let metadata = reader.metadata();
        assert_eq!(metadata.file_metadata().num_rows(), 2_000);
        for group in metadata.row_groups() {
            let has_dictionary = |c: usize| group.column(c).dictionary_page_offset().is_some();
            assert!(!has_dictionary(0), "distinct values got a dictionary");
            assert!(has_dictionary(1), "two values lost their dictionary");
        }
    }

    /// A string column whose greatest value (100 bytes) lies in the first of two row
    /// groups: the file's upper bound must be at least that value. iceberg-rust builds a
    /// file's bounds from the row groups whose statistics are exact, so a truncated
    /// (inexact) maximum in one row group left a bound below it, and a reader pruning by
    /// it would skip the row.
    #[tokio::test]
    async fn string_bounds_hold_every_row_group() {
        let mut json = serde_json::to_value(crate::fixture::table("{}", 2, "", "")).unwrap();
        json["location"] = "memory:/t".into();
        json["schemas"][0] = serde_json::json!({"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "s", "required": true, "type": "string"}]});
        json["last-column-id"] = 1.into();
        let table: TableMetadata = serde_json::from_value(json).unwrap();
        let arrow = std::sync::Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.current_schema()).unwrap(),
        );
        let long = "z".repeat(100);
        let values = vec![long.as_str(), "a", "m", "b"];
        let batch = RecordBatch::try_new(
            arrow,
            vec![std::sync::Arc::new(arrow_array::StringArray::from(values))],
        )
        .unwrap();
        let config = ParquetConfig {
            row_group_size: Some(2),
            ..ParquetConfig::default()
        };
        let settings = file_settings(&config, &table).unwrap();
        let io = FileIO::new_with_memory();
        let files = write_data_files(vec![batch], &table, &io, &settings)
            .await
            .unwrap();
        assert_eq!(files.len(), 1);
        let upper = files[0].upper_bounds().get(&1);
        assert!(
            upper.is_none_or(|u| *u >= iceberg::spec::Datum::string(&long)),
            "upper bound {upper:?}"
        );
        let lower = files[0].lower_bounds().get(&1);
        assert!(lower.is_none_or(|l| *l <= iceberg::spec::Datum::string("a")));
    }

    /// Equality deletes of 10,000 keys, handed over in no order (as a call's keys come):
    /// written sorted, once each, in a file of a few kilobytes (27 KB with a dictionary).
    #[tokio::test]
    async fn equality_delete_files_are_sorted_and_small() {
        let mut json = serde_json::to_value(crate::fixture::table("{}", 2, "", "")).unwrap();
        json["location"] = "memory:/t".into();
        let table: TableMetadata = serde_json::from_value(json).unwrap();
        let key_schema = table.current_schema().clone();
        let arrow =
            std::sync::Arc::new(iceberg::arrow::schema_to_arrow_schema(&key_schema).unwrap());
        // 0, 2, 4, … 19,998, shuffled by a fixed permutation.
        let ids: Vec<i64> = (0..10_000i64).map(|i| (i * 7_919) % 10_000 * 2).collect();
        let keys = RecordBatch::try_new(
            arrow,
            vec![std::sync::Arc::new(arrow_array::Int64Array::from(
                ids.clone(),
            ))],
        )
        .unwrap();
        let io = FileIO::new_with_memory();
        let settings = file_settings(&ParquetConfig::default(), &table).unwrap();
        let files = write_equality_delete_files(&keys, &key_schema, &[1], &table, &io, &settings)
            .await
            .unwrap();
        assert_eq!(files.len(), 1);
        let file = &files[0];
        assert_eq!(file.record_count(), 10_000);
        assert!(
            file.file_size_in_bytes() <= 4_096,
            "{} bytes",
            file.file_size_in_bytes()
        );
        let bytes = io
            .new_input(file.file_path())
            .unwrap()
            .read()
            .await
            .unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        let mut read = Vec::new();
        for batch in reader {
            let batch = batch.unwrap();
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>();
            read.extend(column.unwrap().values().iter().copied());
        }
        let mut want = ids;
        want.sort_unstable();
        assert_eq!(read, want);
    }

    /// A key of one column per physical layout a delete file can hold (int, FLBA decimal,
    /// multi-byte and empty strings, binary, fixed, boolean, date, timestamptz), some keys
    /// twice, in a table bucketed by a key column: sorting before the partition split
    /// must keep every key row once per copy, in its own partition's file, under the
    /// key's field ids, and each file's counts and bounds must still be its rows' (readers
    /// prune delete files by them).
    #[tokio::test]
    async fn typed_key_delete_files_keep_rows_field_ids_and_bounds() {
        let table = typed_key_table();
        let key_schema = table.current_schema().clone();
        let ids: Vec<i32> = (1..=8).collect();
        // 200 keys, 11 of them twice, handed over in no order.
        let mut want: Vec<TypedKey> = (0..211).map(|j| typed_key(j * 7_919 % 211 % 200)).collect();
        let keys = typed_key_batch(&key_schema, &want);
        let io = FileIO::new_with_memory();
        let settings = file_settings(&ParquetConfig::default(), &table).unwrap();
        let files = write_equality_delete_files(&keys, &key_schema, &ids, &table, &io, &settings)
            .await
            .unwrap();
        assert_eq!(files.len(), 2, "one file per bucket of n");
        let mut got = Vec::new();
        for file in &files {
            assert_eq!(
                file.content_type(),
                iceberg::spec::DataContentType::EqualityDeletes
            );
            assert_eq!(file.equality_ids(), Some(ids.clone()));
            let rows = read_typed_keys(&io, file).await;
            assert!(
                rows.is_sorted(),
                "rows of {} out of order",
                file.file_path()
            );
            assert_eq!(file.record_count(), rows.len() as u64);
            assert_stats_are_of(file, &rows, &ids);
            got.extend(rows);
        }
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    /// The key rows of a delete file written for [`typed_key_table`], checking on the way
    /// that its columns carry the key's field ids, that it has no dictionary, and that
    /// every row lies in the file's partition.
    async fn read_typed_keys(io: &FileIO, file: &DataFile) -> Vec<TypedKey> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::TimestampMicrosecondType as Micros;
        use arrow_array::types::{Date32Type, Decimal128Type, Int32Type};
        let input = io.new_input(file.file_path()).unwrap();
        let bytes = input.read().await.unwrap();
        let builder =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        let field_ids: Vec<&str> = builder
            .schema()
            .fields()
            .iter()
            .map(|f| f.metadata()["PARQUET:field_id"].as_str())
            .collect();
        assert_eq!(field_ids, ["1", "2", "3", "4", "5", "6", "7", "8"]);
        for column in builder.metadata().row_group(0).columns() {
            assert_eq!(column.dictionary_page_offset(), None);
        }
        let bucket = iceberg::spec::Transform::Bucket(2);
        let bucket = iceberg::transform::create_transform_function(&bucket).unwrap();
        let mut rows = Vec::new();
        for batch in builder.build().unwrap() {
            let b = batch.unwrap();
            let buckets = bucket.transform(b.column(0).clone()).unwrap();
            for n in buckets.as_primitive::<Int32Type>().values() {
                let literal = iceberg::spec::Literal::int(*n);
                assert_eq!(file.partition().fields(), [Some(literal)]);
            }
            rows.extend((0..b.num_rows()).map(|r| {
                TypedKey(
                    b.column(0).as_primitive::<Int32Type>().value(r),
                    b.column(1).as_primitive::<Decimal128Type>().value(r),
                    b.column(2).as_string::<i32>().value(r).to_string(),
                    b.column(3).as_binary::<i64>().value(r).to_vec(),
                    b.column(4).as_fixed_size_binary().value(r).to_vec(),
                    b.column(5).as_boolean().value(r),
                    b.column(6).as_primitive::<Date32Type>().value(r),
                    b.column(7).as_primitive::<Micros>().value(r),
                )
            }));
        }
        rows
    }

    /// `file`'s value and null counts and its bounds are those of `rows`, its contents.
    fn assert_stats_are_of(file: &DataFile, rows: &[TypedKey], ids: &[i32]) {
        for (col, id) in ids.iter().enumerate() {
            assert_eq!(file.value_counts()[id], rows.len() as u64);
            assert_eq!(file.null_value_counts()[id], 0);
            let mut values: Vec<_> = rows.iter().map(|r| r.datum(col)).collect();
            values.sort_by(|a, b| a.partial_cmp(b).unwrap());
            assert_eq!(file.lower_bounds()[id], values[0], "lower bound of {id}");
            assert_eq!(
                file.upper_bounds()[id],
                values[values.len() - 1],
                "upper bound of {id}"
            );
        }
    }

    /// One key row of [`typed_key_table`]: n, d (mantissa), s, b, f, flag, day, ts.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct TypedKey(i32, i128, String, Vec<u8>, Vec<u8>, bool, i32, i64);

    impl TypedKey {
        /// Column `col` as the Datum a file's bounds hold.
        fn datum(&self, col: usize) -> iceberg::spec::Datum {
            use iceberg::spec::Datum;
            match col {
                0 => Datum::int(self.0),
                1 => {
                    let (sign, m) = (if self.1 < 0 { "-" } else { "" }, self.1.unsigned_abs());
                    Datum::decimal_from_str(format!("{sign}{}.{:02}", m / 100, m % 100)).unwrap()
                }
                2 => Datum::string(&self.2),
                3 => Datum::binary(self.3.clone()),
                4 => Datum::fixed(self.4.clone()),
                5 => Datum::bool(self.5),
                6 => Datum::date(self.6),
                _ => Datum::timestamptz_micros(self.7),
            }
        }
    }

    /// Key `i` of a deterministic set: negative and 37-digit decimals, empty, multi-byte
    /// and prefix-sharing strings, empty binaries, ties in every leading column.
    fn typed_key(i: u64) -> TypedKey {
        const STRINGS: [&str; 8] = ["", "a", "Ä", "Äb", "Å", "日本", "日本語", "😀"];
        let big = 10i128.pow(34);
        TypedKey(
            (i * 37 % 11) as i32 - 5,
            ((i * 7_919 % 200) as i128 - 100) * big + i as i128,
            STRINGS[(i % 8) as usize].to_string(),
            [(i % 3) as u8, 0xff][..(i % 3) as usize].to_vec(),
            vec![0, (i % 2) as u8, (i % 256) as u8],
            i.is_multiple_of(3),
            20_000 - (i % 5) as i32,
            1_767_225_600_000_000 - (i % 7) as i64 * 86_400_000_000,
        )
    }

    /// The fixture table with the key columns of [`TypedKey`], bucketed by `n`.
    fn typed_key_table() -> TableMetadata {
        let mut json = serde_json::to_value(crate::fixture::table("{}", 2, "", "")).unwrap();
        json["location"] = "memory:/t".into();
        json["schemas"][0] = serde_json::json!({"type": "struct", "schema-id": 0,
            "identifier-field-ids": [1, 2, 3, 4, 5, 6, 7, 8], "fields": [
            {"id": 1, "name": "n", "required": true, "type": "int"},
            {"id": 2, "name": "d", "required": true, "type": "decimal(38, 2)"},
            {"id": 3, "name": "s", "required": true, "type": "string"},
            {"id": 4, "name": "b", "required": true, "type": "binary"},
            {"id": 5, "name": "f", "required": true, "type": "fixed[3]"},
            {"id": 6, "name": "flag", "required": true, "type": "boolean"},
            {"id": 7, "name": "day", "required": true, "type": "date"},
            {"id": 8, "name": "ts", "required": true, "type": "timestamptz"}]});
        json["last-column-id"] = 8.into();
        json["partition-specs"][0]["fields"] = serde_json::json!([
            {"source-id": 1, "field-id": 1000, "name": "n_bucket", "transform": "bucket[2]"}]);
        json["last-partition-id"] = 1000.into();
        serde_json::from_value(json).unwrap()
    }

    /// `keys` as a batch in the key schema (Arrow types as iceberg-rust maps them).
    fn typed_key_batch(key_schema: &iceberg::spec::SchemaRef, keys: &[TypedKey]) -> RecordBatch {
        use arrow_array::*;
        use std::sync::Arc;
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(key_schema).unwrap());
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from_iter_values(keys.iter().map(|k| k.0))),
            Arc::new(
                Decimal128Array::from_iter_values(keys.iter().map(|k| k.1))
                    .with_precision_and_scale(38, 2)
                    .unwrap(),
            ),
            Arc::new(StringArray::from_iter_values(keys.iter().map(|k| &k.2))),
            Arc::new(LargeBinaryArray::from_iter_values(
                keys.iter().map(|k| &k.3),
            )),
            Arc::new(
                FixedSizeBinaryArray::try_from_iter(keys.iter().map(|k| k.4.clone())).unwrap(),
            ),
            Arc::new(BooleanArray::from_iter(keys.iter().map(|k| Some(k.5)))),
            Arc::new(Date32Array::from_iter_values(keys.iter().map(|k| k.6))),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(keys.iter().map(|k| k.7))
                    .with_timezone("+00:00"),
            ),
        ];
        RecordBatch::try_new(arrow, columns).unwrap()
    }
}
