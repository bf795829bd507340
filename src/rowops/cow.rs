//! Copy-on-write: upserts and deletes that rewrite the data files holding their keys, so
//! the table never has delete files (readable by engines that refuse them: pyiceberg,
//! Unity Catalog, Snowflake).
//!
//! Each file that holds a touched key (found by [`super::lookup`]) is streamed a batch at
//! a time through one data-file sink without those rows, and the snapshot removes it:
//! memory holds one row group being read and the row groups being written, never a whole
//! file.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::table::manifest_cache::ManifestCache;
use arrow_array::BooleanArray;
use arrow_schema::SchemaRef;
use arrow_select::filter::filter_record_batch;
use futures::TryStreamExt;
use iceberg::io::FileIO;
use iceberg::spec::{FormatVersion, ManifestContentType, ManifestFile, TableMetadata};
use uuid::Uuid;

use super::conform::conform;
use super::lookup::{Hit, has_live_files, open_data_file, unreadable};
use super::removed::Removed;
use crate::error::{Error, Result};
use crate::table::merge::rewrite as rewrite_manifest;
use crate::write::{DataFileSink, FileSettings};

/// Refuses tables copy-on-write cannot rewrite correctly.
pub fn check_table(metadata: &TableMetadata, carried: &[ManifestFile]) -> Result<()> {
    if metadata.format_version() == FormatVersion::V3 {
        // Copied manifests would give untouched files new row ids (iceberg-rust does not
        // read inherited first row ids back), as merging would (see commit::merge).
        return Err(Error::config(
            "copy-on-write does not rewrite Iceberg v3 tables yet (row lineage would change); \
             use merge-on-read",
        ));
    }
    refuse_live_delete_files(carried)
}

/// Rewrites the files of `hits` without their touched rows; `carried` (the head's
/// manifests) comes back with each manifest that listed one replaced by a copy marking
/// it DELETED.
pub async fn rewrite(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    (snapshot_id, commit_id, attempt): (i64, Uuid, u32),
    carried: Vec<ManifestFile>,
    hits: Vec<Hit>,
    settings: &FileSettings,
    written: &mut Vec<String>,
) -> Result<Removed> {
    let current = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(metadata.current_schema()).map_err(Error::from)?,
    );
    // One sink for every remainder: small remainders of several files share a file.
    let mut sink = DataFileSink::new(metadata, file_io, settings)?;
    let mut removed_by_manifest: BTreeMap<usize, HashSet<String>> = BTreeMap::new();
    let mut removed = Vec::with_capacity(hits.len());
    for hit in hits {
        stream_without(file_io, &hit, &current, &mut sink).await?;
        removed_by_manifest
            .entry(hit.manifest)
            .or_default()
            .insert(hit.file.file_path().to_string());
        removed.push((hit.file, hit.spec_id));
    }
    let added = sink.close().await?;
    written.extend(added.iter().map(|f| f.file_path().to_string()));
    let mut manifests = Vec::with_capacity(carried.len());
    for (n, manifest) in carried.into_iter().enumerate() {
        let Some(removed_here) = removed_by_manifest.get(&n) else {
            manifests.push(manifest);
            continue;
        };
        let path = format!(
            "{}/metadata/{commit_id}-{snapshot_id}-{attempt}-r{n}.avro",
            metadata.location()
        );
        written.push(path.clone());
        manifests.push(
            without_files(
                metadata,
                (file_io, cache),
                snapshot_id,
                &path,
                &manifest,
                removed_here,
            )
            .await?,
        );
    }
    Ok(Removed {
        manifests,
        removed,
        added,
        ..Removed::default()
    })
}

/// Streams the rows of `hit`'s file, minus those at its positions, into `sink`.
async fn stream_without(
    file_io: &FileIO,
    hit: &Hit,
    current: &SchemaRef,
    sink: &mut DataFileSink,
) -> Result<()> {
    let path = hit.file.file_path();
    let read_error = |e: parquet::errors::ParquetError| unreadable(path, e);
    let mut stream = open_data_file(file_io, &hit.file)
        .await?
        .build()
        .map_err(read_error)?;
    let mut next = hit.positions.iter().copied().peekable();
    let mut offset = 0u64;
    while let Some(batch) = stream.try_next().await.map_err(read_error)? {
        let rows = batch.num_rows() as u64;
        let keep: BooleanArray = (offset..offset + rows)
            .map(|pos| Some(next.next_if_eq(&pos).is_none()))
            .collect();
        offset += rows;
        let kept = filter_record_batch(&conform(&batch, current)?, &keep)
            .map_err(|e| Error::internal(format!("rewriting {path}: {e}")))?;
        sink.write(&kept).await?;
    }
    Ok(())
}

/// A rewritten file gets a new sequence number, so delete files (from a merge-on-read
/// writer) that applied to its rows would stop applying and resurrect them. Refused
/// until floe applies them while rewriting.
fn refuse_live_delete_files(carried: &[ManifestFile]) -> Result<()> {
    let live = |m: &&ManifestFile| m.content == ManifestContentType::Deletes && has_live_files(m);
    match carried.iter().find(live) {
        None => Ok(()),
        Some(m) => Err(Error::config(format!(
            "copy-on-write cannot rewrite this table: it has delete files (manifest {}), \
             written by merge-on-read, that rewritten rows would escape; compact the table \
             (rewrite_data_files with delete files applied) or keep merge-on-read",
            m.manifest_path
        ))),
    }
}

/// A copy of `source` in which the `removed` files are DELETED entries and every other
/// live file an EXISTING one (with its sequence numbers), under the source's own spec.
async fn without_files(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    snapshot_id: i64,
    path: &str,
    source: &ManifestFile,
    removed: &HashSet<String>,
) -> Result<ManifestFile> {
    let spec = metadata
        .partition_spec_by_id(source.partition_spec_id)
        .ok_or_else(|| {
            Error::internal(format!(
                "manifest {} names partition spec {}, which the table does not have",
                source.manifest_path, source.partition_spec_id
            ))
        })?;
    let content = (ManifestContentType::Data, spec.as_ref().clone());
    let bin = std::slice::from_ref(source);
    let io = (file_io, cache);
    rewrite_manifest(metadata, io, snapshot_id, path, bin, content, removed).await
}
