//! Manifest entries encoded straight to Avro binary, field by field in the order of the
//! v2 `manifest_entry` schema.

use super::*;

/// The whole Avro file: the header, then one block of every entry (with its partition
/// values, `partitions[i]`).
pub(super) fn encode_manifest(
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
pub(super) fn encode_entry(
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
pub(super) fn encode_data_file(
    out: &mut Vec<u8>,
    file: &DataFile,
    partition: &[Option<Datum>],
) -> Result<()> {
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

pub(super) fn as_long(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::new(ErrorKind::Internal, format!("{n} exceeds a long")))
}

/// A file's partition values as the partition type's `types` (see [`as_datum`]).
pub(super) fn partition_datums(
    file: &DataFile,
    types: &[PrimitiveType],
) -> Result<Vec<Option<Datum>>> {
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
pub(super) fn encode_partition(out: &mut Vec<u8>, partition: &[Option<Datum>]) -> Result<()> {
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

pub(super) fn partition_mismatch(file: &DataFile) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!(
            "the partition values of {} do not match the partition spec",
            file.file_path()
        ),
    )
}

/// A partition value as a datum of the partition field's type, for the types this writer
/// encodes. Values written before their source column was widened (int to long, float to
/// double: floe's schema evolution does both) become the wider type, which the partition
/// type now is: iceberg-rust's writer refuses them, so a merge of manifests from before
/// the widening would fail on every commit.
pub(crate) fn as_datum(ty: &PrimitiveType, literal: PrimitiveLiteral) -> Option<Datum> {
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
pub(super) mod avro {
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
