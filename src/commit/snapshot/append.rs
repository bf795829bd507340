//! An append: the new data files' manifest over the head's manifests, nothing removed.

use super::builder::{Planned, SnapshotBuilder};
use crate::error::Result;

pub(super) async fn plan(b: &mut SnapshotBuilder<'_>) -> Result<Planned> {
    Ok(Planned {
        own_manifests: Vec::new(),
        carried: b.head_manifests().await?,
        removed: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_table::{MemoryTable, operation, rows};
    use iceberg::spec::{ManifestContentType, Operation};

    #[tokio::test]
    async fn an_append_adds_its_rows_over_the_head() {
        let mut t = MemoryTable::new();
        let files = t.data_files(&[(1, "a"), (2, "b")]).await;
        let changes = t.changes(files, Vec::new(), None);
        let prepared = t.prepare(&changes).await.unwrap();
        assert_eq!(operation(&prepared), Operation::Append);
        t.commit(prepared);
        t.insert(&[(1, "c")]).await;
        // No key applies to an append: both rows with id 1 stay.
        assert_eq!(t.rows().await, rows(&[(1, "a"), (1, "c"), (2, "b")]));
        let data = ManifestContentType::Data;
        assert_eq!(t.manifest_contents().await, vec![data, data]);
    }
}
