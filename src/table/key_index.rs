//! What keys each live data file holds, so a commit that upserts or deletes keys
//! (copy-on-write, positional merge-on-read) reads only the files that hold them.
//!
//! A data file never changes, so its keys are learned once: from the bytes this writer
//! staged when it wrote the file, or by reading the file's key columns the first time a
//! lookup needs them. Each key is kept as a 64-bit fingerprint with its row's position.
//! When the key is one integer-like column the fingerprint is the key's value itself
//! (the index is *exact*: a matching fingerprint is the key, and the positions are the
//! rows to remove, with no read at all); otherwise it is a hash, and a file whose hashes
//! match a touched key's is read to confirm which rows hold it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use arrow_schema::DataType;
use iceberg::spec::DataFile;

use super::by_path::ByPath;
use crate::sync::LockExt;

/// Estimated bytes of key indexes kept at most per table (12 per row when exact, 8 when
/// hashed: some 10 to 16 million rows).
const MAX_KEY_INDEX_BYTES: usize = 128 << 20;

/// What fingerprints were computed for: the key's field ids and their Arrow types (a key
/// column promoted from int to long fingerprints differently).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySignature(pub Vec<(i32, DataType)>);

/// The keys of one data file: fingerprints ascending and, for an exact index, each
/// one's row position (files of more than 2^32 rows are not indexed).
#[derive(Debug, PartialEq)]
pub struct KeyIndex {
    fingerprints: Vec<u64>,
    /// Parallel to `fingerprints` when exact; empty for hashes (positions found by a
    /// hash alone could name another key's row).
    positions: Vec<u32>,
    exact: bool,
    /// The rows the file held when it was indexed (null keys included), counted in the
    /// file itself rather than taken from its manifest entry.
    rows: u64,
}

impl KeyIndex {
    /// The index of a file of `rows` rows from its `(fingerprint, position)` pairs;
    /// `None` when a position does not fit 32 bits.
    pub fn new(exact: bool, mut pairs: Vec<(u64, u64)>, rows: u64) -> Option<Self> {
        pairs.sort_unstable();
        if exact {
            let positions = pairs
                .iter()
                .map(|&(_, p)| u32::try_from(p).ok())
                .collect::<Option<Vec<u32>>>()?;
            // Collected afresh: an in-place collect would keep the pairs' capacity.
            let mut fingerprints = Vec::with_capacity(pairs.len());
            fingerprints.extend(pairs.iter().map(|&(f, _)| f));
            return Some(KeyIndex {
                fingerprints,
                positions,
                exact,
                rows,
            });
        }
        let mut fingerprints: Vec<u64> = pairs.into_iter().map(|(f, _)| f).collect();
        fingerprints.dedup();
        fingerprints.shrink_to_fit();
        Some(KeyIndex {
            fingerprints,
            positions: Vec::new(),
            exact,
            rows,
        })
    }

    /// Whether the fingerprints are the keys themselves (see the module docs).
    pub fn exact(&self) -> bool {
        self.exact
    }

    /// The rows the file holds, as counted when it was indexed.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Whether any of `touched` (ascending, no repeats) is among the file's fingerprints.
    pub fn holds_any(&self, touched: &[u64]) -> bool {
        let mut found = false;
        each_match(touched, &self.fingerprints, |_| {
            found = true;
            false
        });
        found
    }

    /// The positions, ascending, of the rows whose fingerprint is among `touched`
    /// (ascending, no repeats); for an exact index, the rows that hold those keys.
    pub fn positions_of(&self, touched: &[u64]) -> Vec<u64> {
        let mut found = Vec::new();
        each_match(touched, &self.fingerprints, |i| {
            if let Some(&p) = self.positions.get(i) {
                found.push(u64::from(p));
            }
            true
        });
        found.sort_unstable();
        found
    }

    /// This exact index carried over to a file holding some of the same rows, in
    /// another order: `new_position[p]` is where the old file's row `p` went (`None`:
    /// removed), and the new file holds `rows` rows. `None` for an index of hashes
    /// (it keeps no positions) or a position `new_position` does not cover.
    pub fn moved(&self, new_position: &[Option<u32>], rows: u64) -> Option<KeyIndex> {
        if !self.exact {
            return None;
        }
        let mut pairs = Vec::with_capacity(self.positions.len());
        for (&fingerprint, &p) in self.fingerprints.iter().zip(&self.positions) {
            if let Some(new) = new_position.get(p as usize)? {
                pairs.push((fingerprint, u64::from(*new)));
            }
        }
        KeyIndex::new(true, pairs, rows)
    }

    fn bytes(&self, path: &str) -> usize {
        64 + path.len() + 8 * self.fingerprints.len() + 4 * self.positions.len()
    }
}

/// Calls `f` with the index in `sorted` of each entry equal to one of `wanted` (both
/// ascending; `wanted` without repeats) until `f` says stop. A few wanted values are
/// each found by binary search; many are walked beside the entries.
fn each_match(wanted: &[u64], sorted: &[u64], mut f: impl FnMut(usize) -> bool) {
    if wanted.len().saturating_mul(16) < sorted.len() {
        for w in wanted {
            let start = sorted.partition_point(|s| s < w);
            for (i, _) in sorted[start..]
                .iter()
                .enumerate()
                .take_while(|(_, s)| *s == w)
            {
                if !f(start + i) {
                    return;
                }
            }
        }
        return;
    }
    let (mut i, mut j) = (0, 0);
    while i < wanted.len() && j < sorted.len() {
        match wanted[i].cmp(&sorted[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                if !f(j) {
                    return;
                }
                j += 1;
            }
        }
    }
}

/// The key indexes of a table's live data files, for one key signature (a new one
/// forgets them all), within [`MAX_KEY_INDEX_BYTES`].
pub struct KeyIndexes {
    inner: Mutex<(Option<KeySignature>, ByPath<FileShape, KeyIndex>)>,
}

impl Default for KeyIndexes {
    fn default() -> Self {
        KeyIndexes {
            inner: Mutex::new((None, ByPath::new(MAX_KEY_INDEX_BYTES))),
        }
    }
}

/// A data file's size in bytes and row count.
type FileShape = (u64, u64);

fn shape(file: &DataFile) -> FileShape {
    (file.file_size_in_bytes(), file.record_count())
}

impl KeyIndexes {
    /// `file`'s index, if known for this key signature.
    pub fn get(&self, signature: &KeySignature, file: &DataFile) -> Option<Arc<KeyIndex>> {
        let inner = self.inner.locked();
        if inner.0.as_ref() != Some(signature) {
            return None;
        }
        inner.1.get(file.file_path(), &shape(file))
    }

    /// Whether an index of `file` would fit the budget (else none is built).
    pub fn fits(&self, file: &DataFile) -> bool {
        let rows = file.record_count() as usize;
        self.inner
            .locked()
            .1
            .fits(64 + file.file_path().len() + 12 * rows)
    }

    /// Keeps `index` of `file`, if it fits; a lookup's signature replaces another one
    /// (the key changed), forgetting every file's index.
    pub fn remember(&self, signature: &KeySignature, file: &DataFile, index: KeyIndex) {
        let mut inner = self.inner.locked();
        if inner.0.as_ref() != Some(signature) {
            *inner = (Some(signature.clone()), ByPath::new(MAX_KEY_INDEX_BYTES));
        }
        insert(&mut inner.1, file, index);
    }

    /// Keeps `index` of a file this writer wrote, if it fits and its signature is the
    /// one lookups use now (a group encoded before the key changed does not reset the
    /// indexes lookups built since).
    pub fn offer(&self, signature: &KeySignature, file: &DataFile, index: KeyIndex) {
        let mut inner = self.inner.locked();
        match &inner.0 {
            Some(current) if current != signature => {}
            _ => {
                inner.0 = Some(signature.clone());
                insert(&mut inner.1, file, index);
            }
        }
    }

    /// Forgets the indexes of data files not in `live`.
    pub fn keep(&self, live: &HashSet<String>) {
        self.inner.locked().1.keep(live);
    }
}

fn insert(kept: &mut ByPath<FileShape, KeyIndex>, file: &DataFile, index: KeyIndex) {
    let path = file.file_path();
    let size = index.bytes(path);
    kept.insert(path, shape(file), Arc::new(index), size);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(pairs: &[(u64, u64)]) -> KeyIndex {
        KeyIndex::new(true, pairs.to_vec(), pairs.len() as u64).unwrap()
    }

    #[test]
    fn an_exact_index_gives_the_rows_of_the_touched_keys_repeats_included() {
        let index = exact(&[(30, 0), (10, 1), (20, 2), (10, 3), (40, 4)]);
        assert_eq!(index.positions_of(&[10, 40]), vec![1, 3, 4]);
        assert_eq!(index.positions_of(&[5, 25, 50]), Vec::<u64>::new());
        assert!(index.holds_any(&[1, 20]));
        assert!(!index.holds_any(&[1, 21]));
    }

    #[test]
    fn a_moved_index_finds_the_kept_rows_where_they_went() {
        let index = exact(&[(30, 0), (10, 1), (20, 2), (10, 3), (40, 4)]);
        // Rows 1 and 4 removed; the others reversed.
        let moved = index
            .moved(&[Some(2), None, Some(1), Some(0), None], 3)
            .unwrap();
        assert_eq!(moved, exact(&[(30, 2), (20, 1), (10, 0)]));
        assert_eq!(moved.positions_of(&[10, 30]), vec![0, 2]);
        // A position the map does not cover, and an index of hashes: nothing.
        assert_eq!(index.moved(&[Some(0)], 1), None);
        let hashes = KeyIndex::new(false, vec![(1, 0)], 1).unwrap();
        assert_eq!(hashes.moved(&[Some(0)], 1), None);
    }

    #[test]
    fn few_and_many_wanted_values_find_the_same_rows() {
        // 1,000 rows of keys 0, 3, 6, ...; each key appears twice.
        let pairs: Vec<(u64, u64)> = (0..1000u64).map(|p| ((p % 500) * 3, p)).collect();
        let index = exact(&pairs);
        let few = [3u64, 4, 1497];
        let many: Vec<u64> = (0..1500u64).collect();
        assert_eq!(index.positions_of(&few), vec![1, 499, 501, 999]);
        let all = index.positions_of(&many);
        assert_eq!(all, (0..1000u64).collect::<Vec<_>>());
    }

    #[test]
    fn a_hashed_index_says_whether_a_file_may_hold_a_key_and_names_no_rows() {
        let index = KeyIndex::new(false, vec![(7, 0), (7, 1), (9, 2)], 3).unwrap();
        assert!(!index.exact());
        assert!(index.holds_any(&[7]));
        assert!(!index.holds_any(&[8]));
        assert!(index.positions_of(&[7]).is_empty());
    }

    #[test]
    fn positions_beyond_32_bits_are_not_indexed() {
        assert!(KeyIndex::new(true, vec![(1, 1 << 32)], 1 << 32).is_none());
    }
}
