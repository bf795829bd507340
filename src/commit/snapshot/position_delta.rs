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
    use crate::rowops::removal::Removal;
    use iceberg::spec::{FormatVersion, Operation};

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
