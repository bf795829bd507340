//! The writer's events across the C ABI: what each table's commits and uploads did, for a
//! host's metrics (see [`crate::stats::events`]).

use std::ffi::c_char;

use super::{FloeStatus, FloeWriter, borrow, ffi_boundary, invalid, store};
use crate::stats::{Event, EventKind};

/// What an event reports.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloeEventKind {
    /// A snapshot landed.
    Committed = 1,
    /// A commit gave up: its write calls fail (`failure` says why).
    CommitFailed = 2,
    /// One group's data and delete files were written (encoded, and uploaded unless they
    /// go up with the commit).
    FilesWritten = 3,
}

/// One event. Durations and counts its kind does not have are zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FloeEvent {
    pub kind: FloeEventKind,
    /// `FLOE_STATUS_OK`, or for `COMMIT_FAILED` the status the commit failed with.
    pub failure: FloeStatus,
    /// The table, `namespace.table`, NUL-terminated: valid until the writer is freed, and
    /// the same pointer for every event of the table (a host may cache by address).
    /// Past 1,024 tables a writer reports `_other`.
    pub table: *const c_char,
    /// COMMITTED / COMMIT_FAILED: the commit stage (manifests, manifest list, catalog
    /// calls, retries); FILES_WRITTEN: encoding and upload. Microseconds.
    pub took_us: u64,
    /// COMMITTED: the catalog's answer to the request that landed, in microseconds.
    pub catalog_us: u64,
    /// COMMITTED / COMMIT_FAILED: how long the commit was held back before it started,
    /// pacing itself while other writers' commits kept refusing this writer's, in
    /// microseconds (0 otherwise; not part of `took_us`).
    pub paced_us: u64,
    pub rows: u64,
    pub data_files: u64,
    pub data_bytes: u64,
    pub delete_files: u64,
    /// Commit attempts refused because another commit landed first.
    pub conflicts: u32,
    /// Commit attempts retried for another reason (throttling, unknown outcome, outage).
    pub retries: u32,
}

impl From<&Event> for FloeEvent {
    fn from(e: &Event) -> Self {
        let us = |d: std::time::Duration| d.as_micros() as u64;
        FloeEvent {
            kind: match e.kind {
                EventKind::Committed => FloeEventKind::Committed,
                EventKind::CommitFailed => FloeEventKind::CommitFailed,
                EventKind::FilesWritten => FloeEventKind::FilesWritten,
            },
            failure: e.failure.map_or(FloeStatus::Ok, FloeStatus::from),
            table: e.table.as_ptr(),
            took_us: us(e.took),
            catalog_us: us(e.catalog),
            paced_us: us(e.paced),
            rows: e.rows,
            data_files: e.data_files,
            data_bytes: e.data_bytes,
            delete_files: e.delete_files,
            conflicts: e.conflicts,
            retries: e.retries,
        }
    }
}

/// Moves up to `capacity` of the writer's oldest events not taken yet into
/// `events_out[0..n]` and stores `n` in `*count_out` (0 when there are none). A writer
/// keeps at most 16,384 events: a host that drains less often loses the oldest. Safe to
/// call from any thread, during writes; each event is taken by one caller.
///
/// # Safety
/// `writer` must be a live writer; `events_out` valid for writing `capacity` events;
/// `count_out` valid for a write; `err_out` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_writer_events(
    writer: *const FloeWriter,
    events_out: *mut FloeEvent,
    capacity: usize,
    count_out: *mut usize,
    err_out: *mut *mut super::FloeError,
) -> FloeStatus {
    ffi_boundary(err_out, || {
        // SAFETY: NULL or a live writer.
        let Some(writer) = (unsafe { borrow(writer) }) else {
            return Err(invalid("floe_writer_events: NULL writer"));
        };
        if count_out.is_null() || (events_out.is_null() && capacity > 0) {
            return Err(invalid("floe_writer_events: NULL events_out or count_out"));
        }
        let events = writer.inner.drain_events(capacity);
        for (i, e) in events.iter().enumerate() {
            // SAFETY: i < capacity, and `events_out` holds `capacity` events by contract.
            unsafe { events_out.add(i).write(FloeEvent::from(e)) };
        }
        // SAFETY: checked non-NULL above; valid for a write by contract.
        unsafe { store(count_out, events.len(), "count_out") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::WriterStats;

    #[test]
    fn an_event_crosses_with_its_table_and_failure() {
        let stats = WriterStats::default();
        let mut e = stats.event(EventKind::CommitFailed, "ns.t");
        e.failure = Some(crate::error::ErrorKind::Conflict);
        e.took = std::time::Duration::from_millis(3);
        e.conflicts = 7;
        let c = FloeEvent::from(&e);
        // SAFETY: the pointer is the event's table name, alive while `e` is.
        let name = unsafe { std::ffi::CStr::from_ptr(c.table) };
        assert_eq!(name.to_str().unwrap(), "ns.t");
        assert_eq!(
            (c.kind, c.failure, c.took_us, c.conflicts),
            (FloeEventKind::CommitFailed, FloeStatus::Conflict, 3000, 7)
        );
    }
}
