//! The C objects: errors, cancellation tokens, writers and batch results.

use std::ffi::{CString, c_char};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::runtime::Runtime;
use tokio::sync::Notify;

use super::{FloeStatus, borrow, fail, ffi_boundary, free_handle, into_handle, invalid, store};
use crate::error::{Error, ErrorKind};
use crate::writer::{Message, Writer};

/// An error: a status code and a UTF-8 message. Owned by the caller; free with
/// `floe_error_free`. Safe to read from any thread.
pub struct FloeError {
    status: FloeStatus,
    message: CString,
}

impl FloeError {
    pub(crate) fn new(status: FloeStatus, message: String) -> Self {
        let message = CString::new(message.replace('\0', " ")).expect("NULs removed");
        FloeError { status, message }
    }
}

/// The status code of `err` (`FLOE_STATUS_INTERNAL` for NULL).
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_error_status(err: *const FloeError) -> FloeStatus {
    // SAFETY: NULL or a pointer from floe that has not been freed.
    unsafe { borrow(err) }.map_or(FloeStatus::Internal, |e| e.status)
}

/// The message of `err`, NUL-terminated, valid until `floe_error_free(err)`; "" for NULL.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_error_message(err: *const FloeError) -> *const c_char {
    // SAFETY: NULL or a pointer from floe that has not been freed.
    match unsafe { borrow(err) } {
        Some(e) => e.message.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// Frees an error. NULL is accepted.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_error_free(err: *mut FloeError) {
    // SAFETY: NULL or a pointer floe returned, freed once by contract.
    unsafe { free_handle(err) }
}

/// A cancellation token. Any thread may fire it while another thread is blocked in a
/// call that was given it. Free with `floe_cancel_token_free` after every call using it
/// has returned.
pub struct FloeCancelToken {
    fired: AtomicBool,
    notify: Notify,
}

impl FloeCancelToken {
    fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            if self.fired.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// A new token, not fired. Never NULL. Free with `floe_cancel_token_free`.
#[unsafe(no_mangle)]
pub extern "C" fn floe_cancel_token_new() -> *mut FloeCancelToken {
    into_handle(FloeCancelToken {
        fired: AtomicBool::new(false),
        notify: Notify::new(),
    })
}

/// Fires the token: calls waiting on it return `FLOE_STATUS_CANCELLED` as soon as they
/// can. Thread-safe; firing twice is harmless. NULL is ignored.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_cancel_token_cancel(token: *const FloeCancelToken) {
    // SAFETY: NULL or a live token.
    if let Some(t) = unsafe { borrow(token) } {
        t.fired.store(true, Ordering::Release);
        t.notify.notify_waiters();
    }
}

/// Frees a token once every call given it has returned. NULL is accepted.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_cancel_token_free(token: *mut FloeCancelToken) {
    // SAFETY: NULL or a pointer floe returned, freed once by contract.
    unsafe { free_handle(token) }
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The process-wide runtime, sized by the first writer's `runtime_threads` (default:
/// one worker per core).
fn runtime(threads: Option<usize>) -> Result<&'static Runtime, (FloeStatus, String)> {
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("floe");
    if let Some(n) = threads {
        builder.worker_threads(n.max(1));
    }
    let rt = builder
        .build()
        .map_err(|e| (FloeStatus::Internal, format!("cannot start runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// A writer for one configuration. Many threads may call `floe_writer_write` on the same
/// writer at once. Free with `floe_writer_free` once no call is using it.
pub struct FloeWriter {
    pub(super) inner: Arc<Writer>,
}

/// Opens a writer from a JSON config (`config_json`, `config_len` bytes, UTF-8).
/// On success stores a new writer in `*writer_out`.
///
/// # Safety
/// `config_json` must point to `config_len` readable bytes; `writer_out` must be valid
/// for a write; `err_out` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_writer_open(
    config_json: *const u8,
    config_len: usize,
    writer_out: *mut *mut FloeWriter,
    err_out: *mut *mut FloeError,
) -> FloeStatus {
    ffi_boundary(err_out, || {
        if config_json.is_null() || writer_out.is_null() {
            return Err(invalid("floe_writer_open: NULL argument"));
        }
        // SAFETY: the caller guarantees `config_len` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(config_json, config_len) };
        let text = std::str::from_utf8(bytes).map_err(|_| invalid("config is not UTF-8"))?;
        let config = crate::validate::config_from_json(text).map_err(fail)?;
        let rt = runtime(config.runtime_threads.filter(|&n| n > 0))?;
        let writer = rt.block_on(Writer::open(config)).map_err(fail)?;
        let handle = into_handle(FloeWriter {
            inner: Arc::new(writer),
        });
        // SAFETY: checked non-NULL above; valid for a write by contract.
        unsafe { store(writer_out, handle, "writer_out") }
    })
}

/// Takes a place in arrival order for a call (and its retries): a key's upserts and
/// deletes in calls that arrived so apply in that order, however the calls overlap (see
/// `FloeBatch::call`). Give the ticket back with `floe_writer_depart` when the call is
/// over, written or given up: until then the calls after it wait for its rows. Returns 0
/// for a NULL writer.
///
/// # Safety
/// `writer` must be NULL or a live writer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_writer_arrive(writer: *const FloeWriter) -> u64 {
    // SAFETY: NULL or a live writer by contract.
    let writer = unsafe { borrow(writer) };
    // No panic crosses the boundary; a call without a ticket keeps no order.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        writer.map_or(0, |w| w.inner.arrive())
    }))
    .unwrap_or(0)
}

/// Gives back a ticket of `floe_writer_arrive`: the calls after it no longer wait for it.
/// 0 and NULL are accepted.
///
/// # Safety
/// `writer` must be NULL or a live writer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_writer_depart(writer: *const FloeWriter, call: u64) {
    // SAFETY: NULL or a live writer by contract.
    if let Some(writer) = unsafe { borrow(writer) } {
        let _ =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.inner.depart(call)));
    }
}

/// How many tables the writer holds open (each with its committer and caches), idle or
/// not; tables idle for `commit.table_idle_timeout` are closed. 0 for a NULL writer.
///
/// # Safety
/// `writer` must be NULL or a live writer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_writer_open_tables(writer: *const FloeWriter) -> u64 {
    // SAFETY: NULL or a live writer by contract.
    let writer = unsafe { borrow(writer) };
    // No panic crosses the boundary.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        writer.map_or(0, |w| w.inner.open_tables() as u64)
    }))
    .unwrap_or(0)
}

/// Closes and frees a writer. Data of calls that returned is already committed. NULL is
/// accepted.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_writer_free(writer: *mut FloeWriter) {
    // SAFETY: NULL or a pointer floe returned, freed once by contract.
    unsafe { free_handle(writer) }
}

/// A batch of messages laid out for one call: message `i` is
/// `data[offsets[i] .. offsets[i+1]]`. `namespaces`/`tables` are optional (NULL when the
/// config's value applies to every message); when given they use the same layout with
/// their own offsets, and an empty entry means "use the config's value". `operations`
/// likewise (NULL or empty entries: `insert`). `sources`/`source_offsets` and
/// `message_offsets` carry exactly-once positions (given together or not at all, and
/// only read when `commit.exactly_once` is configured): message `i` came from source
/// `sources[i]` at offset `message_offsets[i]`. `types`/`type_offsets` (NULL when the
/// output has no schema metadata or type mapping) carry each message's explicit column
/// types.
#[repr(C)]
pub struct FloeBatch {
    /// The messages' bytes; may be NULL when every message is empty.
    pub data: *const u8,
    /// `count + 1` offsets into `data`, non-decreasing.
    pub offsets: *const usize,
    pub count: usize,
    pub namespaces: *const u8,
    pub namespace_offsets: *const usize,
    pub tables: *const u8,
    pub table_offsets: *const usize,
    /// Per-message row operation (`insert`; empty = `insert`), same layout; may be NULL.
    pub operations: *const u8,
    pub operation_offsets: *const usize,
    /// Exactly-once: per-message source names, same layout; may be NULL.
    pub sources: *const u8,
    pub source_offsets: *const usize,
    /// Exactly-once: `count` per-message offsets within their source; may be NULL.
    pub message_offsets: *const i64,
    /// Per-message explicit types (a JSON object of field path → Iceberg type; empty:
    /// none), same layout as `data`; may be NULL.
    pub types: *const u8,
    pub type_offsets: *const usize,
    /// The call's place in arrival order, from `floe_writer_arrive` (the same for each
    /// retry of the call's messages), or 0 for a call that keeps no order.
    pub call: u64,
}

/// What one write did. Free with `floe_batch_result_free`.
pub struct FloeBatchResult {
    failures: Vec<Option<FloeError>>,
    rows_committed: usize,
    snapshots: usize,
}

/// Slices message `i` out of a buffer with `count + 1` offsets.
///
/// # Safety
/// `data` must cover `offsets[count]` bytes and `offsets` `count + 1` entries.
unsafe fn strings<'a>(
    data: *const u8,
    offsets: *const usize,
    count: usize,
) -> Result<Vec<&'a [u8]>, (FloeStatus, String)> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if offsets.is_null() {
        return Err(invalid("batch offsets are NULL"));
    }
    // SAFETY: guaranteed by the caller.
    let offsets = unsafe { std::slice::from_raw_parts(offsets, count + 1) };
    if offsets.windows(2).any(|w| w[0] > w[1]) {
        return Err(invalid("batch offsets decrease"));
    }
    // Entries that are all empty need no buffer (C and Go may pass NULL for one).
    let data: &[u8] = match (data.is_null(), offsets[count]) {
        (_, 0) => &[],
        (true, _) => return Err(invalid("batch buffer is NULL")),
        // SAFETY: the caller guarantees `offsets[count]` readable bytes.
        (false, len) => unsafe { std::slice::from_raw_parts(data, len) },
    };
    Ok(offsets.windows(2).map(|w| &data[w[0]..w[1]]).collect())
}

/// Each message's entry of a name list; `Err` when it is not UTF-8.
type Names<'a> = Vec<Result<&'a str, ()>>;

/// Per-message names (namespaces, tables, operations, sources), `None` when the caller
/// gave none. An entry that is not UTF-8 is `Err`: it fails its message, not the batch
/// (hosts fill these from per-message metadata, which may hold any bytes).
fn optional_names<'a>(
    data: *const u8,
    offsets: *const usize,
    count: usize,
) -> Result<Option<Names<'a>>, (FloeStatus, String)> {
    if offsets.is_null() {
        return Ok(None);
    }
    // SAFETY: same contract as the messages.
    let raw = unsafe { strings(data, offsets, count) }?;
    Ok(Some(
        raw.into_iter()
            .map(|b| std::str::from_utf8(b).map_err(|_| ()))
            .collect(),
    ))
}

/// Writes and commits a batch, blocking until every table it touches has committed.
///
/// On `FLOE_STATUS_OK`, `*result_out` receives the per-message outcome (see
/// `floe_batch_result_failure`). A message failed with `FLOE_STATUS_DATA` failed through
/// its own fault (conversion, a table that does not exist, a name or operation that is
/// not UTF-8, a missing exactly-once position): replaying it fails again, so it may be dead-lettered. A message failed
/// with any other status (its table's commit failed: storage, catalog, auth, conflicts
/// beyond `commit.retry_timeout`, unknown outcome; or its position was being committed
/// by another call) should be retried, not dead-lettered; the other messages are
/// committed, so retry only the failed ones. Any status other than `FLOE_STATUS_OK`
/// means no table committed anything: retry the whole batch. A token fired before the
/// call starts cancels it before any row is submitted; one fired during the call leaves
/// its outcome unknown. `cancel` may be NULL.
///
/// # Safety
/// `writer` must be a live writer; `batch` must describe readable memory as documented
/// on `FloeBatch`; `result_out` valid for a write; `err_out` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_writer_write(
    writer: *const FloeWriter,
    batch: *const FloeBatch,
    cancel: *const FloeCancelToken,
    result_out: *mut *mut FloeBatchResult,
    err_out: *mut *mut FloeError,
) -> FloeStatus {
    ffi_boundary(err_out, || {
        // SAFETY: NULL or live pointers by contract.
        let (Some(writer), Some(batch)) = (unsafe { borrow(writer) }, unsafe { borrow(batch) })
        else {
            return Err(invalid("floe_writer_write: NULL writer or batch"));
        };
        if result_out.is_null() {
            return Err(invalid("floe_writer_write: NULL result_out"));
        }
        // SAFETY: the caller describes the batch memory.
        let payloads = unsafe { strings(batch.data, batch.offsets, batch.count) }?;
        let namespaces = optional_names(batch.namespaces, batch.namespace_offsets, batch.count)?;
        let tables = optional_names(batch.tables, batch.table_offsets, batch.count)?;
        let operations = optional_names(batch.operations, batch.operation_offsets, batch.count)?;
        let sources = optional_names(batch.sources, batch.source_offsets, batch.count)?;
        let types = match batch.type_offsets.is_null() {
            true => None,
            // SAFETY: the caller describes the types' memory like the messages'.
            false => Some(unsafe { strings(batch.types, batch.type_offsets, batch.count) }?),
        };
        let positions = match (batch.message_offsets.is_null(), batch.count) {
            (true, _) | (false, 0) => None,
            // SAFETY: `count` readable entries by contract.
            (false, n) => Some(unsafe { std::slice::from_raw_parts(batch.message_offsets, n) }),
        };
        if sources.is_some() != positions.is_some() {
            return Err(invalid(
                "floe_writer_write: sources and message_offsets must be given together",
            ));
        }
        // A source only matters with exactly-once on: without it, positions are not
        // used, and a source that is not UTF-8 must not fail its message.
        let sources = sources.filter(|_| writer.inner.exactly_once());
        let named = [
            ("namespace", &namespaces),
            ("table", &tables),
            ("operation", &operations),
            ("source", &sources),
        ];
        let failed: Vec<Option<Error>> = (0..batch.count)
            .map(|i| {
                let (what, _) = named
                    .iter()
                    .find(|(_, names)| names.as_ref().is_some_and(|n| n[i].is_err()))?;
                Some(Error::new(
                    ErrorKind::Data,
                    format!("message {i}: its {what} is not UTF-8"),
                ))
            })
            .collect();
        let pick = |v: &Option<Names<'static>>, i: usize| {
            v.as_ref().and_then(|v| v[i].ok()).filter(|s| !s.is_empty())
        };
        let messages: Vec<Message> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| Message {
                payload: p,
                namespace: pick(&namespaces, i),
                table: pick(&tables, i),
                operation: pick(&operations, i),
                source: pick(&sources, i),
                offset: positions.map(|p| p[i]),
                types: types.as_ref().map(|t| t[i]).filter(|t| !t.is_empty()),
            })
            .collect();
        // SAFETY: NULL or a live token.
        let cancel = unsafe { borrow(cancel) };
        let rt = runtime(None)?;
        // A token fired before the call starts cancels it before any row is submitted
        // (the host retries a cancelled batch: submitted rows would be written twice).
        // Once started, a write that has finished wins over a token fired meanwhile, so
        // a committed batch is never reported as cancelled.
        if cancel.is_some_and(FloeCancelToken::is_fired) {
            return Err(fail(Error::new(
                ErrorKind::Cancelled,
                "write cancelled before it started; nothing was written",
            )));
        }
        let outcome = rt.block_on(async {
            let write = writer.inner.write_call(batch.call, &messages, failed);
            match cancel {
                None => write.await,
                Some(token) => tokio::select! {
                    biased;
                    out = write => out,
                    () = token.cancelled() => Err(Error::new(ErrorKind::Cancelled, "write cancelled; its outcome is unknown")),
                },
            }
        });
        let outcome = outcome.map_err(fail)?;
        let result = FloeBatchResult {
            failures: outcome
                .failures
                .into_iter()
                .map(|f| f.map(|e| FloeError::new(e.kind().into(), e.to_string())))
                .collect(),
            rows_committed: outcome.rows_committed,
            snapshots: outcome.snapshots,
        };
        // SAFETY: checked non-NULL above; valid for a write by contract.
        unsafe { store(result_out, into_handle(result), "result_out") }
    })
}

/// The error of message `index`, or NULL when it was committed (or `index` is out of
/// range). The error is owned by the result: do not free it.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_batch_result_failure(
    result: *const FloeBatchResult,
    index: usize,
) -> *const FloeError {
    // SAFETY: NULL or a live result.
    unsafe { borrow(result) }
        .and_then(|r| r.failures.get(index))
        .and_then(Option::as_ref)
        .map_or(std::ptr::null(), |e| e as *const FloeError)
}

/// How many messages of the batch failed.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_batch_result_failed_count(result: *const FloeBatchResult) -> usize {
    // SAFETY: NULL or a live result.
    unsafe { borrow(result) }.map_or(0, |r| r.failures.iter().filter(|f| f.is_some()).count())
}

/// Rows committed by the call.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_batch_result_rows(result: *const FloeBatchResult) -> usize {
    // SAFETY: NULL or a live result.
    unsafe { borrow(result) }.map_or(0, |r| r.rows_committed)
}

/// Snapshots committed with the call's rows. A snapshot holding several calls' rows
/// (group commit) is counted by one of them: summed over calls, each counts once.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_batch_result_snapshots(result: *const FloeBatchResult) -> usize {
    // SAFETY: NULL or a live result.
    unsafe { borrow(result) }.map_or(0, |r| r.snapshots)
}

/// Frees a result and the errors it owns. NULL is accepted.
///
/// # Safety
/// Each pointer argument must be NULL or a live object obtained from floe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_batch_result_free(result: *mut FloeBatchResult) {
    // SAFETY: NULL or a pointer floe returned, freed once by contract.
    unsafe { free_handle(result) }
}

/// What a writer has committed since it was opened, over all its tables.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct FloeWriterStats {
    pub rows: u64,
    pub snapshots: u64,
    pub data_files: u64,
    pub data_bytes: u64,
    /// Commit stage per snapshot (manifests, manifest list, uploads, catalog call,
    /// retries), in microseconds: median, 95th percentile (within 2%) and maximum.
    pub commit_p50_us: u64,
    pub commit_p95_us: u64,
    pub commit_max_us: u64,
    /// Medians, in microseconds, of writing one group's data files and of the catalog's
    /// answer to one commit request.
    pub write_p50_us: u64,
    pub catalog_p50_us: u64,
}

/// Stores the writer's counters in `*stats_out`. Cheap; safe to call during writes.
///
/// # Safety
/// `writer` must be a live writer; `stats_out` valid for a write; `err_out` NULL or valid
/// for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_writer_stats(
    writer: *const FloeWriter,
    stats_out: *mut FloeWriterStats,
    err_out: *mut *mut FloeError,
) -> FloeStatus {
    ffi_boundary(err_out, || {
        // SAFETY: NULL or a live writer.
        let Some(writer) = (unsafe { borrow(writer) }) else {
            return Err(invalid("floe_writer_stats: NULL writer"));
        };
        if stats_out.is_null() {
            return Err(invalid("floe_writer_stats: NULL stats_out"));
        }
        let s = writer.inner.stats();
        let us = |d: std::time::Duration| d.as_micros() as u64;
        let stats = FloeWriterStats {
            rows: s.rows,
            snapshots: s.snapshots,
            data_files: s.data_files,
            data_bytes: s.data_bytes,
            commit_p50_us: us(s.commit_p50),
            commit_p95_us: us(s.commit_p95),
            commit_max_us: us(s.commit_max),
            write_p50_us: us(s.write_p50),
            catalog_p50_us: us(s.catalog_p50),
        };
        // SAFETY: checked non-NULL above; valid for a write by contract.
        unsafe { store(stats_out, stats, "stats_out") }
    })
}
