//! Exactly-once bookkeeping: which source offsets a writer id has committed.
//!
//! Each snapshot floe commits with exactly-once enabled records, in its summary under
//! `floe.offsets.<writer id>`, every committed offset per source as merged inclusive
//! ranges. Commits under `max_in_flight` > 1 land out of order, leaving gaps that close
//! as later commits fill them, so the record stays a handful of ranges per source.

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::{Snapshot, TableMetadata};

use crate::error::{Error, ErrorKind, Result};

/// Summary key prefix; the writer id follows.
pub const OFFSETS_PROPERTY_PREFIX: &str = "floe.offsets.";

/// A set of offsets stored as disjoint, non-adjacent inclusive ranges `start → end`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet(BTreeMap<i64, i64>);

impl RangeSet {
    pub fn contains(&self, offset: i64) -> bool {
        self.0
            .range(..=offset)
            .next_back()
            .is_some_and(|(_, &end)| offset <= end)
    }

    pub fn insert(&mut self, offset: i64) {
        self.insert_range(offset, offset);
    }

    /// Adds `[start, end]`, merging with overlapping or adjacent ranges.
    pub fn insert_range(&mut self, mut start: i64, mut end: i64) {
        if let Some((&s, &e)) = self.0.range(..=start).next_back()
            && e.saturating_add(1) >= start
        {
            start = s;
            end = end.max(e);
        }
        let absorbed: Vec<i64> = self
            .0
            .range(start..)
            .take_while(|(s, _)| **s <= end.saturating_add(1))
            .map(|(s, _)| *s)
            .collect();
        for s in absorbed {
            let e = self.0.remove(&s).expect("key listed above");
            end = end.max(e);
        }
        self.0.insert(start, end);
    }

    pub fn union_with(&mut self, other: &RangeSet) {
        for (&s, &e) in &other.0 {
            self.insert_range(s, e);
        }
    }

    pub fn intersects(&self, other: &RangeSet) -> bool {
        other.0.iter().any(|(&s, &e)| {
            self.0
                .range(..=e)
                .next_back()
                .is_some_and(|(_, &end)| end >= s)
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn ranges(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.0.iter().map(|(&s, &e)| (s, e))
    }
}

/// Offsets per source (e.g. `topic/partition`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceOffsets(HashMap<String, RangeSet>);

impl SourceOffsets {
    pub fn contains(&self, source: &str, offset: i64) -> bool {
        self.0.get(source).is_some_and(|r| r.contains(offset))
    }

    pub fn insert(&mut self, source: &str, offset: i64) {
        match self.0.get_mut(source) {
            Some(r) => r.insert(offset),
            None => {
                let mut r = RangeSet::default();
                r.insert(offset);
                self.0.insert(source.to_string(), r);
            }
        }
    }

    pub fn union_with(&mut self, other: &SourceOffsets) {
        for (source, ranges) in &other.0 {
            self.0.entry(source.clone()).or_default().union_with(ranges);
        }
    }

    pub fn intersects(&self, other: &SourceOffsets) -> bool {
        other
            .0
            .iter()
            .any(|(source, r)| self.0.get(source).is_some_and(|mine| mine.intersects(r)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(RangeSet::is_empty)
    }

    /// The summary value: `{"source": [[start, end], …], …}`, sources sorted.
    pub fn to_summary_value(&self) -> String {
        let sorted: BTreeMap<&String, Vec<[i64; 2]>> = self
            .0
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(s, r)| (s, r.ranges().map(|(a, b)| [a, b]).collect()))
            .collect();
        serde_json::to_string(&sorted).expect("maps of strings and numbers serialize")
    }

    pub fn from_summary_value(text: &str) -> Result<Self> {
        let parsed: HashMap<String, Vec<[i64; 2]>> = serde_json::from_str(text).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("unreadable committed-offsets record in the table: {e}"),
            )
        })?;
        let mut out = SourceOffsets::default();
        for (source, ranges) in parsed {
            let set = out.0.entry(source).or_default();
            for [s, e] in ranges {
                set.insert_range(s.min(e), s.max(e));
            }
        }
        Ok(out)
    }
}

pub fn summary_key(writer_id: &str) -> String {
    format!("{OFFSETS_PROPERTY_PREFIX}{writer_id}")
}

/// The offsets `writer_id` has committed on the main branch: the record of the newest
/// ancestor of the head that carries one (snapshots by other tools may sit between).
pub fn committed_offsets(metadata: &TableMetadata, writer_id: &str) -> Result<SourceOffsets> {
    let key = summary_key(writer_id);
    let mut next = metadata.current_snapshot().cloned();
    while let Some(snapshot) = next {
        if let Some(value) = snapshot.summary().additional_properties.get(&key) {
            return SourceOffsets::from_summary_value(value);
        }
        next = parent(metadata, &snapshot);
    }
    Ok(SourceOffsets::default())
}

fn parent(metadata: &TableMetadata, snapshot: &Snapshot) -> Option<iceberg::spec::SnapshotRef> {
    snapshot
        .parent_snapshot_id()
        .and_then(|id| metadata.snapshot_by_id(id).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ranges: &[(i64, i64)]) -> RangeSet {
        let mut r = RangeSet::default();
        for &(s, e) in ranges {
            r.insert_range(s, e);
        }
        r
    }

    #[test]
    fn ranges_merge_when_they_touch_or_overlap() {
        let mut r = set(&[(0, 4), (10, 14)]);
        assert_eq!(r.ranges().collect::<Vec<_>>(), vec![(0, 4), (10, 14)]);
        r.insert_range(5, 9); // fills the gap exactly
        assert_eq!(r.ranges().collect::<Vec<_>>(), vec![(0, 14)]);
        r.insert_range(20, 30);
        r.insert_range(16, 25);
        assert_eq!(r.ranges().collect::<Vec<_>>(), vec![(0, 14), (16, 30)]);
        r.insert(15);
        assert_eq!(r.ranges().collect::<Vec<_>>(), vec![(0, 30)]);
        r.insert_range(-5, 100);
        assert_eq!(r.ranges().collect::<Vec<_>>(), vec![(-5, 100)]);
    }

    #[test]
    fn out_of_order_points_collapse() {
        let mut r = RangeSet::default();
        for i in (0..1000).rev().step_by(2).chain((0..1000).step_by(2)) {
            r.insert(i);
        }
        assert_eq!(r.ranges().collect::<Vec<_>>(), vec![(0, 999)]);
        assert!(r.contains(0) && r.contains(999) && !r.contains(1000) && !r.contains(-1));
    }

    #[test]
    fn membership_and_intersection() {
        let r = set(&[(10, 20), (30, 40)]);
        assert!(!r.contains(9) && r.contains(10) && r.contains(20) && !r.contains(25));
        assert!(r.intersects(&set(&[(20, 22)])));
        assert!(r.intersects(&set(&[(0, 100)])));
        assert!(!r.intersects(&set(&[(21, 29), (41, 50)])));
        assert!(!r.intersects(&RangeSet::default()));
        let extreme = set(&[(i64::MAX - 1, i64::MAX)]);
        assert!(extreme.contains(i64::MAX));
    }

    #[test]
    fn summary_value_round_trips() {
        let mut o = SourceOffsets::default();
        for i in [5, 3, 4, 9] {
            o.insert("orders/0", i);
        }
        o.insert("orders/1", 7);
        let text = o.to_summary_value();
        assert_eq!(text, r#"{"orders/0":[[3,5],[9,9]],"orders/1":[[7,7]]}"#);
        assert_eq!(SourceOffsets::from_summary_value(&text).unwrap(), o);
        assert!(SourceOffsets::from_summary_value("nope").is_err());
        let mut other = SourceOffsets::default();
        other.insert("orders/0", 6);
        assert!(!o.intersects(&other));
        o.union_with(&other);
        assert_eq!(
            o.to_summary_value(),
            r#"{"orders/0":[[3,6],[9,9]],"orders/1":[[7,7]]}"#
        );
        assert!(o.intersects(&other));
    }
}
