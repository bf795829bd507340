//! A snapshot's summary: the `added-*` and `removed-*` figures of its files, running
//! `total-*` counts, its commit id and writer, and the operation Iceberg's own writers
//! would name it by.

use std::collections::HashMap;

use iceberg::spec::{DataFile, Operation, SnapshotSummaryCollector, Summary, TableMetadata};

use super::{COMMIT_ID_PROPERTY, SnapshotChanges};
use crate::commit::offsets::WRITER_ID_SUMMARY;
use crate::error::Result;
use crate::rowops::removal::Removed;
use crate::table::lineage::in_current_type;
use crate::write::deletion_vector::is_deletion_vector;

/// Each running total with the summary figures that add to and take from it.
const TOTALS: [(&str, &str, &str); 6] = [
    ("total-records", "added-records", "deleted-records"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    ("total-data-files", "added-data-files", "deleted-data-files"),
    (
        "total-delete-files",
        "added-delete-files",
        "removed-delete-files",
    ),
    (
        "total-position-deletes",
        "added-position-deletes",
        "removed-position-deletes",
    ),
    (
        "total-equality-deletes",
        "added-equality-deletes",
        "removed-equality-deletes",
    ),
];

/// Iceberg counts a deletion vector by its blob (`content_size_in_bytes`), not by the
/// Puffin file that holds it beside others, and apart from position-delete files
/// (`added-dvs`, `removed-dvs`); iceberg-rust 0.10.1's collector counts the whole file
/// as a position-delete file. This puts the figures right, before the totals use them.
fn count_vectors_as_iceberg_does(
    props: &mut HashMap<String, String>,
    added: &[&DataFile],
    removed: &[&DataFile],
) {
    let figures = [
        (
            added,
            "added-files-size",
            "added-position-delete-files",
            "added-dvs",
        ),
        (
            removed,
            "removed-files-size",
            "removed-position-delete-files",
            "removed-dvs",
        ),
    ];
    for (files, size, position_files, vectors_key) in figures {
        let vectors: Vec<&&DataFile> = files.iter().filter(|f| is_deletion_vector(f)).collect();
        if vectors.is_empty() {
            continue;
        }
        let whole_files: u64 = vectors.iter().map(|f| f.file_size_in_bytes()).sum();
        let blobs: u64 = vectors
            .iter()
            .map(|f| f.content_size_in_bytes().unwrap_or(0) as u64)
            .sum();
        let less = |props: &mut HashMap<String, String>, key: &str, by: u64| {
            let now = props
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            match now.saturating_sub(by) {
                0 => props.remove(key),
                left => props.insert(key.to_string(), left.to_string()),
            };
        };
        less(props, size, whole_files - blobs.min(whole_files));
        less(props, position_files, vectors.len() as u64);
        props.insert(vectors_key.to_string(), vectors.len().to_string());
    }
}

/// Summary properties: the collector's `added-*` figures plus running `total-*` counts.
pub(super) fn summarize(
    metadata: &TableMetadata,
    files: &SnapshotChanges,
    rewrite: Option<&Removed>,
) -> Result<Summary> {
    let mut collector = SnapshotSummaryCollector::default();
    let rewritten = rewrite.map(|r| r.added.as_slice()).unwrap_or_default();
    let position_deletes = rewrite
        .map(|r| r.position_deletes.as_slice())
        .unwrap_or_default();
    for file in files
        .data_files
        .iter()
        .chain(&files.delete_files)
        .chain(rewritten)
        .chain(position_deletes)
    {
        // The collector names each file's partition: values from before a column was
        // widened in their current type (iceberg-rust cannot name them otherwise).
        let spec = metadata.default_partition_spec();
        let file = in_current_type(file, spec, metadata.current_schema())?;
        collector.add_file(&file, metadata.current_schema().clone(), spec.clone());
    }
    let removed_files = rewrite.map(|r| r.removed.as_slice()).unwrap_or_default();
    for (file, spec_id) in removed_files {
        let spec = metadata
            .partition_spec_by_id(*spec_id)
            .unwrap_or_else(|| metadata.default_partition_spec())
            .clone();
        let file = in_current_type(file, &spec, metadata.current_schema())?;
        collector.remove_file(&file, metadata.current_schema().clone(), spec);
    }
    let mut props = files.properties.clone();
    props.extend(collector.build());
    let added: Vec<&DataFile> = position_deletes.iter().collect();
    let removed: Vec<&DataFile> = removed_files.iter().map(|(f, _)| f).collect();
    count_vectors_as_iceberg_does(&mut props, &added, &removed);
    let previous = metadata.current_snapshot().map(|s| s.summary());
    for (total, added, removed) in TOTALS {
        // A previous snapshot without this total (written by a writer that kept none)
        // leaves it unknown: better absent than wrong.
        let before = match previous {
            None => 0,
            Some(s) => match s
                .additional_properties
                .get(total)
                .and_then(|v| v.parse::<u64>().ok())
            {
                Some(v) => v,
                None => continue,
            },
        };
        let figure = |key: &str| {
            props
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let (add, remove) = (figure(added), figure(removed));
        props.insert(
            total.to_string(),
            (before + add).saturating_sub(remove).to_string(),
        );
    }
    props.insert(COMMIT_ID_PROPERTY.to_string(), files.commit_id.to_string());
    if let Some((writer_id, _)) = &files.offsets {
        props.insert(WRITER_ID_SUMMARY.to_string(), writer_id.clone());
    }
    // As Iceberg's own row delta names them: deletes alone are a delete, deletes with
    // new rows an overwrite.
    let removes =
        !files.delete_files.is_empty() || !removed_files.is_empty() || !position_deletes.is_empty();
    let adds = !files.data_files.is_empty() || !rewritten.is_empty();
    let operation = match (adds, removes) {
        (_, false) => Operation::Append,
        (false, true) => Operation::Delete,
        (true, true) => Operation::Overwrite,
    };
    Ok(Summary {
        operation,
        additional_properties: props,
    })
}
