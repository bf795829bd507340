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

use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::spec::{DataFile, ManifestFile, ManifestList, TableMetadata};
use iceberg::{TableRequirement, TableUpdate};
use uuid::Uuid;

use super::offsets::SourceOffsets;
use crate::catalog::LoadedTable;
use crate::error::{Error, Result};
use crate::rowops::removal::{Removal, RemoveKeys};
use crate::table::manifest_cache::ManifestCache;
use crate::table::merge::MergePolicy;
use builder::SnapshotBuilder;

mod append;
mod builder;
mod equality_delta;
mod overwrite;
mod position_delta;
mod summary;
#[cfg(test)]
mod test_table;
#[cfg(test)]
mod tests;

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
    /// Of those, the ones written to the staging storage (the new manifests, the manifest
    /// list, position deletes and small copy-on-write rewrites): they must be uploaded
    /// before the catalog request is sent.
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

/// The operation a snapshot performs, each produced by its own module over the shared
/// [`builder`].
#[derive(Clone, Copy)]
pub enum SnapshotKind<'a> {
    /// Data files only.
    Append,
    /// Data files and equality-delete files (merge-on-read).
    EqualityDelta,
    /// Data files, and the head's files holding touched keys rewritten (copy-on-write).
    Overwrite(&'a RemoveKeys),
    /// Data files, and position deletes for the touched keys' rows (positional).
    PositionDelta(&'a RemoveKeys),
}

impl SnapshotChanges {
    /// Which operation these changes make. A commit run holds at most one group with
    /// deletes, of one strategy (see `committer::stage::one_snapshot_each`), so equality
    /// deletes and keys to remove never meet; if they did, the snapshot is refused rather
    /// than half applied.
    pub fn kind(&self) -> Result<SnapshotKind<'_>> {
        match (&self.remove_keys, self.delete_files.is_empty()) {
            (None, true) => Ok(SnapshotKind::Append),
            (None, false) => Ok(SnapshotKind::EqualityDelta),
            (Some(remove), true) => Ok(match remove.by {
                Removal::Rewrite => SnapshotKind::Overwrite(remove),
                Removal::PositionDeletes => SnapshotKind::PositionDelta(remove),
            }),
            (Some(_), false) => Err(Error::internal(
                "a snapshot cannot both add equality deletes and remove keys' rows",
            )),
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

pub use crate::catalog::refs::table_refs;

/// Builds a snapshot of `files` on top of the table's current head: writes the data
/// manifest, the manifest list, position deletes and small rewrites to `stage_io` (see
/// [`PreparedCommit::staged`]), merges small manifests per `merge` in `file_io`, and
/// returns the catalog request. When it fails, what it wrote in `file_io` (merged
/// manifests, large rewrites, deletion vectors) is deleted: nothing references it.
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

/// [`prepare_snapshot`]'s work, dispatched by the snapshot's kind; every file it writes
/// is recorded in `written`.
async fn build_snapshot(
    table: &LoadedTable,
    file_io: &FileIO,
    stage_io: &FileIO,
    (files, merge, cache): (&SnapshotChanges, &MergePolicy, Cached<'_>),
    attempt: Attempt<'_>,
    written: &mut Vec<String>,
) -> Result<PreparedCommit> {
    let kind = files.kind()?;
    let ios = (file_io, stage_io);
    let mut b = SnapshotBuilder::start(table, ios, (files, cache), attempt, written).await?;
    let planned = match kind {
        SnapshotKind::Append => append::plan(&mut b).await?,
        SnapshotKind::EqualityDelta => equality_delta::plan(&mut b).await?,
        SnapshotKind::Overwrite(remove) => overwrite::plan(&mut b, remove).await?,
        SnapshotKind::PositionDelta(remove) => position_delta::plan(&mut b, remove).await?,
    };
    b.finish(planned, merge).await
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
