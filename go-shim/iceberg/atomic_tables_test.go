package iceberg

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// With commit.atomic_tables, every call keeps its place in arrival order (as keyed
// writes do): libfloe needs that so each table meets the calls' transactions in one
// order. Concurrent batches, each routed to both tables of an embedded catalog, all
// commit, and each table holds every row of its batches.
func TestAtomicTablesBatchesKeepOrderAndCommitEveryTable(t *testing.T) {
	wh := t.TempDir()
	yaml := fmt.Sprintf("catalog: {warehouse: %q}\nnamespace: gotest\ntable: '${! json(\"t\") }'\n"+
		"schema_evolution: {enabled: true}\nmax_in_flight: 4\ncommit: {atomic_tables: true}\n", wh)
	out := newTestOutput(t, yaml)
	if !out.ordered {
		t.Fatal("atomic_tables calls must keep their place in arrival order")
	}
	plain := outputFor(t, fmt.Sprintf("catalog: {warehouse: %q}\nnamespace: gotest\ntable: t\n", wh))
	if plain.ordered {
		t.Fatal("appends without atomic_tables need no order")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for b := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var msgs []string
			for i := range 6 {
				msgs = append(msgs, fmt.Sprintf(`{"id": %d, "t": "%s"}`, b*6+i, []string{"left", "right"}[i%2]))
			}
			errs <- out.WriteBatch(context.Background(), batchOf(msgs...))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"gotest.left", "gotest.right"} {
		if got := readCount(t, wh, table); got != 24 {
			t.Fatalf("%s holds %d rows, want 24", table, got)
		}
	}
}
