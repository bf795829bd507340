//! A row delta with position deletes (positional merge-on-read): the touched keys' rows
//! in the head's files are found and deleted by position, beside the new data files.
//! Planned again on every attempt's head (see [`crate::rowops::removal`]).

use super::builder::{NewManifest, Planned, SnapshotBuilder};
use crate::error::Result;
use crate::rowops::removal::RemoveKeys;

pub(super) async fn plan(b: &mut SnapshotBuilder<'_>, remove: &RemoveKeys) -> Result<Planned> {
    let removed = b.remove_rows(remove).await?;
    let deletes = NewManifest::PositionDeletes(b.attempt);
    let own = b
        .manifest_of_any(&removed.position_deletes, deletes)
        .await?;
    Ok(Planned::removing(own, removed))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::test_table::{MemoryTable, figure, operation, rows};
    use crate::error::ErrorKind;
    use crate::rowops::removal::Removal;
    use crate::table::merge::MergePolicy;
    use iceberg::spec::{FormatVersion, ManifestContentType, Operation};

    #[tokio::test]
    async fn touched_rows_are_deleted_by_position() {
        let mut t = MemoryTable::new();
        t.insert(&[(1, "a"), (2, "b"), (3, "c")]).await;
        // Upsert 2 and 7 (new), delete 3.
        let files = t.data_files(&[(2, "B"), (7, "g")]).await;
        let remove = t.remove(&[2, 3, 7], Removal::PositionDeletes);
        let prepared = t
            .prepare(&t.changes(files, Vec::new(), Some(remove)))
            .await
            .unwrap();
        assert_eq!(operation(&prepared), Operation::Overwrite);
        assert_eq!(
            figure(&prepared, "added-position-deletes").as_deref(),
            Some("2")
        );
        t.commit(prepared);
        // The snapshot's own rows with those keys stay: its deletes name the head's files.
        assert_eq!(t.rows().await, rows(&[(1, "a"), (2, "B"), (7, "g")]));
        assert_eq!(t.file_counts().await, (2, 1, 0));
    }

    /// On v3 the positions go into deletion vectors: one live vector per data file,
    /// each new one holding the old one's positions, which it replaces.
    #[tokio::test]
    async fn v3_keeps_one_deletion_vector_per_data_file() {
        let mut t = MemoryTable::of_version(FormatVersion::V3);
        t.insert(&[(1, "a"), (2, "b"), (3, "c"), (4, "d")]).await;
        t.insert(&[(5, "e"), (6, "f")]).await;
        let mut want: BTreeMap<i64, String> = (1..=6)
            .map(|id| {
                (
                    id,
                    ["a", "b", "c", "d", "e", "f"][id as usize - 1].to_string(),
                )
            })
            .collect();
        // Each round upserts some keys and deletes one; keys 1 and 5 again and again.
        let rounds: [(&[(i64, &str)], i64); 4] = [
            (&[(1, "a1"), (5, "e1")], 2),
            (&[(1, "a2"), (6, "f2")], 3),
            (&[(5, "e3")], 1),
            (&[(7, "g4")], 7),
        ];
        for (upserts, deleted) in rounds {
            let files = t.data_files(upserts).await;
            let mut keys: Vec<i64> = upserts.iter().map(|(id, _)| *id).collect();
            keys.push(deleted);
            let remove = t.remove(&keys, Removal::PositionDeletes);
            let prepared = t
                .prepare(&t.changes(files, Vec::new(), Some(remove)))
                .await
                .unwrap();
            t.commit(prepared);
            want.remove(&deleted);
            want.extend(upserts.iter().map(|(id, v)| (*id, v.to_string())));
            let got: BTreeMap<i64, String> = t.rows().await.into_iter().collect();
            assert_eq!(got, want);
        }
        // rows() has checked that no data file has two live vectors.
        let (_, vectors, _) = t.file_counts().await;
        assert!(vectors >= 2, "{vectors} live deletion vectors");
        // The running totals follow the replaced vectors out.
        let head = t.table.metadata.current_snapshot().unwrap().summary();
        let total = &head.additional_properties["total-position-deletes"];
        assert_eq!(total, &t.live_position_deletes().await.to_string());
        assert_eq!(
            head.additional_properties["total-delete-files"],
            vectors.to_string()
        );
        // Sizes count each vector's blob once, not its whole Puffin file per vector.
        let size = &head.additional_properties["total-files-size"];
        assert_eq!(size, &t.live_size().await.to_string());
        for snapshot in t.table.metadata.snapshots() {
            let figures = &snapshot.summary().additional_properties;
            assert!(!figures.contains_key("added-position-delete-files"));
            let vectors = figures.contains_key("added-dvs");
            assert_eq!(vectors, figures.contains_key("added-delete-files"));
        }
    }

    /// Found by an attack on the deletion-vector change: a vector the head lists but
    /// storage no longer has (expired by another writer while this one's view was
    /// stale) is retryable, as every other file the plan reads, so the next attempt
    /// plans again on a reloaded head instead of failing the batch.
    #[tokio::test]
    async fn a_vanished_deletion_vector_is_retryable() {
        let mut t = MemoryTable::of_version(FormatVersion::V3);
        t.insert(&[(1, "a"), (2, "b"), (3, "c")]).await;
        let remove = t.remove(&[1], Removal::PositionDeletes);
        t.apply(t.changes(Vec::new(), Vec::new(), Some(remove)))
            .await;
        let manifests = t.manifests().await;
        let deletes = manifests
            .iter()
            .find(|m| m.content == ManifestContentType::Deletes);
        let entries = deletes.unwrap().load_manifest(&t.io).await.unwrap();
        let puffin = entries.entries()[0].data_file().file_path().to_string();
        t.io.delete(&puffin).await.unwrap();
        let remove = t.remove(&[2], Removal::PositionDeletes);
        let e = t
            .prepare(&t.changes(Vec::new(), Vec::new(), Some(remove)))
            .await
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    }

    /// Rows of one data file deleted one commit at a time: each commit replaces the last
    /// one's vector, leaving the manifest that listed it with only a DELETED entry; such
    /// manifests merge away (they stay listed until then: an earlier commit is found by
    /// its manifests when its answer was lost), so the delete manifests stay few.
    #[tokio::test]
    async fn replaced_vectors_leave_manifests_that_merge_away() {
        let mut t = MemoryTable::of_version(FormatVersion::V3);
        t.merge = MergePolicy {
            enabled: true,
            min_count: 4,
            target_bytes: 8 << 20,
        };
        let all: Vec<(i64, String)> = (1..=30).map(|id| (id, format!("v{id}"))).collect();
        let rows_of = |from: i64| -> Vec<(i64, &str)> {
            let kept = all.iter().filter(|(id, _)| *id >= from);
            kept.map(|(id, v)| (*id, v.as_str())).collect()
        };
        t.insert(&rows_of(1)).await;
        for id in 1..30 {
            let remove = t.remove(&[id], Removal::PositionDeletes);
            t.apply(t.changes(Vec::new(), Vec::new(), Some(remove)))
                .await;
            let manifests = t.manifests().await;
            let deletes = manifests
                .iter()
                .filter(|m| m.content == ManifestContentType::Deletes)
                .count();
            assert!(
                deletes <= 8,
                "after deleting {id}: {deletes} delete manifests"
            );
            assert_eq!(t.rows().await, rows(&rows_of(id + 1)));
        }
    }

    /// A hot key upserted on and on leaves one vector per commit (each for the last
    /// commit's file, never replaced) and one data manifest: on v3 too, manifests merge
    /// (data manifests' entries carrying their first row ids), so they grow by levels,
    /// not one per commit; and the rows stay right.
    #[tokio::test]
    async fn hot_key_vectors_merge_their_delete_manifests() {
        let mut t = MemoryTable::of_version(FormatVersion::V3);
        t.merge = MergePolicy {
            enabled: true,
            min_count: 4,
            target_bytes: 8 << 20,
        };
        t.insert(&[(1, "a"), (2, "b"), (3, "c")]).await;
        let mut ids = t.first_row_ids().await;
        for round in 0..30 {
            let value = format!("a{round}");
            let files = t.data_files(&[(1, value.as_str()), (2, "b")]).await;
            let remove = t.remove(&[1, 2], Removal::PositionDeletes);
            t.apply(t.changes(files, Vec::new(), Some(remove))).await;
            let manifests = t.manifests().await;
            let deletes = manifests
                .iter()
                .filter(|m| m.content == ManifestContentType::Deletes)
                .count();
            assert!(deletes <= 8, "round {round}: {deletes} delete manifests");
            let data = manifests.len() - deletes;
            assert!(data <= 8, "round {round}: {data} data manifests");
            // Merged or not, every file keeps the first row id it had.
            let now = t.first_row_ids().await;
            for (path, id) in &ids {
                if let Some(still) = now.get(path) {
                    assert_eq!(still, id, "round {round}: {path}");
                }
            }
            assert!(now.values().all(Option::is_some));
            ids = now;
            assert_eq!(
                t.rows().await,
                rows(&[(1, value.as_str()), (2, "b"), (3, "c")])
            );
        }
    }

    #[tokio::test]
    async fn deleting_rows_alone_makes_a_delete_snapshot() {
        let mut t = MemoryTable::new();
        t.insert(&[(1, "a"), (2, "b")]).await;
        let remove = t.remove(&[1], Removal::PositionDeletes);
        let prepared = t
            .prepare(&t.changes(Vec::new(), Vec::new(), Some(remove)))
            .await
            .unwrap();
        assert_eq!(operation(&prepared), Operation::Delete);
        t.commit(prepared);
        assert_eq!(t.rows().await, rows(&[(2, "b")]));
    }
}
