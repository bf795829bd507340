//! Shredding: JSON messages → one Arrow `RecordBatch` shaped by a table's Iceberg schema.
//!
//! Every message becomes one row or one [`MessageError`]; a bad message never stops the
//! rest of its batch. The Arrow schema carries Iceberg field ids (`PARQUET:field_id`), so
//! the Parquet writer can stamp them onto the file.

mod column;
pub mod convert;
pub mod infer;
mod json;

use std::fmt;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;
use iceberg::spec::Schema;

pub use column::{DecodeOptions, NOT_A_COLUMN, UnknownFields};
use column::{RowDecoder, ValueError};
pub use convert::EpochUnit;
pub use json::MAX_DEPTH;

/// Why one message of a batch was not shredded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageError {
    /// Index of the message in the batch handed to [`Shredder::shred`].
    pub index: usize,
    /// Dotted path of the field at fault, empty when the whole message is at fault.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "message {}: {}", self.index, self.reason)
        } else {
            write!(
                f,
                "message {}: field `{}`: {}",
                self.index, self.path, self.reason
            )
        }
    }
}

impl std::error::Error for MessageError {}

/// What [`Shredder::shred`] made of a batch.
#[derive(Debug)]
pub struct Shredded {
    /// The good rows, in message order; `None` when no message was good.
    pub batch: Option<RecordBatch>,
    /// For each row of `batch`, the index of the message it came from.
    pub row_sources: Vec<usize>,
    pub errors: Vec<MessageError>,
}

/// Turns batches of JSON messages into Arrow batches for one table schema.
///
/// Built once per schema; decoding options are fixed at construction.
pub struct Shredder {
    iceberg: Arc<Schema>,
    arrow: SchemaRef,
    decoder: RowDecoder,
}

impl Shredder {
    pub fn new(schema: Arc<Schema>, options: DecodeOptions) -> crate::Result<Self> {
        let arrow =
            Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).map_err(crate::Error::from)?);
        let decoder = RowDecoder::new(&schema, &arrow, options);
        Ok(Shredder {
            iceberg: schema,
            arrow,
            decoder,
        })
    }

    pub fn iceberg_schema(&self) -> &Arc<Schema> {
        &self.iceberg
    }

    pub fn arrow_schema(&self) -> &SchemaRef {
        &self.arrow
    }

    /// Shreds `messages`; each is one JSON object.
    pub fn shred<'m>(&mut self, messages: impl IntoIterator<Item = &'m [u8]>) -> Shredded {
        let mut row_sources = Vec::new();
        let mut errors = Vec::new();
        for (index, bytes) in messages.into_iter().enumerate() {
            match self.shred_one(bytes) {
                Ok(()) => row_sources.push(index),
                Err((path, reason)) => errors.push(MessageError {
                    index,
                    path,
                    reason,
                }),
            }
        }
        let batch = (!row_sources.is_empty()).then(|| self.take_batch());
        Shredded {
            batch,
            row_sources,
            errors,
        }
    }

    fn shred_one(&mut self, bytes: &[u8]) -> Result<(), (String, String)> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            (
                String::new(),
                format!("not valid UTF-8 at byte {}", e.valid_up_to()),
            )
        })?;
        self.decoder.decode_row(text).map_err(|e| match e {
            ValueError::Syntax(s) => (String::new(), s.to_string()),
            ValueError::Field { path, reason } => (path, reason),
        })
    }

    fn take_batch(&mut self) -> RecordBatch {
        let rows = self.decoder.rows();
        let columns = self.decoder.finish();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.arrow.clone(), columns, &options)
            .expect("decoders build arrays matching the Arrow schema")
    }
}

#[cfg(test)]
mod differential;
#[cfg(test)]
mod tests;
