//go:build floe_failpoints

package floe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// A panic inside libfloe comes back as StatusPanic, and the handle stays usable: a lock
// held during the panic is not poisoned, the panicked call's exactly-once claim does not
// block its positions, later writes commit, and replays are still recognised. Run by
// `make go-test` against a libfloe built with failpoints (src/failpoint.rs).
func TestFailpointPanicsLeaveTheWriterUsable(t *testing.T) {
	for _, failpoint := range []string{"writer.plan.ledger-locked", "writer.before-submit"} {
		t.Run(failpoint, func(t *testing.T) { panicLeavesTheWriterUsable(t, failpoint) })
	}
}

func panicLeavesTheWriterUsable(t *testing.T, failpoint string) {
	cfg, _ := json.Marshal(map[string]any{
		"catalog":          map[string]any{"warehouse": t.TempDir()},
		"namespace":        "binding",
		"table":            "panics",
		"schema_evolution": map[string]any{"enabled": true},
		"commit":           map[string]any{"exactly_once": map[string]any{"writer_id": "panic-test"}},
	})
	w, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	batch := func(from, to int64) Batch {
		b := Batch{}
		for i := from; i < to; i++ {
			b.Messages = append(b.Messages, []byte(fmt.Sprintf(`{"id": %d}`, i)))
			b.Sources = append(b.Sources, "src")
			b.Offsets = append(b.Offsets, i)
		}
		return b
	}
	ctx := context.Background()
	if res, err := w.Write(ctx, batch(0, 10)); err != nil || res.Rows != 10 {
		t.Fatalf("first write: %+v %v", res, err)
	}

	if err := armFailpoint(failpoint); err != nil {
		t.Fatal(err)
	}
	_, err = w.Write(ctx, batch(10, 20))
	var fe *Error
	if !errors.As(err, &fe) || fe.Status != StatusPanic {
		t.Fatalf("want StatusPanic from the armed failpoint, got %v", err)
	}

	// The same positions again: written once, not refused as "in flight" by a claim the
	// panicked call left behind, and the lock it held still works.
	res, err := w.Write(ctx, batch(10, 20))
	if err != nil || res.Rows != 10 || res.FailedCount != 0 {
		t.Fatalf("write after the panic: %+v %v", res, err)
	}
	// Replays of everything are still recognised as committed.
	res, err = w.Write(ctx, batch(0, 20))
	if err != nil || res.Rows != 0 || res.Snapshots != 0 || res.FailedCount != 0 {
		t.Fatalf("replay after the panic wrote again: %+v %v", res, err)
	}
	stats, err := w.Stats()
	if err != nil || stats.Rows != 20 {
		t.Fatalf("want 20 rows committed in all, stats say %+v %v", stats, err)
	}
	// A fresh writer finds all 20 positions in the table's exactly-once record.
	_ = w.Close()
	w2, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	res, err = w2.Write(ctx, batch(0, 21))
	if err != nil || res.Rows != 1 || res.FailedCount != 0 {
		t.Fatalf("a fresh writer's replay: %+v %v", res, err)
	}
}
