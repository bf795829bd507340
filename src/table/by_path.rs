//! What the commit stage learned about files that never change (a data file's keys, a
//! delete file's positions), by file path, within a byte budget, and only while the
//! table's head lists the file.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Values by file path, each with a guard the file must still match (its size, row
/// count: a path reused for other contents is not taken for the old one) and the bytes
/// it is estimated to hold.
pub struct ByPath<G, V> {
    files: HashMap<String, (G, Arc<V>, usize)>,
    bytes: usize,
    budget: usize,
}

impl<G: PartialEq, V> ByPath<G, V> {
    pub fn new(budget: usize) -> Self {
        ByPath {
            files: HashMap::new(),
            bytes: 0,
            budget,
        }
    }

    /// The value kept for `path`, if its guard is `guard`.
    pub fn get(&self, path: &str, guard: &G) -> Option<Arc<V>> {
        let (known, value, _) = self.files.get(path)?;
        (known == guard).then(|| value.clone())
    }

    /// Whether `size` more bytes would fit the budget.
    pub fn fits(&self, size: usize) -> bool {
        self.bytes + size <= self.budget
    }

    /// Keeps `value` for `path` (`size` bytes), if it fits and `path` has none yet.
    pub fn insert(&mut self, path: &str, guard: G, value: Arc<V>, size: usize) {
        if self.fits(size) && !self.files.contains_key(path) {
            self.bytes += size;
            self.files.insert(path.to_string(), (guard, value, size));
        }
    }

    /// Forgets every path not in `live`.
    pub fn keep(&mut self, live: &HashSet<String>) {
        let mut freed = 0;
        self.files.retain(|path, (_, _, size)| {
            let keep = live.contains(path);
            if !keep {
                freed += *size;
            }
            keep
        });
        self.bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_stay_within_the_budget_until_their_paths_leave() {
        let mut kept: ByPath<u64, &str> = ByPath::new(100);
        kept.insert("a", 1, Arc::new("A"), 60);
        kept.insert("b", 1, Arc::new("B"), 60);
        assert!(kept.get("b", &1).is_none(), "over the budget");
        assert!(kept.get("a", &2).is_none(), "another guard");
        assert_eq!(kept.get("a", &1).as_deref(), Some(&"A"));
        kept.keep(&HashSet::new());
        kept.insert("b", 1, Arc::new("B"), 60);
        assert_eq!(kept.get("b", &1).as_deref(), Some(&"B"));
    }
}
