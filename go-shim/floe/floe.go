package floe

/*
#include <stdlib.h>
#include <string.h>
#include "floe.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// ABIVersion is the C ABI version this binding was written for.
const ABIVersion = 7

// The binding was written for ABIVersion: it stops compiling when floe.h says otherwise.
var _ = [1]struct{}{}[ABIVersion-C.FLOE_ABI_VERSION]

// Status mirrors floe_status; the values are floe.h's own constants.
type Status uint32

const (
	StatusOK                 Status = C.FLOE_STATUS_OK
	StatusInvalidArgument    Status = C.FLOE_STATUS_INVALID_ARGUMENT
	StatusConfig             Status = C.FLOE_STATUS_CONFIG
	StatusData               Status = C.FLOE_STATUS_DATA
	StatusNotFound           Status = C.FLOE_STATUS_NOT_FOUND
	StatusConflict           Status = C.FLOE_STATUS_CONFLICT
	StatusCommitStateUnknown Status = C.FLOE_STATUS_COMMIT_STATE_UNKNOWN
	StatusUnavailable        Status = C.FLOE_STATUS_UNAVAILABLE
	StatusRejected           Status = C.FLOE_STATUS_REJECTED
	StatusCancelled          Status = C.FLOE_STATUS_CANCELLED
	StatusInternal           Status = C.FLOE_STATUS_INTERNAL
	StatusPanic              Status = C.FLOE_STATUS_PANIC
)

// Error is a failure reported by libfloe.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string { return e.Message }

// ErrClosed is returned by calls on a closed Writer.
var ErrClosed = errors.New("floe: writer is closed")

// takeError converts and frees a floe_error.
func takeError(status C.floe_status, cerr *C.floe_error) error {
	if cerr == nil {
		return &Error{Status: Status(status), Message: fmt.Sprintf("floe status %d", status)}
	}
	defer C.floe_error_free(cerr)
	return &Error{Status: Status(C.floe_error_status(cerr)), Message: C.GoString(C.floe_error_message(cerr))}
}

// CheckABI refuses a library built for another ABI version.
func CheckABI() error {
	if v := uint32(C.floe_abi_version()); v != ABIVersion {
		return fmt.Errorf("floe: library ABI version %d, binding expects %d", v, ABIVersion)
	}
	return nil
}

// CheckConfig returns every problem libfloe finds in a JSON config, one line each
// naming its field (unsupported fields, wrong types, invalid values); nil when it is
// valid. Nothing is opened. The output's lint rule and its start-up both call this, so
// `floe lint` and `floe run` print the same lines.
func CheckConfig(configJSON []byte) []string {
	if len(configJSON) == 0 {
		return []string{"the config is empty"}
	}
	var cerr *C.floe_error
	status := C.floe_config_check((*C.uint8_t)(unsafe.Pointer(&configJSON[0])), C.size_t(len(configJSON)), &cerr)
	if status == C.FLOE_STATUS_OK {
		return nil
	}
	return strings.Split(takeError(status, cerr).Error(), "\n")
}

// ConfigDefaults returns libfloe's defaults for the fields a config leaves out, as the
// config document (durations as Go duration text). The output declares them as its
// fields' defaults, so docs, lint and libfloe agree.
func ConfigDefaults() (map[string]any, error) {
	text := C.floe_config_defaults()
	if text == nil {
		return nil, errors.New("floe: libfloe gave no config defaults")
	}
	dec := json.NewDecoder(strings.NewReader(C.GoString(text)))
	dec.UseNumber()
	var defaults map[string]any
	if err := dec.Decode(&defaults); err != nil {
		return nil, fmt.Errorf("floe: libfloe's config defaults are not JSON: %w", err)
	}
	return defaults, nil
}

// Writer is an open libfloe writer. Write may be called from many goroutines at once;
// Close waits for calls in progress and is idempotent.
type Writer struct {
	mu  sync.RWMutex
	ptr *C.floe_writer
	// Table names of events by their C address, which libfloe keeps for the writer's life.
	names sync.Map
}

// Open opens a writer from the JSON config.
func Open(configJSON []byte) (*Writer, error) {
	if err := CheckABI(); err != nil {
		return nil, err
	}
	cfg := C.CBytes(configJSON)
	defer C.free(cfg)
	var w *C.floe_writer
	var cerr *C.floe_error
	status := C.floe_writer_open((*C.uint8_t)(cfg), C.size_t(len(configJSON)), &w, &cerr)
	if status != C.FLOE_STATUS_OK {
		return nil, takeError(status, cerr)
	}
	writer := &Writer{ptr: w}
	// A safety net only: callers are expected to Close.
	runtime.SetFinalizer(writer, func(w *Writer) { _ = w.Close() })
	return writer, nil
}

// Close frees the writer. Safe to call more than once.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ptr != nil {
		C.floe_writer_free(w.ptr)
		w.ptr = nil
	}
	return nil
}

// Stats is what a writer has committed since it opened, over all its tables.
type Stats struct {
	Rows, Snapshots, DataFiles, DataBytes uint64
	// Commit stage per snapshot (manifests, manifest list, uploads, catalog call, retries).
	CommitP50, CommitP95, CommitMax time.Duration
	// Medians of writing one group's data files and of the catalog's answer to a commit.
	WriteP50, CatalogP50 time.Duration
}

// Stats reads the writer's counters; cheap, and safe while writes are in flight.
func (w *Writer) Stats() (Stats, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.ptr == nil {
		return Stats{}, ErrClosed
	}
	var cs C.floe_stats
	var cerr *C.floe_error
	if status := C.floe_writer_stats(w.ptr, &cs, &cerr); status != C.FLOE_STATUS_OK {
		return Stats{}, takeError(status, cerr)
	}
	us := func(v C.uint64_t) time.Duration { return time.Duration(v) * time.Microsecond }
	return Stats{
		Rows: uint64(cs.rows), Snapshots: uint64(cs.snapshots),
		DataFiles: uint64(cs.data_files), DataBytes: uint64(cs.data_bytes),
		CommitP50: us(cs.commit_p50_us), CommitP95: us(cs.commit_p95_us), CommitMax: us(cs.commit_max_us),
		WriteP50: us(cs.write_p50_us), CatalogP50: us(cs.catalog_p50_us),
	}, nil
}

// EventKind says what an Event reports.
type EventKind int

const (
	// EventCommitted: a snapshot landed.
	EventCommitted EventKind = C.FLOE_EVENT_KIND_COMMITTED
	// EventCommitFailed: a commit gave up; its calls fail with Failure.
	EventCommitFailed EventKind = C.FLOE_EVENT_KIND_COMMIT_FAILED
	// EventFilesWritten: one group's data and delete files were written.
	EventFilesWritten EventKind = C.FLOE_EVENT_KIND_FILES_WRITTEN
)

// Event is one commit, failed commit or group of files written, by table: what a host
// turns into per-table metrics. Counts and durations its kind does not have are zero.
type Event struct {
	Kind  EventKind
	Table string // namespace.table ("_other" past 1,024 tables)
	// Committed, CommitFailed: the commit stage; FilesWritten: encoding and upload.
	Took time.Duration
	// Committed: the catalog's answer to the request that landed.
	Catalog time.Duration
	// Committed, CommitFailed: how long the commit was held back before it started,
	// pacing itself while other writers' commits kept refusing this writer's (not part
	// of Took).
	Paced                                   time.Duration
	Rows, DataFiles, DataBytes, DeleteFiles uint64
	Conflicts, Retries                      int
	// CommitFailed: the status the commit failed with.
	Failure Status
}

// Events takes the writer's events not taken yet, oldest first (libfloe keeps the last
// 16,384); safe while writes are in flight.
func (w *Writer) Events() ([]Event, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.ptr == nil {
		return nil, ErrClosed
	}
	const chunk = 256
	var buf [chunk]C.floe_event
	var out []Event
	for {
		var n C.size_t
		var cerr *C.floe_error
		if status := C.floe_writer_events(w.ptr, &buf[0], chunk, &n, &cerr); status != C.FLOE_STATUS_OK {
			return out, takeError(status, cerr)
		}
		for _, ce := range buf[:n] {
			out = append(out, w.event(&ce))
		}
		if n < chunk {
			return out, nil
		}
	}
}

func (w *Writer) event(ce *C.floe_event) Event {
	us := func(v C.uint64_t) time.Duration { return time.Duration(v) * time.Microsecond }
	return Event{
		Kind: EventKind(ce.kind), Table: w.tableName(ce.table),
		Took: us(ce.took_us), Catalog: us(ce.catalog_us), Paced: us(ce.paced_us),
		Rows: uint64(ce.rows), DataFiles: uint64(ce.data_files), DataBytes: uint64(ce.data_bytes),
		DeleteFiles: uint64(ce.delete_files),
		Conflicts:   int(ce.conflicts), Retries: int(ce.retries),
		Failure: Status(ce.failure),
	}
}

// tableName converts a table's C name once: libfloe gives every event of a table the
// same pointer, valid while the writer lives.
func (w *Writer) tableName(p *C.char) string {
	key := uintptr(unsafe.Pointer(p))
	if name, ok := w.names.Load(key); ok {
		return name.(string)
	}
	name := C.GoString(p)
	w.names.Store(key, name)
	return name
}

// Batch is one call's messages; Namespaces and Tables are nil when the config's
// values apply to every message, else one entry per message ("" = config's value).
type Batch struct {
	Messages   [][]byte
	Namespaces []string
	Tables     []string
	// Operations is nil for all-inserts, else one entry per message ("" = insert).
	Operations []string
	// Sources and Offsets are nil unless the writer has exactly-once on; then message
	// i came from Sources[i] at Offsets[i].
	Sources []string
	Offsets []int64
	// Types is nil, or one entry per message: a JSON object of field path → Iceberg
	// type that wins over inference when a column is added (empty: none).
	Types [][]byte
	// Call is the call's place in arrival order (Writer.Arrive), the same for each retry
	// of its messages; 0 keeps no order.
	Call uint64
}

// Result tells, per message, whether it was committed.
type Result struct {
	// Failures[i] is nil when message i was committed.
	Failures []error
	Rows     int
	// Snapshots holding the call's rows; one shared with other calls (group commit) is
	// counted by one of them only.
	Snapshots   int
	FailedCount int
}

// cBuffer lays byte strings out in C memory as one buffer plus n+1 offsets, so no Go
// pointer is ever stored in memory C reads.
type cBuffer struct {
	data    unsafe.Pointer
	offsets unsafe.Pointer
}

func newCBuffer[T ~[]byte | ~string](items []T) cBuffer {
	total := 0
	for _, it := range items {
		total += len(it)
	}
	data := C.malloc(C.size_t(total + 1))
	offsets := C.malloc(C.size_t((len(items) + 1) * int(unsafe.Sizeof(C.size_t(0)))))
	dst := unsafe.Slice((*byte)(data), total+1)
	offs := unsafe.Slice((*C.size_t)(offsets), len(items)+1)
	pos := 0
	for i, it := range items {
		offs[i] = C.size_t(pos)
		pos += copy(dst[pos:], it)
	}
	offs[len(items)] = C.size_t(pos)
	return cBuffer{data: data, offsets: offsets}
}

func (b cBuffer) free() {
	if b.data != nil {
		C.free(b.data)
		C.free(b.offsets)
	}
}

// testHookBeforeWrite, when set by a test, runs just before the C call, after the
// context was checked; it gets a channel closed once the cancel token has been fired.
var testHookBeforeWrite func(tokenFired <-chan struct{})

// Arrive takes a place in arrival order for a call and its retries (Batch.Call): each
// key's upserts and deletes in calls that arrived so apply in that order, however the
// calls overlap. Depart must follow when the call is over; until then the calls after
// it wait for its rows. 0 on a closed writer (no order).
func (w *Writer) Arrive() uint64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.ptr == nil {
		return 0
	}
	return uint64(C.floe_writer_arrive(w.ptr))
}

// OpenTables is how many tables the writer holds open (each with its committer and
// caches), idle or not; tables idle for commit.table_idle_timeout are closed.
func (w *Writer) OpenTables() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.ptr == nil {
		return 0
	}
	return int(C.floe_writer_open_tables(w.ptr))
}

// Depart gives back a ticket of Arrive.
func (w *Writer) Depart(call uint64) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.ptr != nil && call != 0 {
		C.floe_writer_depart(w.ptr, C.uint64_t(call))
	}
}

// Write commits a batch, returning once every table it touches has committed or failed.
// Result.Failures holds per-message errors: StatusData ones are the message's own fault;
// any other status (an outage, a conflict beyond the retry budget) means "retry this
// message", and the others are committed. A non-nil error means no table committed
// anything: retry the whole batch. Cancelling ctx aborts the call with a
// StatusCancelled error (the outcome of an in-flight commit is unknown); a context
// cancelled before the call reaches libfloe writes nothing.
func (w *Writer) Write(ctx context.Context, b Batch) (*Result, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.ptr == nil {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for name, list := range map[string][]string{"Namespaces": b.Namespaces, "Tables": b.Tables, "Operations": b.Operations, "Sources": b.Sources} {
		if list != nil && len(list) != len(b.Messages) {
			return nil, fmt.Errorf("floe: %d %s for %d messages", len(list), name, len(b.Messages))
		}
	}
	if b.Types != nil && len(b.Types) != len(b.Messages) {
		return nil, fmt.Errorf("floe: %d Types for %d messages", len(b.Types), len(b.Messages))
	}
	if (b.Sources == nil) != (b.Offsets == nil) || (b.Offsets != nil && len(b.Offsets) != len(b.Messages)) {
		return nil, fmt.Errorf("floe: Sources and Offsets must both be nil or both have %d entries", len(b.Messages))
	}
	msgs := newCBuffer(b.Messages)
	defer msgs.free()
	batch := (*C.floe_batch)(C.calloc(1, C.size_t(unsafe.Sizeof(C.floe_batch{}))))
	defer C.free(unsafe.Pointer(batch))
	batch.data = (*C.uint8_t)(msgs.data)
	batch.offsets = (*C.size_t)(msgs.offsets)
	batch.count = C.size_t(len(b.Messages))
	batch.call = C.uint64_t(b.Call)
	if b.Namespaces != nil {
		ns := newCBuffer(b.Namespaces)
		defer ns.free()
		batch.namespaces, batch.namespace_offsets = (*C.uint8_t)(ns.data), (*C.size_t)(ns.offsets)
	}
	if b.Tables != nil {
		ts := newCBuffer(b.Tables)
		defer ts.free()
		batch.tables, batch.table_offsets = (*C.uint8_t)(ts.data), (*C.size_t)(ts.offsets)
	}
	if b.Operations != nil {
		ops := newCBuffer(b.Operations)
		defer ops.free()
		batch.operations, batch.operation_offsets = (*C.uint8_t)(ops.data), (*C.size_t)(ops.offsets)
	}
	if b.Types != nil {
		ty := newCBuffer(b.Types)
		defer ty.free()
		batch.types, batch.type_offsets = (*C.uint8_t)(ty.data), (*C.size_t)(ty.offsets)
	}
	if b.Sources != nil {
		src := newCBuffer(b.Sources)
		defer src.free()
		batch.sources, batch.source_offsets = (*C.uint8_t)(src.data), (*C.size_t)(src.offsets)
		offs := C.malloc(C.size_t(len(b.Offsets)*8 + 8))
		defer C.free(offs)
		copy(unsafe.Slice((*int64)(offs), len(b.Offsets)), b.Offsets)
		batch.message_offsets = (*C.int64_t)(offs)
	}

	token := C.floe_cancel_token_new()
	done := make(chan struct{})
	fired := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		select {
		case <-ctx.Done():
			C.floe_cancel_token_cancel(token)
			close(fired)
		case <-done:
		}
	}()
	if testHookBeforeWrite != nil {
		testHookBeforeWrite(fired)
	}
	var res *C.floe_batch_result
	var cerr *C.floe_error
	status := C.floe_writer_write(w.ptr, batch, token, &res, &cerr)
	close(done)
	watcher.Wait()
	C.floe_cancel_token_free(token)
	runtime.KeepAlive(w)
	if status != C.FLOE_STATUS_OK {
		return nil, takeError(status, cerr)
	}
	defer C.floe_batch_result_free(res)
	out := &Result{
		Failures:    make([]error, len(b.Messages)),
		Rows:        int(C.floe_batch_result_rows(res)),
		Snapshots:   int(C.floe_batch_result_snapshots(res)),
		FailedCount: int(C.floe_batch_result_failed_count(res)),
	}
	if out.FailedCount > 0 {
		for i := range b.Messages {
			if e := C.floe_batch_result_failure(res, C.size_t(i)); e != nil {
				out.Failures[i] = &Error{Status: Status(C.floe_error_status(e)), Message: C.GoString(C.floe_error_message(e))}
			}
		}
	}
	return out, nil
}
