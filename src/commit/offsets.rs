//! Exactly-once bookkeeping: which source offsets a writer id has committed.
//!
//! The record lives in a **table property**, `floe.offsets.<writer id>`, set in the same
//! catalog commit as the snapshot (the commit requires main's head, so both land or
//! neither). A property survives what snapshot summaries do not: another tool's commits
//! (which copy no floe keys), snapshot expiry, and rewrites. It holds the committed
//! offsets per source as merged inclusive ranges, plus the snapshot id and sequence
//! number of the commit that wrote it, so a table rolled back behind that commit is
//! detected and refused instead of silently written twice.
//!
//! **Bounded.** Commits under `max_in_flight` > 1 land out of order, leaving gaps that
//! close as later commits fill them. Gaps that never close (messages filtered or
//! dead-lettered upstream, compacted topics, sparse offsets) would grow the record
//! forever, so each source keeps at most [`MAX_RANGES`] ranges: beyond that the lowest
//! gaps are closed, and an offset inside a closed gap counts as committed. Gaps holding an
//! offset claimed by a call in flight in this process are never closed. A message can
//! therefore only be skipped if it is not in flight here while at least `MAX_RANGES - 1`
//! newer gaps of its source are committed above it: a batch that failed and waits for
//! the host's retry, or one in flight in another process with the same writer id, on a
//! source whose offsets are sparse enough to leave a gap per message.
//!
//! Tables written by older floe versions kept the record in snapshot summaries; it is
//! still read from there when the property is absent.

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::{Snapshot, TableMetadata};

use crate::error::{Error, ErrorKind, Result};

/// Property (and legacy summary) key prefix; the writer id follows.
pub const OFFSETS_PROPERTY_PREFIX: &str = "floe.offsets.";
/// Summary key naming the exactly-once writer id of a floe snapshot: a table whose
/// history shows this writer id but no record has lost it, and is refused.
pub const WRITER_ID_SUMMARY: &str = "floe.writer-id";
/// Most ranges kept per source (see the module docs).
pub const MAX_RANGES: usize = 1_000;

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

    /// Closes the lowest gaps until at most `max` ranges remain, except gaps holding an
    /// offset of `open` (messages still in flight in this process).
    pub fn bound(&mut self, max: usize, open: Option<&RangeSet>) {
        let max = max.max(1);
        if self.0.len() <= max {
            return;
        }
        let mut excess = self.0.len() - max;
        let ranges: Vec<(i64, i64)> = self.ranges().collect();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(max);
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last)
                    if excess > 0
                        && !open.is_some_and(|o| {
                            o.intersects(&RangeSet(BTreeMap::from([(last.1 + 1, start - 1)])))
                        }) =>
                {
                    last.1 = end;
                    excess -= 1;
                }
                _ => merged.push((start, end)),
            }
        }
        self.0 = merged.into_iter().collect();
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

    /// Applies [`RangeSet::bound`] to every source, keeping gaps that hold an offset of
    /// `open` (claimed by calls in flight).
    pub fn bound(&mut self, max: usize, open: &SourceOffsets) {
        for (source, ranges) in &mut self.0 {
            ranges.bound(max, open.0.get(source));
        }
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

/// The table property holding `writer_id`'s record.
pub fn property_key(writer_id: &str) -> String {
    summary_key(writer_id)
}

/// The record as stored in the table property.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct StoredRecord {
    /// The snapshot committed together with this record, and its sequence number.
    #[serde(rename = "snapshot-id")]
    snapshot_id: i64,
    #[serde(rename = "sequence-number")]
    sequence_number: i64,
    offsets: serde_json::Value,
}

/// The property value recording `offsets` as committed by `snapshot_id`.
pub fn record_value(offsets: &SourceOffsets, snapshot_id: i64, sequence_number: i64) -> String {
    let record = StoredRecord {
        snapshot_id,
        sequence_number,
        offsets: serde_json::from_str(&offsets.to_summary_value()).expect("valid JSON"),
    };
    serde_json::to_string(&record).expect("serializable")
}

/// The snapshot that last wrote `writer_id`'s record: a commit that landed, even if its
/// snapshot was since expired or its files compacted away.
pub fn record_snapshot_id(metadata: &TableMetadata, writer_id: &str) -> Option<i64> {
    let value = metadata.properties().get(&property_key(writer_id))?;
    serde_json::from_str::<StoredRecord>(value)
        .ok()
        .map(|r| r.snapshot_id)
}

/// The offsets `writer_id` has committed on the main branch.
///
/// Fails (rather than answer "nothing") when the table was rolled back behind the
/// commit that wrote the record, or when floe snapshots of this writer id are in the
/// table's history but no record is: re-writing everything would duplicate it.
pub fn committed_offsets(metadata: &TableMetadata, writer_id: &str) -> Result<SourceOffsets> {
    let key = property_key(writer_id);
    if let Some(value) = metadata.properties().get(&key) {
        let record: StoredRecord = serde_json::from_str(value).map_err(|e| {
            Error::new(
                ErrorKind::Rejected,
                format!("table property {key} is not a floe offset record: {e}"),
            )
        })?;
        if rolled_back(metadata, record.snapshot_id, record.sequence_number) {
            return Err(Error::new(
                ErrorKind::Rejected,
                format!(
                    "exactly-once: the table's main branch no longer contains snapshot {} that committed \
                     the offsets recorded for writer id {writer_id:?} (rolled back?); refusing to guess \
                     which messages are in the table. To write the sources again from scratch, use a \
                     new exactly_once.writer_id",
                    record.snapshot_id
                ),
            ));
        }
        let mut offsets = SourceOffsets::from_summary_value(&record.offsets.to_string())?;
        // A floe older than the property (same writer id, e.g. mid rolling upgrade) may
        // have committed on top since: its records are in the snapshot summaries.
        let mut next = metadata.current_snapshot().cloned();
        while let Some(snapshot) = next {
            if snapshot.snapshot_id() == record.snapshot_id
                || snapshot.sequence_number() < record.sequence_number
            {
                break;
            }
            if let Some(value) = snapshot.summary().additional_properties.get(&key) {
                offsets.union_with(&SourceOffsets::from_summary_value(value)?);
                break;
            }
            next = parent(metadata, &snapshot);
        }
        return Ok(offsets);
    }
    // Tables written before the record moved to a property.
    let mut next = metadata.current_snapshot().cloned();
    while let Some(snapshot) = next {
        if let Some(value) = snapshot.summary().additional_properties.get(&key) {
            return SourceOffsets::from_summary_value(value);
        }
        next = parent(metadata, &snapshot);
    }
    let committed_before = metadata.snapshots().any(|s| {
        s.summary()
            .additional_properties
            .get(WRITER_ID_SUMMARY)
            .map(String::as_str)
            == Some(writer_id)
    });
    if committed_before {
        return Err(Error::new(
            ErrorKind::Rejected,
            format!(
                "exactly-once: writer id {writer_id:?} has committed to this table, but its offset \
                 record (table property {key}) is gone; refusing to write the sources again. \
                 To write them again from scratch, use a new exactly_once.writer_id"
            ),
        ));
    }
    Ok(SourceOffsets::default())
}

/// Whether main's history no longer contains `snapshot_id`: walking back from the head
/// passes below its sequence number or reaches the first snapshot without meeting it.
/// A parent that was expired ends the walk undecided, taken as "still there" (expiry
/// keeps the head's ancestors newer than the record's snapshot, which were checked).
fn rolled_back(metadata: &TableMetadata, snapshot_id: i64, sequence_number: i64) -> bool {
    let Some(mut snapshot) = metadata.current_snapshot().cloned() else {
        return true;
    };
    loop {
        if snapshot.snapshot_id() == snapshot_id {
            return false;
        }
        if snapshot.sequence_number() < sequence_number {
            return true;
        }
        match snapshot.parent_snapshot_id() {
            None => return true,
            Some(id) => match metadata.snapshot_by_id(id) {
                Some(p) => snapshot = p.clone(),
                None => return false,
            },
        }
    }
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
    fn sparse_offsets_stay_bounded_and_recent_gaps_stay_open() {
        // Offsets 0, 2, 4, … 20,000: every odd offset is a gap that never closes.
        let mut r = RangeSet::default();
        for i in (0..=20_000).step_by(2) {
            r.insert(i);
        }
        assert_eq!(r.ranges().count(), 10_001);
        let mut protected = r.clone();
        r.bound(MAX_RANGES, None);
        assert_eq!(r.ranges().count(), MAX_RANGES);
        // The newest MAX_RANGES - 1 gaps are still open: their messages would be written.
        let open_gaps: Vec<i64> = (1..20_000).step_by(2).filter(|&g| !r.contains(g)).collect();
        assert_eq!(open_gaps.len(), MAX_RANGES - 1);
        assert_eq!(open_gaps[0], 20_000 - 2 * (MAX_RANGES as i64 - 1) + 1);
        // Everything committed is still committed.
        assert!((0..=20_000).step_by(2).all(|i| r.contains(i)));
        assert!(!r.contains(20_001));
        // A gap holding a message still in flight stays open, however old.
        let mut in_flight = RangeSet::default();
        in_flight.insert(1);
        protected.bound(MAX_RANGES, Some(&in_flight));
        assert!(
            !protected.contains(1),
            "offset 1 is in flight: its gap stays open"
        );
        assert!(protected.contains(3));
        assert_eq!(protected.ranges().count(), MAX_RANGES);
    }

    fn table(properties: &str, main: i64, extra_snapshot: &str) -> TableMetadata {
        crate::fixture::table(properties, main, "", extra_snapshot)
    }

    fn property(snapshot: i64, seq: i64) -> String {
        let mut o = SourceOffsets::default();
        o.insert("s", 7);
        serde_json::to_string(
            &serde_json::json!({"floe.offsets.w": record_value(&o, snapshot, seq)}),
        )
        .unwrap()
    }

    #[test]
    fn the_record_survives_other_tools_and_expiry_and_rollbacks_are_refused() {
        // The record's snapshot (1) is an ancestor of main (2, another tool's commit).
        let m = table(&property(1, 1), 2, "");
        assert!(committed_offsets(&m, "w").unwrap().contains("s", 7));
        // Snapshot 1 expired (another tool's expire_snapshots): the record still holds.
        let json = serde_json::to_string(&table(&property(1, 1), 2, "")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["snapshots"]
            .as_array_mut()
            .unwrap()
            .retain(|s| s["snapshot-id"] != 1);
        let expired: TableMetadata = serde_json::from_value(v).unwrap();
        assert!(expired.snapshot_by_id(1).is_none());
        assert!(committed_offsets(&expired, "w").unwrap().contains("s", 7));
        // Main rolled back to 1, behind the record written with snapshot 2.
        let m = table(&property(2, 2), 1, "");
        let e = committed_offsets(&m, "w").unwrap_err();
        assert!(e.to_string().contains("rolled back"), "{e}");
        // Rolled back, then another tool committed on top (snapshot 3, parent 1).
        let other = crate::fixture::third_snapshot(1, "");
        let m = table(&property(2, 2), 3, &other);
        assert!(committed_offsets(&m, "w").is_err());
        // No record, but this writer id committed before: refused, not "nothing".
        let mine = crate::fixture::third_snapshot(2, r#", "floe.writer-id": "w""#);
        let m = table("{}", 3, &mine);
        assert!(committed_offsets(&m, "w").is_err());
        assert!(committed_offsets(&m, "someone-else").unwrap().is_empty());
    }

    #[test]
    fn records_of_an_older_floe_committed_after_the_property_are_added() {
        // Property written with snapshot 2; an older floe (same writer id) committed 3 on
        // top with its record in the summary.
        let older = crate::fixture::third_snapshot(2, r#", "floe.offsets.w": "{\"s\":[[8,8]]}""#);
        let m = table(&property(2, 2), 3, &older);
        let committed = committed_offsets(&m, "w").unwrap();
        assert!(committed.contains("s", 7) && committed.contains("s", 8));
        assert!(!committed.contains("s", 9));
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
