//! Snapshot expiry: keeps table metadata bounded over long runs, within the table's own
//! retention settings.
//!
//! **What is kept** (Iceberg's retention rules, as Java's `ExpireSnapshots` applies them):
//! every ref's head; per branch, its ancestors younger than the branch's max snapshot age
//! and at least its `min-snapshots-to-keep` newest ancestors; snapshots no ref reaches
//! that are younger than the table's max snapshot age. A branch's settings come from the
//! ref itself (`max-snapshot-age-ms`, `min-snapshots-to-keep`), else from the table
//! properties `history.expire.max-snapshot-age-ms` / `history.expire.min-snapshots-to-keep`,
//! else from floe's `commit.max_snapshot_age` and `commit.max_snapshots`: floe's settings
//! only fill in what the table does not say. `commit.max_snapshots` (the newest N
//! ancestors of a branch) applies only under floe's defaults, so a table configured for
//! 7 days of time travel keeps 7 days.
//!
//! **What is deleted** after the catalog accepted the removal: expired manifest lists,
//! manifests no kept snapshot references and, when the table ever had a non-append
//! snapshot, data files no kept manifest references. On a table that is one chain of
//! snapshots (a streaming table), a round reads only the lists of the snapshots it
//! expires and of their kept neighbours (see [`lists_to_read`]); otherwise every kept
//! list.

use std::collections::HashSet;
use std::time::Duration;

use iceberg::io::FileIO;
use iceberg::spec::{
    MAIN_BRANCH, ManifestFile, ManifestList, Operation, SnapshotReference, SnapshotRetention,
    TableMetadata,
};
use iceberg::{TableRequirement, TableUpdate};

use super::snapshot::table_refs;
use crate::catalog::Refs;
use crate::error::Result;

pub const MIN_SNAPSHOTS_TO_KEEP: &str = "history.expire.min-snapshots-to-keep";
pub const MAX_SNAPSHOT_AGE_MS: &str = "history.expire.max-snapshot-age-ms";
pub const MAX_REF_AGE_MS: &str = "history.expire.max-ref-age-ms";

/// floe's retention defaults, used where the table and its refs set nothing.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// `commit.max_snapshot_age`; zero turns floe's expiry off.
    pub max_age: Duration,
    /// `commit.max_snapshots`: most ancestors a branch keeps under floe's defaults.
    pub max_snapshots: usize,
}

fn property<T: std::str::FromStr>(metadata: &TableMetadata, key: &str) -> Option<T> {
    metadata.properties().get(key).and_then(|v| v.parse().ok())
}

/// Snapshot ids that have expired at `now_ms`.
pub fn expired_snapshots(metadata: &TableMetadata, retention: Retention, now_ms: i64) -> Vec<i64> {
    let refs = table_refs(metadata);
    expired_snapshots_of(metadata, || refs.as_ref(), retention, now_ms)
}

/// [`expired_snapshots`] of a table whose refs `refs` gives (`None`: unreadable), asked
/// only past the cheap exits. Reading them from the metadata copies all of it (see
/// `catalog::refs`), which a writer that looked at expiry after every commit did: a
/// twentieth of its CPU at 32 writers.
pub fn expired_snapshots_of<'a>(
    metadata: &TableMetadata,
    refs: impl FnOnce() -> Option<&'a Refs>,
    retention: Retention,
    now_ms: i64,
) -> Vec<i64> {
    if retention.max_age.is_zero() || metadata.snapshots().len() <= 1 {
        return Vec::new();
    }
    let table_age: Option<i64> = property(metadata, MAX_SNAPSHOT_AGE_MS);
    let table_min: Option<usize> = property(metadata, MIN_SNAPSHOTS_TO_KEEP);
    let floe_age = retention.max_age.as_millis() as i64;
    let oldest_allowed = now_ms.saturating_sub(table_age.unwrap_or(floe_age));
    // Refs that cannot be read: expire nothing rather than a ref's head.
    let Some(refs) = refs() else {
        return Vec::new();
    };
    // Cheap exit for the common case: nothing old enough for any branch's age (its own
    // may be shorter than the table's) and no count cap to apply.
    let shortest_branch_age = refs
        .values()
        .filter_map(|r| match &r.retention {
            SnapshotRetention::Branch {
                max_snapshot_age_ms,
                ..
            } => *max_snapshot_age_ms,
            SnapshotRetention::Tag { .. } => None,
        })
        .min();
    let youngest_expirable = shortest_branch_age.map_or(oldest_allowed, |age| {
        oldest_allowed.max(now_ms.saturating_sub(age))
    });
    let cap_applies = table_age.is_none() && metadata.snapshots().len() > retention.max_snapshots;
    let any_old = metadata
        .snapshots()
        .any(|s| s.timestamp_ms() < youngest_expirable);
    if !any_old && !cap_applies {
        return Vec::new();
    }
    let mut keep: HashSet<i64> = HashSet::new();
    let mut reached: HashSet<i64> = HashSet::new();
    for reference in refs.values() {
        keep.insert(reference.snapshot_id);
        let SnapshotRetention::Branch {
            min_snapshots_to_keep,
            max_snapshot_age_ms,
            ..
        } = &reference.retention
        else {
            continue;
        };
        let age = max_snapshot_age_ms.or(table_age);
        let min_keep = min_snapshots_to_keep
            .map(|n| n as usize)
            .or(table_min)
            .unwrap_or(1)
            .max(1);
        // floe's count cap only where neither the ref nor the table set an age.
        let max_keep = if age.is_none() {
            retention.max_snapshots.max(min_keep)
        } else {
            usize::MAX
        };
        let cutoff = now_ms.saturating_sub(age.unwrap_or(floe_age));
        let mut next = metadata.snapshot_by_id(reference.snapshot_id).cloned();
        let mut depth = 0;
        while let Some(s) = next {
            reached.insert(s.snapshot_id());
            if depth < min_keep || (depth < max_keep && s.timestamp_ms() >= cutoff) {
                keep.insert(s.snapshot_id());
            }
            depth += 1;
            next = s
                .parent_snapshot_id()
                .and_then(|p| metadata.snapshot_by_id(p).cloned());
        }
    }
    metadata
        .snapshots()
        .filter(|s| !keep.contains(&s.snapshot_id()))
        // Unreferenced snapshots (no ref reaches them) go by the table's age alone.
        .filter(|s| reached.contains(&s.snapshot_id()) || s.timestamp_ms() < oldest_allowed)
        .map(|s| s.snapshot_id())
        .collect()
}

/// Refs whose `max-ref-age-ms` (or the table's `history.expire.max-ref-age-ms`) has
/// passed: tags and branches other than main, removed as Java's expiry does.
pub fn expired_refs(metadata: &TableMetadata, refs: Option<&Refs>, now_ms: i64) -> Vec<String> {
    let table_max: Option<i64> = property(metadata, MAX_REF_AGE_MS);
    let Some(refs) = refs else {
        return Vec::new();
    };
    refs.iter()
        .filter(|(name, _)| name.as_str() != MAIN_BRANCH)
        .filter(|(_, r): &(&String, &SnapshotReference)| {
            let max = match &r.retention {
                SnapshotRetention::Branch { max_ref_age_ms, .. } => *max_ref_age_ms,
                SnapshotRetention::Tag { max_ref_age_ms, .. } => *max_ref_age_ms,
            }
            .or(table_max);
            let head = metadata.snapshot_by_id(r.snapshot_id);
            matches!((max, head), (Some(max), Some(s)) if s.timestamp_ms() < now_ms.saturating_sub(max))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// The catalog request that removes `ids`, valid only while `main` is unchanged.
pub fn removal_request(
    metadata: &TableMetadata,
    ids: Vec<i64>,
    refs: Vec<String>,
) -> (Vec<TableRequirement>, Vec<TableUpdate>) {
    let mut updates: Vec<TableUpdate> = refs
        .into_iter()
        .map(|ref_name| TableUpdate::RemoveSnapshotRef { ref_name })
        .collect();
    if !ids.is_empty() {
        updates.push(TableUpdate::RemoveSnapshots { snapshot_ids: ids });
    }
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
        updates,
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

/// What a cleanup round did: files deleted, manifest lists read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cleanup {
    pub deleted: usize,
    pub lists_read: usize,
}

/// Whether every snapshot of the table is an ancestor of main's head: one chain, the
/// usual shape of a streaming table.
fn single_chain(metadata: &TableMetadata) -> bool {
    let mut reached = 0;
    let mut next = metadata.snapshot_for_ref(MAIN_BRANCH).cloned();
    while let Some(s) = next {
        reached += 1;
        next = s
            .parent_snapshot_id()
            .and_then(|p| metadata.snapshot_by_id(p).cloned());
    }
    reached == metadata.snapshots().len()
}

/// The kept snapshots whose manifest lists hold every manifest an expired snapshot may
/// share with a kept one.
///
/// A manifest is written by one snapshot and carried forward by its descendants until it
/// is merged away, never to return; so the snapshots referencing it form a connected part
/// of the snapshot tree. If an expired and a kept snapshot share it, so does every
/// snapshot on the path between them, including a kept one next to an expired one. On a
/// single chain those are the kept parents and children of expired snapshots: a read per
/// expired snapshot at most. With branches, rolled-back or staged snapshots, the path may
/// run through snapshots removed in earlier rounds, so every kept list is read.
fn lists_to_read(before: &TableMetadata, after: &TableMetadata, expired: &[i64]) -> Vec<i64> {
    if !single_chain(before) {
        return after.snapshots().map(|s| s.snapshot_id()).collect();
    }
    let expired_set: HashSet<i64> = expired.iter().copied().collect();
    let mut ids: Vec<i64> = after
        .snapshots()
        .filter(|s| {
            s.parent_snapshot_id()
                .is_some_and(|p| expired_set.contains(&p))
        })
        .map(|s| s.snapshot_id())
        .collect();
    ids.extend(expired.iter().filter_map(|e| {
        let parent = before.snapshot_by_id(*e)?.parent_snapshot_id()?;
        after.snapshot_by_id(parent).map(|p| p.snapshot_id())
    }));
    ids.sort();
    ids.dedup();
    ids
}

/// Deletes what the removal of `expired` (snapshots of `before`) left unreachable from
/// the snapshots of `after`.
pub async fn delete_unreachable(
    before: &TableMetadata,
    after: &TableMetadata,
    file_io: &FileIO,
    expired: &[i64],
) -> Result<Cleanup> {
    let mut lists_read = 0;
    let mut kept_manifests: HashSet<String> = HashSet::new();
    let kept_lists: HashSet<&str> = after.snapshots().map(|s| s.manifest_list()).collect();
    for id in lists_to_read(before, after, expired) {
        let Some(s) = after.snapshot_by_id(id) else {
            continue;
        };
        lists_read += 1;
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
        if !kept_lists.contains(s.manifest_list()) {
            dead_lists.push(s.manifest_list().to_string());
        }
        lists_read += 1;
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
    Ok(Cleanup {
        deleted,
        lists_read,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floe(age_s: u64, max_snapshots: usize) -> Retention {
        Retention {
            max_age: Duration::from_secs(age_s),
            max_snapshots,
        }
    }

    fn table(properties: &str, main_retention: &str) -> TableMetadata {
        crate::fixture::table(properties, 2, main_retention, "")
    }

    #[test]
    fn cleanup_reads_kept_neighbours_on_a_chain_and_everything_off_it() {
        // Chain 1 ← 2 (main): expiring 1 reads 2's list only.
        let before = table("{}", "");
        let mut v = serde_json::to_value(&before).unwrap();
        v["snapshots"]
            .as_array_mut()
            .unwrap()
            .retain(|s| s["snapshot-id"] != 1);
        let after: TableMetadata = serde_json::from_value(v).unwrap();
        assert!(single_chain(&before));
        assert_eq!(lists_to_read(&before, &after, &[1]), vec![2]);
        // A staged snapshot 3 hanging off 1 (never published): expiring it must keep
        // what 1 and 2 share with it, so every kept list is read.
        let branched = crate::fixture::table("{}", 2, "", &crate::fixture::third_snapshot(1, ""));
        assert!(!single_chain(&branched));
        let mut lists = lists_to_read(&branched, &before, &[3]);
        lists.sort();
        assert_eq!(lists, vec![1, 2]);
    }

    #[test]
    fn zero_age_expires_nothing() {
        let metadata = table("{}", "");
        assert!(expired_snapshots(&metadata, floe(0, 500), i64::MAX).is_empty());
        // Far in the future, everything but main's head has expired.
        let expired = expired_snapshots(&metadata, floe(1, 500), i64::MAX);
        assert_eq!(expired, vec![1]);
        // Not yet old enough: nothing.
        assert!(expired_snapshots(&metadata, floe(3600, 500), 0).is_empty());
    }

    #[test]
    fn the_tables_retention_wins_over_floes_defaults() {
        let now = 1_700_000_002_000 + 10_000; // 10 s after the head, 11 s after snapshot 1
        // floe's 5 s would expire snapshot 1; the table keeps a day.
        let week = table(r#"{"history.expire.max-snapshot-age-ms": "86400000"}"#, "");
        assert!(expired_snapshots(&week, floe(5, 500), now).is_empty());
        // The table keeps 2 snapshots whatever their age.
        let two = table(r#"{"history.expire.min-snapshots-to-keep": "2"}"#, "");
        assert!(expired_snapshots(&two, floe(5, 500), now).is_empty());
        // main's own retention wins over the table's.
        let m = table(
            r#"{"history.expire.max-snapshot-age-ms": "1000"}"#,
            r#", "max-snapshot-age-ms": 86400000"#,
        );
        assert!(expired_snapshots(&m, floe(5, 500), now).is_empty());
        // Under floe's defaults alone, the count cap applies: 1 snapshot kept.
        let plain = table("{}", "");
        assert_eq!(expired_snapshots(&plain, floe(3600, 1), now), vec![1]);
        // ... but not when the table sets an age: it keeps what the age says.
        assert!(expired_snapshots(&week, floe(3600, 1), now).is_empty());
    }

    /// A branch's own age shorter than the table's and floe's applies too: the cheap
    /// exit looked at those two alone and kept everything.
    #[test]
    fn a_branchs_own_shorter_age_expires_its_ancestors() {
        let now = 1_700_000_002_000 + 10_000; // snapshot 1 is 11 s old
        let main_1s = table("{}", r#", "max-snapshot-age-ms": 1000"#);
        assert_eq!(expired_snapshots(&main_1s, floe(3600, 500), now), vec![1]);
        let under_a_week = table(
            r#"{"history.expire.max-snapshot-age-ms": "604800000"}"#,
            r#", "max-snapshot-age-ms": 1000"#,
        );
        assert_eq!(
            expired_snapshots(&under_a_week, floe(3600, 500), now),
            vec![1]
        );
        // Younger than the branch's age: kept.
        let main_a_minute = table("{}", r#", "max-snapshot-age-ms": 60000"#);
        assert!(expired_snapshots(&main_a_minute, floe(3600, 500), now).is_empty());
    }
}
