//! The part of snapshot production every operation shares: the checks that the table is
//! still the one the files were written for, the snapshot's ids, the manifest of the new
//! data files, and, once the operation has planned its own manifests, the manifest list,
//! the snapshot and the catalog request that publishes it.

use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestFile, ManifestListWriter,
    ManifestStatus, Snapshot, SnapshotReference, SnapshotRetention, TableMetadata,
    UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::{TableRequirement, TableUpdate};
use uuid::Uuid;

use super::summary::summarize;
use super::{Attempt, Cached, ManifestListCache, PreparedCommit, Rebase, SnapshotChanges};
use crate::catalog::{LoadedTable, Refs};
use crate::commit::offsets::{MAX_RANGES, committed_offsets, property_key, record_value};
use crate::error::{Error, ErrorKind, Result};
use crate::rowops::removal::{RemoveKeys, Removed, Written, remove_touched_rows};
use crate::table::manifest_cache::write_manifest;
use crate::table::manifest_writer::WrittenEntry;
use crate::table::merge::{MergePolicy, merge_manifests};

/// Which manifest of the snapshot's own files, named by it (`m0` and `d0`: merged
/// manifests are numbered `m1`, `m2`, … in merge.rs).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum NewManifest {
    /// The new data files.
    Data,
    /// The new equality-delete files.
    Deletes,
    /// Rows kept from files a copy-on-write attempt rewrote.
    Rewritten(u32),
    /// Position deletes a positional attempt planned.
    PositionDeletes(u32),
}

impl NewManifest {
    fn name(self) -> String {
        match self {
            NewManifest::Data => "m0".to_string(),
            NewManifest::Deletes => "d0".to_string(),
            NewManifest::Rewritten(attempt) => format!("w{attempt}"),
            NewManifest::PositionDeletes(attempt) => format!("p{attempt}"),
        }
    }

    fn content(self) -> ManifestContentType {
        match self {
            NewManifest::Deletes | NewManifest::PositionDeletes(_) => ManifestContentType::Deletes,
            NewManifest::Data | NewManifest::Rewritten(_) => ManifestContentType::Data,
        }
    }
}

/// What an operation planned on top of the data manifest: its own new manifests (listed
/// right after the data manifest), the head's manifests as the snapshot carries them
/// forward, and what it removed from them (for the summary).
pub(super) struct Planned {
    pub(super) own_manifests: Vec<ManifestFile>,
    pub(super) carried: Vec<ManifestFile>,
    pub(super) removed: Option<Removed>,
}

impl Planned {
    /// A removal's plan: `own_manifests` beside the head as the removal left it (moved
    /// out of `removed`: the summary reads only the files it added and removed).
    pub(super) fn removing(own_manifests: Vec<ManifestFile>, mut removed: Removed) -> Self {
        Planned {
            own_manifests,
            carried: std::mem::take(&mut removed.manifests),
            removed: Some(removed),
        }
    }
}

/// One snapshot in the making. Every file it writes is recorded in `written` as soon as
/// it exists, so [`super::prepare_snapshot`] can delete them when the attempt fails.
pub(super) struct SnapshotBuilder<'a> {
    pub(super) table: &'a LoadedTable,
    pub(super) file_io: &'a FileIO,
    /// Where the snapshot's small files go first (see [`PreparedCommit::staged`]).
    stage_io: &'a FileIO,
    pub(super) files: &'a SnapshotChanges,
    pub(super) cache: Cached<'a>,
    pub(super) attempt: u32,
    /// The refused attempt this one rebuilds, when its snapshot id is still free.
    pub(super) reused: Option<&'a Rebase>,
    pub(super) snapshot_id: i64,
    parent: Option<i64>,
    sequence_number: i64,
    /// Exactly-once: the writer's offsets record after this commit.
    offsets: Option<TableUpdate>,
    data_manifest: ManifestFile,
    /// Set by a row delta with equality deletes; reused by a rebase.
    pub(super) delete_manifest: Option<ManifestFile>,
    pub(super) written: &'a mut Vec<String>,
    staged: Vec<String>,
}

impl<'a> SnapshotBuilder<'a> {
    /// Checks that `files` still fit the table's head, picks the snapshot's ids and writes
    /// (or, rebasing, reuses) the manifest of the new data files.
    pub(super) async fn start(
        table: &'a LoadedTable,
        (file_io, stage_io): (&'a FileIO, &'a FileIO),
        (files, cache): (&'a SnapshotChanges, Cached<'a>),
        attempt: Attempt<'a>,
        written: &'a mut Vec<String>,
    ) -> Result<Self> {
        let metadata = &*table.metadata;
        check_same_table(metadata, files)?;
        let reused = attempt
            .rebase
            .filter(|r| metadata.snapshot_by_id(r.snapshot_id).is_none());
        let snapshot_id = reused.map_or_else(|| new_snapshot_id(metadata), |r| r.snapshot_id);
        let sequence_number = metadata.next_sequence_number();
        let offsets = offsets_update(metadata, files, snapshot_id, sequence_number)?;
        let commit = (metadata, stage_io, cache, snapshot_id, files.commit_id);
        let mut staged = Vec::new();
        let data_manifest = match reused {
            Some(r) => r.data_manifest.clone(),
            None => {
                let m = own_manifest(commit, &files.data_files, NewManifest::Data).await?;
                written.push(m.manifest_path.clone());
                staged.push(m.manifest_path.clone());
                m
            }
        };
        Ok(SnapshotBuilder {
            table,
            file_io,
            stage_io,
            files,
            cache,
            attempt: attempt.number,
            reused,
            snapshot_id,
            parent: metadata.current_snapshot_id(),
            sequence_number,
            offsets,
            data_manifest,
            delete_manifest: None,
            written,
            staged,
        })
    }

    pub(super) fn metadata(&self) -> &'a TableMetadata {
        &self.table.metadata
    }

    /// The manifests of the head this attempt builds on.
    pub(super) async fn head_manifests(&self) -> Result<Vec<ManifestFile>> {
        super::current_manifests(self.metadata(), self.file_io, self.cache.list).await
    }

    /// The head's manifests less the rows with `remove`'s keys: copy-on-write and
    /// positional plan this on the head of every attempt (see `rowops::removal`).
    pub(super) async fn remove_rows(&mut self, remove: &RemoveKeys) -> Result<Removed> {
        let head = self.head_manifests().await?;
        let ids = (self.snapshot_id, self.files.commit_id, self.attempt);
        let io = (self.file_io, self.cache.manifests);
        let metadata = &self.table.metadata;
        let out = Written {
            all: self.written,
            stage_io: self.stage_io,
            staged: &mut self.staged,
        };
        remove_touched_rows(metadata, io, ids, head, remove, out).await
    }

    /// A manifest of `files` when there are any (see [`Self::write_manifest`]).
    pub(super) async fn manifest_of_any(
        &mut self,
        files: &[DataFile],
        which: NewManifest,
    ) -> Result<Vec<ManifestFile>> {
        match files.is_empty() {
            true => Ok(Vec::new()),
            false => Ok(vec![self.write_manifest(files, which).await?]),
        }
    }

    /// Writes a manifest of this snapshot's own files to the staging storage.
    pub(super) async fn write_manifest(
        &mut self,
        files: &[DataFile],
        which: NewManifest,
    ) -> Result<ManifestFile> {
        let commit = (
            self.metadata(),
            self.stage_io,
            self.cache,
            self.snapshot_id,
            self.files.commit_id,
        );
        let manifest = own_manifest(commit, files, which).await?;
        self.written.push(manifest.manifest_path.clone());
        self.staged.push(manifest.manifest_path.clone());
        Ok(manifest)
    }

    /// Merges the carried manifests, writes the manifest list and returns the catalog
    /// request for the snapshot.
    pub(super) async fn finish(
        mut self,
        planned: Planned,
        merge: &MergePolicy,
    ) -> Result<PreparedCommit> {
        let metadata = self.metadata();
        let files = self.files;
        let summary = summarize(metadata, files, planned.removed.as_ref())?;
        // A rebase only carries the new head's manifests: merging again would rewrite them
        // on every conflict; the next commit merges.
        let merge = match self.reused {
            Some(_) => &MergePolicy::DISABLED,
            None => merge,
        };
        // This attempt's copies that mark removed files DELETED are listed as they are (a
        // merge drops DELETED entries); the rest of the head merges as usual.
        let (own_copies, carried): (Vec<ManifestFile>, Vec<ManifestFile>) = planned
            .carried
            .into_iter()
            .partition(|m| self.written.contains(&m.manifest_path));
        let merged = merge_manifests(
            metadata,
            (self.file_io, self.cache.manifests),
            self.snapshot_id,
            files.commit_id,
            carried,
            merge,
        )
        .await?;
        self.written.extend(merged.written);
        let mut manifests = vec![self.data_manifest.clone()];
        manifests.extend(planned.own_manifests);
        manifests.extend(merged.manifests);
        manifests.extend(own_copies);
        let (list_path, manifest_list, next_row_id) = self.write_list(manifests).await?;

        let builder = Snapshot::builder()
            .with_manifest_list(list_path)
            .with_snapshot_id(self.snapshot_id)
            .with_parent_snapshot_id(self.parent)
            .with_sequence_number(self.sequence_number)
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
            snapshot_id: self.snapshot_id,
            requirements: self.requirements(),
            updates: [
                TableUpdate::AddSnapshot { snapshot },
                TableUpdate::SetSnapshotRef {
                    ref_name: MAIN_BRANCH.to_string(),
                    reference: SnapshotReference::new(
                        self.snapshot_id,
                        main_retention(self.table.refs()),
                    ),
                },
            ]
            .into_iter()
            .chain(self.offsets.take())
            .collect(),
            written: std::mem::take(self.written),
            staged: self.staged,
            manifest_list,
            rebase: Rebase {
                snapshot_id: self.snapshot_id,
                data_manifest: self.data_manifest,
                delete_manifest: self.delete_manifest,
            },
        })
    }

    /// Writes the manifest list to the staging storage: its path, what it holds (to reuse
    /// once it is the head) and, on v3, the next row id after it.
    async fn write_list(
        &mut self,
        manifests: Vec<ManifestFile>,
    ) -> Result<(String, ManifestListCache, Option<u64>)> {
        let metadata = self.metadata();
        let (snapshot_id, parent, sequence_number) =
            (self.snapshot_id, self.parent, self.sequence_number);
        // The attempt is part of the name: a rebased attempt reuses the snapshot id.
        let list_path = format!(
            "{}/metadata/snap-{snapshot_id}-{}-{}.avro",
            metadata.location(),
            self.attempt,
            self.files.commit_id
        );
        let out = self.stage_io.new_output(&list_path)?.writer().await?;
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
        let cached = ManifestListCache {
            path: match metadata.format_version() {
                FormatVersion::V2 => list_path.clone(),
                _ => String::new(),
            },
            manifests: manifests
                .iter()
                .cloned()
                .map(|m| with_sequence_number(m, sequence_number))
                .collect(),
        };
        list.add_manifests(manifests.into_iter())?;
        let next_row_id = list.next_row_id();
        list.close().await?;
        self.written.push(list_path.clone());
        self.staged.push(list_path.clone());
        Ok((list_path, cached, next_row_id))
    }

    /// Pins the table UUID, the branch head, the schema and the spec, so a concurrent
    /// change is refused rather than lost.
    fn requirements(&self) -> Vec<TableRequirement> {
        vec![
            TableRequirement::UuidMatch {
                uuid: self.files.table_uuid,
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: MAIN_BRANCH.to_string(),
                snapshot_id: self.parent,
            },
            // The schema the snapshot is made under: the files' own, or one evolved from
            // it since (see `evolve::compatible`).
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: self.metadata().current_schema_id(),
            },
            TableRequirement::DefaultSpecIdMatch {
                default_spec_id: self.files.spec_id,
            },
        ]
    }
}

/// Refuses a head the files were not written for: another table under the same name, or
/// a schema or spec changed since.
fn check_same_table(metadata: &TableMetadata, files: &SnapshotChanges) -> Result<()> {
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
    Ok(())
}

/// A manifest as the list will hold it: one without a sequence number takes the
/// snapshot's.
fn with_sequence_number(mut m: ManifestFile, sequence_number: i64) -> ManifestFile {
    if m.sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
        m.sequence_number = sequence_number;
    }
    if m.min_sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
        m.min_sequence_number = sequence_number;
    }
    m
}

/// Writes a manifest of snapshot `snapshot_id`'s own files (ADDED, with its id) to
/// `stage_io`.
async fn own_manifest(
    (metadata, stage_io, cache, snapshot_id, commit_id): (
        &TableMetadata,
        &FileIO,
        Cached<'_>,
        i64,
        Uuid,
    ),
    files: &[DataFile],
    which: NewManifest,
) -> Result<ManifestFile> {
    // The snapshot id is part of the name: a retry never overwrites a manifest that an
    // attempt of unknown outcome may already reference.
    let path = format!(
        "{}/metadata/{commit_id}-{snapshot_id}-{}.avro",
        metadata.location(),
        which.name()
    );
    // A missing sequence number is inherited from the manifest list, so the manifest
    // stays valid if the snapshot is rebuilt after a conflict.
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
        (stage_io, cache.manifests),
        &path,
        snapshot_id,
        (which.content(), spec),
        entries,
    )
    .await
}

pub(super) fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (hi, lo) = Uuid::new_v4().as_u64_pair();
        let id = ((hi ^ lo) & (i64::MAX as u64)) as i64;
        if metadata.snapshot_by_id(id).is_none() {
            return id;
        }
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

/// Main's retention settings, kept when the branch moves.
pub(super) fn main_retention(refs: Option<&Refs>) -> SnapshotRetention {
    refs.and_then(|refs| refs.get(MAIN_BRANCH))
        .map(|r| r.retention.clone())
        .unwrap_or(SnapshotRetention::branch(None, None, None))
}
