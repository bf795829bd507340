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

pub use snapshot::{
    COMMIT_ID_PROPERTY, PreparedCommit, SnapshotChanges, find_commit, prepare_snapshot,
};

/// Table metadata for unit tests, built from `testdata/two_snapshots.json`.
#[cfg(test)]
pub(crate) mod fixture {
    use iceberg::spec::TableMetadata;

    /// Snapshots 1 ← 2 (timestamps 1,700,000,001,000 and …002,000) plus `more` (JSON
    /// objects, each starting with a comma), main at `main` with `main_extra` added to
    /// its ref (e.g. retention), and `properties` (a JSON object).
    pub fn table(properties: &str, main: i64, main_extra: &str, more: &str) -> TableMetadata {
        let json = include_str!("testdata/two_snapshots.json")
            .replace(
                r#""properties": {}"#,
                &format!(r#""properties": {properties}"#),
            )
            .replace(
                r#""main": {"snapshot-id": 2, "type": "branch"}"#,
                &format!(r#""main": {{"snapshot-id": {main}, "type": "branch"{main_extra}}}"#),
            )
            .replace(
                r#""current-snapshot-id": 2"#,
                &format!(r#""current-snapshot-id": {main}"#),
            )
            .replace(
                r#""last-sequence-number": 2"#,
                r#""last-sequence-number": 3"#,
            )
            .replace(
                "\"schema-id\": 0}\n  ],",
                &format!("\"schema-id\": 0}}{more}\n  ],"),
            );
        serde_json::from_str(&json).unwrap()
    }

    /// A third snapshot, `id` 3 with `parent` and extra summary JSON, for `table`'s `more`.
    pub fn third_snapshot(parent: i64, summary_extra: &str) -> String {
        format!(
            r#",
    {{"snapshot-id": 3, "parent-snapshot-id": {parent}, "sequence-number": 3, "timestamp-ms": 1700000003000, "manifest-list": "file:///tmp/t/metadata/snap-3.avro", "summary": {{"operation": "append"{summary_extra}}}, "schema-id": 0}}"#
        )
    }
}
