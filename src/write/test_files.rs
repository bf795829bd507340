//! Parquet files for unit tests: a batch written with given writer properties, and a
//! seeded random stream to vary them.

use arrow_array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

/// `batch` as a Parquet file written with `properties`.
pub(crate) fn parquet_bytes(batch: &RecordBatch, properties: WriterProperties) -> Bytes {
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    Bytes::from(out)
}

/// The next draw of a xorshift64* stream (`state` must not be 0).
pub(crate) fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}
