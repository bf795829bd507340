//! The sections of a config that say what floe does: tables, Parquet, commits, upserts.

use super::*;

/// How epoch numbers given for `timestamp`/`timestamptz` columns are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EpochUnit {
    S,
    #[default]
    Ms,
    Us,
    Ns,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub catalog: CatalogConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    /// Default namespace (dot-separated levels) for messages that name none.
    #[serde(default, deserialize_with = "non_empty")]
    pub namespace: Option<String>,
    /// Default table for messages that name none.
    #[serde(default, deserialize_with = "non_empty")]
    pub table: Option<String>,
    #[serde(default = "yes")]
    pub case_sensitive_columns: bool,
    #[serde(default)]
    pub schema_evolution: SchemaEvolution,
    #[serde(default)]
    pub parquet: ParquetConfig,
    #[serde(default)]
    pub json: JsonConfig,
    #[serde(default)]
    pub commit: CommitConfig,
    /// Worker threads of the process-wide runtime (set by the first writer opened;
    /// unset or 0: one per core).
    pub runtime_threads: Option<usize>,
    /// How many write calls the host runs at once (its `max_in_flight`). When known, a
    /// table's committer waits briefly for all of them before writing a group, instead
    /// of committing whichever arrived first (see `commit::committer`).
    pub max_in_flight: Option<usize>,
    /// The key that upserts and deletes match rows by (top-level columns). Empty: the
    /// table's own identifier fields.
    #[serde(default)]
    pub identifier_fields: Vec<String>,
    /// How upserts and deletes reach the table. Unset: the table's `write.update.mode` /
    /// `write.delete.mode`, else merge-on-read.
    pub merge_strategy: Option<MergeStrategy>,
}

/// Table property naming the kind of delete files merge-on-read writes on this table:
/// `position` for floe's positional strategy (Iceberg's write modes only say
/// merge-on-read), so a writer that follows the table keeps readers that apply position
/// deletes but not equality deletes (pyiceberg) able to read it.
pub const MERGE_ON_READ_DELETES: &str = "floe.merge-on-read-deletes";

/// How upserts and deletes are written.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub enum MergeStrategy {
    /// Equality-delete files on the key plus the new rows, in one row-delta snapshot:
    /// cheapest to write; readers apply the deletes.
    #[default]
    #[serde(rename = "merge-on-read")]
    MergeOnRead,
    /// Rewrite the data files holding the keys; no delete files, readable everywhere.
    #[serde(rename = "copy-on-write")]
    CopyOnWrite,
    /// Copy-on-write's key lookup, written as position-delete files.
    #[serde(rename = "merge-on-read-positional")]
    MergeOnReadPositional,
}

impl MergeStrategy {
    /// The name as configs and table properties spell it.
    pub fn name(self) -> &'static str {
        match self {
            MergeStrategy::MergeOnRead => "merge-on-read",
            MergeStrategy::CopyOnWrite => "copy-on-write",
            MergeStrategy::MergeOnReadPositional => "merge-on-read-positional",
        }
    }

    /// The value of Iceberg's `write.update.mode` / `write.delete.mode` that means this
    /// strategy (positional deletes are merge-on-read, as Spark writes it).
    pub fn write_mode(self) -> &'static str {
        match self {
            MergeStrategy::CopyOnWrite => "copy-on-write",
            MergeStrategy::MergeOnRead | MergeStrategy::MergeOnReadPositional => "merge-on-read",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaEvolution {
    /// Create the namespace and table when missing, and evolve its schema on write: new
    /// fields become optional columns (at any depth), required fields become optional
    /// when a message has them null, and types widen where Iceberg allows and a value
    /// needs it (see `crate::evolve`).
    #[serde(default)]
    pub enabled: bool,
    /// Without evolution: what a JSON field that is not a column does to its message.
    #[serde(default)]
    pub unknown_fields: UnknownFieldPolicy,
    /// The metadata key the host reads each message's explicit types from (the host
    /// hands them over with the message; named here for errors).
    #[serde(default, deserialize_with = "non_empty")]
    pub schema_metadata: Option<String>,
    /// A message without explicit types fails.
    #[serde(default)]
    pub require_schema_metadata: bool,
    /// Partition spec for new tables, e.g. `(day(ts), bucket(16, user_id))`.
    #[serde(default, deserialize_with = "non_empty")]
    pub partition_spec: Option<String>,
    /// Location prefix for new tables when the catalog assigns none.
    #[serde(default, deserialize_with = "non_empty")]
    pub table_location: Option<String>,
    /// Explicit schema for new tables (Iceberg schema JSON, as an object or as text);
    /// inferred when absent.
    #[serde(default, deserialize_with = "json_or_text")]
    pub schema: Option<serde_json::Value>,
    /// The Iceberg format version of tables floe creates: 2, which every reader reads, or
    /// 3 (row lineage, nanosecond timestamps, deletion vectors), which fewer readers do
    /// yet (see docs/upserts.md). Existing tables keep their own.
    #[serde(default = "default_format_version")]
    pub format_version: u8,
}

/// What a field that is not a column does when schema evolution is off.
///
/// `error` is the default: the message fails with an error naming the field, so a
/// producer that starts sending a new field is noticed (the message goes to the dead
/// letters or is retried) instead of the field being dropped without a trace. `ignore`
/// writes the rest of the message, for tables that deliberately keep a subset.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum UnknownFieldPolicy {
    #[default]
    Error,
    Ignore,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Zstd,
    Snappy,
    Lz4,
    Gzip,
    Uncompressed,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StringEncoding {
    DeltaLengthByteArray,
    Plain,
}

/// Parquet options. `None` means: the table's `write.parquet.*` property, else floe's default.
/// `0` and `""` also mean "not set" (the values configs written for earlier versions
/// carry as defaults), so no size here is ever 0.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ParquetConfig {
    #[serde(default, deserialize_with = "blank_as_none")]
    pub compression: Option<Compression>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub compression_level: Option<i32>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub row_group_size: Option<usize>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub page_size: Option<usize>,
    /// Most rows in one data page (see [`crate::write::DEFAULT_PAGE_ROW_LIMIT`]).
    #[serde(default, deserialize_with = "blank_as_none")]
    pub page_row_limit: Option<usize>,
    pub dictionary: Option<bool>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub target_file_size_bytes: Option<usize>,
    #[serde(default, deserialize_with = "blank_as_none")]
    pub string_encoding: Option<StringEncoding>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitConfig {
    /// Retries after a conflict (or an unknown outcome that turned out not committed),
    /// each rebuilt on the new table head after an exponential, jittered backoff.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// How long a commit keeps retrying conflicts with other writers before it fails.
    /// A conflict means another commit landed, so it is retried on the new head (a
    /// cheap rebase) until this much time has passed since the first attempt. Also how
    /// long floe keeps asking a catalog it cannot reach whether a commit of unknown
    /// outcome landed, before it reports the outcome unknown (which an at-least-once
    /// host answers by writing the rows again).
    #[serde(
        default = "default_retry_timeout",
        deserialize_with = "duration",
        serialize_with = "go_duration"
    )]
    pub retry_timeout: std::time::Duration,
    /// Delete the files of a commit the catalog definitively refused. Files of a commit
    /// whose outcome is unknown are never deleted.
    #[serde(default = "yes")]
    pub cleanup_on_failure: bool,
    /// Merge small manifests (the table's `commit.manifest.*` properties decide when), so
    /// planning stays fast after many small commits.
    #[serde(default = "yes")]
    pub manifest_merge_enabled: bool,
    /// Snapshots older than this are expired (refs' heads are kept) and files no longer
    /// reachable are deleted. `"0s"` turns expiry off.
    #[serde(
        default = "default_snapshot_age",
        deserialize_with = "duration",
        serialize_with = "go_duration"
    )]
    pub max_snapshot_age: std::time::Duration,
    /// Most snapshots a branch keeps under floe's defaults, whatever their age: every
    /// commit makes the catalog rewrite the whole table metadata, so a streaming table
    /// committing several times a second must not keep a day of snapshots. Ignored for
    /// a table (or branch) that sets its own max snapshot age.
    #[serde(default = "default_max_snapshots")]
    pub max_snapshots: usize,
    /// How long the committer waits for more batches before writing a group (0: writes
    /// as soon as the previous group is handed on; concurrency alone fills groups).
    #[serde(default, deserialize_with = "duration", serialize_with = "go_duration")]
    pub linger: std::time::Duration,
    /// Upper bounds on one commit group: rows, and JSON bytes handed in.
    #[serde(default = "default_group_rows")]
    pub max_group_rows: usize,
    #[serde(default = "default_group_bytes")]
    pub max_group_bytes: usize,
    /// A table no call has written for this long is closed: its committer stops and its
    /// caches are freed, and the next message for it opens it again (one catalog load).
    /// Bounds what a process routing to many tables holds for those it no longer
    /// writes. `"0s"`: tables stay open.
    #[serde(
        default = "default_table_idle_timeout",
        deserialize_with = "duration",
        serialize_with = "go_duration"
    )]
    pub table_idle_timeout: std::time::Duration,
    /// The tables one call writes commit in one catalog transaction: readers see all of
    /// them change or none (REST `transactions/commit`; one SQLite transaction for the
    /// embedded catalog). A REST catalog whose `/v1/config` lists its endpoints without
    /// it is a config error (one that lists none offers the spec's defaults, which
    /// include it).
    #[serde(default)]
    pub atomic_tables: bool,
    /// Exactly-once across restarts: committed offsets per source are recorded in each
    /// snapshot under this writer id, and already committed messages are acknowledged
    /// without being written again.
    pub exactly_once: Option<ExactlyOnceConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExactlyOnceConfig {
    pub writer_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct JsonConfig {
    /// Unit of epoch numbers given for timestamp columns (default milliseconds).
    #[serde(default)]
    pub epoch_unit: EpochUnit,
}
