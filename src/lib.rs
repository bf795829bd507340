//! floe: stream JSON message batches into Apache Iceberg tables.
//!
//! The pipeline, one module per stage: [`shred`] turns JSON into Arrow, `write` turns
//! Arrow into Parquet data files, `commit` produces snapshots, `catalog` publishes them;
//! `evolve` adds what new messages need to a table's schema.

pub mod config;
pub mod error;
pub mod failpoint;
#[cfg(test)]
pub(crate) mod fixture;
pub mod shred;

pub use error::{Error, ErrorKind, Result};
pub mod catalog;
pub mod commit;
pub mod evolve;
pub mod ffi;
pub mod partition_spec;
pub mod rowops;
pub mod stats;
pub mod storage;
mod sync;
pub mod table;
pub mod validate;
pub mod write;
pub mod writer;
