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

/// Prepares `changes` as attempt `number` (rebasing on `rebase`) with `merge`.
async fn prepare_attempt(
    t: &super::test_table::MemoryTable,
    changes: &SnapshotChanges,
    merge: &MergePolicy,
    number: u32,
    rebase: Option<&Rebase>,
) -> PreparedCommit {
    let cache = Cached {
        list: None,
        manifests: &t.cache,
    };
    let attempt = Attempt { number, rebase };
    prepare_snapshot(&t.table, &t.io, &t.io, changes, merge, cache, attempt)
        .await
        .unwrap()
}

/// As the commit stage does after a definite refusal: every file the refused attempt
/// wrote but the rebase does not reuse is deleted once the rebased attempt has landed.
async fn delete_refused(t: &super::test_table::MemoryTable, refused: &PreparedCommit) {
    let reused = refused.rebase.reused_paths();
    for path in refused
        .written
        .iter()
        .filter(|p| !reused.contains(&p.as_str()))
    {
        t.io.delete(path).await.unwrap();
    }
}

/// For every kind of snapshot: an attempt refused by a conflict (another writer's commit
/// of the same keys in between, with merging on for the first attempt), rebased, and the
/// refused attempt's own files then deleted. The rebased snapshot must reference none of
/// them (reading the table reads every live file) and hold each key once, at its newest
/// value; a second rebase over yet another commit must do the same.
#[tokio::test]
async fn a_rebase_after_conflicts_references_nothing_the_refused_attempts_wrote() {
    use super::test_table::{MemoryTable, rows};
    for kind in ["equality", "rewrite", "positions"] {
        let mut t = MemoryTable::new();
        for i in 0..4 {
            t.insert(&[(10 + i, "old")]).await;
        }
        t.insert(&[(1, "a"), (2, "b"), (3, "c")]).await;
        let files = t.data_files(&[(2, "B"), (4, "D")]).await;
        let upsert = match kind {
            "equality" => t.changes(files, t.equality_deletes(&[2, 3, 4]).await, None),
            "rewrite" => t.changes(
                files,
                Vec::new(),
                Some(t.remove(&[2, 3, 4], Removal::Rewrite)),
            ),
            _ => t.changes(
                files,
                Vec::new(),
                Some(t.remove(&[2, 3, 4], Removal::PositionDeletes)),
            ),
        };
        let merge = MergePolicy {
            enabled: true,
            min_count: 2,
            target_bytes: 1 << 30,
        };
        let first = prepare_attempt(&t, &upsert, &merge, 0, None).await;
        // Another writer adds rows with touched keys first.
        t.insert(&[(3, "c2"), (4, "d0")]).await;
        let second = prepare_attempt(&t, &upsert, &merge, 1, Some(&first.rebase)).await;
        assert_eq!(second.snapshot_id, first.snapshot_id, "{kind}");
        // The first attempt merged the head's manifests; a rebase does not (its merged
        // manifests would take the refused attempt's names, deleted with it).
        let merged = |p: &PreparedCommit| p.written.iter().any(|w| w.ends_with("-m1.avro"));
        assert!(merged(&first) && !merged(&second), "{kind}");
        // And again before the rebase lands.
        t.insert(&[(2, "b2"), (5, "e")]).await;
        let third = prepare_attempt(&t, &upsert, &merge, 2, Some(&second.rebase)).await;
        assert!(!merged(&third), "{kind}");
        t.commit(third);
        delete_refused(&t, &first).await;
        delete_refused(&t, &second).await;
        let want = [
            (1, "a"),
            (2, "B"),
            (4, "D"),
            (5, "e"),
            (10, "old"),
            (11, "old"),
            (12, "old"),
            (13, "old"),
        ];
        assert_eq!(t.rows().await, rows(&want), "{kind}");
    }
}
