//! Table metadata for unit tests, built from `testdata/two_snapshots.json`: the ground
//! layer, so every layer's tests can use it.

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
