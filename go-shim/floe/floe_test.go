package floe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func openTemp(t *testing.T) *Writer {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{
		"catalog":          map[string]any{"warehouse": t.TempDir()},
		"namespace":        "binding",
		"table":            "t",
		"schema_evolution": map[string]any{"enabled": true},
	})
	w, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func TestABIMatches(t *testing.T) {
	if err := CheckABI(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRejectsBadConfigWithStatus(t *testing.T) {
	_, err := Open([]byte(`{"catalog": {"url": "ftp://nope"}}`))
	var fe *Error
	if !errors.As(err, &fe) || fe.Status != StatusConfig {
		t.Fatalf("want a config error, got %v", err)
	}
	_, err = Open([]byte(`{"tabel": "typo"}`))
	if !errors.As(err, &fe) || fe.Status != StatusConfig {
		t.Fatalf("want a config error for an unknown field, got %v", err)
	}
}

func TestWriteReportsPerMessageOutcomes(t *testing.T) {
	w := openTemp(t)
	res, err := w.Write(context.Background(), Batch{Messages: [][]byte{
		[]byte(`{"id": 1}`), []byte(`{"id": `), []byte(`{"id": 3}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 2 || res.Snapshots != 1 || res.FailedCount != 1 || res.Failures[1] == nil {
		t.Fatalf("unexpected result: %+v", res)
	}
	var fe *Error
	if !errors.As(res.Failures[1], &fe) || fe.Status != StatusData {
		t.Fatalf("want a data error for message 1, got %v", res.Failures[1])
	}
}

func TestUnsupportedOperationFailsOnlyThatMessage(t *testing.T) {
	w := openTemp(t)
	res, err := w.Write(context.Background(), Batch{
		Messages:   [][]byte{[]byte(`{"id": 1}`), []byte(`{"id": 2}`)},
		Operations: []string{"insert", "upsert"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 || res.Failures[0] != nil || res.Failures[1] == nil {
		t.Fatalf("unexpected result: %+v", res)
	}
}

func TestConcurrentWritesOnOneWriter(t *testing.T) {
	w := openTemp(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			msgs := make([][]byte, 100)
			for i := range msgs {
				msgs[i] = []byte(fmt.Sprintf(`{"id": %d, "g": %d}`, g*1000+i, g))
			}
			res, err := w.Write(context.Background(), Batch{Messages: msgs})
			if err == nil && res.Rows != 100 {
				err = fmt.Errorf("goroutine %d committed %d rows", g, res.Rows)
			}
			errs <- err
			runtime.GC() // surfaces a missing KeepAlive or a Go pointer kept by C
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st, err := w.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 1600 || st.Snapshots == 0 || st.Snapshots > 16 || st.DataFiles < st.Snapshots || st.DataBytes == 0 {
		t.Fatalf("stats do not add up for 16 × 100 rows: %+v", st)
	}
	if st.CommitP50 <= 0 || st.CommitP50 > st.CommitP95 || st.CommitP95 > st.CommitMax {
		t.Fatalf("commit latency quantiles out of order: %+v", st)
	}
	if st.WriteP50 <= 0 || st.CatalogP50 <= 0 || st.CatalogP50 > st.CommitMax {
		t.Fatalf("stage medians missing or above the slowest commit: %+v", st)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Stats(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Stats after Close: want ErrClosed, got %v", err)
	}
}

func TestCloseIsIdempotentAndWriteAfterCloseFails(t *testing.T) {
	w := openTemp(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(context.Background(), Batch{Messages: [][]byte{[]byte(`{}`)}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
}

func TestCancelledContextIsNotWritten(t *testing.T) {
	w := openTemp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Write(ctx, Batch{Messages: [][]byte{[]byte(`{"id": 1}`)}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

// A cancel that fires after Write checked its context but before libfloe starts must
// win inside libfloe: no row of the cancelled call may be committed (the host retries
// it, so a committed row would be written twice). The hook cancels at exactly that
// point, so the call reaches the library with its token already fired.
func TestCancelFiredBeforeTheCallReachesLibfloeWritesNothing(t *testing.T) {
	w := openTemp(t)
	t.Cleanup(func() { testHookBeforeWrite = nil })
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		testHookBeforeWrite = func(fired <-chan struct{}) {
			cancel()
			<-fired
		}
		_, err := w.Write(ctx, Batch{Messages: [][]byte{[]byte(fmt.Sprintf(`{"id": %d}`, i))}})
		var fe *Error
		if !errors.As(err, &fe) || fe.Status != StatusCancelled {
			t.Fatalf("call %d: want a StatusCancelled error from libfloe, got %v", i, err)
		}
	}
	testHookBeforeWrite = nil
	// A later write shares the committer's queue: once it is committed, so is anything
	// a cancelled call might have submitted before it.
	if _, err := w.Write(context.Background(), Batch{Messages: [][]byte{[]byte(`{"id": 100}`)}}); err != nil {
		t.Fatal(err)
	}
	st, err := w.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 1 {
		t.Fatalf("committed rows = %d, want 1: a cancelled call's rows were written", st.Rows)
	}
}

func TestMismatchedPerMessageListsAreRefused(t *testing.T) {
	w := openTemp(t)
	_, err := w.Write(context.Background(), Batch{Messages: [][]byte{[]byte(`{}`), []byte(`{}`)}, Tables: []string{"t"}})
	if err == nil {
		t.Fatal("a Tables list shorter than Messages must be refused before calling C")
	}
}

func TestEmptyBatchIsANoOp(t *testing.T) {
	w := openTemp(t)
	res, err := w.Write(context.Background(), Batch{})
	if err != nil || res.Rows != 0 || res.Snapshots != 0 {
		t.Fatalf("empty batch: %+v, %v", res, err)
	}
}

func TestExactlyOnceSkipsCommittedOffsetsAcrossWriters(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{
		"catalog":          map[string]any{"warehouse": dir},
		"namespace":        "binding",
		"table":            "eo",
		"schema_evolution": map[string]any{"enabled": true},
		"commit":           map[string]any{"exactly_once": map[string]any{"writer_id": "test"}},
	})
	batch := func(from, to int64) Batch {
		b := Batch{}
		for i := from; i < to; i++ {
			b.Messages = append(b.Messages, []byte(fmt.Sprintf(`{"id": %d}`, i)))
			b.Sources = append(b.Sources, "file-a")
			b.Offsets = append(b.Offsets, i)
		}
		return b
	}
	w, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(context.Background(), batch(0, 10))
	if err != nil || res.Rows != 10 || res.FailedCount != 0 {
		t.Fatalf("first write: %+v %v", res, err)
	}
	_ = w.Close()
	// A restarted writer replays 0..15: only 10..15 are new.
	w, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res, err = w.Write(context.Background(), batch(0, 15))
	if err != nil || res.Rows != 5 || res.FailedCount != 0 {
		t.Fatalf("replay: %+v %v", res, err)
	}
	res, err = w.Write(context.Background(), batch(0, 15))
	if err != nil || res.Rows != 0 || res.Snapshots != 0 || res.FailedCount != 0 {
		t.Fatalf("second replay wrote again: %+v %v", res, err)
	}
	// Without positions, an exactly-once writer refuses each message.
	res, err = w.Write(context.Background(), Batch{Messages: [][]byte{[]byte(`{"id": 99}`)}})
	if err != nil || res.FailedCount != 1 {
		t.Fatalf("want a per-message refusal, got %+v %v", res, err)
	}
	if _, err = w.Write(context.Background(), Batch{Messages: [][]byte{[]byte(`{}`)}, Sources: []string{"a"}}); err == nil {
		t.Fatal("Sources without Offsets must be refused")
	}
}

// libfloe's warnings reach the host: an expiry round whose file cleanup fails (an
// expired manifest list was removed behind floe's back) logs through SetLogger.
func TestLibraryWarningsReachTheHostLog(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	if err := SetLogger(LogInfo, func(level LogLevel, msg string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf("%d %s", level, msg))
	}); err != nil {
		t.Fatal(err)
	}
	wh := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{
		"catalog":          map[string]any{"warehouse": wh},
		"namespace":        "binding",
		"table":            "logs",
		"schema_evolution": map[string]any{"enabled": true},
		"commit":           map[string]any{"max_snapshot_age": "1ms"},
	})
	w, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write := func(id int) {
		if _, err := w.Write(context.Background(), Batch{Messages: [][]byte{[]byte(fmt.Sprintf(`{"id": %d}`, id))}}); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	lists, _ := filepath.Glob(filepath.Join(wh, "binding", "logs", "metadata", "snap-*.avro"))
	if len(lists) != 1 {
		t.Fatalf("want the first snapshot's manifest list, found %v", lists)
	}
	if err := os.Remove(lists[0]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the first snapshot is now older than 1 ms
	write(2)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		for _, l := range lines {
			if strings.HasPrefix(l, "2 ") && strings.Contains(l, "file cleanup failed") {
				mu.Unlock()
				return
			}
		}
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no warning about the failed cleanup reached the logger; got %q", lines)
}

// Calls that arrived in an order keep it for each key, whatever order they finish
// shredding in: a large call (slow to shred) arrives before small ones, all upserting
// and deleting the same keys, four at once, round after round; the table, read back by
// pyiceberg, holds each key's last operation in arrival order. Without the ticket
// (Batch.Call) the small calls overtake the large one and an older value wins.
func TestEachKeysOperationsApplyInArrivalOrder(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{
		"catalog":           map[string]any{"warehouse": dir},
		"namespace":         "binding",
		"table":             "keyed",
		"identifier_fields": []string{"id"},
		"merge_strategy":    "copy-on-write",
		"max_in_flight":     4,
		"schema_evolution":  map[string]any{"enabled": true},
	})
	w, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const rounds, calls = 6, 4
	for r := 0; r < rounds; r++ {
		batches := make([]Batch, calls)
		for c := range batches {
			b := &batches[c]
			if c == 0 {
				for i := 0; i < 3000; i++ {
					b.Messages = append(b.Messages, []byte(fmt.Sprintf(`{"id": %d, "v": "cold"}`, 1000+r*10000+i)))
					b.Operations = append(b.Operations, "insert")
				}
			}
			// Every call upserts key 1; the last one deletes key 2, which the others upsert.
			b.Messages = append(b.Messages, []byte(fmt.Sprintf(`{"id": 1, "v": "r%dc%d"}`, r, c)))
			b.Operations = append(b.Operations, "upsert")
			op := "upsert"
			if c == calls-1 {
				op = "delete"
			}
			b.Messages = append(b.Messages, []byte(fmt.Sprintf(`{"id": 2, "v": "r%dc%d"}`, r, c)))
			b.Operations = append(b.Operations, op)
		}
		var wg sync.WaitGroup
		errs := make(chan error, calls)
		for c := range batches {
			batches[c].Call = w.Arrive()
			wg.Add(1)
			go func(b Batch) {
				defer wg.Done()
				defer w.Depart(b.Call)
				errs <- writeAll(w, b)
			}(batches[c])
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	hot := map[float64]string{}
	for _, row := range readRows(t, dir, "binding.keyed") {
		if id := row["id"].(float64); id < 1000 {
			hot[id] = row["v"].(string)
		}
	}
	want := map[float64]string{1: fmt.Sprintf("r%dc%d", rounds-1, calls-1)}
	if fmt.Sprint(hot) != fmt.Sprint(want) {
		t.Fatalf("keys 1 and 2 hold %v, want %v (each key's last operation in arrival order)", hot, want)
	}
}

// writeAll writes a batch under its ticket, retrying the messages that failed not at
// their fault (held back behind rows that failed), as the iceberg output does.
func writeAll(w *Writer, b Batch) error {
	for try := 0; try < 100; try++ {
		res, err := w.Write(context.Background(), b)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var left Batch
		left.Call = b.Call
		for i, f := range res.Failures {
			var fe *Error
			if f != nil && errors.As(f, &fe) && fe.Status == StatusData {
				return f
			}
			if f != nil {
				left.Messages = append(left.Messages, b.Messages[i])
				left.Operations = append(left.Operations, b.Operations[i])
			}
		}
		if len(left.Messages) == 0 {
			return nil
		}
		b = left
	}
	return fmt.Errorf("%d messages still failing", len(b.Messages))
}

// readRows reads a table of the embedded catalog in dir with pyiceberg.
func readRows(t *testing.T, dir, table string) []map[string]any {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	python := os.Getenv("PYTHON")
	if python == "" {
		python = filepath.Join(root, ".venv", "bin", "python3")
	}
	args, _ := json.Marshal(map[string]string{
		"uri":       "sqlite:///" + filepath.Join(dir, "catalog.db"),
		"warehouse": "file://" + dir,
		"table":     table,
	})
	out, err := exec.Command(python, filepath.Join(root, "tests", "support", "read_table.py"), "pyiceberg-sql", string(args)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("reader failed: %s", ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct{ Rows []map[string]any }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	return res.Rows
}

// OpenTables counts the tables a writer holds open, and falls as idle ones close.
func TestOpenTablesCountsTablesUntilTheyIdleOut(t *testing.T) {
	cfg, _ := json.Marshal(map[string]any{
		"catalog":          map[string]any{"warehouse": t.TempDir()},
		"namespace":        "binding",
		"schema_evolution": map[string]any{"enabled": true},
		"commit":           map[string]any{"table_idle_timeout": "200ms"},
	})
	w, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	if n := w.OpenTables(); n != 0 {
		t.Fatalf("%d tables open before any write", n)
	}
	write := func(tables ...string) {
		t.Helper()
		b := Batch{Tables: tables}
		for range tables {
			b.Messages = append(b.Messages, []byte(`{"id": 1}`))
		}
		if _, err := w.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "b", "c")
	if n := w.OpenTables(); n != 3 {
		t.Fatalf("%d tables open after writing three, want 3", n)
	}
	time.Sleep(1500 * time.Millisecond) // idle tables are looked for at most once a second
	write("a")
	if n := w.OpenTables(); n != 1 {
		t.Fatalf("%d tables open after two idled out, want 1", n)
	}
}
