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
