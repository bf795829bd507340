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
//! read from cached entries (status, data files): inherited snapshot ids and sequence
//! numbers are not, and code that needs them (merging, rewriting manifests) reads the
//! manifest itself.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use iceberg::io::FileIO;
use iceberg::spec::{DataFile, Manifest, ManifestFile};

use crate::rowops::lookup::KeySignature;
use crate::sync::LockExt;

/// Estimated bytes cached at most per table.
const MAX_CACHED_BYTES: usize = 64 << 20;

#[derive(Default)]
pub struct ManifestCache {
    cached: Mutex<Cached>,
    keys: Mutex<KeyHashes>,
}

/// Estimated bytes of key hashes cached at most per table (8 per row: ~16M rows).
const MAX_KEY_HASH_BYTES: usize = 128 << 20;

/// The hashes of the keys each live data file holds, sorted, for the key signature they
/// were computed with. A data file never changes, so a file whose hashes miss every
/// touched key's hash cannot hold one and is not read (a hash match is confirmed by
/// reading the file).
#[derive(Default)]
struct KeyHashes {
    signature: Option<KeySignature>,
    /// By path: the file's size and row count (a guard against a path reused for other
    /// contents) and its hashes.
    files: HashMap<String, (FileShape, Arc<Vec<u64>>)>,
    bytes: usize,
}

/// A data file's size in bytes and row count.
type FileShape = (u64, u64);

/// What a data file's cached hashes cost.
fn hashes_size(path: &str, rows: u64) -> usize {
    64 + path.len() + 8 * rows as usize
}

#[derive(Default)]
struct Cached {
    manifests: HashMap<String, (Arc<Manifest>, usize)>,
    bytes: usize,
}

impl ManifestCache {
    /// `manifest`'s entries, read from storage the first time only.
    pub async fn load(
        &self,
        file_io: &FileIO,
        manifest: &ManifestFile,
    ) -> iceberg::Result<Arc<Manifest>> {
        if let Some((m, _)) = self.cached.locked().manifests.get(&manifest.manifest_path) {
            return Ok(m.clone());
        }
        let loaded = Arc::new(manifest.load_manifest(file_io).await?);
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

    /// The key hashes of `file`, if known for this key signature.
    pub fn key_hashes(&self, signature: &KeySignature, file: &DataFile) -> Option<Arc<Vec<u64>>> {
        let keys = self.keys.locked();
        if keys.signature.as_ref() != Some(signature) {
            return None;
        }
        let (shape, hashes) = keys.files.get(file.file_path())?;
        (*shape == (file.file_size_in_bytes(), file.record_count())).then(|| hashes.clone())
    }

    /// Whether `file`'s key hashes would fit the budget (else they are not collected).
    pub fn key_hashes_fit(&self, file: &DataFile) -> bool {
        let size = hashes_size(file.file_path(), file.record_count());
        self.keys.locked().bytes + size <= MAX_KEY_HASH_BYTES
    }

    /// Records the key hashes (sorted) of `file`; a new signature (the key changed)
    /// forgets every file's.
    pub fn remember_key_hashes(&self, signature: &KeySignature, file: &DataFile, hashes: Vec<u64>) {
        let mut keys = self.keys.locked();
        if keys.signature.as_ref() != Some(signature) {
            *keys = KeyHashes {
                signature: Some(signature.clone()),
                ..KeyHashes::default()
            };
        }
        let path = file.file_path();
        let size = hashes_size(path, file.record_count());
        if keys.bytes + size <= MAX_KEY_HASH_BYTES && !keys.files.contains_key(path) {
            keys.bytes += size;
            let shape = (file.file_size_in_bytes(), file.record_count());
            keys.files
                .insert(path.to_string(), (shape, Arc::new(hashes)));
        }
    }

    /// Forgets the key hashes of data files not in `live`.
    pub fn keep_key_hashes(&self, live: &HashSet<String>) {
        let mut keys = self.keys.locked();
        let mut freed = 0;
        keys.files.retain(|path, ((_, rows), _)| {
            let keep = live.contains(path);
            if !keep {
                freed += hashes_size(path, *rows);
            }
            keep
        });
        keys.bytes -= freed;
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
        .map(|e| {
            let f = e.data_file();
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
        })
        .sum();
    4096 + schema + entries
}
