//! Manifest merging: keeps the manifest list short after many small commits.
//!
//! Every append adds one small manifest. Without merging, a table after 10,000 commits
//! has 10,000 manifests that every reader opens and every commit carries forward. Like
//! Iceberg's merge-append, once the head holds `commit.manifest.min-count-to-merge`
//! (default 100) small data manifests of the current spec, they are packed into bins of
//! up to `commit.manifest.target-size-bytes` (default 8 MiB) and each bin of two or more
//! is rewritten as one manifest whose entries keep their snapshot ids and sequence
//! numbers (status EXISTING). Entries already marked deleted are dropped. Delete
//! manifests (one per merge-on-read commit) merge the same way, among themselves: their
//! entries keep their sequence numbers, so each delete still applies to exactly the rows
//! it applied to.
//!
//! Unlike merge-append, manifests merge by level ([`level`]). Merge-append packs the
//! table's earlier merged manifest into every merge, so each merge rewrites every entry
//! of the table up to 8 MiB of manifest: a streaming table of one-file commits paid for
//! its whole history every 100 commits. Here a merge takes manifests of one level only:
//! level 0 (fewer than min-count files, typically one commit's) merges at min-count
//! manifests, and each higher level at [`LEVEL_FAN_IN`], into a manifest of the next
//! level. Each entry is rewritten a few times in a table's life (about 2.5 per commit at
//! 10,000 commits), and the head lists at most min-count plus fan-in − 1 per level
//! manifests (112 after 10,000 one-file commits).
//!
//! Manifests this writer wrote are merged from the entries it remembers
//! ([`ManifestCache::written`]) instead of being read back, and small manifests other
//! writers wrote are read once while the head lists them ([`ManifestCache::read_entries`]):
//! with several writers on a table, every attempt of a merging commit read them all
//! again, most of a writer's CPU once conflicts made it try again and again.

use std::collections::BTreeMap;

use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, ManifestContentType, ManifestFile, ManifestStatus, PartitionSpec, TableMetadata,
};
use uuid::Uuid;

use super::lineage::{first_row_ids, with_first_row_id};
use super::manifest_cache::{ManifestCache, write_manifest};
use super::manifest_writer::WrittenEntry;
use crate::error::{Error, ErrorKind, Result};

/// How many manifests of a level above 0 merge into one of the next level (fewer when
/// min-count is smaller).
const LEVEL_FAN_IN: usize = 10;

pub const MIN_COUNT_TO_MERGE: &str = "commit.manifest.min-count-to-merge";
pub const TARGET_SIZE_BYTES: &str = "commit.manifest.target-size-bytes";
pub const MERGE_ENABLED: &str = "commit.manifest-merge.enabled";

/// When to merge; read from the config and the table's properties.
#[derive(Debug, Clone, Copy)]
pub struct MergePolicy {
    pub enabled: bool,
    pub min_count: usize,
    pub target_bytes: u64,
}

impl MergePolicy {
    pub const DISABLED: MergePolicy = MergePolicy {
        enabled: false,
        min_count: usize::MAX,
        target_bytes: 0,
    };

    /// `config_enabled` (floe's `commit.manifest_merge_enabled`) can only turn merging
    /// off; the table's properties set the thresholds and can turn it off too.
    pub fn for_table(config_enabled: bool, metadata: &TableMetadata) -> Result<Self> {
        let props = metadata.properties();
        let parse = |key: &str, default: u64| -> Result<u64> {
            props.get(key).map_or(Ok(default), |v| {
                v.parse().map_err(|_| {
                    Error::config(format!("table property {key}={v:?} is not a number"))
                })
            })
        };
        let table_enabled = props
            .get(MERGE_ENABLED)
            .is_none_or(|v| !v.eq_ignore_ascii_case("false"));
        Ok(MergePolicy {
            enabled: config_enabled && table_enabled,
            min_count: parse(MIN_COUNT_TO_MERGE, 100)?.max(2) as usize,
            target_bytes: parse(TARGET_SIZE_BYTES, 8 << 20)?,
        })
    }
}

pub struct Merged {
    pub manifests: Vec<ManifestFile>,
    /// Manifests written by the merge (for cleanup if the commit is refused).
    pub written: Vec<String>,
}

/// Returns `carried` (the head's manifests) with small data manifests of the default
/// spec merged when there are enough of them, and likewise small delete manifests (one
/// per merge-on-read commit), each kind into its own bins.
pub async fn merge_manifests(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    snapshot_id: i64,
    commit_id: Uuid,
    carried: Vec<ManifestFile>,
    policy: &MergePolicy,
) -> Result<Merged> {
    // Entries read for earlier merges of manifests the head no longer lists are dropped.
    cache.keep_read(&carried);
    let mut merged = Merged {
        manifests: carried,
        written: Vec::new(),
    };
    for (content, prefix) in [
        (ManifestContentType::Data, "m"),
        (ManifestContentType::Deletes, "dm"),
    ] {
        let carried = std::mem::take(&mut merged.manifests);
        let step = merge_kind(
            metadata,
            (file_io, cache),
            (snapshot_id, commit_id),
            carried,
            policy,
            (content, prefix),
        )
        .await?;
        merged.manifests = step.manifests;
        merged.written.extend(step.written);
    }
    Ok(merged)
}

/// A manifest's level: 0 below `min_count` files, then one more for each factor of the
/// fan-in (`min_count`·fan-in, `min_count`·fan-in², …). Files a manifest marks deleted
/// do not count (a merge drops them); a manifest without counts (v1) is level 0.
fn level(m: &ManifestFile, min_count: usize) -> u32 {
    let files = u64::from(m.added_files_count.unwrap_or(0))
        + u64::from(m.existing_files_count.unwrap_or(0));
    let fan_in = fan_in(min_count) as u64;
    let (mut level, mut bound) = (0, min_count as u64);
    while files >= bound {
        level += 1;
        bound = bound.saturating_mul(fan_in);
    }
    level
}

fn fan_in(min_count: usize) -> usize {
    LEVEL_FAN_IN.min(min_count).max(2)
}

/// Merges the small manifests of one content kind, level by level (see the module
/// doc); merged bins are named `{commit}-{snapshot}-{prefix}{n}.avro` (n from 1: `m0`
/// and `d0` are a commit's own).
async fn merge_kind(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    (snapshot_id, commit_id): (i64, Uuid),
    carried: Vec<ManifestFile>,
    policy: &MergePolicy,
    (content, prefix): (ManifestContentType, &str),
) -> Result<Merged> {
    let spec_id = metadata.default_partition_spec_id();
    let mergeable = |m: &ManifestFile| {
        m.content == content
            && m.partition_spec_id == spec_id
            && (m.manifest_length as u64) < policy.target_bytes
    };
    if !policy.enabled {
        return Ok(Merged {
            manifests: carried,
            written: Vec::new(),
        });
    }
    let (small, mut kept): (Vec<ManifestFile>, Vec<ManifestFile>) =
        carried.into_iter().partition(|m| mergeable(m));
    let mut by_level: BTreeMap<u32, Vec<ManifestFile>> = BTreeMap::new();
    for m in small {
        by_level
            .entry(level(&m, policy.min_count))
            .or_default()
            .push(m);
    }
    let mut written = Vec::new();
    for (at, members) in by_level {
        // At level 0 the new manifest of this commit counts too, as in Iceberg's
        // merge-append.
        let enough = match at {
            0 => members.len() + 1 >= policy.min_count,
            _ => members.len() >= fan_in(policy.min_count),
        };
        if !enough {
            kept.extend(members);
            continue;
        }
        for bin in pack(members, policy.target_bytes) {
            if bin.len() < 2 {
                kept.extend(bin);
                continue;
            }
            let path = format!(
                "{}/metadata/{commit_id}-{snapshot_id}-{prefix}{}.avro",
                metadata.location(),
                written.len() + 1
            );
            let spec = metadata.default_partition_spec().as_ref().clone();
            let merged = rewrite(
                metadata,
                (file_io, cache),
                snapshot_id,
                &path,
                &bin,
                (content, spec),
                &|_| false,
            )
            .await?;
            written.push(path);
            // It merges again at its level in a later commit, not in this one: an
            // intermediate manifest merged away at once would be left unreferenced.
            kept.push(merged);
        }
    }
    Ok(Merged {
        manifests: kept,
        written,
    })
}

/// Packs manifests, in order, into bins of at most `target` bytes (a bin always takes
/// at least one manifest).
fn pack(manifests: Vec<ManifestFile>, target: u64) -> Vec<Vec<ManifestFile>> {
    let mut bins: Vec<Vec<ManifestFile>> = Vec::new();
    let mut bin_bytes = 0u64;
    for m in manifests {
        let size = m.manifest_length.max(0) as u64;
        match bins.last_mut() {
            Some(bin) if bin_bytes + size <= target => {
                bin_bytes += size;
                bin.push(m);
            }
            _ => {
                bin_bytes = size;
                bins.push(vec![m]);
            }
        }
    }
    bins
}

/// Writes the live entries of the manifests `bin` (of `content`, under `spec`) as one
/// manifest at `path`, keeping their snapshot ids and sequence numbers: EXISTING, or
/// DELETED for the files `removed` picks (a copy-on-write commit removing them, a
/// deletion vector replaced by a new one).
pub(crate) async fn rewrite(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    snapshot_id: i64,
    path: &str,
    bin: &[ManifestFile],
    (content, spec): (ManifestContentType, PartitionSpec),
    removed: &(dyn Fn(&DataFile) -> bool + Sync),
) -> Result<ManifestFile> {
    let mut remembered = Vec::new();
    for source in bin {
        let entries = entries_of((file_io, cache), source).await?;
        // v3: the entries leave the manifest their first row ids were inherited from, so
        // they carry them (the copy is listed with a first row id of its own).
        let ids = first_row_ids(source, entries.iter().map(|e| (e.status, &e.data_file)));
        for (entry, first_row_id) in entries.into_iter().zip(ids) {
            if entry.status == ManifestStatus::Deleted {
                continue;
            }
            let snapshot = entry.snapshot_id.unwrap_or(source.added_snapshot_id);
            let Some(sequence) = entry.sequence_number else {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!(
                        "manifest {} has an EXISTING entry without a data sequence number",
                        source.manifest_path
                    ),
                ));
            };
            // Writers older than the file sequence number leave it out of EXISTING
            // entries, and Iceberg's writer requires one: the data sequence number is the
            // closest known value (equal unless the file was rewritten by a compaction).
            let file_sequence = entry.file_sequence_number.or(Some(sequence));
            let file = match first_row_id {
                Some(id) if entry.data_file.first_row_id().is_none() => {
                    with_first_row_id(&entry.data_file, id, spec.spec_id())?
                }
                _ => entry.data_file,
            };
            let status = match removed(&file) {
                true => ManifestStatus::Deleted,
                false => ManifestStatus::Existing,
            };
            remembered.push(WrittenEntry {
                status,
                snapshot_id: Some(match status {
                    ManifestStatus::Deleted => snapshot_id,
                    _ => snapshot,
                }),
                sequence_number: Some(sequence),
                file_sequence_number: file_sequence,
                data_file: file,
            });
        }
    }
    // When every live entry carries its first row id, the copy is listed with the
    // lowest of them, so the list writer gives it no new range of row ids: none would
    // be used, and merges would use up ids for rows appended long ago.
    let carried_ids: Option<Vec<i64>> = remembered
        .iter()
        .filter(|e| e.status != ManifestStatus::Deleted)
        .map(|e| e.data_file.first_row_id())
        .collect();
    let mut written = write_manifest(
        metadata,
        (file_io, cache),
        path,
        snapshot_id,
        (content, &spec),
        remembered,
    )
    .await?;
    if content == ManifestContentType::Data
        && let Some(lowest) = carried_ids.and_then(|ids| ids.into_iter().min())
    {
        written.first_row_id = Some(lowest as u64);
    }
    Ok(written)
}

/// A copy of the one manifest `source` at `path`, under its own partition spec, in which
/// the files `removed` picks are DELETED entries and every other live file an EXISTING
/// one (see [`rewrite`]): a copy-on-write commit removing data files, a deletion vector
/// replaced by a new one.
pub(crate) async fn without_files(
    metadata: &TableMetadata,
    io: (&FileIO, &ManifestCache),
    snapshot_id: i64,
    path: &str,
    source: &ManifestFile,
    removed: &(dyn Fn(&DataFile) -> bool + Sync),
) -> Result<ManifestFile> {
    let spec = metadata
        .partition_spec_by_id(source.partition_spec_id)
        .ok_or_else(|| {
            Error::internal(format!(
                "manifest {} names partition spec {}, which the table does not have",
                source.manifest_path, source.partition_spec_id
            ))
        })?;
    let content = (source.content, spec.as_ref().clone());
    let bin = std::slice::from_ref(source);
    rewrite(metadata, io, snapshot_id, path, bin, content, removed).await
}

/// `carried` (a head's manifests) with each manifest that `removed` names by index
/// replaced by a copy (see [`without_files`]) marking DELETED its files whose `key` is in
/// that manifest's set; the copies are named `{commit}-{snapshot}-{attempt}-{tag}{n}` and
/// recorded in `written` before they are written.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn carried_without<K: Eq + std::hash::Hash + Sync>(
    metadata: &TableMetadata,
    io: (&FileIO, &ManifestCache),
    (snapshot_id, commit_id, attempt): (i64, Uuid, u32),
    tag: &str,
    carried: Vec<ManifestFile>,
    removed: &BTreeMap<usize, std::collections::HashSet<K>>,
    key: &(dyn Fn(&DataFile) -> K + Sync),
    written: &mut Vec<String>,
) -> Result<Vec<ManifestFile>> {
    let mut manifests = Vec::with_capacity(carried.len());
    for (n, manifest) in carried.into_iter().enumerate() {
        let Some(gone) = removed.get(&n) else {
            manifests.push(manifest);
            continue;
        };
        let path = format!(
            "{}/metadata/{commit_id}-{snapshot_id}-{attempt}-{tag}{n}.avro",
            metadata.location()
        );
        written.push(path.clone());
        let removes = |f: &DataFile| gone.contains(&key(f));
        manifests.push(without_files(metadata, io, snapshot_id, &path, &manifest, &removes).await?);
    }
    Ok(manifests)
}

/// The entries of `source` with what they inherit from its list entry: from the
/// entries this writer remembers writing (v2 tables only), else read from storage (where
/// iceberg-rust applies the same inheritance when loading: snapshot id from the
/// manifest; sequence numbers for ADDED entries and for manifests written before v2,
/// whose sequence number is 0) or remembered from such a read through a list entry with
/// the same values to inherit.
async fn entries_of(
    (file_io, cache): (&FileIO, &ManifestCache),
    source: &ManifestFile,
) -> Result<Vec<WrittenEntry>> {
    if let Some(written) = cache.written(&source.manifest_path) {
        return Ok(written
            .entries
            .iter()
            .map(|e| e.inherited(source))
            .collect());
    }
    if let Some(read) = cache.read_entries(source) {
        return Ok(read.as_ref().clone());
    }
    let manifest = source.load_manifest(file_io).await?;
    let entries: Vec<WrittenEntry> = manifest
        .entries()
        .iter()
        .map(|e| WrittenEntry {
            status: e.status(),
            snapshot_id: e.snapshot_id(),
            sequence_number: e.sequence_number(),
            file_sequence_number: e.file_sequence_number,
            data_file: e.data_file().clone(),
        })
        .collect();
    cache.remember_read(source, &entries);
    Ok(entries)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A data manifest list entry of `len` bytes, without counts, for tests.
    pub(crate) fn manifest(len: i64) -> ManifestFile {
        ManifestFile {
            manifest_path: format!("m{len}"),
            manifest_length: len,
            partition_spec_id: 0,
            content: ManifestContentType::Data,
            sequence_number: 1,
            min_sequence_number: 1,
            added_snapshot_id: 1,
            added_files_count: None,
            existing_files_count: None,
            deleted_files_count: None,
            added_rows_count: None,
            existing_rows_count: None,
            deleted_rows_count: None,
            partitions: None,
            key_metadata: None,
            first_row_id: None,
        }
    }

    fn with_files(added: u32, existing: u32) -> ManifestFile {
        ManifestFile {
            added_files_count: Some(added),
            existing_files_count: Some(existing),
            ..manifest(1)
        }
    }

    #[test]
    fn levels_grow_by_the_fan_in_above_min_count() {
        let at = |files, min_count| level(&with_files(files, 0), min_count);
        assert_eq!(
            [1, 99, 100, 999, 1_000, 9_999, 10_000].map(|f| at(f, 100)),
            [0, 0, 1, 1, 2, 2, 3]
        );
        // Existing entries count, deleted ones (dropped by a merge) do not.
        assert_eq!(level(&with_files(50, 50), 100), 1);
        // A small min-count keeps the fan-in at most min-count.
        assert_eq!(
            [1, 2, 3, 8, 9, 26, 27].map(|f| at(f, 3)),
            [0, 0, 1, 1, 2, 2, 3]
        );
        // No counts (a v1 manifest): level 0.
        assert_eq!(level(&manifest(1), 100), 0);
    }

    #[test]
    fn packing_respects_the_target_and_keeps_order() {
        let bins = pack(vec![manifest(4), manifest(5), manifest(2), manifest(9)], 10);
        let sizes: Vec<Vec<i64>> = bins
            .iter()
            .map(|b| b.iter().map(|m| m.manifest_length).collect())
            .collect();
        assert_eq!(sizes, vec![vec![4, 5], vec![2], vec![9]]);
        // An oversized manifest still gets a bin of its own.
        assert_eq!(pack(vec![manifest(20)], 10).len(), 1);
    }

    fn data_file(i: usize) -> iceberg::spec::DataFile {
        iceberg::spec::DataFileBuilder::default()
            .content(iceberg::spec::DataContentType::Data)
            .file_path(format!("memory:/t/data/{i}.parquet"))
            .file_format(iceberg::spec::DataFileFormat::Parquet)
            .partition(iceberg::spec::Struct::empty())
            .record_count(i as u64 + 1)
            .file_size_in_bytes(100)
            .build()
            .unwrap()
    }

    /// A merge reads the manifests this writer wrote from the entries it remembers; one
    /// that cannot (another writer's manifests, a restart) reads them from storage. Both
    /// must write the same entries: same status, snapshot ids and sequence numbers.
    #[tokio::test]
    async fn merging_remembered_entries_writes_what_merging_from_storage_does() {
        let metadata = crate::fixture::table("{}", 2, "", "");
        let spec = metadata.default_partition_spec().as_ref().clone();
        let io = FileIO::new_with_memory();
        let remembering = ManifestCache::default();
        // Three commits' manifests (ADDED, sequence numbers inherited from the list),
        // and one an earlier merge wrote (EXISTING, its own numbers).
        let written: Vec<(i64, i64, Vec<WrittenEntry>)> = vec![
            (11, 4, vec![added(11, 0)]),
            (12, 5, vec![added(12, 1), added(12, 2)]),
            (13, 6, vec![added(13, 3)]),
            (10, 3, vec![existing(7, 2, 4), existing(9, 3, 5)]),
        ];
        let mut listed = Vec::new();
        for (i, (snapshot, sequence, entries)) in written.into_iter().enumerate() {
            let path = format!("memory:/t/metadata/m{i}.avro");
            let content = (ManifestContentType::Data, &spec);
            let mut manifest = write_manifest(
                &metadata,
                (&io, &remembering),
                &path,
                snapshot,
                content,
                entries,
            )
            .await
            .unwrap();
            // What the manifest list writer assigns when the commit lands.
            manifest.sequence_number = sequence;
            if manifest.min_sequence_number == iceberg::spec::UNASSIGNED_SEQUENCE_NUMBER {
                manifest.min_sequence_number = sequence;
            }
            listed.push(manifest);
        }
        // A copy-on-write commit removing one file as it merges.
        let removed = std::collections::HashSet::from(["memory:/t/data/2.parquet".to_string()]);
        let merge = |cache, path| {
            let (io, metadata, listed, removed, spec) = (&io, &metadata, &listed, &removed, &spec);
            async move {
                let content = (ManifestContentType::Data, spec.clone());
                let removes = |f: &DataFile| removed.contains(f.file_path());
                let merged = rewrite(metadata, (io, cache), 20, path, listed, content, &removes)
                    .await
                    .unwrap();
                let bytes = io.new_input(path).unwrap().read().await.unwrap();
                let manifest = iceberg::spec::Manifest::parse_avro(&bytes).unwrap();
                (merged, manifest.entries().to_vec())
            }
        };
        let (from_memory, remembered) = merge(&remembering, "memory:/t/metadata/a.avro").await;
        let fresh = ManifestCache::default();
        let (from_storage, read) = merge(&fresh, "memory:/t/metadata/b.avro").await;
        assert_eq!(remembered, read);
        // Merged again with what the first merge read (another writer's manifests, read
        // once): the same entries.
        let (_, read_again) = merge(&fresh, "memory:/t/metadata/c.avro").await;
        assert_eq!(read_again, read);
        assert!(listed.iter().all(|m| fresh.read_entries(m).is_some()));
        // The same manifests listed at other sequence numbers (an attempt rebuilt on a new
        // head lists its manifest again at the next one): ADDED entries inherit the new
        // numbers, not the remembered ones.
        let relisted: Vec<ManifestFile> = listed
            .iter()
            .map(|m| ManifestFile {
                sequence_number: m.sequence_number + 10,
                ..m.clone()
            })
            .collect();
        let content = (ManifestContentType::Data, spec.clone());
        rewrite(
            &metadata,
            (&io, &fresh),
            21,
            "memory:/t/metadata/d.avro",
            &relisted,
            content,
            &|_: &DataFile| false,
        )
        .await
        .unwrap();
        let bytes = io
            .new_input("memory:/t/metadata/d.avro")
            .unwrap()
            .read()
            .await
            .unwrap();
        let shifted = iceberg::spec::Manifest::parse_avro(&bytes).unwrap();
        let numbers: Vec<_> = shifted
            .entries()
            .iter()
            .map(|e| e.sequence_number())
            .collect();
        assert_eq!(numbers, [14, 15, 15, 16, 2, 3].map(Some));
        let same_list_entry = |m: ManifestFile| ManifestFile {
            manifest_path: String::new(),
            manifest_length: 0,
            ..m
        };
        assert_eq!(same_list_entry(from_memory), same_list_entry(from_storage));
        // And what both wrote is what the spec's inheritance gives.
        let seen: Vec<_> = read
            .iter()
            .map(|e| {
                let path = e.data_file().file_path().to_string();
                (
                    path,
                    e.status(),
                    e.snapshot_id(),
                    e.sequence_number(),
                    e.file_sequence_number,
                )
            })
            .collect();
        let at = |i: usize| format!("memory:/t/data/{i}.parquet");
        use ManifestStatus::{Deleted, Existing};
        assert_eq!(
            seen,
            vec![
                (at(0), Existing, Some(11), Some(4), Some(4)),
                (at(1), Existing, Some(12), Some(5), Some(5)),
                (at(2), Deleted, Some(20), Some(5), Some(5)),
                (at(3), Existing, Some(13), Some(6), Some(6)),
                (at(4), Existing, Some(7), Some(2), Some(2)),
                (at(5), Existing, Some(9), Some(3), Some(3)),
            ]
        );
    }

    fn added(snapshot: i64, i: usize) -> WrittenEntry {
        WrittenEntry {
            status: ManifestStatus::Added,
            snapshot_id: Some(snapshot),
            sequence_number: None,
            file_sequence_number: None,
            data_file: data_file(i),
        }
    }

    fn existing(snapshot: i64, sequence: i64, i: usize) -> WrittenEntry {
        WrittenEntry {
            status: ManifestStatus::Existing,
            snapshot_id: Some(snapshot),
            sequence_number: Some(sequence),
            file_sequence_number: Some(sequence),
            data_file: data_file(i),
        }
    }
}
