//! A row delta with equality deletes (merge-on-read): the new data files and the
//! equality-delete files on the key in one snapshot, one sequence number, so the deletes
//! remove older rows with their keys but never the snapshot's own. A rebase after a
//! conflict reuses both manifests; it only makes the deletes apply to rows committed in
//! between, which is what commit order means for an upsert.

use iceberg::spec::{ManifestContentType, ManifestFile};

use super::builder::{NewManifest, Planned, SnapshotBuilder};
use crate::error::{Error, Result};

pub(super) async fn plan(b: &mut SnapshotBuilder<'_>) -> Result<Planned> {
    let deletes = match b.reused.and_then(|r| r.delete_manifest.clone()) {
        Some(reused) => reused,
        None => {
            b.write_manifest(&b.files.delete_files, NewManifest::Deletes)
                .await?
        }
    };
    b.delete_manifest = Some(deletes.clone());
    let carried = b.head_manifests().await?;
    refuse_deletes_across_specs(&carried, b.files.spec_id)?;
    Ok(Planned {
        own_manifests: vec![deletes],
        carried,
        removed: None,
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

#[cfg(test)]
mod tests {
    use super::super::test_table::{MemoryTable, figure, operation, rows};
    use super::*;
    use iceberg::spec::Operation;

    #[tokio::test]
    async fn deletes_remove_older_rows_but_never_the_snapshots_own() {
        let mut t = MemoryTable::new();
        t.insert(&[(1, "a"), (2, "b")]).await;
        // An upsert of 1: the new row and a delete of key 1, in one snapshot.
        let (files, deletes) = (
            t.data_files(&[(1, "c")]).await,
            t.equality_deletes(&[1]).await,
        );
        let prepared = t.prepare(&t.changes(files, deletes, None)).await.unwrap();
        assert_eq!(operation(&prepared), Operation::Overwrite);
        assert_eq!(
            figure(&prepared, "added-equality-deletes").as_deref(),
            Some("1")
        );
        t.commit(prepared);
        assert_eq!(t.rows().await, rows(&[(1, "c"), (2, "b")]));
        let (data, deletes) = (ManifestContentType::Data, ManifestContentType::Deletes);
        assert_eq!(t.manifest_contents().await, vec![data, deletes, data]);
        assert_eq!(t.file_counts().await, (2, 0, 1));
    }

    #[tokio::test]
    async fn deletes_alone_make_a_delete_snapshot() {
        let mut t = MemoryTable::new();
        t.insert(&[(1, "a"), (2, "b")]).await;
        let deletes = t.equality_deletes(&[2, 3]).await;
        let prepared = t
            .prepare(&t.changes(Vec::new(), deletes, None))
            .await
            .unwrap();
        assert_eq!(operation(&prepared), Operation::Delete);
        t.commit(prepared);
        assert_eq!(t.rows().await, rows(&[(1, "a")]));
    }

    #[test]
    fn data_of_another_partition_spec_refuses_deletes() {
        let of_spec = |spec, added| ManifestFile {
            partition_spec_id: spec,
            added_files_count: Some(added),
            existing_files_count: Some(0),
            ..crate::table::merge::tests::manifest(1)
        };
        assert!(refuse_deletes_across_specs(&[of_spec(0, 3)], 0).is_ok());
        // A manifest of the old spec whose files are all gone holds nothing to reach.
        assert!(refuse_deletes_across_specs(&[of_spec(1, 0), of_spec(0, 1)], 0).is_ok());
        let refused = refuse_deletes_across_specs(&[of_spec(0, 1), of_spec(1, 2)], 0);
        let message = refused.unwrap_err().message().to_string();
        assert!(message.contains("partition spec 1"), "{message}");
    }
}
