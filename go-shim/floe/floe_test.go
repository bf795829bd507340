package floe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
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
