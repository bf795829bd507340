use super::builder::main_retention;
use super::*;
use iceberg::spec::SnapshotRetention;

fn metadata(json: &str) -> TableMetadata {
    serde_json::from_str(json).unwrap()
}

#[test]
fn legacy_summary_records_are_read_past_other_tools_snapshots() {
    // Snapshot 1 (floe) holds writer a's record; the head (another tool) holds none.
    let json = include_str!("../../testdata/two_snapshots.json").replacen(
        r#""summary": {"operation": "append"}"#,
        r#""summary": {"operation": "append", "floe.offsets.a": "{\"s\":[[0,9]]}"}"#,
        1,
    );
    let m = metadata(&json);
    let committed = crate::commit::offsets::committed_offsets(&m, "a").unwrap();
    assert!(committed.contains("s", 9) && !committed.contains("s", 10));
}

#[test]
fn main_keeps_its_retention_settings() {
    let json = include_str!("../../testdata/two_snapshots.json").replace(
        r#""main": {"snapshot-id": 2, "type": "branch"}"#,
        r#""main": {"snapshot-id": 2, "type": "branch", "min-snapshots-to-keep": 7}"#,
    );
    match main_retention(table_refs(&metadata(&json)).as_ref()) {
        SnapshotRetention::Branch {
            min_snapshots_to_keep,
            ..
        } => assert_eq!(min_snapshots_to_keep, Some(7)),
        other => panic!("main is a branch, got {other:?}"),
    }
}

#[tokio::test]
async fn changes_pick_their_operation() {
    use super::test_table::MemoryTable;
    let t = MemoryTable::new();
    let data = t.data_files(&[(1, "a")]).await;
    let deletes = t.equality_deletes(&[1]).await;
    let kind = |changes: &SnapshotChanges| {
        format!(
            "{:?}",
            changes
                .kind()
                .map(|k| match k {
                    SnapshotKind::Append => "append",
                    SnapshotKind::EqualityDelta => "equality delta",
                    SnapshotKind::Overwrite(_) => "overwrite",
                    SnapshotKind::PositionDelta(_) => "position delta",
                })
                .map_err(|e| e.kind())
        )
    };
    assert_eq!(
        kind(&t.changes(data.clone(), Vec::new(), None)),
        r#"Ok("append")"#
    );
    assert_eq!(
        kind(&t.changes(data.clone(), deletes.clone(), None)),
        r#"Ok("equality delta")"#
    );
    let rewrite = || Some(t.remove(&[1], Removal::Rewrite));
    assert_eq!(
        kind(&t.changes(data.clone(), Vec::new(), rewrite())),
        r#"Ok("overwrite")"#
    );
    let positions = Some(t.remove(&[1], Removal::PositionDeletes));
    assert_eq!(
        kind(&t.changes(Vec::new(), Vec::new(), positions)),
        r#"Ok("position delta")"#
    );
    // Never produced by the committer; refused rather than half applied.
    assert_eq!(kind(&t.changes(data, deletes, rewrite())), "Err(Internal)");
}

/// A retry after a conflict reuses the snapshot id and the manifests of the new files,
/// and writes a new manifest list on the new head.
#[tokio::test]
async fn a_rebase_reuses_the_new_files_manifests() {
    use super::test_table::{MemoryTable, rows};
    let mut t = MemoryTable::new();
    let (files, deletes) = (
        t.data_files(&[(1, "b")]).await,
        t.equality_deletes(&[1]).await,
    );
    let upsert = t.changes(files, deletes, None);
    let refused = t.prepare(&upsert).await.unwrap();
    // Another writer commits first.
    t.insert(&[(1, "a"), (2, "x")]).await;
    let cache = Cached {
        list: None,
        manifests: &t.cache,
    };
    let attempt = Attempt {
        number: 1,
        rebase: Some(&refused.rebase),
    };
    let merge = MergePolicy::DISABLED;
    let rebased = prepare_snapshot(&t.table, &t.io, &t.io, &upsert, &merge, cache, attempt)
        .await
        .unwrap();
    assert_eq!(rebased.snapshot_id, refused.snapshot_id);
    assert_eq!(rebased.rebase.reused_paths(), refused.rebase.reused_paths());
    assert_ne!(rebased.manifest_list.path, refused.manifest_list.path);
    t.commit(rebased);
    // The upsert's delete now applies to the row committed in between.
    assert_eq!(t.rows().await, rows(&[(1, "b"), (2, "x")]));
}
