//! What a writer has done so far: rows, snapshots and files committed, and how long its
//! commits took. Hosts log it when they close (the Go output does) and benchmarks read
//! it, so a run's commit latency comes from inside the committer rather than being
//! guessed from call durations, which also include waiting for a group to form. The
//! same records go, one by one and by table, to the [`events`] a host's metrics drain.

pub mod events;

pub use events::{Event, EventKind};

use crate::sync::LockExt;
use events::EventLog;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters shared by every table committer of one writer.
#[derive(Default)]
pub struct WriterStats {
    rows: AtomicU64,
    snapshots: AtomicU64,
    data_files: AtomicU64,
    data_bytes: AtomicU64,
    commit_latency: Mutex<LatencyHistogram>,
    write_latency: Mutex<LatencyHistogram>,
    catalog_latency: Mutex<LatencyHistogram>,
    events: Mutex<EventLog>,
    waited_to_shred: AtomicU64,
}

impl std::fmt::Debug for WriterStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

/// A point-in-time copy of [`WriterStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatsSnapshot {
    pub rows: u64,
    pub snapshots: u64,
    pub data_files: u64,
    pub data_bytes: u64,
    /// Commit stage per snapshot: manifests, manifest list, uploads, catalog call,
    /// retries.
    pub commit_p50: Duration,
    pub commit_p95: Duration,
    pub commit_max: Duration,
    /// Median time to write one group's data files: encoding, plus the upload for groups
    /// too large to stage in memory (small groups' files go up with the commit's
    /// manifest and list, inside the commit stage).
    pub write_p50: Duration,
    /// Median time of the catalog's answer to one commit request: with `commit_p50`,
    /// says whether a commit waits on the catalog or on floe's own metadata writes.
    pub catalog_p50: Duration,
    /// Table parts of calls that waited for room to shred (rows of other calls waiting
    /// for the encoder filled it; see `commit::committer::gate`).
    pub waited_to_shred: u64,
}

impl WriterStats {
    /// An event of `kind` for `table` with every count zero, for the caller to fill in
    /// and [`Self::record`].
    pub fn event(&self, kind: EventKind, table: &str) -> Event {
        Event::new(kind, self.events.locked().table(table))
    }

    /// Adds an event to the sums and to the log hosts drain.
    pub fn record(&self, event: Event) {
        match event.kind {
            EventKind::Committed => {
                self.rows.fetch_add(event.rows, Ordering::Relaxed);
                self.snapshots.fetch_add(1, Ordering::Relaxed);
                self.data_files
                    .fetch_add(event.data_files, Ordering::Relaxed);
                self.data_bytes
                    .fetch_add(event.data_bytes, Ordering::Relaxed);
                self.commit_latency.locked().record(event.took);
                self.catalog_latency.locked().record(event.catalog);
            }
            EventKind::FilesWritten => self.write_latency.locked().record(event.took),
            EventKind::CommitFailed => {}
        }
        self.events.locked().push(event);
    }

    /// A call's part waited for room to shred.
    pub fn waited_to_shred(&self) {
        self.waited_to_shred.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes up to `max` of the oldest events not taken yet.
    pub fn drain_events(&self, max: usize) -> Vec<Event> {
        self.events.locked().drain(max)
    }

    /// Events lost because no one drained them in time.
    pub fn events_dropped(&self) -> u64 {
        self.events.locked().dropped()
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let median = |h: &Mutex<LatencyHistogram>| h.locked().quantile(0.5);
        let write_p50 = median(&self.write_latency);
        let catalog_p50 = median(&self.catalog_latency);
        let latency = self.commit_latency.locked();
        StatsSnapshot {
            rows: self.rows.load(Ordering::Relaxed),
            snapshots: self.snapshots.load(Ordering::Relaxed),
            data_files: self.data_files.load(Ordering::Relaxed),
            data_bytes: self.data_bytes.load(Ordering::Relaxed),
            commit_p50: latency.quantile(0.50),
            commit_p95: latency.quantile(0.95),
            commit_max: latency.max,
            write_p50,
            catalog_p50,
            waited_to_shred: self.waited_to_shred.load(Ordering::Relaxed),
        }
    }
}

/// Durations in logarithmic buckets 2% wide from 10 µs up, so memory stays fixed over
/// any number of commits and a quantile is off by at most 2%.
struct LatencyHistogram {
    counts: Vec<u64>,
    total: u64,
    max: Duration,
}

const SMALLEST_US: f64 = 10.0;
const GROWTH: f64 = 1.02;
/// 10 µs × 1.02^1000 ≈ 4 hours: longer commits land in the last bucket.
const BUCKETS: usize = 1000;

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: Duration::ZERO,
        }
    }
}

impl LatencyHistogram {
    fn bucket(d: Duration) -> usize {
        let us = d.as_secs_f64() * 1e6;
        if us <= SMALLEST_US {
            return 0;
        }
        ((us / SMALLEST_US).ln() / GROWTH.ln())
            .ceil()
            .min((BUCKETS - 1) as f64) as usize
    }

    /// The upper bound of a bucket.
    fn bound(bucket: usize) -> Duration {
        Duration::from_secs_f64(SMALLEST_US * GROWTH.powi(bucket as i32) / 1e6)
    }

    fn record(&mut self, d: Duration) {
        self.counts[Self::bucket(d)] += 1;
        self.total += 1;
        self.max = self.max.max(d);
    }

    /// The smallest bucket bound at or above the fraction `q` of samples (zero if none).
    fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, n) in self.counts.iter().enumerate() {
            seen += n;
            // The last bucket has no upper bound: the maximum is the best estimate.
            if seen >= rank && bucket < BUCKETS - 1 {
                return Self::bound(bucket).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1e3)
    }

    #[test]
    fn quantiles_within_two_percent() {
        let mut h = LatencyHistogram::default();
        for i in 1..=1000 {
            h.record(ms(i as f64));
        }
        for (q, want) in [(0.5, 500.0), (0.95, 950.0), (0.01, 10.0)] {
            let got = h.quantile(q).as_secs_f64() * 1e3;
            assert!((got - want).abs() / want <= 0.021, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.quantile(1.0), ms(1000.0));
    }

    #[test]
    fn empty_and_extreme_samples() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.quantile(0.5), Duration::ZERO);
        h.record(Duration::from_nanos(10));
        h.record(Duration::from_secs(10 * 3600));
        assert!(h.quantile(0.5) <= Duration::from_micros(10));
        assert_eq!(h.quantile(1.0), Duration::from_secs(10 * 3600));
    }

    fn commit(stats: &WriterStats, rows: u64, files: u64, bytes: u64, took: f64) {
        let mut e = stats.event(EventKind::Committed, "ns.t");
        (e.rows, e.data_files, e.data_bytes, e.took) = (rows, files, bytes, ms(took));
        e.catalog = ms(took / 2.0);
        stats.record(e);
    }

    #[test]
    fn snapshot_sums_commits() {
        let stats = WriterStats::default();
        commit(&stats, 1000, 2, 5000, 40.0);
        commit(&stats, 500, 1, 2500, 20.0);
        let s = stats.snapshot();
        assert_eq!(
            (s.rows, s.snapshots, s.data_files, s.data_bytes),
            (1500, 2, 3, 7500)
        );
        assert_eq!(s.commit_max, ms(40.0));
        assert!((s.commit_p50.as_secs_f64() * 1e3 - 20.0).abs() < 0.5);
        assert!((s.catalog_p50.as_secs_f64() * 1e3 - 10.0).abs() < 0.2);
        assert_eq!(s.write_p50, Duration::ZERO);
        for took in [3.0, 5.0, 90.0] {
            let mut e = stats.event(EventKind::FilesWritten, "ns.t");
            e.took = ms(took);
            stats.record(e);
        }
        assert!((stats.snapshot().write_p50.as_secs_f64() * 1e3 - 5.0).abs() < 0.1);
    }

    #[test]
    fn every_record_reaches_the_event_log_in_order() {
        let stats = WriterStats::default();
        commit(&stats, 10, 1, 100, 4.0);
        let mut failed = stats.event(EventKind::CommitFailed, "ns.u");
        failed.conflicts = 3;
        stats.record(failed);
        let events = stats.drain_events(10);
        let seen: Vec<(EventKind, &str, u64, u32)> = events
            .iter()
            .map(|e| (e.kind, e.table.to_str().unwrap(), e.rows, e.conflicts))
            .collect();
        assert_eq!(
            seen,
            vec![
                (EventKind::Committed, "ns.t", 10, 0),
                (EventKind::CommitFailed, "ns.u", 0, 3)
            ]
        );
        assert_eq!(
            stats.snapshot().snapshots,
            1,
            "a failed commit is no snapshot"
        );
        assert!(stats.drain_events(10).is_empty());
    }
}
