//! Snapshot expiry: keeps table metadata bounded over long runs.
//!
//! Snapshots older than `commit.max_snapshot_age` are removed from the table, except
//! every ref's head and the newest `history.expire.min-snapshots-to-keep` (default 1)
//! ancestors of `main`. After the catalog accepted the removal, files no longer reachable
//! from any kept snapshot are deleted: the expired manifest lists, manifests no kept
//! list references and, when the table ever had a non-append snapshot, data files no
//! kept manifest references. (In a table that only ever appended, every data file is
//! live in the head, so the costly full scan is skipped.)

use std::collections::HashSet;
use std::time::Duration;

use iceberg::io::FileIO;
use iceberg::spec::{MAIN_BRANCH, ManifestFile, ManifestList, Operation, TableMetadata};
use iceberg::{TableRequirement, TableUpdate};

use super::snapshot::table_refs;
use crate::error::Result;

pub const MIN_SNAPSHOTS_TO_KEEP: &str = "history.expire.min-snapshots-to-keep";

/// Snapshot ids that have expired at `now_ms`.
pub fn expired_snapshots(metadata: &TableMetadata, max_age: Duration, now_ms: i64) -> Vec<i64> {
    if max_age.is_zero() {
        return Vec::new();
    }
    let cutoff = now_ms.saturating_sub(max_age.as_millis() as i64);
    let min_keep: usize = metadata
        .properties()
        .get(MIN_SNAPSHOTS_TO_KEEP)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    if !metadata.snapshots().any(|s| s.timestamp_ms() < cutoff) {
        return Vec::new();
    }
    // Refs that cannot be read: expire nothing rather than a ref's head.
    let Some(refs) = table_refs(metadata) else {
        return Vec::new();
    };
    let mut keep: HashSet<i64> = refs.values().map(|r| r.snapshot_id).collect();
    let mut next = metadata.snapshot_for_ref(MAIN_BRANCH).cloned();
    for _ in 0..min_keep {
        let Some(s) = next else { break };
        keep.insert(s.snapshot_id());
        next = s
            .parent_snapshot_id()
            .and_then(|p| metadata.snapshot_by_id(p).cloned());
    }
    metadata
        .snapshots()
        .filter(|s| s.timestamp_ms() < cutoff && !keep.contains(&s.snapshot_id()))
        .map(|s| s.snapshot_id())
        .collect()
}

/// The catalog request that removes `ids`, valid only while `main` is unchanged.
pub fn removal_request(
    metadata: &TableMetadata,
    ids: Vec<i64>,
) -> (Vec<TableRequirement>, Vec<TableUpdate>) {
    (
        vec![
            TableRequirement::UuidMatch {
                uuid: metadata.uuid(),
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: MAIN_BRANCH.to_string(),
                snapshot_id: metadata.current_snapshot_id(),
            },
        ],
        vec![TableUpdate::RemoveSnapshots { snapshot_ids: ids }],
    )
}

async fn manifests_of(
    metadata: &TableMetadata,
    file_io: &FileIO,
    list_path: &str,
) -> Result<Vec<ManifestFile>> {
    let bytes = file_io.new_input(list_path)?.read().await?;
    let list = ManifestList::parse_with_version(&bytes, metadata.format_version())?;
    Ok(list.consume_entries().into_iter().collect())
}

/// Deletes what the removal of `expired` (snapshots of `before`) left unreachable from
/// the snapshots of `after`. Returns how many files were deleted.
pub async fn delete_unreachable(
    before: &TableMetadata,
    after: &TableMetadata,
    file_io: &FileIO,
    expired: &[i64],
) -> Result<usize> {
    let mut kept_manifests: HashSet<String> = HashSet::new();
    let mut kept_lists: Vec<String> = Vec::new();
    for s in after.snapshots() {
        kept_lists.push(s.manifest_list().to_string());
        for m in manifests_of(after, file_io, s.manifest_list()).await? {
            kept_manifests.insert(m.manifest_path);
        }
    }
    let mut dead_lists = Vec::new();
    let mut dead_manifests: Vec<ManifestFile> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    for id in expired {
        let Some(s) = before.snapshot_by_id(*id) else {
            continue;
        };
        if !kept_lists.iter().any(|l| l == s.manifest_list()) {
            dead_lists.push(s.manifest_list().to_string());
        }
        for m in manifests_of(before, file_io, s.manifest_list()).await? {
            if !kept_manifests.contains(&m.manifest_path) && seen.insert(m.manifest_path.clone()) {
                dead_manifests.push(m);
            }
        }
    }
    let only_appends = before
        .snapshots()
        .all(|s| s.summary().operation == Operation::Append);
    let mut dead_data: Vec<String> = Vec::new();
    if !only_appends && !dead_manifests.is_empty() {
        let mut live: HashSet<String> = HashSet::new();
        let mut read: HashSet<String> = HashSet::new();
        for s in after.snapshots() {
            for m in manifests_of(after, file_io, s.manifest_list()).await? {
                if !read.insert(m.manifest_path.clone()) {
                    continue;
                }
                for e in m.load_manifest(file_io).await?.entries() {
                    if e.is_alive() {
                        live.insert(e.file_path().to_string());
                    }
                }
            }
        }
        for m in &dead_manifests {
            for e in m.load_manifest(file_io).await?.entries() {
                if !live.contains(e.file_path()) {
                    dead_data.push(e.file_path().to_string());
                }
            }
        }
        dead_data.sort();
        dead_data.dedup();
    }
    let mut deleted = 0;
    let paths = dead_data
        .iter()
        .chain(dead_manifests.iter().map(|m| &m.manifest_path))
        .chain(dead_lists.iter());
    for path in paths {
        match file_io.delete(path).await {
            Ok(()) => deleted += 1,
            // An orphan left behind costs storage, never correctness: say so and go on.
            Err(e) => tracing::warn!("could not delete expired file {path}: {e}"),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_age_expires_nothing() {
        // Without a table at hand, the zero-age rule alone: a disabled expiry never looks.
        let metadata_json = include_str!("testdata/two_snapshots.json");
        let metadata: TableMetadata = serde_json::from_str(metadata_json).unwrap();
        assert!(expired_snapshots(&metadata, Duration::ZERO, i64::MAX).is_empty());
        // Far in the future, everything but main's head has expired.
        let head = metadata.current_snapshot_id().unwrap();
        let expired = expired_snapshots(&metadata, Duration::from_secs(1), i64::MAX);
        assert!(!expired.contains(&head));
        assert_eq!(expired.len(), metadata.snapshots().count() - 1);
        // Not yet old enough: nothing.
        assert!(expired_snapshots(&metadata, Duration::from_secs(3600), 0).is_empty());
    }
}
