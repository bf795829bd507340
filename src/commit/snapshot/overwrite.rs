//! An overwrite (copy-on-write): the files of the head that hold a touched key are
//! rewritten without those rows and removed, beside the new data files. Planned again on
//! every attempt's head (see [`crate::rowops::removal`]), so a concurrent commit never
//! loses or resurrects a row.

use super::builder::{NewManifest, Planned, SnapshotBuilder};
use crate::error::Result;
use crate::rowops::removal::RemoveKeys;

pub(super) async fn plan(b: &mut SnapshotBuilder<'_>, remove: &RemoveKeys) -> Result<Planned> {
    let removed = b.remove_rows(remove).await?;
    let kept = NewManifest::Rewritten(b.attempt);
    let own = b.manifest_of_any(&removed.added, kept).await?;
    Ok(Planned::removing(own, removed))
}

#[cfg(test)]
mod tests {
    use super::super::test_table::{MemoryTable, figure, operation, rows};
    use crate::rowops::removal::Removal;
    use iceberg::spec::Operation;

    #[tokio::test]
    async fn files_with_touched_keys_are_rewritten_without_them() {
        let mut t = MemoryTable::new();
        t.insert(&[(1, "a"), (2, "b"), (3, "c")]).await;
        t.insert(&[(4, "d")]).await;
        // Upsert 2 and delete 3.
        let files = t.data_files(&[(2, "B")]).await;
        let remove = t.remove(&[2, 3], Removal::Rewrite);
        let prepared = t
            .prepare(&t.changes(files, Vec::new(), Some(remove)))
            .await
            .unwrap();
        assert_eq!(operation(&prepared), Operation::Overwrite);
        assert_eq!(
            figure(&prepared, "deleted-data-files").as_deref(),
            Some("1")
        );
        assert_eq!(figure(&prepared, "total-records").as_deref(), Some("3"));
        t.commit(prepared);
        assert_eq!(t.rows().await, rows(&[(1, "a"), (2, "B"), (4, "d")]));
        // The new file, the rewritten one and the untouched one; no delete files.
        assert_eq!(t.file_counts().await, (3, 0, 0));
    }

    #[tokio::test]
    async fn keys_not_in_the_table_rewrite_nothing() {
        let mut t = MemoryTable::new();
        t.insert(&[(1, "a")]).await;
        let files = t.data_files(&[(5, "e")]).await;
        let remove = t.remove(&[5], Removal::Rewrite);
        let prepared = t
            .prepare(&t.changes(files, Vec::new(), Some(remove)))
            .await
            .unwrap();
        assert_eq!(operation(&prepared), Operation::Append);
        t.commit(prepared);
        assert_eq!(t.rows().await, rows(&[(1, "a"), (5, "e")]));
        assert_eq!(t.file_counts().await, (2, 0, 0));
    }
}
