package iceberg

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/floe-dev/floe/go-shim/floe"
)

// What the output reports to the host's metrics exporter (docs/metrics.md lists them).
// Per-table series come from libfloe's events (each commit, failed commit and group of
// files written) and from the messages' own tables; both name a table
// `namespace.table`.

// maxTableLabels bounds the `table` label: later tables share the label otherTable, so a
// pipeline routing to thousands of tables keeps a bounded number of series.
const (
	maxTableLabels = 100
	otherTable     = "_other"
)

// failureClasses are the values of the `class` label: libfloe's statuses, plus
// `invalid_input` for a message the output itself could not read (an interpolation or
// exactly-once position that fails).
var failureClasses = []string{
	"config", "data", "not_found", "conflict", "commit_state_unknown", "unavailable",
	"rejected", "cancelled", "internal", "invalid_input",
}

var operations = []string{"insert", "upsert", "delete"}

type metrics struct {
	rowOps         *service.MetricCounter // {table, operation}
	rowsFailed     *service.MetricCounter // {table, class}
	writeFailures  *service.MetricCounter // {class}
	commitFailures *service.MetricCounter // {table, class}
	snapshots      *service.MetricCounter // {table}
	dataFiles      *service.MetricCounter // {table}
	dataBytes      *service.MetricCounter // {table}
	deleteFiles    *service.MetricCounter // {table}
	conflicts      *service.MetricCounter // {table}
	retries        *service.MetricCounter // {table}
	commitLatency  *service.MetricTimer   // {table}
	catalogLatency *service.MetricTimer   // {table}
	commitPacing   *service.MetricTimer   // {table}
	uploadLatency  *service.MetricTimer   // {table}
	writeLatency   *service.MetricTimer   // {outcome}
	inFlightBytes  *service.MetricGauge   // message bytes of the calls past the byte gate
	openTables     *service.MetricGauge   // tables libfloe holds open, each with its committer
	// message bytes of the calls of every output of the process past processGate
	processInFlightBytes *service.MetricGauge

	mu     sync.Mutex
	tables map[string]bool

	// For the progress line: totals since start, and at the last line.
	rows, commits, failed atomic.Int64
	// Write calls handed over and not answered yet: a stalled commit is not idleness.
	inFlight atomic.Int64
	drainMu  sync.Mutex
}

func newMetrics(m *service.Metrics) *metrics {
	return &metrics{
		rowOps:               m.NewCounter("iceberg_row_operations_total", "table", "operation"),
		rowsFailed:           m.NewCounter("iceberg_rows_failed_total", "table", "class"),
		writeFailures:        m.NewCounter("iceberg_write_failures_total", "class"),
		commitFailures:       m.NewCounter("iceberg_commit_failures_total", "table", "class"),
		snapshots:            m.NewCounter("iceberg_snapshots_total", "table"),
		dataFiles:            m.NewCounter("iceberg_data_files_total", "table"),
		dataBytes:            m.NewCounter("iceberg_data_bytes_total", "table"),
		deleteFiles:          m.NewCounter("iceberg_delete_files_total", "table"),
		conflicts:            m.NewCounter("iceberg_commit_conflicts_total", "table"),
		retries:              m.NewCounter("iceberg_commit_retries_total", "table"),
		commitLatency:        m.NewTimer("iceberg_commit_latency_ns", "table"),
		catalogLatency:       m.NewTimer("iceberg_catalog_commit_latency_ns", "table"),
		commitPacing:         m.NewTimer("iceberg_commit_pacing_ns", "table"),
		uploadLatency:        m.NewTimer("iceberg_upload_latency_ns", "table"),
		writeLatency:         m.NewTimer("iceberg_write_batch_latency_ns", "outcome"),
		inFlightBytes:        m.NewGauge("iceberg_in_flight_bytes"),
		openTables:           m.NewGauge("iceberg_open_tables"),
		processInFlightBytes: m.NewGauge("iceberg_process_in_flight_bytes"),
		tables:               map[string]bool{},
	}
}

// table is the label of a table: its name for the first maxTableLabels tables seen,
// otherTable after. Only tables libfloe wrote to (its events, committed messages) take
// a slot, so names that fail cannot crowd real tables out; a name that is not UTF-8
// (which the exporter refuses) is labelled with its invalid bytes replaced.
func (m *metrics) table(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tables[name] {
		return name
	}
	if len(m.tables) >= maxTableLabels || name == otherTable {
		return otherTable
	}
	m.tables[name] = true
	return name
}

// knownTable is the label of a failed message's table: the table's own label if it has
// one, else otherTable (a failing name takes no slot).
func (m *metrics) knownTable(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tables[name] {
		return name
	}
	return otherTable
}

// zeroes makes the series that exist from the start at 0, so that a dashboard's rate()
// and alerts see them before the first event: the whole-call failures by class, and,
// for a table the config names, every per-table counter.
func (m *metrics) zeroes(table string) {
	m.inFlightBytes.Set(0)
	m.openTables.Set(0)
	m.processInFlightBytes.Set(processGate.inUse())
	for _, class := range failureClasses {
		m.writeFailures.Incr(0, class)
	}
	if table == "" {
		return
	}
	t := m.table(table)
	for _, c := range []*service.MetricCounter{m.snapshots, m.dataFiles, m.dataBytes, m.deleteFiles, m.conflicts, m.retries} {
		c.Incr(0, t)
	}
	for _, op := range operations {
		m.rowOps.Incr(0, t, op)
	}
	for _, class := range failureClasses {
		m.rowsFailed.Incr(0, t, class)
		m.commitFailures.Incr(0, t, class)
	}
}

// takeEvents drains the writer's events into the per-table series. Called after every
// write call and by the progress tick; one drain at a time keeps each event counted once
// and in order.
func (m *metrics) takeEvents(w *floe.Writer) {
	m.drainMu.Lock()
	defer m.drainMu.Unlock()
	events, _ := w.Events()
	for _, e := range events {
		m.event(e)
	}
	m.openTables.Set(int64(w.OpenTables()))
}

func (m *metrics) event(e floe.Event) {
	t := m.table(e.Table)
	switch e.Kind {
	case floe.EventCommitted:
		m.commits.Add(1)
		m.snapshots.Incr(1, t)
		m.dataFiles.Incr(int64(e.DataFiles), t)
		m.dataBytes.Incr(int64(e.DataBytes), t)
		m.deleteFiles.Incr(int64(e.DeleteFiles), t)
		m.commitLatency.Timing(e.Took.Nanoseconds(), t)
		if e.Catalog > 0 {
			// Zero when the commit was found landed by a look, without an answer.
			m.catalogLatency.Timing(e.Catalog.Nanoseconds(), t)
		}
	case floe.EventCommitFailed:
		m.commitFailures.Incr(1, t, statusClass(e.Failure))
	case floe.EventFilesWritten:
		m.uploadLatency.Timing(e.Took.Nanoseconds(), t)
	}
	if e.Paced > 0 {
		// Held back while other writers' commits kept refusing this writer's.
		m.commitPacing.Timing(e.Paced.Nanoseconds(), t)
	}
	// A failed commit's attempts were conflicts and retries too.
	m.conflicts.Incr(int64(e.Conflicts), t)
	m.retries.Incr(int64(e.Retries), t)
}

// call records one write call to libfloe: its latency by outcome, and a whole-call
// failure by class.
func (m *metrics) call(took time.Duration, err error) {
	outcome := "committed"
	if err != nil {
		outcome = "failed"
		m.writeFailures.Incr(1, errorClass(err))
	}
	m.writeLatency.Timing(took.Nanoseconds(), outcome)
}

// committed counts a call's committed messages by table and operation: by the batch's
// per-message tables, or `static` (the config's table) when it has none. A table's
// label text is made once per call, not once per message.
func (m *metrics) committed(b floe.Batch, static string, failures []error) {
	type key struct{ ns, table, op string }
	counts := map[key]int64{}
	for i, err := range failures {
		if err != nil {
			continue
		}
		k := key{op: "insert"}
		if b.Operations != nil && b.Operations[i] != "" {
			k.op = b.Operations[i]
		}
		if b.Tables != nil {
			k.ns, k.table = b.Namespaces[i], b.Tables[i]
		}
		counts[k]++
	}
	for k, n := range counts {
		name := static
		if b.Tables != nil {
			name = k.ns + "." + k.table
		}
		m.rowOps.Incr(n, m.table(name), k.op)
		m.rows.Add(n)
	}
}

// failedMessage counts one message that failed for a reason of its own (each delivery
// of it: an input that delivers it again counts again).
func (m *metrics) failedMessage(table string, err error) {
	m.rowsFailed.Incr(1, m.knownTable(table), errorClass(err))
	m.failed.Add(1)
}

// failedWhole counts the messages of a call failed as a whole to the host (under
// permanent_errors: fail), which then owns them: a fallback output receives them. Calls
// the host retries (not connected), cut short by stopping, or failed message by message
// are counted elsewhere or not at all.
func (m *metrics) failedWhole(table string, n int, err error, stopping bool) {
	var batchErr *service.BatchError
	if err == nil || stopping || errors.Is(err, service.ErrNotConnected) || errors.As(err, &batchErr) {
		return
	}
	m.rowsFailed.Incr(int64(n), m.knownTable(table), errorClass(err))
	m.failed.Add(int64(n))
}

// openFailed counts a write call that found no writer and could not open one.
func (m *metrics) openFailed(err error) {
	m.writeFailures.Incr(1, errorClass(err))
}

// errorClass is an error's `class` label: libfloe's status, or invalid_input for the
// output's own per-message errors.
func errorClass(err error) string {
	var fe *floe.Error
	if errors.As(err, &fe) {
		return statusClass(fe.Status)
	}
	if errors.Is(err, context.Canceled) {
		return "cancelled"
	}
	if errors.Is(err, service.ErrNotConnected) {
		return "unavailable"
	}
	return "invalid_input"
}

func statusClass(s floe.Status) string {
	switch s {
	case floe.StatusConfig:
		return "config"
	case floe.StatusData:
		return "data"
	case floe.StatusNotFound:
		return "not_found"
	case floe.StatusConflict:
		return "conflict"
	case floe.StatusCommitStateUnknown:
		return "commit_state_unknown"
	case floe.StatusUnavailable:
		return "unavailable"
	case floe.StatusRejected:
		return "rejected"
	case floe.StatusCancelled:
		return "cancelled"
	case floe.StatusInvalidArgument:
		return "invalid_input"
	default:
		return "internal"
	}
}

// fProgress is the interval of the progress line.
const fProgress = "progress_interval"

// progress logs, every interval until done closes, what the output did since the last
// line: rows committed and their rate, snapshots, messages failed, and messages of
// calls waiting on an outage. Quiet while nothing happens.
func (o *output) progress(interval time.Duration, done <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastRows, lastCommits, lastFailed int64
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		o.mu.RLock()
		if o.writer != nil {
			o.metrics.takeEvents(o.writer)
		}
		o.mu.RUnlock()
		rows, commits, failed := o.metrics.rows.Load(), o.metrics.commits.Load(), o.metrics.failed.Load()
		waiting := o.pending.messages()
		calls := o.metrics.inFlight.Load()
		if rows == lastRows && commits == lastCommits && failed == lastFailed && waiting == 0 && calls == 0 {
			continue
		}
		o.log.Infof("iceberg output: %d rows committed in the last %s (%.0f rows/s), %d snapshots, %d messages failed, %d waiting to be retried, %d calls in flight; %d rows since start",
			rows-lastRows, interval, float64(rows-lastRows)/interval.Seconds(), commits-lastCommits, failed-lastFailed, waiting, calls, rows)
		lastRows, lastCommits, lastFailed = rows, commits, failed
	}
}
