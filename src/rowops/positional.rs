//! Positional merge-on-read: upserts and deletes that write the positions of the rows
//! they replace as position-delete files, found by copy-on-write's key lookup. Writes
//! cost one small file per data file touched (file-scoped, naming it in
//! `referenced_data_file`); readers that apply position deletes but not equality deletes
//! (pyiceberg, Snowflake) read the table.
//!
//! A row already deleted by a live position delete is not deleted again, so a key
//! upserted many times costs one position delete per upsert, not one per earlier row.
//!
//! On v3 tables the positions go into deletion vectors instead
//! ([`super::deletion_vectors`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use futures::TryStreamExt;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, Literal, ManifestContentType, ManifestFile,
    PrimitiveLiteral, Struct, TableMetadata,
};

use uuid::Uuid;

use super::deletion_vectors;
use super::lookup::{Hit, has_live_files, load, open_data_file, unreadable};
use super::removal::Written;
use super::removed::Removed;
use crate::error::{Error, Result};
use crate::table::manifest_cache::ManifestCache;
use crate::table::merge::carried_without;
use crate::table::position_deletes::RemovedPositions;
use crate::write::deletion_vector::is_deletion_vector;
use crate::write::{
    DELETE_FILE_PATH_FIELD_ID, DeletedRows, FileSettings, widened, write_position_delete_files,
};

/// Position deletes exist from format v2 on (v1 has no delete files); v3 keeps them in
/// deletion vectors.
pub fn check_table(metadata: &TableMetadata) -> Result<()> {
    match metadata.format_version() {
        FormatVersion::V2 | FormatVersion::V3 => Ok(()),
        FormatVersion::V1 => Err(Error::config(
            "merge-on-read-positional needs an Iceberg format v2 or v3 table; this one is v1",
        )),
    }
}

/// Writes position deletes for the touched rows of `hits` that no live position delete
/// of `carried` already removes; on a v2 table a data file all of whose rows are
/// touched, and that no live position delete names, is removed from its manifest
/// instead (the head's other manifests are kept as they are).
pub async fn delete_positions(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    ids: (i64, Uuid, u32),
    carried: Vec<ManifestFile>,
    hits: Vec<Hit>,
    settings: &FileSettings,
    out: Written<'_>,
) -> Result<Removed> {
    let spec_id = metadata.default_partition_spec_id();
    if let Some(old) = hits.iter().find(|h| h.spec_id != spec_id) {
        return Err(Error::config(format!(
            "a key to upsert or delete is in data file {} of partition spec {} (the current \
             one is {spec_id}); floe writes position deletes for the current spec only, so \
             this upsert is refused (rewrite the table's data under the current spec, or use \
             copy-on-write)",
            old.file.file_path(),
            old.spec_id
        )));
    }
    let already = deleted_positions(file_io, cache, &carried, &hits).await?;
    if metadata.format_version() >= FormatVersion::V3 {
        let io = (file_io, cache);
        return deletion_vectors::replace(metadata, io, ids, carried, hits, already, out.all).await;
    }
    // A file every row of which goes, and that no live position delete names, is
    // removed instead: no delete file has to name all its rows (and none is left
    // naming a removed file, so live rows stay records less position deletes).
    let (whole, hits): (Vec<Hit>, Vec<Hit>) = hits
        .into_iter()
        .partition(|h| h.removes_every_row() && !already.contains_key(h.file.file_path()));
    let mut by_manifest: BTreeMap<usize, HashSet<String>> = BTreeMap::new();
    for hit in &whole {
        let path = hit.file.file_path().to_string();
        by_manifest.entry(hit.manifest).or_default().insert(path);
    }
    let key = |f: &DataFile| f.file_path().to_string();
    let io = (file_io, cache);
    let manifests =
        carried_without(metadata, io, ids, "p", carried, &by_manifest, &key, out.all).await?;
    // A file live in two manifests has two hits: removed once (for the summary).
    let mut seen = HashSet::new();
    let removed = whole
        .into_iter()
        .filter(|h| seen.insert(h.file.file_path().to_string()))
        .map(|h| (h.file, h.spec_id))
        .collect();
    let deleted: Vec<DeletedRows> = hits
        .into_iter()
        .map(|hit| {
            let path = hit.file.file_path().to_string();
            let done = already.get(&path);
            DeletedRows {
                partition: hit.file.partition().clone(),
                positions: hit
                    .positions
                    .into_iter()
                    .filter(|p| done.is_none_or(|d| !d.contains(p)))
                    .collect(),
                path,
            }
        })
        .collect();
    let mut by_path: HashMap<String, Vec<u64>> = deleted
        .iter()
        .map(|d| (d.path.clone(), d.positions.clone()))
        .collect();
    let files = write_position_delete_files(deleted, metadata, out.stage_io, settings).await?;
    let paths = files.iter().map(|f| f.file_path().to_string());
    out.all.extend(paths.clone());
    out.staged.extend(paths);
    // Each file names one data file: what it removes is known without reading it back.
    for file in &files {
        let named = file.referenced_data_file();
        if let Some((path, positions)) = named.and_then(|p| by_path.remove_entry(&p)) {
            let removed = RemovedPositions::from([(path, positions)]);
            cache.position_deletes().remember(file, removed);
        }
    }
    Ok(Removed {
        manifests,
        removed,
        position_deletes: files,
        ..Removed::default()
    })
}

/// The positions of `hits`' files that live position-delete files of `carried` remove
/// already (only delete files of the same partition apply; deletion vectors are read by
/// [`super::deletion_vectors`]). Each delete file is read once (see
/// [`crate::table::position_deletes`]).
async fn deleted_positions(
    file_io: &FileIO,
    cache: &ManifestCache,
    carried: &[ManifestFile],
    hits: &[Hit],
) -> Result<HashMap<String, HashSet<u64>>> {
    let mut deleted: HashMap<String, HashSet<u64>> = HashMap::new();
    if hits.is_empty() {
        return Ok(deleted);
    }
    let known = cache.position_deletes();
    let mut live = HashSet::new();
    for manifest in carried
        .iter()
        .filter(|m| m.content == ManifestContentType::Deletes && has_live_files(m))
    {
        let entries = load(cache, file_io, manifest).await?;
        for entry in entries.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            if file.content_type() != DataContentType::PositionDeletes || is_deletion_vector(file) {
                continue;
            }
            live.insert(file.file_path().to_string());
            let relevant: HashSet<&str> = hits
                .iter()
                .filter(|h| {
                    h.spec_id == manifest.partition_spec_id
                        && same_partition(h.file.partition(), file.partition())
                        && may_name(file, h)
                })
                .map(|h| h.file.file_path())
                .collect();
            if relevant.is_empty() {
                continue;
            }
            let removed = match known.get(file) {
                Some(removed) => removed,
                // A file-scoped delete file (as floe writes them) names one data file: kept
                // whole. Another (e.g. partition-scoped) may name millions of rows of
                // other files: only the touched files' positions are read, and not kept.
                None if file.referenced_data_file().is_some() => {
                    known.remember(file, read_position_deletes(file_io, file, None).await?)
                }
                None => {
                    let only = Some(&relevant);
                    Arc::new(read_position_deletes(file_io, file, only).await?)
                }
            };
            for path in relevant {
                if let Some(positions) = removed.get(path) {
                    deleted
                        .entry(path.to_string())
                        .or_default()
                        .extend(positions.iter().copied());
                }
            }
        }
    }
    known.keep(&live);
    Ok(deleted)
}

/// Whether two partition tuples of one spec are the same partition. Values read from manifests
/// written before a partition source column was widened (int to long, float to double)
/// are of the narrower kind, those written after of the wider one: the same value either
/// way (a delete file written after the widening for a data file written before it names
/// the same partition).
pub(super) fn same_partition(a: &Struct, b: &Struct) -> bool {
    a.fields().len() == b.fields().len()
        && a.iter().zip(b.iter()).all(|(x, y)| match (x, y) {
            (Some(Literal::Primitive(x)), Some(Literal::Primitive(y))) => widened(x) == widened(y),
            (x, y) => x == y,
        })
}

/// Whether position-delete file `file` may name `hit`'s data file (its file_path bounds
/// include the path, or it has none).
fn may_name(file: &DataFile, hit: &Hit) -> bool {
    let path = hit.file.file_path();
    if let Some(referenced) = file.referenced_data_file() {
        return referenced == path;
    }
    let bound = |b: Option<&iceberg::spec::Datum>| match b.map(|d| d.literal()) {
        Some(PrimitiveLiteral::String(s)) => Some(s.clone()),
        _ => None,
    };
    let lower = bound(file.lower_bounds().get(&DELETE_FILE_PATH_FIELD_ID));
    let upper = bound(file.upper_bounds().get(&DELETE_FILE_PATH_FIELD_ID));
    lower.is_none_or(|l| l.as_str() <= path) && upper.is_none_or(|u| path <= u.as_str())
}

/// The positions position-delete file `file` removes, by data file (`only` those of the
/// data files named there, if given).
async fn read_position_deletes(
    file_io: &FileIO,
    file: &DataFile,
    only: Option<&HashSet<&str>>,
) -> Result<RemovedPositions> {
    let read_error = |e: parquet::errors::ParquetError| unreadable(file.file_path(), e);
    let mut stream = open_data_file(file_io, file)
        .await?
        .build()
        .map_err(read_error)?;
    let mut removed = RemovedPositions::new();
    while let Some(batch) = stream.try_next().await.map_err(read_error)? {
        let (Some(path_column), Some(pos_column)) = (
            batch.column_by_name("file_path"),
            batch.column_by_name("pos"),
        ) else {
            return Err(Error::internal(format!(
                "position-delete file {} lacks file_path or pos",
                file.file_path()
            )));
        };
        let paths_read = arrow_cast::cast(path_column, &arrow_schema::DataType::Utf8)
            .map_err(|e| Error::internal(format!("position deletes: {e}")))?;
        let paths_read = paths_read.as_string::<i32>();
        let positions = pos_column
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| Error::internal("position deletes: pos is not a long"))?;
        for row in 0..batch.num_rows() {
            let path = paths_read.value(row);
            if only.is_some_and(|only| !only.contains(path)) {
                continue;
            }
            match removed.get_mut(path) {
                Some(list) => list.push(positions.value(row) as u64),
                None => {
                    removed.insert(path.to_string(), vec![positions.value(row) as u64]);
                }
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(values: &[Option<Literal>]) -> Struct {
        Struct::from_iter(values.iter().cloned())
    }

    #[test]
    fn partitions_from_before_and_after_a_widening_are_the_same() {
        let narrow = tuple(&[Some(Literal::int(5)), Some(Literal::float(1.5)), None]);
        let wide = tuple(&[Some(Literal::long(5)), Some(Literal::double(1.5)), None]);
        assert!(same_partition(&narrow, &wide));
        assert!(same_partition(&wide, &narrow));
        assert!(same_partition(&narrow, &narrow));
        let other = tuple(&[Some(Literal::long(6)), Some(Literal::double(1.5)), None]);
        assert!(!same_partition(&narrow, &other));
        let other = tuple(&[Some(Literal::int(5)), Some(Literal::double(1.25)), None]);
        assert!(!same_partition(&narrow, &other));
        let null = tuple(&[None, Some(Literal::float(1.5)), None]);
        assert!(!same_partition(&narrow, &null));
        let nan = tuple(&[Some(Literal::int(5)), Some(Literal::float(f32::NAN)), None]);
        let wide_nan = tuple(&[
            Some(Literal::long(5)),
            Some(Literal::double(f64::NAN)),
            None,
        ]);
        assert!(
            same_partition(&nan, &wide_nan),
            "NaN is one partition, as in one kind"
        );
        assert!(same_partition(&nan, &nan));
        let shorter = tuple(&[Some(Literal::int(5)), Some(Literal::float(1.5))]);
        assert!(!same_partition(&narrow, &shorter));
        let strings = |s: &str| tuple(&[Some(Literal::string(s))]);
        assert!(same_partition(&strings("a"), &strings("a")));
        assert!(!same_partition(&strings("a"), &strings("b")));
    }
}
