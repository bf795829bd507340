//! The per-table committer and everything it publishes.
//!
//! - [`committer`]: group commit. Concurrent write calls hand in shredded batches; one
//!   stage writes the waiting batches as few data files, the next commits every group
//!   that is ready as one snapshot, so encoding overlaps the catalog round trip.
//! - [`snapshot`]: floe's own snapshot production (iceberg-rust 0.10 only exposes
//!   fast-append): manifests, manifest list, summary totals, commit ids, requirements.
//! - [`staging`]: small data files, manifest and manifest list encoded in memory and
//!   uploaded side by side, one storage round trip per commit instead of three.
//! - [`merge`] and [`expire`]: bounded metadata over long runs.
//! - [`landed`]: whether an attempt whose snapshot was since expired landed.
//! - [`offsets`]: exactly-once bookkeeping recorded in snapshot summaries.
//! - [`order`]: calls' rows reach a table in the order the calls arrived.
//! - [`manifest_cache`]: manifests read once per writer for upserts' key lookups.

pub mod committer;
pub mod expire;
pub mod landed;
pub mod offsets;
pub mod order;
pub mod snapshot;
pub mod staging;
pub mod together;

pub use snapshot::{
    COMMIT_ID_PROPERTY, PreparedCommit, SnapshotChanges, find_commit, prepare_snapshot,
};
