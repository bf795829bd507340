//! Deletion vectors (Iceberg v3): the deleted positions of one data file as a roaring
//! bitmap, stored as a `deletion-vector-v1` blob in a Puffin file and listed in a delete
//! manifest with the blob's offset and length. v3 replaces position-delete files with
//! them; a data file has at most one live deletion vector, so a writer deleting more of
//! its rows writes a new one holding the old positions too and removes the old one.
//!
//! The blob, as the Puffin spec lays it out: the length of magic + bitmap (4 bytes,
//! big-endian), the magic `D1 D3 39 64`, the bitmap in the portable 64-bit roaring
//! format, and a CRC-32 of magic + bitmap (4 bytes, big-endian). Blobs are never
//! compressed. The Puffin file is built in memory and written in one put: a commit's
//! deletion vectors are small (a few bytes per deleted row at worst).

use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Struct};
use roaring::RoaringTreemap;
use serde_json::json;

use crate::error::{Error, Result};

/// `deletion-vector-v1`: the Puffin blob type of a deletion vector.
const BLOB_TYPE: &str = "deletion-vector-v1";
/// The blob's magic bytes (shared with Delta Lake's deletion vectors).
const BLOB_MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];
/// Puffin's magic, at the start of the file and at both ends of its footer.
const PUFFIN_MAGIC: [u8; 4] = *b"PFA1";
/// The reserved field id of a row's position (`_pos`), the field a deletion vector is of.
const ROW_POSITION_FIELD_ID: i32 = 2147483645;

/// The deleted positions of one data file.
#[derive(Debug, Clone)]
pub struct DeletionVector {
    /// The data file's location, as its manifest entry has it.
    pub data_file: String,
    /// The data file's partition (the deletion vector's entry has the same).
    pub partition: Struct,
    pub positions: RoaringTreemap,
}

/// Encodes `positions` as the body of a `deletion-vector-v1` blob.
pub fn encode_blob(positions: &RoaringTreemap) -> Result<Vec<u8>> {
    let mut body = Vec::with_capacity(4 + positions.serialized_size());
    body.extend_from_slice(&BLOB_MAGIC);
    positions
        .serialize_into(&mut body)
        .map_err(|e| Error::internal(format!("deletion vector: {e}")))?;
    let length =
        u32::try_from(body.len()).map_err(|_| Error::internal("a deletion vector over 4 GiB"))?;
    let mut blob = Vec::with_capacity(body.len() + 8);
    blob.extend_from_slice(&length.to_be_bytes());
    blob.extend_from_slice(&body);
    blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    Ok(blob)
}

/// Decodes a `deletion-vector-v1` blob read from `path` (named in errors), checking its
/// length, magic and checksum.
pub fn decode_blob(blob: &[u8], path: &str) -> Result<RoaringTreemap> {
    let bad = |why: &str| Error::internal(format!("deletion vector in {path}: {why}"));
    if blob.len() < 12 {
        return Err(bad("shorter than its frame"));
    }
    let length = u32::from_be_bytes(blob[..4].try_into().expect("4 bytes")) as usize;
    if length + 8 != blob.len() {
        return Err(bad("its length does not match the blob's"));
    }
    let body = &blob[4..4 + length];
    if body[..4] != BLOB_MAGIC {
        return Err(bad("not a deletion vector (wrong magic)"));
    }
    let crc = u32::from_be_bytes(blob[4 + length..].try_into().expect("4 bytes"));
    if crc32fast::hash(body) != crc {
        return Err(bad("checksum mismatch"));
    }
    RoaringTreemap::deserialize_from(&body[4..]).map_err(|e| bad(&e.to_string()))
}

/// Reads the deletion vector that manifest entry `file` points at.
pub async fn read_deletion_vector(file_io: &FileIO, file: &DataFile) -> Result<RoaringTreemap> {
    let blob = read_range(file_io, file.file_path(), blob_range(file)?).await?;
    decode_blob(&blob, file.file_path())
}

/// Where in its Puffin file the blob of manifest entry `file` is.
pub fn blob_range(file: &DataFile) -> Result<std::ops::Range<u64>> {
    match (file.content_offset(), file.content_size_in_bytes()) {
        (Some(offset), Some(size)) if offset >= 0 && size >= 0 => {
            Ok(offset as u64..(offset + size) as u64)
        }
        _ => Err(Error::internal(format!(
            "deletion vector {} has no valid content offset and size in its manifest entry",
            file.file_path()
        ))),
    }
}

/// The bytes `range` of the file at `path` (errors here are storage's: a missing or
/// unreachable file).
pub async fn read_range(
    file_io: &FileIO,
    path: &str,
    range: std::ops::Range<u64>,
) -> Result<Bytes> {
    let input = file_io.new_input(path)?;
    Ok(input.reader().await?.read(range).await?)
}

/// Whether manifest entry `file` is a deletion vector (a position delete in Puffin).
pub fn is_deletion_vector(file: &DataFile) -> bool {
    file.content_type() == DataContentType::PositionDeletes
        && file.file_format() == DataFileFormat::Puffin
}

/// Writes `vectors` (empty ones left out) as one Puffin file at `path`; returns the
/// delete-manifest entry of each, in the order given, under partition spec `spec_id`.
pub async fn write_deletion_vectors(
    vectors: &[DeletionVector],
    path: &str,
    spec_id: i32,
    file_io: &FileIO,
) -> Result<Vec<DataFile>> {
    let vectors: Vec<&DeletionVector> =
        vectors.iter().filter(|v| !v.positions.is_empty()).collect();
    if vectors.is_empty() {
        return Ok(Vec::new());
    }
    let mut puffin = PUFFIN_MAGIC.to_vec();
    let mut blobs = Vec::with_capacity(vectors.len());
    let mut placed = Vec::with_capacity(vectors.len());
    for vector in &vectors {
        let blob = encode_blob(&vector.positions)?;
        let (offset, length) = (puffin.len(), blob.len());
        puffin.extend_from_slice(&blob);
        blobs.push(json!({
            "type": BLOB_TYPE,
            "fields": [ROW_POSITION_FIELD_ID],
            // Inherited from the snapshot that adds the file, as for manifest entries.
            "snapshot-id": -1,
            "sequence-number": -1,
            "offset": offset,
            "length": length,
            "properties": {
                "referenced-data-file": vector.data_file,
                "cardinality": vector.positions.len().to_string(),
            },
        }));
        placed.push((offset as i64, length as i64));
    }
    let footer = json!({
        "blobs": blobs,
        "properties": {"created-by": concat!("floe ", env!("CARGO_PKG_VERSION"))},
    });
    let payload = serde_json::to_vec(&footer)
        .map_err(|e| Error::internal(format!("deletion vector footer: {e}")))?;
    let payload_size = u32::try_from(payload.len())
        .map_err(|_| Error::internal("a deletion vector footer over 4 GiB"))?;
    puffin.extend_from_slice(&PUFFIN_MAGIC);
    puffin.extend_from_slice(&payload);
    puffin.extend_from_slice(&payload_size.to_le_bytes());
    puffin.extend_from_slice(&[0; 4]); // flags: the footer is not compressed
    puffin.extend_from_slice(&PUFFIN_MAGIC);
    let size = puffin.len() as u64;
    file_io.new_output(path)?.write(Bytes::from(puffin)).await?;
    vectors
        .iter()
        .zip(placed)
        .map(|(vector, (offset, length))| {
            DataFileBuilder::default()
                .content(DataContentType::PositionDeletes)
                .file_path(path.to_string())
                .file_format(DataFileFormat::Puffin)
                .partition(vector.partition.clone())
                .partition_spec_id(spec_id)
                .record_count(vector.positions.len())
                .file_size_in_bytes(size)
                .referenced_data_file(Some(vector.data_file.clone()))
                .content_offset(Some(offset))
                .content_size_in_bytes(Some(length))
                .build()
                .map_err(|e| Error::internal(format!("deletion vector entry: {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::puffin::{CompressionCodec, PuffinReader};

    fn bitmap(positions: &[u64]) -> RoaringTreemap {
        positions.iter().copied().collect()
    }

    #[test]
    fn a_blob_round_trips_and_refuses_corruption() {
        // Positions in several 32-bit buckets and in array, bitmap and run containers.
        let mut positions = bitmap(&[0, 1, 7, 65_536, (1 << 32) + 3]);
        positions.insert_range(100_000..110_000);
        positions.extend((200_000..300_000).step_by(2));
        let blob = encode_blob(&positions).unwrap();
        assert_eq!(decode_blob(&blob, "f").unwrap(), positions);
        assert_eq!(blob[4..8], BLOB_MAGIC);
        let mut flipped = blob.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 1;
        assert!(
            decode_blob(&flipped, "f")
                .unwrap_err()
                .message()
                .contains("checksum")
        );
        assert!(decode_blob(&blob[..blob.len() - 1], "f").is_err());
    }

    /// The Puffin file is read back by iceberg-rust's own Puffin reader (an independent
    /// implementation of the format): footer, offsets, lengths and properties agree.
    #[tokio::test]
    async fn iceberg_rust_reads_the_puffin_file() {
        let dir = tempfile::tempdir().unwrap();
        let file_io = FileIO::new_with_fs();
        let path = format!("{}/dv.puffin", dir.path().display());
        let vectors = [
            DeletionVector {
                data_file: "s3://b/t/data/a.parquet".into(),
                partition: Struct::empty(),
                positions: bitmap(&[3, 5, 8]),
            },
            DeletionVector {
                data_file: "s3://b/t/data/empty.parquet".into(),
                partition: Struct::empty(),
                positions: RoaringTreemap::new(),
            },
            DeletionVector {
                data_file: "s3://b/t/data/b.parquet".into(),
                partition: Struct::empty(),
                positions: (0..5_000).collect(),
            },
        ];
        let entries = write_deletion_vectors(&vectors, &path, 0, &file_io)
            .await
            .unwrap();
        assert_eq!(entries.len(), 2, "the empty vector is left out");
        let reader = PuffinReader::new(file_io.new_input(&path).unwrap());
        let footer = reader.file_metadata().await.unwrap().clone();
        for ((entry, blob), vector) in entries
            .iter()
            .zip(footer.blobs())
            .zip([&vectors[0], &vectors[2]])
        {
            assert_eq!(blob.blob_type(), BLOB_TYPE);
            assert_eq!(blob.fields(), [ROW_POSITION_FIELD_ID]);
            assert_eq!((blob.snapshot_id(), blob.sequence_number()), (-1, -1));
            assert_eq!(blob.compression_codec(), CompressionCodec::None);
            assert_eq!(Some(blob.offset() as i64), entry.content_offset());
            assert_eq!(Some(blob.length() as i64), entry.content_size_in_bytes());
            assert_eq!(blob.properties()["referenced-data-file"], vector.data_file);
            assert_eq!(
                blob.properties()["cardinality"],
                vector.positions.len().to_string()
            );
            assert_eq!(entry.record_count(), vector.positions.len());
            assert_eq!(
                entry.referenced_data_file().as_deref(),
                Some(vector.data_file.as_str())
            );
            assert!(is_deletion_vector(entry));
            let read = read_deletion_vector(&file_io, entry).await.unwrap();
            assert_eq!(read, vector.positions);
            let data = reader.blob(blob).await.unwrap();
            assert_eq!(decode_blob(data.data(), &path).unwrap(), vector.positions);
        }
        let size = std::fs::metadata(dir.path().join("dv.puffin"))
            .unwrap()
            .len();
        assert!(entries.iter().all(|e| e.file_size_in_bytes() == size));
    }
}
