//! The positions each live position-delete file removes, by data file, so a positional
//! upsert does not read them back on every commit to learn which rows are deleted
//! already. A delete file never changes: its positions are learned once, when this
//! writer writes it or when a lookup first reads it, and forgotten when the head stops
//! listing it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use iceberg::spec::DataFile;

use super::by_path::ByPath;
use crate::sync::LockExt;

/// Estimated bytes of positions kept at most per table (8 per position: 8M positions).
const MAX_POSITION_BYTES: usize = 64 << 20;

/// Positions removed by one delete file: by data file path, ascending.
pub type RemovedPositions = HashMap<String, Vec<u64>>;

pub struct PositionDeletes {
    /// By delete file path, guarded by its size.
    inner: Mutex<ByPath<u64, RemovedPositions>>,
}

impl Default for PositionDeletes {
    fn default() -> Self {
        PositionDeletes {
            inner: Mutex::new(ByPath::new(MAX_POSITION_BYTES)),
        }
    }
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
        let size = file.file_size_in_bytes();
        self.inner.locked().get(file.file_path(), &size)
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
        let guard = file.file_size_in_bytes();
        self.inner
            .locked()
            .insert(path, guard, removed.clone(), size);
        removed
    }

    /// Forgets the delete files not in `live`.
    pub fn keep(&self, live: &HashSet<String>) {
        self.inner.locked().keep(live);
    }
}
