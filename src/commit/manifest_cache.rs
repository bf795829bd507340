//! Manifests the commit stage has read, by path.
//!
//! Copy-on-write and positional deletes look through every data manifest of the head on
//! every commit (and every attempt). A manifest never changes once written, so each is
//! read once: parsing one costs ~7 MB of allocations in iceberg-rust 0.10.1's Avro reader
//! whatever its size, which made the manifests, not the data, most of an upsert
//! commit's work. The cache follows the head: after each plan only the manifests the
//! head lists stay, so it holds at most what one plan reads, and no more than
//! [`MAX_CACHED_ENTRIES`] file entries (beyond that, manifests are read each time).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use iceberg::io::FileIO;
use iceberg::spec::{Manifest, ManifestFile};

use crate::sync::LockExt;

/// File entries kept at most (~0.5–1 KB each with their column bounds).
pub const MAX_CACHED_ENTRIES: usize = 200_000;

#[derive(Default)]
pub struct ManifestCache {
    manifests: Mutex<HashMap<String, Arc<Manifest>>>,
}

impl ManifestCache {
    /// `manifest`'s entries, read from storage the first time only.
    pub async fn load(
        &self,
        file_io: &FileIO,
        manifest: &ManifestFile,
    ) -> iceberg::Result<Arc<Manifest>> {
        if let Some(m) = self.manifests.locked().get(&manifest.manifest_path) {
            return Ok(m.clone());
        }
        let loaded = Arc::new(manifest.load_manifest(file_io).await?);
        let mut cached = self.manifests.locked();
        let entries: usize = cached.values().map(|m| m.entries().len()).sum();
        if entries + loaded.entries().len() <= MAX_CACHED_ENTRIES {
            cached.insert(manifest.manifest_path.clone(), loaded.clone());
        }
        Ok(loaded)
    }

    /// Forgets every manifest `head` does not list.
    pub fn keep_only(&self, head: &[ManifestFile]) {
        let listed: HashSet<&str> = head.iter().map(|m| m.manifest_path.as_str()).collect();
        self.manifests
            .locked()
            .retain(|path, _| listed.contains(path.as_str()));
    }
}
