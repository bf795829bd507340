//! Writing: Arrow batches → Parquet data files with Iceberg field ids and statistics.
//!
//! iceberg-rust's writer stack does the file work (Parquet with field ids, rolling at the
//! target size, `DataFile`s with value/null counts, bounds, sizes and split offsets);
//! this module chooses its settings (config first, then the table's `write.*`
//! properties, then floe's defaults) and fans rows out by partition.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, DataFileFormat, TableMetadata};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::base_writer::equality_delete_writer::{
    EqualityDeleteFileWriterBuilder, EqualityDeleteWriterConfig,
};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
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

/// The Parquet settings for one table, resolved once per table version.
#[derive(Debug, Clone)]
pub struct FileSettings {
    pub properties: WriterProperties,
    pub target_file_size: usize,
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
        .set_created_by(created_by());
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
    if let Some(rows) = table_prop::<usize>(props, "write.parquet.page-row-limit")? {
        builder = builder.set_data_page_row_count_limit(rows);
    }
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

type RollingParquet = RollingFileWriterBuilder<
    ParquetWriterBuilder,
    DefaultLocationGenerator,
    DefaultFileNameGenerator,
>;

/// Parquet files of `schema` under the table's data location, rolled at the target size;
/// `suffix` tells delete files from data files by name.
fn rolling_parquet(
    schema: &iceberg::spec::SchemaRef,
    suffix: &str,
    metadata: &TableMetadata,
    file_io: &FileIO,
    settings: &FileSettings,
) -> Result<RollingParquet> {
    let parquet = ParquetWriterBuilder::new(settings.properties.clone(), schema.clone());
    let names = DefaultFileNameGenerator::new(
        format!("00000-{}{suffix}", uuid::Uuid::new_v4()),
        None,
        DataFileFormat::Parquet,
    );
    Ok(RollingFileWriterBuilder::new(
        parquet,
        settings.target_file_size,
        file_io.clone(),
        DefaultLocationGenerator::new(metadata)?,
        names,
    ))
}

/// Writes `batches` (already in the table's current schema) as data files: the rows of
/// all of them go through one rolling writer per partition of the table's default spec,
/// so a commit group of many small batches becomes as few files as the target size allows.
pub async fn write_data_files(
    batches: &[RecordBatch],
    metadata: &TableMetadata,
    file_io: &FileIO,
    settings: &FileSettings,
) -> Result<Vec<DataFile>> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Ok(Vec::new());
    }
    let mut sink = DataFileSink::new(metadata, file_io, settings)?;
    for batch in batches {
        sink.write(batch).await?;
    }
    sink.close().await
}

type DataWriter = iceberg::writer::base_writer::data_file_writer::DataFileWriter<
    ParquetWriterBuilder,
    DefaultLocationGenerator,
    DefaultFileNameGenerator,
>;

/// Data files fed batch by batch: one rolling writer per partition of the table's default
/// spec, opened when its first row arrives. Memory holds each open file's current row
/// group (encoded), never the rows already written; copy-on-write streams rewritten files
/// through it.
pub struct DataFileSink {
    builder: DataFileWriterBuilder<
        ParquetWriterBuilder,
        DefaultLocationGenerator,
        DefaultFileNameGenerator,
    >,
    splitter: Option<RecordBatchPartitionSplitter>,
    /// One writer per partition key, in first-seen order.
    writers: Vec<DataWriter>,
    index: HashMap<iceberg::spec::Struct, usize>,
}

impl DataFileSink {
    pub fn new(
        metadata: &TableMetadata,
        file_io: &FileIO,
        settings: &FileSettings,
    ) -> Result<Self> {
        let schema = metadata.current_schema().clone();
        let rolling = rolling_parquet(&schema, "", metadata, file_io, settings)?;
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
            builder: DataFileWriterBuilder::new(rolling),
            splitter,
            writers: Vec::new(),
            index: HashMap::new(),
        })
    }

    /// Writes `batch`'s rows (in the table's current schema).
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let Some(splitter) = &self.splitter else {
            if self.writers.is_empty() {
                self.writers.push(self.builder.build(None).await?);
            }
            return Ok(self.writers[0].write(batch.clone()).await?);
        };
        for (key, part) in splitter.split(batch)? {
            let slot = match self.index.get(key.data()) {
                Some(&i) => i,
                None => {
                    self.writers
                        .push(self.builder.build(Some(key.clone())).await?);
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
    use iceberg::spec::{DataContentType, NestedField, PartitionKey, PrimitiveType, Schema, Type};
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
        let key = (!spec.is_unpartitioned()).then(|| {
            PartitionKey::new(
                spec.as_ref().clone(),
                metadata.current_schema().clone(),
                d.partition.clone(),
            )
        });
        let mut writer = rolling.build();
        writer.write(&key, &batch).await?;
        for mut file in writer.close().await? {
            file.content(DataContentType::PositionDeletes)
                .partition(d.partition.clone())
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
}
