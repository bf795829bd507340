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
    use super::super::test_table::{MemoryTable, figure, operation, rows};
    use crate::rowops::removal::Removal;
    use iceberg::spec::Operation;

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
