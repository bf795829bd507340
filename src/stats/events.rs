//! What each table's commits did, one event at a time, for a host's metrics.
//!
//! [`super::WriterStats`] sums a writer's work; a metrics exporter needs more: which table
//! each commit went to, each commit's and upload's own latency (a histogram needs every
//! sample, not quantiles), and the conflicts and retries behind it. The committers append
//! events here and the host drains them (the Go output does after each write call and on
//! its progress tick). The log is bounded: a host that stops draining loses the oldest
//! events, never memory, and [`EventLog::dropped`] says how many.

use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::time::Duration;

use crate::error::ErrorKind;

/// Events kept while no one drains: a host draining after every call holds a handful.
pub const MAX_EVENTS: usize = 16_384;
/// Distinct table names kept; later tables' events carry [`OTHER_TABLE`] so that a
/// writer routing to unboundedly many tables keeps bounded memory.
pub const MAX_TABLES: usize = 1_024;
pub const OTHER_TABLE: &str = "_other";

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A snapshot landed.
    Committed,
    /// A commit gave up (its calls fail; `failure` says why).
    CommitFailed,
    /// One group's data and delete files were written (encoded, and uploaded unless
    /// staged to go up with the commit).
    FilesWritten,
}

/// One event. Durations and counts a kind does not have are zero.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub kind: EventKind,
    /// The table as `namespace.table`, shared with every other event of the table.
    pub table: Arc<CStr>,
    /// Committed / CommitFailed: the commit stage (manifests, list, catalog calls,
    /// retries); FilesWritten: encoding and upload.
    pub took: Duration,
    /// Committed: the catalog's answer to the request that landed.
    pub catalog: Duration,
    /// Committed / CommitFailed: how long the commit was held back before it started,
    /// pacing itself while other writers' commits kept refusing this writer's (zero
    /// otherwise; not part of `took`).
    pub paced: Duration,
    pub rows: u64,
    pub data_files: u64,
    pub data_bytes: u64,
    pub delete_files: u64,
    /// Attempts the catalog refused because another commit landed first.
    pub conflicts: u32,
    /// Attempts retried for any other reason (throttling, unknown outcome, outage).
    pub retries: u32,
    /// CommitFailed: the error's kind.
    pub failure: Option<ErrorKind>,
}

impl Event {
    /// An event of `kind` with every count zero, for the recorder to fill in.
    pub fn new(kind: EventKind, table: Arc<CStr>) -> Self {
        Event {
            kind,
            table,
            took: Duration::ZERO,
            catalog: Duration::ZERO,
            paced: Duration::ZERO,
            rows: 0,
            data_files: 0,
            data_bytes: 0,
            delete_files: 0,
            conflicts: 0,
            retries: 0,
            failure: None,
        }
    }
}

/// The bounded queue of events and the table names they share.
#[derive(Default)]
pub struct EventLog {
    events: VecDeque<Event>,
    tables: HashMap<String, Arc<CStr>>,
    dropped: u64,
}

impl EventLog {
    /// The shared name of `table`: the same allocation for every event of the table, so
    /// a host may cache by address; [`OTHER_TABLE`] past [`MAX_TABLES`] names.
    pub fn table(&mut self, table: &str) -> Arc<CStr> {
        if let Some(name) = self.tables.get(table) {
            return name.clone();
        }
        let key = if self.tables.len() >= MAX_TABLES {
            OTHER_TABLE
        } else {
            table
        };
        self.tables
            .entry(key.to_string())
            .or_insert_with(|| c_name(key))
            .clone()
    }

    pub fn push(&mut self, event: Event) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.events.push_back(event);
    }

    /// Takes up to `max` of the oldest events.
    pub fn drain(&mut self, max: usize) -> Vec<Event> {
        let n = max.min(self.events.len());
        self.events.drain(..n).collect()
    }

    /// Events lost because the log was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// A table name as C text; a NUL (which table names may not hold) becomes a space.
fn c_name(name: &str) -> Arc<CStr> {
    let text = CString::new(name.replace('\0', " ")).expect("NULs replaced");
    Arc::from(text.as_c_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(log: &mut EventLog, table: &str, rows: u64) -> Event {
        let mut e = Event::new(EventKind::Committed, log.table(table));
        e.rows = rows;
        e
    }

    #[test]
    fn events_drain_oldest_first_in_pieces() {
        let mut log = EventLog::default();
        for rows in 0..5 {
            let e = committed(&mut log, "ns.t", rows);
            log.push(e);
        }
        let first: Vec<u64> = log.drain(3).iter().map(|e| e.rows).collect();
        let rest: Vec<u64> = log.drain(10).iter().map(|e| e.rows).collect();
        assert_eq!((first, rest), (vec![0, 1, 2], vec![3, 4]));
        assert!(log.drain(10).is_empty());
    }

    #[test]
    fn a_full_log_drops_the_oldest_and_counts_them() {
        let mut log = EventLog::default();
        for rows in 0..(MAX_EVENTS as u64 + 3) {
            let e = committed(&mut log, "ns.t", rows);
            log.push(e);
        }
        assert_eq!(log.dropped(), 3);
        let all = log.drain(usize::MAX);
        assert_eq!(all.len(), MAX_EVENTS);
        assert_eq!(all[0].rows, 3);
    }

    #[test]
    fn a_tables_events_share_one_name_and_names_are_bounded() {
        let mut log = EventLog::default();
        let a = log.table("ns.a");
        assert!(Arc::ptr_eq(&a, &log.table("ns.a")));
        assert_eq!(a.to_str().unwrap(), "ns.a");
        for i in 0..MAX_TABLES {
            log.table(&format!("ns.t{i}"));
        }
        assert_eq!(log.table("ns.late").to_str().unwrap(), OTHER_TABLE);
        assert_eq!(log.table("ns.a").to_str().unwrap(), "ns.a");
    }
}
