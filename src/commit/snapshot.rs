//! Snapshot production: turns data files into a new snapshot and the catalog updates
//! that publish it.
//!
//! A data manifest for the new files, a manifest list carrying the previous snapshot's
//! manifests forward (merged when there are many small ones), a summary with `added-*`
//! and `total-*` counts, and requirements that pin the table UUID, the branch head, the
//! schema and the spec, so a concurrent change is refused rather than lost. Each snapshot
//! carries `floe.commit-id` so a commit of unknown outcome can be found, and with
//! exactly-once the writer's committed offsets.
//!
//! The operations: an append (data files only); a row delta with equality deletes
//! (merge-on-read: data files plus equality-delete files in one snapshot, one sequence
//! number, so the deletes remove older rows with their keys but never the snapshot's
//! own; a rebase after a conflict only makes them apply to rows committed in between,
//! which is what commit order means for an upsert); an overwrite (copy-on-write: files
//! rewritten without the touched rows) and a row delta with position deletes
//! (positional merge-on-read), both planned again on every attempt's head
//! (see [`crate::rowops::removal`]). Deletes alone make a delete snapshot.

use crate::catalog::{LoadedTable, Refs};
use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestFile, ManifestList,
    ManifestListWriter, ManifestStatus, Operation, Snapshot, SnapshotReference, SnapshotRetention,
    SnapshotSummaryCollector, Summary, TableMetadata, UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::{TableRequirement, TableUpdate};
use uuid::Uuid;

use super::offsets::{
    MAX_RANGES, SourceOffsets, WRITER_ID_SUMMARY, committed_offsets, property_key, record_value,
};
use crate::error::{Error, ErrorKind, Result};
use crate::rowops::removal::{RemoveKeys, Removed, remove_touched_rows};
use crate::table::manifest_cache::{ManifestCache, write_manifest};
use crate::table::manifest_writer::WrittenEntry;
use crate::table::merge::{MergePolicy, merge_manifests};

/// Summary key holding the id of the floe commit that produced a snapshot.
pub const COMMIT_ID_PROPERTY: &str = "floe.commit-id";

/// The catalog request for one snapshot.
#[derive(Debug)]
pub struct PreparedCommit {
    pub snapshot_id: i64,
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
    /// Metadata files this attempt wrote (manifests, manifest list), for cleanup when
    /// the attempt is definitively refused.
    pub written: Vec<String>,
    /// Of those, the ones written to the staging storage (the new manifest and the
    /// manifest list): they must be uploaded before the catalog request is sent.
    pub staged: Vec<String>,
    /// The new snapshot's manifest list, to reuse once it is the head.
    pub manifest_list: ManifestListCache,
    /// What a retry after a definite refusal (a conflict) may reuse.
    pub rebase: Rebase,
}

/// Which attempt of a commit this is, and what it may reuse of the previous one.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub number: u32,
    pub rebase: Option<&'a Rebase>,
}

/// The part of a refused attempt a retry reuses: the snapshot id and the manifest of
/// the new data files, which do not depend on the head. Only the manifest list (and the
/// summary) is rebuilt on the new head, so a conflict costs one small upload.
///
/// Only after a definite refusal: an attempt of unknown outcome may still land under
/// that snapshot id, so the next attempt needs a fresh one.
#[derive(Debug, Clone)]
pub struct Rebase {
    pub snapshot_id: i64,
    pub data_manifest: ManifestFile,
    pub delete_manifest: Option<ManifestFile>,
}

impl Rebase {
    /// The files a rebased attempt reuses: never cleaned up with the refused attempt.
    pub fn reused_paths(&self) -> Vec<&str> {
        std::iter::once(&self.data_manifest)
            .chain(&self.delete_manifest)
            .map(|m| m.manifest_path.as_str())
            .collect()
    }
}

/// What the commit stage keeps from one commit to the next, so it is not read again.
#[derive(Clone, Copy)]
pub struct Cached<'a> {
    /// The manifest list of this writer's last commit.
    pub list: Option<&'a ManifestListCache>,
    /// Manifests read for upserts' key lookups.
    pub manifests: &'a ManifestCache,
}

/// The manifests of a manifest list this writer wrote, so the next commit on top of it
/// need not read the list back from storage.
#[derive(Debug, Clone)]
pub struct ManifestListCache {
    pub path: String,
    pub manifests: Vec<ManifestFile>,
}

/// What one snapshot adds, reusable when the attempt is rebuilt on a newer head after a
/// conflict.
pub struct SnapshotChanges {
    pub commit_id: Uuid,
    /// The table the files were written for: a table dropped and recreated under the
    /// same name between attempts must not receive them.
    pub table_uuid: Uuid,
    pub data_files: Vec<DataFile>,
    /// Equality-delete files (upserts and deletes): the snapshot is a row delta.
    pub delete_files: Vec<DataFile>,
    /// Copy-on-write and positional upserts and deletes: each attempt finds the rows
    /// with these keys on the head it builds on, and rewrites their files or writes
    /// position deletes for them.
    pub remove_keys: Option<RemoveKeys>,
    /// Schema and partition spec the files were written with; the commit requires the
    /// table to still have them.
    pub schema_id: i32,
    pub spec_id: i32,
    /// Extra summary properties (never secrets).
    pub properties: HashMap<String, String>,
    /// Exactly-once: the writer id and the offsets this snapshot commits. They must not
    /// be committed already; the record written is the head's record plus these.
    pub offsets: Option<(String, SourceOffsets)>,
    /// Exactly-once: offsets claimed by calls in flight, whose gaps the bounded record
    /// must keep open.
    pub in_flight: SourceOffsets,
}

fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (hi, lo) = Uuid::new_v4().as_u64_pair();
        let id = ((hi ^ lo) & (i64::MAX as u64)) as i64;
        if metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// The manifests of the table's current snapshot, to carry forward.
pub(crate) async fn current_manifests(
    metadata: &TableMetadata,
    file_io: &FileIO,
    cached: Option<&ManifestListCache>,
) -> Result<Vec<ManifestFile>> {
    let Some(snapshot) = metadata.current_snapshot() else {
        return Ok(Vec::new());
    };
    if let Some(c) = cached.filter(|c| c.path == snapshot.manifest_list()) {
        return Ok(c.manifests.clone());
    }
    let bytes = file_io.new_input(snapshot.manifest_list())?.read().await?;
    let list = ManifestList::parse_with_version(&bytes, metadata.format_version())?;
    Ok(list.entries().to_vec())
}

/// Which manifest: the new data files or the new delete files.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NewManifest {
    Data,
    Deletes,
    /// Rows kept from files a copy-on-write attempt rewrote.
    Rewritten(u32),
    /// Position deletes a positional attempt planned.
    PositionDeletes(u32),
}

async fn write_new_manifest(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    snapshot_id: i64,
    commit_id: Uuid,
    files: &[DataFile],
    content: NewManifest,
) -> Result<ManifestFile> {
    // The snapshot id is part of the name: a retry never overwrites a manifest that an
    // attempt of unknown outcome may already reference.
    // `m0` and `d0`: merged manifests are numbered `m1`, `m2`, … (merge.rs).
    let name = match content {
        NewManifest::Data => "m0".to_string(),
        NewManifest::Deletes => "d0".to_string(),
        NewManifest::Rewritten(attempt) => format!("w{attempt}"),
        NewManifest::PositionDeletes(attempt) => format!("p{attempt}"),
    };
    let path = format!(
        "{}/metadata/{commit_id}-{snapshot_id}-{name}.avro",
        metadata.location()
    );
    let deletes = matches!(
        content,
        NewManifest::Deletes | NewManifest::PositionDeletes(_)
    );
    let kind = match deletes {
        true => ManifestContentType::Deletes,
        false => ManifestContentType::Data,
    };
    // ADDED, this snapshot's id; a missing sequence number is inherited from the
    // manifest list, so the manifest stays valid if the snapshot is rebuilt after a
    // conflict.
    let entries: Vec<WrittenEntry> = files
        .iter()
        .map(|file| WrittenEntry {
            status: ManifestStatus::Added,
            snapshot_id: Some(snapshot_id),
            sequence_number: None,
            file_sequence_number: None,
            data_file: file.clone(),
        })
        .collect();
    let spec = metadata.default_partition_spec().as_ref();
    write_manifest(
        metadata,
        (file_io, cache),
        &path,
        snapshot_id,
        (kind, spec),
        entries,
    )
    .await
}

/// Each running total with the summary figures that add to and take from it.
const TOTALS: [(&str, &str, &str); 6] = [
    ("total-records", "added-records", "deleted-records"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    ("total-data-files", "added-data-files", "deleted-data-files"),
    (
        "total-delete-files",
        "added-delete-files",
        "removed-delete-files",
    ),
    (
        "total-position-deletes",
        "added-position-deletes",
        "removed-position-deletes",
    ),
    (
        "total-equality-deletes",
        "added-equality-deletes",
        "removed-equality-deletes",
    ),
];

/// Summary properties: the collector's `added-*` figures plus running `total-*` counts.
fn append_summary(
    metadata: &TableMetadata,
    files: &SnapshotChanges,
    rewrite: Option<&Removed>,
) -> Result<Summary> {
    let mut collector = SnapshotSummaryCollector::default();
    let rewritten = rewrite.map(|r| r.added.as_slice()).unwrap_or_default();
    let position_deletes = rewrite
        .map(|r| r.position_deletes.as_slice())
        .unwrap_or_default();
    for file in files
        .data_files
        .iter()
        .chain(&files.delete_files)
        .chain(rewritten)
        .chain(position_deletes)
    {
        collector.add_file(
            file,
            metadata.current_schema().clone(),
            metadata.default_partition_spec().clone(),
        );
    }
    let removed_files = rewrite.map(|r| r.removed.as_slice()).unwrap_or_default();
    for (file, spec_id) in removed_files {
        let spec = metadata
            .partition_spec_by_id(*spec_id)
            .unwrap_or_else(|| metadata.default_partition_spec())
            .clone();
        collector.remove_file(file, metadata.current_schema().clone(), spec);
    }
    let mut props = files.properties.clone();
    props.extend(collector.build());
    let previous = metadata.current_snapshot().map(|s| s.summary());
    for (total, added, removed) in TOTALS {
        // A previous snapshot without this total (written by a writer that kept none)
        // leaves it unknown: better absent than wrong.
        let before = match previous {
            None => 0,
            Some(s) => match s
                .additional_properties
                .get(total)
                .and_then(|v| v.parse::<u64>().ok())
            {
                Some(v) => v,
                None => continue,
            },
        };
        let figure = |key: &str| {
            props
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let (add, remove) = (figure(added), figure(removed));
        props.insert(
            total.to_string(),
            (before + add).saturating_sub(remove).to_string(),
        );
    }
    props.insert(COMMIT_ID_PROPERTY.to_string(), files.commit_id.to_string());
    if let Some((writer_id, _)) = &files.offsets {
        props.insert(WRITER_ID_SUMMARY.to_string(), writer_id.clone());
    }
    // As Iceberg's own row delta names them: deletes alone are a delete, deletes with
    // new rows an overwrite.
    let removes =
        !files.delete_files.is_empty() || !removed_files.is_empty() || !position_deletes.is_empty();
    let adds = !files.data_files.is_empty() || !rewritten.is_empty();
    let operation = match (adds, removes) {
        (_, false) => Operation::Append,
        (false, true) => Operation::Delete,
        (true, true) => Operation::Overwrite,
    };
    Ok(Summary {
        operation,
        additional_properties: props,
    })
}

/// Equality deletes written for the current partition spec apply only to data files of
/// that spec (Iceberg scopes partitioned deletes by spec and partition), so rows written
/// under an earlier spec would survive an upsert. Refused until floe writes deletes per
/// spec.
fn refuse_deletes_across_specs(carried: &[ManifestFile], spec_id: i32) -> Result<()> {
    let other = carried.iter().find(|m| {
        m.content == ManifestContentType::Data
            && m.partition_spec_id != spec_id
            && (m.added_files_count.unwrap_or(1) > 0 || m.existing_files_count.unwrap_or(1) > 0)
    });
    match other {
        None => Ok(()),
        Some(m) => Err(Error::config(format!(
            "the table holds data files written under partition spec {} (the current one is \
             {spec_id}); merge-on-read deletes for the current spec would not reach them, so \
             upserts and deletes are refused on this table (rewrite its data under the current \
             spec first)",
            m.partition_spec_id
        ))),
    }
}

/// Exactly-once: the writer's record after this commit (the head's record plus this
/// commit's offsets, bounded), as a table property update. Refused when the offsets are
/// already recorded: another process with the same writer id committed them first.
fn offsets_update(
    metadata: &TableMetadata,
    files: &SnapshotChanges,
    snapshot_id: i64,
    sequence_number: i64,
) -> Result<Option<TableUpdate>> {
    let Some((writer_id, offsets)) = &files.offsets else {
        return Ok(None);
    };
    let mut record = committed_offsets(metadata, writer_id)?;
    if record.intersects(offsets) {
        return Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "offsets of this commit were already committed under writer id {writer_id:?} \
                 (another process uses the same writer id and source); the batch will be \
                 re-checked and only what is missing written"
            ),
        ));
    }
    record.union_with(offsets);
    record.bound(MAX_RANGES, &files.in_flight);
    Ok(Some(TableUpdate::SetProperties {
        updates: HashMap::from([(
            property_key(writer_id),
            record_value(&record, snapshot_id, sequence_number),
        )]),
    }))
}

pub use crate::catalog::refs::table_refs;

/// Main's retention settings, kept when the branch moves.
fn main_retention(refs: Option<&Refs>) -> SnapshotRetention {
    refs.and_then(|refs| refs.get(MAIN_BRANCH))
        .map(|r| r.retention.clone())
        .unwrap_or(SnapshotRetention::branch(None, None, None))
}

/// Builds a snapshot of `files` on top of the table's current head: writes the data
/// manifest and the manifest list to `stage_io` (see [`PreparedCommit::staged`]), merges
/// small manifests per `merge` in `file_io`, and returns the catalog request. When it
/// fails, what it wrote in `file_io` (merged manifests, rewritten data files, position
/// deletes) is deleted: nothing references it.
pub async fn prepare_snapshot(
    table: &LoadedTable,
    file_io: &FileIO,
    stage_io: &FileIO,
    files: &SnapshotChanges,
    merge: &MergePolicy,
    cache: Cached<'_>,
    attempt: Attempt<'_>,
) -> Result<PreparedCommit> {
    let mut written = Vec::new();
    let prepared = build_snapshot(
        table,
        file_io,
        stage_io,
        (files, merge, cache),
        attempt,
        &mut written,
    )
    .await;
    if prepared.is_err() {
        for path in &written {
            // Staged files never reached storage: not found is expected.
            if let Err(e) = file_io.delete(path).await {
                tracing::debug!("could not delete {path} of a failed attempt: {e}");
            }
        }
    }
    prepared
}

/// [`prepare_snapshot`]'s work; every file it writes is recorded in `written`.
async fn build_snapshot(
    table: &LoadedTable,
    file_io: &FileIO,
    stage_io: &FileIO,
    (files, merge, cache): (&SnapshotChanges, &MergePolicy, Cached<'_>),
    attempt: Attempt<'_>,
    written: &mut Vec<String>,
) -> Result<PreparedCommit> {
    let metadata = &*table.metadata;
    let Attempt {
        number: attempt,
        rebase,
    } = attempt;
    if metadata.uuid() != files.table_uuid {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "the table was dropped and recreated (uuid {} → {}) after the batch was written; it will be written again",
                files.table_uuid,
                metadata.uuid()
            ),
        ));
    }
    if !crate::evolve::compatible(metadata, files.schema_id)
        || metadata.default_partition_spec_id() != files.spec_id
    {
        return Err(Error::new(
            ErrorKind::SchemaChanged,
            "the table's schema or partition spec changed while the batch was written",
        ));
    }
    let reused = rebase.filter(|r| metadata.snapshot_by_id(r.snapshot_id).is_none());
    let snapshot_id = reused.map_or_else(|| new_snapshot_id(metadata), |r| r.snapshot_id);
    let parent = metadata.current_snapshot_id();
    let sequence_number = metadata.next_sequence_number();
    let offsets = offsets_update(metadata, files, snapshot_id, sequence_number)?;
    let mut staged = Vec::new();
    let (new_manifest, delete_manifest) = match reused {
        Some(r) => (r.data_manifest.clone(), r.delete_manifest.clone()),
        None => {
            let m = write_new_manifest(
                metadata,
                (stage_io, cache.manifests),
                snapshot_id,
                files.commit_id,
                &files.data_files,
                NewManifest::Data,
            )
            .await?;
            written.push(m.manifest_path.clone());
            staged.push(m.manifest_path.clone());
            let d = if files.delete_files.is_empty() {
                None
            } else {
                let d = write_new_manifest(
                    metadata,
                    (stage_io, cache.manifests),
                    snapshot_id,
                    files.commit_id,
                    &files.delete_files,
                    NewManifest::Deletes,
                )
                .await?;
                written.push(d.manifest_path.clone());
                staged.push(d.manifest_path.clone());
                Some(d)
            };
            (m, d)
        }
    };
    let mut carried = current_manifests(metadata, file_io, cache.list).await?;
    if !files.delete_files.is_empty() {
        refuse_deletes_across_specs(&carried, files.spec_id)?;
    }
    // Copy-on-write and positional removals plan on this attempt's head, every attempt.
    let rewrite = match &files.remove_keys {
        Some(remove) => {
            let r = remove_touched_rows(
                metadata,
                (file_io, cache.manifests),
                (snapshot_id, files.commit_id, attempt),
                carried,
                remove,
                written,
            )
            .await?;
            carried = r.manifests.clone();
            Some(r)
        }
        None => None,
    };
    let summary = append_summary(metadata, files, rewrite.as_ref())?;
    // A rebase only carries the new head's manifests: merging again would rewrite them
    // on every conflict; the next commit merges.
    let merge = if reused.is_some() {
        &MergePolicy::DISABLED
    } else {
        merge
    };
    // This attempt's copies that mark removed files DELETED are listed as they are (a
    // merge drops DELETED entries); the rest of the head merges as usual.
    let (own_copies, carried): (Vec<ManifestFile>, Vec<ManifestFile>) = carried
        .into_iter()
        .partition(|m| written.contains(&m.manifest_path));
    let merged = merge_manifests(
        metadata,
        (file_io, cache.manifests),
        snapshot_id,
        files.commit_id,
        carried,
        merge,
    )
    .await?;
    written.extend(merged.written);
    let mut manifests = vec![new_manifest.clone()];
    manifests.extend(delete_manifest.clone());
    // This attempt's own files: the remaining rows of rewritten files (copy-on-write) and
    // the position deletes it planned, each in a manifest of its own.
    let planned = rewrite.as_ref().map(|r| {
        [
            (&r.added, NewManifest::Rewritten(attempt)),
            (&r.position_deletes, NewManifest::PositionDeletes(attempt)),
        ]
    });
    for (new_files, kind) in planned.into_iter().flatten() {
        if new_files.is_empty() {
            continue;
        }
        let m = write_new_manifest(
            metadata,
            (stage_io, cache.manifests),
            snapshot_id,
            files.commit_id,
            new_files,
            kind,
        )
        .await?;
        written.push(m.manifest_path.clone());
        staged.push(m.manifest_path.clone());
        manifests.push(m);
    }
    manifests.extend(merged.manifests);
    manifests.extend(own_copies);

    // The attempt is part of the name: a rebased attempt reuses the snapshot id.
    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-{attempt}-{}.avro",
        metadata.location(),
        files.commit_id
    );
    let out = stage_io.new_output(&list_path)?.writer().await?;
    let mut list = match metadata.format_version() {
        FormatVersion::V1 => ManifestListWriter::v1(out, snapshot_id, parent),
        FormatVersion::V2 => ManifestListWriter::v2(out, snapshot_id, parent, sequence_number),
        FormatVersion::V3 => ManifestListWriter::v3(
            out,
            snapshot_id,
            parent,
            sequence_number,
            Some(metadata.next_row_id()),
        ),
    };
    // What the list will hold once written: the writer assigns this snapshot's sequence
    // number to its new manifests. (v3 also assigns row ids: not cached.)
    let manifest_list = ManifestListCache {
        path: if metadata.format_version() == FormatVersion::V2 {
            list_path.clone()
        } else {
            String::new()
        },
        manifests: manifests
            .iter()
            .cloned()
            .map(|mut m| {
                if m.sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
                    m.sequence_number = sequence_number;
                }
                if m.min_sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
                    m.min_sequence_number = sequence_number;
                }
                m
            })
            .collect(),
    };
    list.add_manifests(manifests.into_iter())?;
    let next_row_id = list.next_row_id();
    list.close().await?;
    written.push(list_path.clone());
    staged.push(list_path.clone());

    let builder = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent)
        .with_sequence_number(sequence_number)
        .with_summary(summary)
        .with_schema_id(metadata.current_schema_id())
        .with_timestamp_ms(chrono::Utc::now().timestamp_millis());
    let snapshot = match next_row_id {
        Some(next) => builder
            .with_row_range(metadata.next_row_id(), next - metadata.next_row_id())
            .build(),
        None => builder.build(),
    };
    Ok(PreparedCommit {
        snapshot_id,
        requirements: vec![
            TableRequirement::UuidMatch {
                uuid: files.table_uuid,
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: MAIN_BRANCH.to_string(),
                snapshot_id: parent,
            },
            // The schema the snapshot is made under: the files' own, or one evolved from
            // it since (see `evolve::compatible`).
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: metadata.current_schema_id(),
            },
            TableRequirement::DefaultSpecIdMatch {
                default_spec_id: files.spec_id,
            },
        ],
        updates: [
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_string(),
                reference: SnapshotReference::new(snapshot_id, main_retention(table.refs())),
            },
        ]
        .into_iter()
        .chain(offsets)
        .collect(),
        written: std::mem::take(written),
        staged,
        manifest_list,
        rebase: Rebase {
            snapshot_id,
            data_manifest: new_manifest,
            delete_manifest,
        },
    })
}

/// Whether a snapshot carrying `commit_id` is in the table's history (for commits of
/// unknown outcome).
pub fn find_commit(metadata: &TableMetadata, commit_id: Uuid) -> Option<i64> {
    let id = commit_id.to_string();
    metadata
        .snapshots()
        .find(|s| s.summary().additional_properties.get(COMMIT_ID_PROPERTY) == Some(&id))
        .map(|s| s.snapshot_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(json: &str) -> TableMetadata {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn legacy_summary_records_are_read_past_other_tools_snapshots() {
        // Snapshot 1 (floe) holds writer a's record; the head (another tool) holds none.
        let json = include_str!("../testdata/two_snapshots.json").replacen(
            r#""summary": {"operation": "append"}"#,
            r#""summary": {"operation": "append", "floe.offsets.a": "{\"s\":[[0,9]]}"}"#,
            1,
        );
        let m = metadata(&json);
        let committed = super::super::offsets::committed_offsets(&m, "a").unwrap();
        assert!(committed.contains("s", 9) && !committed.contains("s", 10));
    }

    #[test]
    fn main_keeps_its_retention_settings() {
        let json = include_str!("../testdata/two_snapshots.json").replace(
            r#""main": {"snapshot-id": 2, "type": "branch"}"#,
            r#""main": {"snapshot-id": 2, "type": "branch", "min-snapshots-to-keep": 7}"#,
        );
        match main_retention(table_refs(&metadata(&json)).as_ref()) {
            SnapshotRetention::Branch {
                min_snapshots_to_keep,
                ..
            } => assert_eq!(min_snapshots_to_keep, Some(7)),
            other => panic!("main is a branch, got {other:?}"),
        }
    }
}
