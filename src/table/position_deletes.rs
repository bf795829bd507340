//! The positions each live position-delete file removes, by data file, so a positional
//! upsert does not read them back on every commit to learn which rows are deleted
//! already. A delete file never changes: its positions are learned once, when this
//! writer writes it or when a lookup first reads it, and forgotten when the head stops
//! listing it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use iceberg::spec::DataFile;

use crate::sync::LockExt;

/// Estimated bytes of positions kept at most per table (8 per position: 8M positions).
const MAX_POSITION_BYTES: usize = 64 << 20;

/// Positions removed by one delete file: by data file path, ascending.
pub type RemovedPositions = HashMap<String, Vec<u64>>;

#[derive(Default)]
pub struct PositionDeletes {
    inner: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    /// By delete file path: its size (a guard against a path reused for other contents)
    /// and the positions it removes.
    files: HashMap<String, (u64, Arc<RemovedPositions>)>,
    bytes: usize,
}

fn size_of(path: &str, removed: &RemovedPositions) -> usize {
    let entries: usize = removed
        .iter()
        .map(|(p, v)| 48 + p.len() + 8 * v.len())
        .sum();
    64 + path.len() + entries
}

impl PositionDeletes {
    /// What delete file `file` removes, if known.
    pub fn get(&self, file: &DataFile) -> Option<Arc<RemovedPositions>> {
        let inner = self.inner.locked();
        let (size, removed) = inner.files.get(file.file_path())?;
        (*size == file.file_size_in_bytes()).then(|| removed.clone())
    }

    /// Keeps what delete file `file` removes (positions sorted), if it fits; returns it
    /// either way.
    pub fn remember(
        &self,
        file: &DataFile,
        mut removed: RemovedPositions,
    ) -> Arc<RemovedPositions> {
        for positions in removed.values_mut() {
            positions.sort_unstable();
        }
        let removed = Arc::new(removed);
        let path = file.file_path();
        let size = size_of(path, &removed);
        let mut inner = self.inner.locked();
        if inner.bytes + size <= MAX_POSITION_BYTES && !inner.files.contains_key(path) {
            inner.bytes += size;
            let known = (file.file_size_in_bytes(), removed.clone());
            inner.files.insert(path.to_string(), known);
        }
        removed
    }

    /// Forgets the delete files not in `live`.
    pub fn keep(&self, live: &HashSet<String>) {
        let mut inner = self.inner.locked();
        let mut freed = 0;
        inner.files.retain(|path, (_, removed)| {
            let keep = live.contains(path);
            if !keep {
                freed += size_of(path, removed);
            }
            keep
        });
        inner.bytes -= freed;
    }
}
