//! The table model below row operations and the committer: manifests as floe writes
//! them (its own Avro encoder), the per-table cache of manifests and key indexes, and
//! manifest merging and rewriting.

pub mod by_path;
pub mod key_index;
pub mod lineage;
pub mod manifest_cache;
pub mod manifest_writer;
pub mod merge;
pub mod position_deletes;
