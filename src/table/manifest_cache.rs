//! Manifests the commit stage has read, by path.
//!
//! Copy-on-write and positional deletes look through every data manifest of the head on
//! every commit (and every attempt). A manifest never changes once written, so each is
//! read once: parsing one costs ~7 MB of allocations in iceberg-rust 0.10.1's Avro reader
//! whatever its size, which made the manifests, not the data, most of an upsert
//! commit's work. The cache follows the head (manifests it no longer lists are dropped
//! after each plan and each commit) and holds at most [`MAX_CACHED_BYTES`] (estimated)
//! per table; beyond that, manifests are read each time they are needed.
//!
//! Only what does not depend on the manifest list entry a manifest was loaded through is
//! read from cached manifests (status, data files): inherited snapshot ids and sequence
//! numbers are not. Merging, which needs them, reads entries remembered by the list
//! entry values they inherit from (this writer's own manifests as written, and small
//! manifests read for an earlier merge).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use iceberg::io::FileIO;
use iceberg::metadata_columns::get_metadata_field;
use iceberg::spec::{
    DataFile, Datum, FormatVersion, Manifest, ManifestContentType, ManifestEntry, ManifestFile,
    ManifestMetadata, ManifestStatus, PartitionSpec, PrimitiveLiteral, PrimitiveType,
    TableMetadata,
};

use super::key_index::KeyIndexes;
use super::manifest_writer::{ManifestHeaders, WrittenEntry, as_datum, write_entries};
use super::position_deletes::PositionDeletes;
use crate::error::Result;
use crate::sync::LockExt;

/// Estimated bytes cached at most per table.
const MAX_CACHED_BYTES: usize = 64 << 20;

#[derive(Default)]
pub struct ManifestCache {
    cached: Mutex<Cached>,
    keys: KeyIndexes,
    position_deletes: PositionDeletes,
    written: Mutex<HashMap<String, Arc<WrittenManifest>>>,
    read: Mutex<ReadEntries>,
    headers: ManifestHeaders,
}

/// Entries of small manifests other writers wrote, as a merge read them (inherited
/// values applied), by the manifest and the list entry values they inherit from. With
/// several writers on a table, each merge reads the others' one-file manifests: without
/// this, every attempt of a merging commit read them all again, and under contention
/// (attempts that conflict and are rebuilt) that was most of a writer's CPU.
#[derive(Default)]
struct ReadEntries {
    /// Each manifest's entries and their estimated bytes.
    by_manifest: HashMap<ReadKey, (Arc<Vec<WrittenEntry>>, usize)>,
    bytes: usize,
}

/// A manifest's path and length, and the manifest list entry's values its entries
/// inherit: added snapshot id, sequence number, first row id.
type ReadKey = (String, i64, i64, i64, Option<u64>);

fn read_key(source: &ManifestFile) -> ReadKey {
    (
        source.manifest_path.clone(),
        source.manifest_length,
        source.added_snapshot_id,
        source.sequence_number,
        source.first_row_id,
    )
}

/// Estimated bytes of read manifests' entries remembered at most per table (each a data
/// file with its per-column statistics and bounds).
const MAX_READ_BYTES: usize = 16 << 20;

/// Manifests of at most this many entries that this writer wrote are remembered entry
/// by entry (see [`ManifestCache::remember_written`]): the one-file manifests of each
/// commit and the first merges of them, about a thousand data files per table in all.
const MAX_WRITTEN_ENTRIES: usize = 200;

/// At most this many manifests' entries are remembered: a head lists about a hundred,
/// and attempts that never land (a catalog outage) must not pile up until one does.
const MAX_WRITTEN_MANIFESTS: usize = 1_000;

/// A manifest this writer wrote: its entries as written (sequence numbers of ADDED
/// entries left to inherit) and the metadata its Avro header holds.
pub struct WrittenManifest {
    pub entries: Vec<WrittenEntry>,
    pub metadata: ManifestMetadata,
    /// Whether storage gives the entries back exactly as remembered (see
    /// [`loads_as_written`]); otherwise a load reads the file.
    pub loads_as_written: bool,
}

impl WrittenManifest {
    pub fn new(entries: Vec<WrittenEntry>, metadata: ManifestMetadata) -> Self {
        let loads_as_written = loads_as_written(&entries, &metadata);
        WrittenManifest {
            entries,
            metadata,
            loads_as_written,
        }
    }
}

/// Whether reading the manifest back gives `entries` as they are: every partition value
/// and column bound already of its field's type (values from before a column was
/// widened, int to long or float to double, are written as the wider type and read back
/// so, and readers compare partitions by value and kind), and no ADDED entry with a
/// sequence number of its own (iceberg-rust's writer leaves those to inheritance).
fn loads_as_written(entries: &[WrittenEntry], metadata: &ManifestMetadata) -> bool {
    let schema = &metadata.schema;
    let Ok(partition_type) = metadata.partition_spec.partition_type(schema) else {
        return false;
    };
    let types: Vec<Option<&PrimitiveType>> = partition_type
        .fields()
        .iter()
        .map(|f| f.field_type.as_primitive_type())
        .collect();
    let same_kind = |ty: Option<&PrimitiveType>, literal: &PrimitiveLiteral| {
        ty.and_then(|ty| as_datum(ty, literal.clone()))
            .is_some_and(|datum| datum.literal() == literal)
    };
    // Position-delete files' bounds are of reserved fields (`pos`, `file_path`), which
    // a reader types as iceberg-rust's metadata columns.
    let bound_as_typed = |(id, datum): (&i32, &Datum)| {
        let field = schema
            .field_by_id(*id)
            .or_else(|| get_metadata_field(*id).ok());
        field.and_then(|f| f.field_type.as_primitive_type()) == Some(datum.data_type())
    };
    entries.iter().all(|e| {
        let file = &e.data_file;
        let values = file.partition();
        let own_sequence = e.sequence_number.is_some() || e.file_sequence_number.is_some();
        !(e.status == ManifestStatus::Added && own_sequence)
            && values.fields().len() == types.len()
            && values.iter().zip(&types).all(|(value, ty)| match value {
                None => true,
                Some(value) => value
                    .as_primitive_literal()
                    .is_some_and(|literal| same_kind(*ty, &literal)),
            })
            && file.lower_bounds().iter().all(bound_as_typed)
            && file.upper_bounds().iter().all(bound_as_typed)
    })
}

impl WrittenManifest {
    /// The manifest as a reader loads it through `listed` (its manifest list entry):
    /// the same inheritance iceberg-rust applies after reading the Avro file.
    pub(crate) fn as_loaded(&self, listed: &ManifestFile) -> Manifest {
        let entries = self.entries.iter().map(|e| {
            let e = e.inherited(listed);
            ManifestEntry {
                status: e.status,
                snapshot_id: e.snapshot_id,
                sequence_number: e.sequence_number,
                file_sequence_number: e.file_sequence_number,
                data_file: e.data_file,
            }
        });
        Manifest::new(self.metadata.clone(), entries.collect())
    }
}

#[derive(Default)]
struct Cached {
    manifests: HashMap<String, (Arc<Manifest>, usize)>,
    bytes: usize,
}

impl ManifestCache {
    /// The key indexes of the table's live data files (see [`super::key_index`]).
    pub fn keys(&self) -> &KeyIndexes {
        &self.keys
    }

    /// What the table's live position-delete files remove (see
    /// [`super::position_deletes`]).
    pub fn position_deletes(&self) -> &PositionDeletes {
        &self.position_deletes
    }

    /// The Avro headers of the manifests this writer writes (see `manifest_writer`).
    pub fn headers(&self) -> &ManifestHeaders {
        &self.headers
    }

    /// `manifest`'s entries, read from storage the first time only, and not at all
    /// when this writer wrote it and remembers what (each commit's lookup loads the
    /// manifests the commit before it wrote: reading them back was a round trip to the
    /// store inside the serial commit stage).
    pub async fn load(
        &self,
        file_io: &FileIO,
        manifest: &ManifestFile,
    ) -> iceberg::Result<Arc<Manifest>> {
        if let Some((m, _)) = self.cached.locked().manifests.get(&manifest.manifest_path) {
            return Ok(m.clone());
        }
        let loaded = match self.written(&manifest.manifest_path) {
            Some(written) if written.loads_as_written => Arc::new(written.as_loaded(manifest)),
            _ => Arc::new(manifest.load_manifest(file_io).await?),
        };
        let size = estimated_size(&loaded);
        let mut cached = self.cached.locked();
        if cached.bytes + size <= MAX_CACHED_BYTES
            && !cached.manifests.contains_key(&manifest.manifest_path)
        {
            cached.bytes += size;
            cached
                .manifests
                .insert(manifest.manifest_path.clone(), (loaded.clone(), size));
        }
        Ok(loaded)
    }

    /// Remembers the entries of a manifest this writer wrote at `path`, so merging it
    /// later does not read it back: reading a manifest costs ~7 MB of allocations in
    /// iceberg-rust 0.10.1's Avro reader whatever its size, which made merging a hundred
    /// one-file manifests the largest part of a small commit's CPU. Only small manifests
    /// are kept (large ones merge rarely), and only until the head stops listing them.
    /// v2 tables only: v1 manifests do not store sequence numbers as written here, and
    /// v3 ones, merged less often (data manifests carry first row ids when they are),
    /// are read back.
    pub fn remember_written(&self, path: &str, manifest: WrittenManifest) {
        let mut written = self.written.locked();
        if manifest.metadata.format_version == FormatVersion::V2
            && manifest.entries.len() <= MAX_WRITTEN_ENTRIES
            && written.len() < MAX_WRITTEN_MANIFESTS
        {
            written.insert(path.to_string(), Arc::new(manifest));
        }
    }

    /// The manifest this writer wrote at `path`, if remembered.
    pub fn written(&self, path: &str) -> Option<Arc<WrittenManifest>> {
        self.written.locked().get(path).cloned()
    }

    /// Remembers the entries of a small manifest read from storage through `source`
    /// (see [`ReadEntries`]), within [`MAX_READ_BYTES`].
    pub fn remember_read(&self, source: &ManifestFile, entries: &[WrittenEntry]) {
        if entries.len() > MAX_WRITTEN_ENTRIES {
            return;
        }
        let size: usize = entries.iter().map(|e| entry_size(&e.data_file)).sum();
        let mut read = self.read.locked();
        let key = read_key(source);
        if read.bytes + size <= MAX_READ_BYTES && !read.by_manifest.contains_key(&key) {
            read.bytes += size;
            read.by_manifest
                .insert(key, (Arc::new(entries.to_vec()), size));
        }
    }

    /// The entries of a manifest read through `source` before, if remembered.
    pub fn read_entries(&self, source: &ManifestFile) -> Option<Arc<Vec<WrittenEntry>>> {
        let read = self.read.locked();
        read.by_manifest
            .get(&read_key(source))
            .map(|(e, _)| e.clone())
    }

    /// Forgets the read entries of manifests `head` does not list: called before each
    /// merge (the only reader of them), so a writer whose attempts keep conflicting does
    /// not fill the budget with manifests others have merged away.
    pub fn keep_read(&self, head: &[ManifestFile]) {
        let listed: HashSet<&str> = head.iter().map(|m| m.manifest_path.as_str()).collect();
        let mut read = self.read.locked();
        read.by_manifest
            .retain(|(path, ..), _| listed.contains(path.as_str()));
        read.bytes = read.by_manifest.values().map(|(_, size)| size).sum();
    }

    /// Forgets the written entries of manifests `head` (a committed snapshot's list)
    /// does not list. Called only after a commit: an attempt's new manifests are
    /// remembered before its list exists.
    pub fn keep_written(&self, head: &[ManifestFile]) {
        let listed: HashSet<&str> = head.iter().map(|m| m.manifest_path.as_str()).collect();
        self.written
            .locked()
            .retain(|path, _| listed.contains(path.as_str()));
    }

    /// Forgets every manifest `head` does not list.
    pub fn keep_only(&self, head: &[ManifestFile]) {
        let listed: HashSet<&str> = head.iter().map(|m| m.manifest_path.as_str()).collect();
        let mut cached = self.cached.locked();
        let mut freed = 0;
        cached.manifests.retain(|path, (_, size)| {
            let keep = listed.contains(path.as_str());
            if !keep {
                freed += *size;
            }
            keep
        });
        cached.bytes -= freed;
    }
}

/// A rough size of a parsed manifest: its schema and specs, and per entry the data file
/// with its per-column statistics and bounds.
fn estimated_size(manifest: &Manifest) -> usize {
    let metadata = manifest.metadata();
    let schema = 512 * metadata.schema().as_struct().fields().len();
    let entries: usize = manifest
        .entries()
        .iter()
        .map(|e| entry_size(e.data_file()))
        .sum();
    4096 + schema + entries
}

/// A rough size of one data file entry: per-column statistics and bounds (string bounds
/// may be whole values).
fn entry_size(f: &DataFile) -> usize {
    let stats = f.column_sizes().len()
        + f.value_counts().len()
        + f.null_value_counts().len()
        + f.nan_value_counts().len();
    let bounds: usize = f
        .lower_bounds()
        .values()
        .chain(f.upper_bounds().values())
        .map(|d| 64 + d.to_bytes().map_or(0, |b| b.len()))
        .sum();
    512 + f.file_path().len() + 48 * stats + bounds
}

/// Writes `entries` as one manifest of `content` under `spec` at `path` (for the commit
/// of snapshot `snapshot_id`) and returns its manifest list entry. Entries are written
/// as given: an ADDED entry without sequence numbers inherits them from the manifest
/// list. The cache remembers them, so a later merge need not read the manifest back.
pub(crate) async fn write_manifest(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    path: &str,
    snapshot_id: i64,
    (content, spec): (ManifestContentType, &PartitionSpec),
    entries: Vec<WrittenEntry>,
) -> Result<ManifestFile> {
    let io = (file_io, cache.headers());
    let manifest =
        write_entries(metadata, io, path, snapshot_id, (content, spec), &entries).await?;
    let schema = metadata.current_schema().clone();
    let header = ManifestMetadata {
        schema_id: schema.schema_id(),
        schema,
        partition_spec: spec.clone(),
        format_version: metadata.format_version(),
        content,
    };
    cache.remember_written(path, WrittenManifest::new(entries, header));
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat};

    fn listed(sequence_number: i64, added_snapshot_id: i64) -> ManifestFile {
        ManifestFile {
            manifest_path: "m.avro".into(),
            sequence_number,
            min_sequence_number: sequence_number,
            added_snapshot_id,
            ..crate::table::merge::tests::manifest(1)
        }
    }

    /// A one-row data file whose `columns` columns have `bound` as both bounds.
    fn data_file(columns: i32, bound: &iceberg::spec::Datum) -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("f.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .partition(iceberg::spec::Struct::empty())
            .record_count(1)
            .file_size_in_bytes(1)
            .lower_bounds((1..=columns).map(|c| (c, bound.clone())).collect())
            .upper_bounds((1..=columns).map(|c| (c, bound.clone())).collect())
            .build()
            .unwrap()
    }

    fn entry(status: ManifestStatus, ids: (Option<i64>, Option<i64>, Option<i64>)) -> WrittenEntry {
        let data_file = data_file(0, &iceberg::spec::Datum::long(0));
        WrittenEntry {
            status,
            snapshot_id: ids.0,
            sequence_number: ids.1,
            file_sequence_number: ids.2,
            data_file,
        }
    }

    fn ids(e: &WrittenEntry) -> (Option<i64>, Option<i64>, Option<i64>) {
        (e.snapshot_id, e.sequence_number, e.file_sequence_number)
    }

    #[test]
    fn added_entries_inherit_from_the_list_and_explicit_values_stay() {
        let list = listed(7, 42);
        let added = entry(ManifestStatus::Added, (Some(5), None, None));
        assert_eq!(ids(&added.inherited(&list)), (Some(5), Some(7), Some(7)));
        let added = entry(ManifestStatus::Added, (None, None, None));
        assert_eq!(ids(&added.inherited(&list)), (Some(42), Some(7), Some(7)));
        let existing = entry(ManifestStatus::Existing, (Some(3), Some(2), Some(1)));
        assert_eq!(ids(&existing.inherited(&list)), (Some(3), Some(2), Some(1)));
        // Only ADDED entries inherit sequence numbers from a v2 list entry...
        let existing = entry(ManifestStatus::Existing, (Some(3), None, None));
        assert_eq!(ids(&existing.inherited(&list)), (Some(3), None, None));
        // ...but every entry of a manifest listed with sequence number 0 (v1) does.
        assert_eq!(
            ids(&existing.inherited(&listed(0, 42))),
            (Some(3), Some(0), Some(0))
        );
    }

    #[test]
    fn read_entries_are_found_only_through_the_same_list_values() {
        let cache = ManifestCache::default();
        let one = vec![entry(ManifestStatus::Added, (Some(1), Some(7), Some(7)))];
        let source = listed(7, 42);
        cache.remember_read(&source, &one);
        assert_eq!(
            ids(&cache.read_entries(&source).unwrap()[0]),
            (Some(1), Some(7), Some(7))
        );
        // The same path listed with other values to inherit (a rebased attempt's
        // manifest, at a new sequence number) is read again.
        assert!(cache.read_entries(&listed(8, 42)).is_none());
        assert!(cache.read_entries(&listed(7, 43)).is_none());
        let longer = ManifestFile {
            manifest_length: source.manifest_length + 1,
            ..listed(7, 42)
        };
        assert!(cache.read_entries(&longer).is_none());
        let later = ManifestFile {
            first_row_id: Some(5),
            ..listed(7, 42)
        };
        assert!(cache.read_entries(&later).is_none());
        // Kept while the head lists the manifest.
        cache.keep_read(std::slice::from_ref(&source));
        assert!(cache.read_entries(&source).is_some());
        cache.keep_read(&[]);
        assert!(cache.read_entries(&source).is_none());
    }

    #[test]
    fn read_entries_stay_within_their_byte_budget() {
        let cache = ManifestCache::default();
        // Wide entries: long string bounds, as a table of long text columns has.
        let wide = || {
            let mut e = entry(ManifestStatus::Added, (Some(1), Some(1), Some(1)));
            e.data_file = data_file(16, &iceberg::spec::Datum::string("x".repeat(4096)));
            e
        };
        let manifest: Vec<_> = (0..10).map(|_| wide()).collect();
        let size: usize = manifest.iter().map(|e| entry_size(&e.data_file)).sum();
        let mut kept = 0;
        for n in 0..(MAX_READ_BYTES / size + 3) {
            let source = ManifestFile {
                manifest_path: format!("m{n}.avro"),
                ..listed(1, 1)
            };
            cache.remember_read(&source, &manifest);
            kept += cache.read_entries(&source).is_some() as usize;
        }
        assert_eq!(
            kept,
            MAX_READ_BYTES / size,
            "kept up to the byte budget, no more"
        );
        let one = || entry(ManifestStatus::Added, (Some(1), Some(1), Some(1)));
        let too_long: Vec<_> = (0..=MAX_WRITTEN_ENTRIES).map(|_| one()).collect();
        let fresh = ManifestCache::default();
        fresh.remember_read(&listed(1, 1), &too_long);
        assert!(
            fresh.read_entries(&listed(1, 1)).is_none(),
            "too many entries to keep"
        );
        // Forgetting what the head no longer lists frees the budget.
        cache.keep_read(&[]);
        let last = ManifestFile {
            manifest_path: "last.avro".into(),
            ..listed(1, 1)
        };
        cache.remember_read(&last, &manifest);
        assert!(cache.read_entries(&last).is_some());
    }

    /// `entries` as a v2 data manifest of the fixture table wrote them.
    fn written(entries: Vec<WrittenEntry>) -> WrittenManifest {
        let table = crate::fixture::table("{}", 2, "", "");
        let schema = table.current_schema().clone();
        let metadata = ManifestMetadata {
            schema_id: schema.schema_id(),
            schema,
            partition_spec: table.default_partition_spec().as_ref().clone(),
            format_version: FormatVersion::V2,
            content: ManifestContentType::Data,
        };
        WrittenManifest::new(entries, metadata)
    }

    #[test]
    fn written_entries_are_kept_while_the_head_lists_them() {
        let cache = ManifestCache::default();
        let one = || vec![entry(ManifestStatus::Added, (Some(1), None, None))];
        cache.remember_written("a.avro", written(one()));
        cache.remember_written("b.avro", written(one()));
        let big = (0..=MAX_WRITTEN_ENTRIES).flat_map(|_| one()).collect();
        cache.remember_written("big.avro", written(big));
        assert!(cache.written("big.avro").is_none(), "too large to keep");
        let head = [ManifestFile {
            manifest_path: "b.avro".into(),
            ..listed(1, 1)
        }];
        cache.keep_written(&head);
        assert!(cache.written("a.avro").is_none());
        assert_eq!(cache.written("b.avro").unwrap().entries.len(), 1);
    }
}
