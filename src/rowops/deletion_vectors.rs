//! Positional merge-on-read on v3 tables: the touched rows' positions go into deletion
//! vectors ([`crate::write::deletion_vector`]), one per touched data file, all in one
//! Puffin file per commit attempt.
//!
//! The spec allows one live deletion vector per data file. A file that has one already
//! gets a new one holding the old positions and the new, and the old one's manifest
//! entry is marked DELETED in the same snapshot (its manifest is rewritten; a Puffin
//! file can hold vectors of other data files, so entries are told apart by offset).
//! Positions of older position-delete files (a table upgraded from v2) are folded into
//! the vector too: readers that find a deletion vector for a file ignore those. Those
//! naming only that file (`referenced_data_file`) are removed with the old vector, so
//! their positions are not counted twice nor read again.
//! A file whose touched rows are all deleted already gets no new vector.

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, ManifestContentType, ManifestFile, PartitionKey, TableMetadata,
};
use iceberg::writer::file_writer::location_generator::LocationGenerator;
use roaring::RoaringTreemap;
use uuid::Uuid;

use super::lookup::{Hit, has_live_files, load, unreadable};
use super::positional::same_partition;
use super::removed::Removed;
use crate::error::{Error, Result};
use crate::table::manifest_cache::ManifestCache;
use crate::table::merge::carried_without;
use crate::write::deletion_vector::{
    DeletionVector, blob_range, decode_blob, is_deletion_vector, read_range, write_deletion_vectors,
};

/// A live delete file of the head: its entry, the index of the manifest listing it (in
/// the head's manifests) and that manifest's partition spec id.
struct Live {
    entry: DataFile,
    manifest: usize,
    spec_id: i32,
}

/// The live position deletes of one data file that a new deletion vector replaces: its
/// vector, if any, and the position-delete files naming only it.
#[derive(Default)]
struct Replaceable {
    vector: Option<Live>,
    scoped: Vec<Live>,
}

/// Writes the deletion vectors of `hits`' files (with `folded`, the positions older
/// position-delete files remove, and each file's live vector) and removes the vectors
/// they replace from `carried`, the head's manifests.
pub async fn replace(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    (snapshot_id, commit_id, attempt): (i64, Uuid, u32),
    carried: Vec<ManifestFile>,
    hits: Vec<Hit>,
    mut folded: HashMap<String, HashSet<u64>>,
    written: &mut Vec<String>,
) -> Result<Removed> {
    // One vector per data file, whatever the lookup gave.
    let mut touched: BTreeMap<&str, (&Hit, Vec<u64>)> = BTreeMap::new();
    for hit in &hits {
        let at = touched
            .entry(hit.file.file_path())
            .or_insert((hit, Vec::new()));
        at.1.extend(&hit.positions);
    }
    let targets: HashSet<&str> = touched.keys().copied().collect();
    let live = live_deletes(file_io, cache, &carried, &targets).await?;
    let mut vectors = Vec::new();
    let mut replaced: Vec<&Live> = Vec::new();
    for (path, (hit, new)) in touched {
        let old = live.get(path);
        let vector = old.and_then(|o| o.vector.as_ref());
        let mut positions = match vector {
            Some(v) => {
                let puffin = v.entry.file_path();
                let blob = read_range(file_io, puffin, blob_range(&v.entry)?)
                    .await
                    .map_err(|e| unreadable(puffin, e))?;
                decode_blob(&blob, v.entry.file_path())?
            }
            None => RoaringTreemap::new(),
        };
        positions.extend(folded.remove(path).unwrap_or_default());
        let before = positions.len();
        positions.extend(new);
        if positions.len() == before {
            continue; // every touched row is deleted already
        }
        replaced.extend(vector);
        // Only those whose positions were folded in (the same partition's, as
        // `positional::deleted_positions` reads them).
        let folded_in = |s: &&Live| {
            s.spec_id == hit.spec_id && same_partition(s.entry.partition(), hit.file.partition())
        };
        replaced.extend(old.iter().flat_map(|o| &o.scoped).filter(folded_in));
        vectors.push(DeletionVector {
            data_file: path.to_string(),
            partition: hit.file.partition().clone(),
            positions,
        });
    }
    let spec_id = metadata.default_partition_spec_id();
    let mut added = Vec::new();
    if !vectors.is_empty() {
        let path = puffin_path(metadata)?;
        written.push(path.clone());
        added = write_deletion_vectors(&vectors, &path, spec_id, file_io).await?;
    }
    // A Puffin file holds several data files' vectors: an entry is its path and offset.
    let key = |f: &DataFile| (f.file_path().to_string(), f.content_offset());
    let mut by_manifest: BTreeMap<usize, HashSet<(String, Option<i64>)>> = BTreeMap::new();
    for old in &replaced {
        by_manifest
            .entry(old.manifest)
            .or_default()
            .insert(key(&old.entry));
    }
    let removed = replaced
        .iter()
        .map(|old| (old.entry.clone(), old.spec_id))
        .collect();
    let ids = (snapshot_id, commit_id, attempt);
    let io = (file_io, cache);
    let manifests = carried_without(
        metadata,
        io,
        ids,
        "dv",
        carried,
        &by_manifest,
        &key,
        written,
    )
    .await?;
    Ok(Removed {
        manifests,
        removed,
        position_deletes: added,
        ..Removed::default()
    })
}

/// The live deletion vectors and file-scoped position-delete files of `carried` for the
/// data files `targets`, by data file.
async fn live_deletes(
    file_io: &FileIO,
    cache: &ManifestCache,
    carried: &[ManifestFile],
    targets: &HashSet<&str>,
) -> Result<HashMap<String, Replaceable>> {
    let mut live: HashMap<String, Replaceable> = HashMap::new();
    if targets.is_empty() {
        return Ok(live);
    }
    for (n, manifest) in carried.iter().enumerate() {
        if manifest.content != ManifestContentType::Deletes || !has_live_files(manifest) {
            continue;
        }
        let entries = load(cache, file_io, manifest).await?;
        for entry in entries.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            if file.content_type() != DataContentType::PositionDeletes {
                continue;
            }
            let target = match file.referenced_data_file() {
                Some(target) => target,
                None if is_deletion_vector(file) => {
                    return Err(Error::internal(format!(
                        "deletion vector in {} names no data file",
                        file.file_path()
                    )));
                }
                None => continue, // a position-delete file of several data files
            };
            if !targets.contains(target.as_str()) {
                continue;
            }
            let found = Live {
                entry: file.clone(),
                manifest: n,
                spec_id: manifest.partition_spec_id,
            };
            let at = live.entry(target.clone()).or_default();
            if !is_deletion_vector(file) {
                at.scoped.push(found);
            } else if at.vector.replace(found).is_some() {
                return Err(Error::internal(format!(
                    "data file {target} has two live deletion vectors (the spec allows one)"
                )));
            }
        }
    }
    Ok(live)
}

/// Where a commit attempt's Puffin file goes: among the table's data files (a file can
/// hold vectors of several partitions, so in no partition's folder).
fn puffin_path(metadata: &TableMetadata) -> Result<String> {
    let name = format!("00000-{}-deletes.puffin", Uuid::new_v4());
    let locations = crate::write::location::FileLocations::new(metadata);
    Ok(locations.generate_location(None::<&PartitionKey>, &name))
}
