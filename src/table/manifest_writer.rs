//! floe's writer of manifests (the Avro files listing a snapshot's data and delete files).
//!
//! iceberg-rust 0.10.1's `ManifestWriter` rebuilds the manifest's Avro schema for every
//! manifest it writes (an Iceberg schema of 25 fields, converted to Avro and resolved),
//! serialises the table schema into its header, and turns each entry into a generic Avro
//! value resolved against that schema. For the one-entry manifest every commit writes that
//! was about 16% of floe's CPU per commit. This writer takes the header once per table
//! schema, partition spec and content from iceberg-rust's own writer (so the schema and
//! metadata readers see are iceberg-rust's, byte for byte), and encodes entries straight
//! to Avro binary, field by field in the order of the v2 `manifest_entry` schema.
//!
//! Format v1 and v3 tables, and partition fields of types it does not encode (decimal,
//! uuid, fixed, binary, time), are written by iceberg-rust's writer: same files, its
//! speed.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, Datum, FieldSummary, FormatVersion, ManifestContentType, ManifestFile,
    ManifestStatus, ManifestWriterBuilder, PartitionSpec, PrimitiveLiteral, PrimitiveType,
    SchemaRef, TableMetadata, Type, UNASSIGNED_SEQUENCE_NUMBER,
};

use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockExt;

/// One entry of a manifest this writer wrote, as written: before the snapshot id and
/// sequence numbers an ADDED entry inherits from the manifest list.
#[derive(Debug, Clone)]
pub struct WrittenEntry {
    pub status: ManifestStatus,
    pub snapshot_id: Option<i64>,
    pub sequence_number: Option<i64>,
    pub file_sequence_number: Option<i64>,
    pub data_file: DataFile,
}

impl WrittenEntry {
    /// The entry as a reader sees it through `listed` (its manifest list entry), by the
    /// spec's inheritance rules: a missing snapshot id is the manifest's; missing
    /// sequence numbers of ADDED entries (and of any entry of a manifest whose list
    /// sequence number is 0, i.e. from v1) are the manifest's.
    pub fn inherited(&self, listed: &ManifestFile) -> WrittenEntry {
        let inherits = self.status == ManifestStatus::Added || listed.sequence_number == 0;
        let or_listed = |n: Option<i64>| match n {
            None if inherits => Some(listed.sequence_number),
            n => n,
        };
        WrittenEntry {
            status: self.status,
            snapshot_id: self.snapshot_id.or(Some(listed.added_snapshot_id)),
            sequence_number: or_listed(self.sequence_number),
            file_sequence_number: or_listed(self.file_sequence_number),
            data_file: self.data_file.clone(),
        }
    }
}

/// The headers this writer has built, one per schema, partition spec and content (a
/// table has a handful over its life: each schema change adds one or two).
#[derive(Default)]
pub struct ManifestHeaders {
    known: Mutex<Vec<Arc<Header>>>,
}

/// Headers kept at most; beyond that the oldest is dropped (a table whose schema changes
/// on every commit must not grow this without bound).
const MAX_HEADERS: usize = 16;

/// An Avro container header (magic, metadata, sync marker) as iceberg-rust writes it for
/// a manifest of `content` under `schema` and `spec`.
struct Header {
    schema: SchemaRef,
    spec: PartitionSpec,
    content: ManifestContentType,
    /// The partition tuple's field types, in order.
    partition_types: Vec<PrimitiveType>,
    bytes: Vec<u8>,
}

impl Header {
    /// The 16-byte sync marker, which ends the header and every block.
    fn sync(&self) -> &[u8] {
        &self.bytes[self.bytes.len() - 16..]
    }

    fn serves(
        &self,
        schema: &SchemaRef,
        spec: &PartitionSpec,
        content: ManifestContentType,
    ) -> bool {
        self.content == content
            && (Arc::ptr_eq(&self.schema, schema) || self.schema == *schema)
            && self.spec == *spec
    }
}

impl ManifestHeaders {
    /// The header for these, built once (by iceberg-rust's writer, with no entries, in
    /// memory); `None` if this writer does not encode the spec's partition types.
    async fn header(
        &self,
        schema: &SchemaRef,
        spec: &PartitionSpec,
        content: ManifestContentType,
    ) -> Result<Option<Arc<Header>>> {
        let found = self
            .known
            .locked()
            .iter()
            .find(|h| h.serves(schema, spec, content))
            .cloned();
        if found.is_some() {
            return Ok(found);
        }
        let Some(partition_types) = encoded_partition_types(schema, spec)? else {
            return Ok(None);
        };
        let io = FileIO::new_with_memory();
        let path = "memory:/header.avro";
        let builder =
            ManifestWriterBuilder::new(io.new_output(path)?, None, schema.clone(), spec.clone());
        let writer = match content {
            ManifestContentType::Data => builder.build_v2_data(),
            ManifestContentType::Deletes => builder.build_v2_deletes(),
        };
        writer.write_manifest_file().await?;
        let bytes = io.new_input(path)?.read().await?.to_vec();
        if bytes.len() < 4 + 16 || &bytes[..4] != b"Obj\x01" {
            return Err(Error::new(
                ErrorKind::Internal,
                "iceberg-rust's manifest writer wrote no Avro header",
            ));
        }
        let header = Arc::new(Header {
            schema: schema.clone(),
            spec: spec.clone(),
            content,
            partition_types,
            bytes,
        });
        let mut known = self.known.locked();
        if known.len() >= MAX_HEADERS {
            known.remove(0);
        }
        known.push(header.clone());
        Ok(Some(header))
    }
}

/// The partition tuple's types, if each is one this writer encodes.
fn encoded_partition_types(
    schema: &SchemaRef,
    spec: &PartitionSpec,
) -> Result<Option<Vec<PrimitiveType>>> {
    let mut types = Vec::new();
    for field in spec.partition_type(schema)?.fields() {
        match &*field.field_type {
            Type::Primitive(ty) if encodes(ty) => types.push(ty.clone()),
            _ => return Ok(None),
        }
    }
    Ok(Some(types))
}

/// The partition value types this writer encodes: those whose Avro form and summary
/// bounds it builds with iceberg-rust's public API. Time is left out because
/// `Datum::time_micros` refuses values iceberg-rust's writer takes.
fn encodes(ty: &PrimitiveType) -> bool {
    use PrimitiveType::*;
    matches!(
        ty,
        Boolean
            | Int
            | Long
            | Float
            | Double
            | Date
            | Timestamp
            | Timestamptz
            | TimestampNs
            | TimestamptzNs
            | String
    )
}

/// Writes `entries` as one manifest (see [`crate::table::manifest_cache::write_manifest`],
/// which also remembers them) and returns its manifest list entry.
pub(crate) async fn write_entries(
    metadata: &TableMetadata,
    (file_io, headers): (&FileIO, &ManifestHeaders),
    path: &str,
    snapshot_id: i64,
    (content, spec): (ManifestContentType, &PartitionSpec),
    entries: &[WrittenEntry],
) -> Result<ManifestFile> {
    for entry in entries {
        check_entry(content, snapshot_id, entry)?;
    }
    let schema = metadata.current_schema();
    let header = match metadata.format_version() {
        FormatVersion::V2 => headers.header(schema, spec, content).await?,
        _ => None,
    };
    let Some(header) = header else {
        return write_with_iceberg(
            metadata,
            file_io,
            path,
            snapshot_id,
            (content, spec),
            entries,
        )
        .await;
    };
    // Each entry's partition values, as the spec's types: encoded, then summarised.
    let partitions = entries
        .iter()
        .map(|e| partition_datums(&e.data_file, &header.partition_types))
        .collect::<Result<Vec<_>>>()?;
    let bytes = encode_manifest(&header, entries, &partitions)?;
    let length = bytes.len() as i64;
    file_io.new_output(path)?.write(Bytes::from(bytes)).await?;
    list_entry(
        path,
        length,
        snapshot_id,
        (content, spec),
        entries,
        &partitions,
    )
}

/// What iceberg-rust's writer refuses: a file of the other content, and EXISTING or
/// DELETED entries without both sequence numbers. And what would be written other than
/// the caller remembers it: ADDED and DELETED entries not naming the snapshot written
/// (iceberg-rust's writer puts that in whatever they say), EXISTING ones naming none
/// (null is inherited from the manifest list: the merge's snapshot, not the one that
/// added the file).
fn check_entry(content: ManifestContentType, snapshot_id: i64, entry: &WrittenEntry) -> Result<()> {
    let file = &entry.data_file;
    let refuse = |why: String| {
        Err(Error::new(
            ErrorKind::Internal,
            format!(
                "manifest entry {} ({:?}): {why}",
                file.file_path(),
                entry.status
            ),
        ))
    };
    let is_data = file.content_type() == iceberg::spec::DataContentType::Data;
    if is_data != (content == ManifestContentType::Data) {
        return refuse(format!(
            "a {:?} file does not belong in a {content} manifest",
            file.content_type()
        ));
    }
    match (entry.status, entry.snapshot_id) {
        (ManifestStatus::Existing, None) => {
            return refuse("without the snapshot that added it".into());
        }
        (ManifestStatus::Existing, Some(_)) => {}
        (_, named) if named != Some(snapshot_id) => {
            return refuse(format!("by snapshot {named:?}, not by {snapshot_id}"));
        }
        _ => {}
    }
    let sequenced = entry.sequence_number.is_some() && entry.file_sequence_number.is_some();
    if entry.status != ManifestStatus::Added && !sequenced {
        return refuse("without its sequence numbers".into());
    }
    Ok(())
}

/// iceberg-rust's writer, for what this one does not encode.
async fn write_with_iceberg(
    metadata: &TableMetadata,
    file_io: &FileIO,
    path: &str,
    snapshot_id: i64,
    (content, spec): (ManifestContentType, &PartitionSpec),
    entries: &[WrittenEntry],
) -> Result<ManifestFile> {
    let builder = ManifestWriterBuilder::new(
        file_io.new_output(path)?,
        Some(snapshot_id),
        metadata.current_schema().clone(),
        spec.clone(),
    );
    let deletes = content == ManifestContentType::Deletes;
    let mut writer = match (metadata.format_version(), deletes) {
        (FormatVersion::V1, false) => builder.build_v1(),
        (FormatVersion::V1, true) => {
            return Err(Error::config(
                "delete files need an Iceberg format v2 table; this one is v1",
            ));
        }
        (FormatVersion::V2, false) => builder.build_v2_data(),
        (FormatVersion::V2, true) => builder.build_v2_deletes(),
        (FormatVersion::V3, false) => builder.build_v3_data(),
        (FormatVersion::V3, true) => builder.build_v3_deletes(),
    };
    // Callers go through `check_entry` first: EXISTING entries have a snapshot id, and
    // EXISTING and DELETED ones their sequence numbers.
    for entry in entries {
        let file = entry.data_file.clone();
        let (sequence, file_sequence) = (entry.sequence_number, entry.file_sequence_number);
        match (entry.status, entry.snapshot_id, sequence) {
            (ManifestStatus::Added, _, _) => writer.add_file(file, sequence.unwrap_or(-1))?,
            (ManifestStatus::Existing, Some(snapshot), Some(sequence)) => {
                writer.add_existing_file(file, snapshot, sequence, file_sequence)?
            }
            (ManifestStatus::Deleted, _, Some(sequence)) => {
                writer.add_delete_file(file, sequence, file_sequence)?
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!(
                        "manifest entry {} is incomplete",
                        entry.data_file.file_path()
                    ),
                ));
            }
        }
    }
    Ok(writer.write_manifest_file().await?)
}

/// The whole Avro file: the header, then one block of every entry (with its partition
/// values, `partitions[i]`).
fn encode_manifest(
    header: &Header,
    entries: &[WrittenEntry],
    partitions: &[Vec<Option<Datum>>],
) -> Result<Vec<u8>> {
    let mut block = Vec::with_capacity(512 * entries.len());
    for (entry, partition) in entries.iter().zip(partitions) {
        encode_entry(&mut block, entry, partition)?;
    }
    let mut out = Vec::with_capacity(header.bytes.len() + block.len() + 32);
    out.extend_from_slice(&header.bytes);
    if !entries.is_empty() {
        avro::long(&mut out, entries.len() as i64);
        avro::long(&mut out, block.len() as i64);
        out.extend_from_slice(&block);
        out.extend_from_slice(header.sync());
    }
    Ok(out)
}

/// One `manifest_entry` record of the v2 schema (iceberg-rust uses it for v3 as well).
fn encode_entry(
    out: &mut Vec<u8>,
    entry: &WrittenEntry,
    partition: &[Option<Datum>],
) -> Result<()> {
    avro::long(out, entry.status as i64);
    avro::optional(out, entry.snapshot_id, avro::long);
    avro::optional(out, entry.sequence_number, avro::long);
    avro::optional(out, entry.file_sequence_number, avro::long);
    encode_data_file(out, &entry.data_file, partition)
}

/// The `data_file` record, field by field: content, file_path, file_format, partition,
/// record_count, file_size_in_bytes, the six metric maps, key_metadata, split_offsets,
/// equality_ids, sort_order_id, first_row_id, referenced_data_file, content_offset,
/// content_size_in_bytes. The metric maps are always present, as iceberg-rust writes them.
fn encode_data_file(out: &mut Vec<u8>, file: &DataFile, partition: &[Option<Datum>]) -> Result<()> {
    avro::long(out, file.content_type() as i64);
    avro::string(out, file.file_path());
    avro::string(out, &file.file_format().to_string().to_ascii_uppercase());
    encode_partition(out, partition)?;
    avro::long(out, as_long(file.record_count())?);
    avro::long(out, as_long(file.file_size_in_bytes())?);
    for counts in [
        file.column_sizes(),
        file.value_counts(),
        file.null_value_counts(),
        file.nan_value_counts(),
    ] {
        let mut sorted: Vec<(i32, i64)> = Vec::with_capacity(counts.len());
        for (&id, &n) in counts {
            sorted.push((id, as_long(n)?));
        }
        sorted.sort_unstable();
        avro::union_branch(out, 1);
        avro::array(out, &sorted, |out, &(id, n)| {
            avro::long(out, id.into());
            avro::long(out, n);
        });
    }
    for bounds in [file.lower_bounds(), file.upper_bounds()] {
        let mut sorted: Vec<(i32, Vec<u8>)> = Vec::with_capacity(bounds.len());
        for (&id, datum) in bounds {
            sorted.push((id, datum.to_bytes()?.into_vec()));
        }
        sorted.sort_unstable();
        avro::union_branch(out, 1);
        avro::array(out, &sorted, |out, (id, bytes)| {
            avro::long(out, (*id).into());
            avro::bytes(out, bytes);
        });
    }
    avro::optional(out, file.key_metadata(), avro::bytes);
    avro::optional(out, file.split_offsets(), |out, offsets| {
        avro::array(out, offsets, |out, &o| avro::long(out, o))
    });
    avro::optional(out, file.equality_ids(), |out, ids| {
        avro::array(out, &ids, |out, &id| avro::long(out, id.into()))
    });
    avro::optional(out, file.sort_order_id(), |out, id| {
        avro::long(out, id.into())
    });
    avro::optional(out, file.first_row_id(), avro::long);
    avro::optional(out, file.referenced_data_file(), |out, p| {
        avro::string(out, &p)
    });
    avro::optional(out, file.content_offset(), avro::long);
    avro::optional(out, file.content_size_in_bytes(), avro::long);
    Ok(())
}

fn as_long(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::new(ErrorKind::Internal, format!("{n} exceeds a long")))
}

/// A file's partition values as the partition type's `types` (see [`as_datum`]).
fn partition_datums(file: &DataFile, types: &[PrimitiveType]) -> Result<Vec<Option<Datum>>> {
    let values = file.partition();
    if values.fields().len() != types.len() {
        return Err(partition_mismatch(file));
    }
    values
        .iter()
        .zip(types)
        .map(|(value, ty)| match value {
            None => Ok(None),
            Some(value) => value
                .as_primitive_literal()
                .and_then(|literal| as_datum(ty, literal))
                .map(Some)
                .ok_or_else(|| partition_mismatch(file)),
        })
        .collect()
}

/// The partition tuple: each field optional, encoded as Avro encodes its Iceberg type
/// (dates as int, timestamps as long, floats little-endian: by the datum's literal).
fn encode_partition(out: &mut Vec<u8>, partition: &[Option<Datum>]) -> Result<()> {
    for value in partition {
        let Some(datum) = value else {
            avro::union_branch(out, 0);
            continue;
        };
        avro::union_branch(out, 1);
        match datum.literal() {
            PrimitiveLiteral::Boolean(b) => out.push(u8::from(*b)),
            PrimitiveLiteral::Int(n) => avro::long(out, (*n).into()),
            PrimitiveLiteral::Long(n) => avro::long(out, *n),
            PrimitiveLiteral::Float(f) => out.extend_from_slice(&f.0.to_le_bytes()),
            PrimitiveLiteral::Double(f) => out.extend_from_slice(&f.0.to_le_bytes()),
            PrimitiveLiteral::String(s) => avro::string(out, s),
            other => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("no Avro encoding for partition value {other:?}"),
                ));
            }
        }
    }
    Ok(())
}

fn partition_mismatch(file: &DataFile) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!(
            "the partition values of {} do not match the partition spec",
            file.file_path()
        ),
    )
}

/// The manifest list entry of a manifest written from `entries`, with the counts and
/// partition summaries iceberg-rust's writer gives: sequence number unassigned (the
/// manifest list writer sets it), the least data sequence number among live entries.
fn list_entry(
    path: &str,
    length: i64,
    snapshot_id: i64,
    (content, spec): (ManifestContentType, &PartitionSpec),
    entries: &[WrittenEntry],
    partitions: &[Vec<Option<Datum>>],
) -> Result<ManifestFile> {
    let (mut files, mut rows) = ([0u32; 3], [0u64; 3]);
    let mut min_sequence = None::<i64>;
    for entry in entries {
        let i = match entry.status {
            ManifestStatus::Added => 0,
            ManifestStatus::Existing => 1,
            ManifestStatus::Deleted => 2,
        };
        files[i] += 1;
        rows[i] += entry.data_file.record_count();
        if entry.status != ManifestStatus::Deleted
            && let Some(sequence) = entry.sequence_number
        {
            min_sequence = Some(min_sequence.map_or(sequence, |m| m.min(sequence)));
        }
    }
    Ok(ManifestFile {
        manifest_path: path.to_string(),
        manifest_length: length,
        partition_spec_id: spec.spec_id(),
        content,
        sequence_number: UNASSIGNED_SEQUENCE_NUMBER,
        min_sequence_number: min_sequence.unwrap_or(UNASSIGNED_SEQUENCE_NUMBER),
        added_snapshot_id: snapshot_id,
        added_files_count: Some(files[0]),
        existing_files_count: Some(files[1]),
        deleted_files_count: Some(files[2]),
        added_rows_count: Some(rows[0]),
        existing_rows_count: Some(rows[1]),
        deleted_rows_count: Some(rows[2]),
        partitions: Some(partition_summaries(partitions, spec.fields().len())?),
        key_metadata: None,
        first_row_id: None,
    })
}

/// Per partition field, over every entry's values (DELETED ones too, as iceberg-rust
/// counts them): whether a value is null or NaN, and the least and greatest other value.
fn partition_summaries(
    partitions: &[Vec<Option<Datum>>],
    fields: usize,
) -> Result<Vec<FieldSummary>> {
    let mut bounds: Vec<(FieldSummary, Option<&Datum>, Option<&Datum>)> = (0..fields)
        .map(|_| {
            let summary = FieldSummary {
                contains_null: false,
                contains_nan: Some(false),
                lower_bound: None,
                upper_bound: None,
            };
            (summary, None, None)
        })
        .collect();
    for partition in partitions {
        for (value, (summary, lower, upper)) in partition.iter().zip(bounds.iter_mut()) {
            match value {
                None => summary.contains_null = true,
                Some(datum) if datum.is_nan() => summary.contains_nan = Some(true),
                Some(datum) => {
                    if lower.is_none_or(|l| datum < l) {
                        *lower = Some(datum);
                    }
                    if upper.is_none_or(|u| datum > u) {
                        *upper = Some(datum);
                    }
                }
            }
        }
    }
    bounds
        .into_iter()
        .map(|(mut summary, lower, upper)| {
            summary.lower_bound = lower.map(Datum::to_bytes).transpose()?;
            summary.upper_bound = upper.map(Datum::to_bytes).transpose()?;
            Ok(summary)
        })
        .collect()
}

/// A partition value as a datum of the partition field's type, for the types this writer
/// encodes. Values written before their source column was widened (int to long, float to
/// double: floe's schema evolution does both) become the wider type, which the partition
/// type now is: iceberg-rust's writer refuses them, so a merge of manifests from before
/// the widening would fail on every commit.
fn as_datum(ty: &PrimitiveType, literal: PrimitiveLiteral) -> Option<Datum> {
    use PrimitiveType as T;
    Some(match (ty, literal) {
        (T::Boolean, PrimitiveLiteral::Boolean(b)) => Datum::bool(b),
        (T::Int, PrimitiveLiteral::Int(n)) => Datum::int(n),
        (T::Date, PrimitiveLiteral::Int(n)) => Datum::date(n),
        (T::Long, PrimitiveLiteral::Long(n)) => Datum::long(n),
        (T::Long, PrimitiveLiteral::Int(n)) => Datum::long(n),
        (T::Timestamp, PrimitiveLiteral::Long(n)) => Datum::timestamp_micros(n),
        (T::Timestamptz, PrimitiveLiteral::Long(n)) => Datum::timestamptz_micros(n),
        (T::TimestampNs, PrimitiveLiteral::Long(n)) => Datum::timestamp_nanos(n),
        (T::TimestamptzNs, PrimitiveLiteral::Long(n)) => Datum::timestamptz_nanos(n),
        (T::Float, PrimitiveLiteral::Float(f)) => Datum::float(f.0),
        (T::Double, PrimitiveLiteral::Double(f)) => Datum::double(f.0),
        (T::Double, PrimitiveLiteral::Float(f)) => Datum::double(f.0),
        (T::String, PrimitiveLiteral::String(s)) => Datum::string(s),
        _ => return None,
    })
}

/// Avro's binary encoding, the parts a manifest uses.
mod avro {
    /// int and long: zig-zag, then 7 bits a byte, least significant first.
    pub fn long(out: &mut Vec<u8>, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    pub fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        long(out, b.len() as i64);
        out.extend_from_slice(b);
    }

    pub fn string(out: &mut Vec<u8>, s: &str) {
        bytes(out, s.as_bytes())
    }

    /// The branch of a union; Iceberg's optional fields are `["null", T]`.
    pub fn union_branch(out: &mut Vec<u8>, index: i64) {
        long(out, index)
    }

    pub fn optional<T>(out: &mut Vec<u8>, value: Option<T>, encode: impl FnOnce(&mut Vec<u8>, T)) {
        match value {
            None => union_branch(out, 0),
            Some(v) => {
                union_branch(out, 1);
                encode(out, v);
            }
        }
    }

    /// An array as one block of items and the empty block that ends it.
    pub fn array<T>(out: &mut Vec<u8>, items: &[T], mut encode: impl FnMut(&mut Vec<u8>, &T)) {
        if !items.is_empty() {
            long(out, items.len() as i64);
            for item in items {
                encode(out, item);
            }
        }
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, Literal, Manifest, Struct,
    };

    use super::*;

    /// A v2 table partitioned by one field of each type this writer encodes, and by a
    /// decimal (which it leaves to iceberg-rust) in `decimal_spec`.
    fn table(version: u8) -> TableMetadata {
        let json = r#"{
          "format-version": VERSION, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
          "location": "memory:/t", "last-sequence-number": 4, "last-updated-ms": 1700000002000,
          "last-column-id": 9, "current-schema-id": 0,
          "schemas": [{"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "name", "required": false, "type": "string"},
            {"id": 3, "name": "day", "required": false, "type": "date"},
            {"id": 4, "name": "ts", "required": false, "type": "timestamptz"},
            {"id": 5, "name": "flag", "required": false, "type": "boolean"},
            {"id": 6, "name": "score", "required": false, "type": "double"},
            {"id": 7, "name": "n", "required": false, "type": "int"},
            {"id": 8, "name": "ratio", "required": false, "type": "float"},
            {"id": 9, "name": "price", "required": false, "type": "decimal(9,2)"}]}],
          "default-spec-id": 0,
          "partition-specs": [
            {"spec-id": 0, "fields": [
              {"source-id": 2, "field-id": 1000, "name": "name", "transform": "identity"},
              {"source-id": 3, "field-id": 1001, "name": "day", "transform": "identity"},
              {"source-id": 4, "field-id": 1002, "name": "ts_hour", "transform": "hour"},
              {"source-id": 5, "field-id": 1003, "name": "flag", "transform": "identity"},
              {"source-id": 6, "field-id": 1004, "name": "score", "transform": "identity"},
              {"source-id": 7, "field-id": 1005, "name": "n_bucket", "transform": "bucket[8]"},
              {"source-id": 4, "field-id": 1006, "name": "ts", "transform": "identity"},
              {"source-id": 1, "field-id": 1007, "name": "id", "transform": "identity"},
              {"source-id": 8, "field-id": 1008, "name": "ratio", "transform": "identity"}]},
            {"spec-id": 1, "fields": [
              {"source-id": 9, "field-id": 1009, "name": "price", "transform": "identity"}]}],
          "last-partition-id": 1009, "default-sort-order-id": 0,
          "sort-orders": [{"order-id": 0, "fields": []}], "properties": {},
          "current-snapshot-id": -1, "refs": {}, "snapshots": [], "snapshot-log": [],
          "metadata-log": []
        }"#;
        let mut json = json.replace("VERSION", &version.to_string());
        if version == 3 {
            json = json.replace(
                r#""properties": {},"#,
                r#""properties": {}, "next-row-id": 0,"#,
            );
        }
        serde_json::from_str(&json).unwrap()
    }

    fn partition(name: Option<&str>, score: f64) -> Struct {
        Struct::from_iter([
            name.map(Literal::string),
            Some(Literal::date(19_700)),
            Some(Literal::int(473_000)),
            Some(Literal::bool(true)),
            Some(Literal::double(score)),
            None,
            Some(Literal::timestamptz(1_700_000_000_000_000)),
            Some(Literal::long(-42)),
            Some(Literal::float(0.5)),
        ])
    }

    fn file(path: &str, content: DataContentType, partition: Struct) -> DataFile {
        let mut builder = DataFileBuilder::default();
        builder
            .content(content)
            .file_path(path.to_string())
            .file_format(DataFileFormat::Parquet)
            .partition(partition)
            .partition_spec_id(0)
            .record_count(17)
            .file_size_in_bytes(4_096)
            .column_sizes(HashMap::from([(1, 100), (2, 200), (3, 300)]))
            .value_counts(HashMap::from([(1, 17), (2, 17)]))
            .null_value_counts(HashMap::from([(2, 3)]))
            .nan_value_counts(HashMap::from([(6, 1)]))
            .lower_bounds(HashMap::from([
                (1, Datum::long(-5)),
                (2, Datum::string("a")),
            ]))
            .upper_bounds(HashMap::from([
                (1, Datum::long(90)),
                (2, Datum::string("zz")),
            ]))
            .split_offsets(Some(vec![4, 2_048]));
        match content {
            DataContentType::EqualityDeletes => builder.equality_ids(Some(vec![1, 2])),
            DataContentType::PositionDeletes => builder
                .referenced_data_file(Some("memory:/t/data/a.parquet".into()))
                .split_offsets(None),
            DataContentType::Data => builder.key_metadata(Some(vec![1, 2, 3])).sort_order_id(0),
        };
        builder.build().unwrap()
    }

    /// An entry as the commit path gives it: ADDED and DELETED by snapshot 9 (the one
    /// written), EXISTING from snapshot 7.
    fn entry(status: ManifestStatus, sequence: Option<i64>, data_file: DataFile) -> WrittenEntry {
        WrittenEntry {
            status,
            snapshot_id: Some(match status {
                ManifestStatus::Existing => 7,
                _ => 9,
            }),
            sequence_number: sequence,
            file_sequence_number: sequence,
            data_file,
        }
    }

    /// An entry of `file` at `path` with partition values from `partition`.
    fn sample(
        status: ManifestStatus,
        sequence: Option<i64>,
        path: &str,
        content: DataContentType,
        (name, score): (Option<&str>, f64),
    ) -> WrittenEntry {
        entry(
            status,
            sequence,
            file(path, content, partition(name, score)),
        )
    }

    /// Writes `entries` with this writer and with iceberg-rust's, and checks that both
    /// read back alike and give the same manifest list entry.
    async fn same_as_iceberg(
        metadata: &TableMetadata,
        content: ManifestContentType,
        spec_id: i32,
        entries: &[WrittenEntry],
    ) {
        let io = FileIO::new_with_memory();
        let headers = ManifestHeaders::default();
        let spec = metadata.partition_spec_by_id(spec_id).unwrap();
        let ours = write_entries(
            metadata,
            (&io, &headers),
            "memory:/t/ours.avro",
            9,
            (content, spec),
            entries,
        )
        .await
        .unwrap();
        let theirs = write_with_iceberg(
            metadata,
            &io,
            "memory:/t/theirs.avro",
            9,
            (content, spec),
            entries,
        )
        .await
        .unwrap();
        let read = |path: &'static str| {
            let io = io.clone();
            async move {
                Manifest::parse_avro(&io.new_input(path).unwrap().read().await.unwrap()).unwrap()
            }
        };
        let (ours_read, theirs_read) = (
            read("memory:/t/ours.avro").await,
            read("memory:/t/theirs.avro").await,
        );
        assert_eq!(ours_read.metadata(), theirs_read.metadata());
        assert_eq!(ours_read.entries(), theirs_read.entries());
        assert_eq!(ours_read.entries().len(), entries.len());
        assert_eq!(
            ManifestFile {
                manifest_path: String::new(),
                manifest_length: 0,
                ..ours
            },
            ManifestFile {
                manifest_path: String::new(),
                manifest_length: 0,
                ..theirs
            }
        );
    }

    #[tokio::test]
    async fn data_manifests_read_back_as_iceberg_rusts_do() {
        let metadata = table(2);
        let entries = [
            sample(
                ManifestStatus::Added,
                None,
                "memory:/t/data/a.parquet",
                DataContentType::Data,
                (Some("b"), 1.5),
            ),
            entry(
                ManifestStatus::Existing,
                Some(3),
                file(
                    "memory:/t/data/b.parquet",
                    DataContentType::Data,
                    partition(None, f64::NAN),
                ),
            ),
            sample(
                ManifestStatus::Deleted,
                Some(2),
                "memory:/t/data/c.parquet",
                DataContentType::Data,
                (Some("a"), -0.25),
            ),
            sample(
                ManifestStatus::Existing,
                Some(4),
                "memory:/t/data/d.parquet",
                DataContentType::Data,
                (Some("é"), 9.0),
            ),
        ];
        same_as_iceberg(&metadata, ManifestContentType::Data, 0, &entries).await;
        same_as_iceberg(&metadata, ManifestContentType::Data, 0, &entries[..1]).await;
        same_as_iceberg(&metadata, ManifestContentType::Data, 0, &[]).await;
    }

    #[tokio::test]
    async fn delete_manifests_read_back_as_iceberg_rusts_do() {
        let metadata = table(2);
        let entries = [
            sample(
                ManifestStatus::Added,
                None,
                "memory:/t/data/e.parquet",
                DataContentType::EqualityDeletes,
                (Some("b"), 1.5),
            ),
            sample(
                ManifestStatus::Existing,
                Some(1),
                "memory:/t/data/p.parquet",
                DataContentType::PositionDeletes,
                (Some("c"), 2.5),
            ),
        ];
        same_as_iceberg(&metadata, ManifestContentType::Deletes, 0, &entries).await;
    }

    #[tokio::test]
    async fn what_it_does_not_encode_is_written_by_iceberg_rust() {
        // A decimal partition field, and a v1 and a v3 table.
        let metadata = table(2);
        let spec = metadata.partition_spec_by_id(1).unwrap();
        let headers = ManifestHeaders::default();
        let header = headers
            .header(metadata.current_schema(), spec, ManifestContentType::Data)
            .await
            .unwrap();
        assert!(
            header.is_none(),
            "decimal partitions go to iceberg-rust's writer"
        );
        let decimal = Struct::from_iter([Some(Literal::decimal(1_234))]);
        let data = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("memory:/t/data/x.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .partition(decimal)
            .partition_spec_id(1)
            .record_count(1)
            .file_size_in_bytes(10)
            .build()
            .unwrap();
        same_as_iceberg(
            &metadata,
            ManifestContentType::Data,
            1,
            &[entry(ManifestStatus::Added, None, data)],
        )
        .await;
        for version in [1, 3] {
            let metadata = table(version);
            let io = FileIO::new_with_memory();
            let data = file(
                "memory:/t/data/a.parquet",
                DataContentType::Data,
                partition(Some("b"), 1.5),
            );
            let spec = metadata.default_partition_spec().as_ref();
            let entries = [entry(ManifestStatus::Added, None, data)];
            let content = (ManifestContentType::Data, spec);
            write_entries(
                &metadata,
                (&io, &headers),
                "memory:/t/v.avro",
                9,
                content,
                &entries,
            )
            .await
            .unwrap();
            assert!(
                headers.known.locked().is_empty(),
                "v{version} went to floe's encoder"
            );
            let data = file(
                "memory:/t/data/a.parquet",
                DataContentType::Data,
                partition(Some("b"), 1.5),
            );
            same_as_iceberg(
                &metadata,
                ManifestContentType::Data,
                0,
                &[entry(ManifestStatus::Added, None, data)],
            )
            .await;
        }
    }

    #[tokio::test]
    async fn a_header_serves_only_its_schema_spec_and_content() {
        let metadata = table(2);
        let spec = metadata.default_partition_spec().as_ref();
        let schema = metadata.current_schema();
        let headers = ManifestHeaders::default();
        let data = headers
            .header(schema, spec, ManifestContentType::Data)
            .await
            .unwrap()
            .unwrap();
        let again = headers
            .header(schema, spec, ManifestContentType::Data)
            .await
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&data, &again), "built once");
        let deletes = headers
            .header(schema, spec, ManifestContentType::Deletes)
            .await
            .unwrap()
            .unwrap();
        assert!(!Arc::ptr_eq(&data, &deletes));
        let evolved = Arc::new(
            iceberg::spec::Schema::builder()
                .with_schema_id(1)
                .with_fields(schema.as_struct().fields().iter().cloned())
                .build()
                .unwrap(),
        );
        let other = headers
            .header(&evolved, spec, ManifestContentType::Data)
            .await
            .unwrap()
            .unwrap();
        assert!(
            !Arc::ptr_eq(&data, &other),
            "another schema, another header"
        );
    }

    #[tokio::test]
    async fn entries_that_iceberg_rust_refuses_are_refused() {
        let metadata = table(2);
        let io = FileIO::new_with_memory();
        let headers = ManifestHeaders::default();
        let spec = metadata.default_partition_spec().as_ref();
        let write = |entries: Vec<WrittenEntry>, content| {
            let (io, headers, metadata) = (&io, &headers, &metadata);
            async move {
                write_entries(
                    metadata,
                    (io, headers),
                    "memory:/t/x.avro",
                    9,
                    (content, spec),
                    &entries,
                )
                .await
            }
        };
        let data = file(
            "memory:/t/data/a.parquet",
            DataContentType::Data,
            partition(Some("b"), 1.5),
        );
        let in_deletes = write(
            vec![entry(ManifestStatus::Added, None, data.clone())],
            ManifestContentType::Deletes,
        )
        .await;
        assert!(
            in_deletes
                .unwrap_err()
                .to_string()
                .contains("does not belong")
        );
        let unsequenced = write(
            vec![entry(ManifestStatus::Existing, None, data.clone())],
            ManifestContentType::Data,
        )
        .await;
        assert!(
            unsequenced
                .unwrap_err()
                .to_string()
                .contains("sequence numbers")
        );
        let mut orphan = entry(ManifestStatus::Existing, Some(2), data.clone());
        orphan.snapshot_id = None;
        let orphaned = write(vec![orphan], ManifestContentType::Data).await;
        let refused = orphaned.unwrap_err().to_string();
        assert!(
            refused.contains("without the snapshot that added it"),
            "{refused}"
        );
        let wrong = Struct::from_iter([Some(Literal::long(1))]);
        let mismatched = file("memory:/t/data/b.parquet", DataContentType::Data, wrong);
        let mismatch = write(
            vec![entry(ManifestStatus::Added, None, mismatched)],
            ManifestContentType::Data,
        )
        .await;
        assert!(
            mismatch
                .unwrap_err()
                .to_string()
                .contains("do not match the partition spec")
        );
    }

    #[tokio::test]
    async fn values_from_before_a_widening_are_written_as_the_wider_type() {
        // `id` (long) and `score` (double) partition values as they were when the columns
        // were int and float: a merge rewrites such entries after floe widened them.
        let metadata = table(2);
        let mut values = partition(Some("b"), 1.5).fields().to_vec();
        values[4] = Some(Literal::float(0.25));
        values[7] = Some(Literal::int(-42));
        let old = file(
            "memory:/t/data/a.parquet",
            DataContentType::Data,
            Struct::from_iter(values),
        );
        let io = FileIO::new_with_memory();
        let spec = metadata.default_partition_spec().as_ref();
        let entries = [entry(ManifestStatus::Existing, Some(1), old)];
        let headers = ManifestHeaders::default();
        let path = "memory:/t/widened.avro";
        let listed = write_entries(
            &metadata,
            (&io, &headers),
            path,
            9,
            (ManifestContentType::Data, spec),
            &entries,
        )
        .await
        .unwrap();
        let bytes = io.new_input(path).unwrap().read().await.unwrap();
        let read = Manifest::parse_avro(&bytes).unwrap();
        let partition = read.entries()[0].data_file().partition().fields().to_vec();
        assert_eq!(partition[4], Some(Literal::double(0.25)));
        assert_eq!(partition[7], Some(Literal::long(-42)));
        let summary = &listed.partitions.unwrap()[7];
        let lower = summary.lower_bound.as_ref().map(|b| b.to_vec());
        assert_eq!(lower, Some((-42i64).to_le_bytes().to_vec()));
        // iceberg-rust's writer, which wrote every manifest before, refuses them.
        let content = (ManifestContentType::Data, spec);
        let before = write_with_iceberg(
            &metadata,
            &io,
            "memory:/t/refused.avro",
            9,
            content,
            &entries,
        )
        .await;
        assert!(
            before.is_err(),
            "iceberg-rust's writer took a pre-widening value"
        );
    }

    #[test]
    fn longs_are_zig_zag_varints() {
        for (n, bytes) in [
            (0i64, vec![0u8]),
            (-1, vec![1]),
            (1, vec![2]),
            (-64, vec![127]),
            (64, vec![128, 1]),
            (i64::MIN, vec![255; 9].into_iter().chain([1]).collect()),
        ] {
            let mut out = Vec::new();
            avro::long(&mut out, n);
            assert_eq!(out, bytes, "{n}");
        }
    }
}
