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
//!
//! The entries' Avro binary is encoded in `encode`.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, Datum, FieldSummary, FormatVersion, ManifestContentType, ManifestFile,
    ManifestStatus, ManifestWriterBuilder, PartitionSpec, PrimitiveLiteral, PrimitiveType,
    SchemaRef, TableMetadata, Type, UNASSIGNED_SEQUENCE_NUMBER,
};

use super::lineage::in_current_type;
use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockExt;

mod encode;
#[cfg(test)]
mod tests;

pub(crate) use encode::as_datum;
use encode::*;

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
        // Values from before a column was widened, which iceberg-rust's writer refuses
        // (this writer's encoder widens them as it writes, see `as_datum`).
        let file = in_current_type(&entry.data_file, spec, metadata.current_schema())?.into_owned();
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
