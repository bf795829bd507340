package floe

import (
	"context"
	"testing"
)

// The events a host's metrics take: one Committed per snapshot under its table's name,
// the group's files written, each event taken once.
func TestEventsReportEachCommitByTable(t *testing.T) {
	w := openTemp(t)
	batch := Batch{
		Messages:   [][]byte{[]byte(`{"id": 1}`), []byte(`{"id": 2}`), []byte(`{"id": 3}`)},
		Namespaces: []string{"binding", "binding", "binding"},
		Tables:     []string{"a", "b", "b"},
	}
	if _, err := w.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	events, err := w.Events()
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string]Event{}
	written := map[string]uint64{}
	for _, e := range events {
		switch e.Kind {
		case EventCommitted:
			committed[e.Table] = e
		case EventFilesWritten:
			written[e.Table] += e.Rows
		default:
			t.Fatalf("unexpected event %+v", e)
		}
	}
	for table, rows := range map[string]uint64{"binding.a": 1, "binding.b": 2} {
		c, ok := committed[table]
		if !ok {
			t.Fatalf("no commit event for %s in %+v", table, events)
		}
		if c.Rows != rows || c.DataFiles != 1 || c.DataBytes == 0 || c.Took <= 0 || c.Catalog <= 0 || c.Failure != StatusOK {
			t.Fatalf("%s: %+v", table, c)
		}
		if written[table] != rows {
			t.Fatalf("%s: files written for %d rows, want %d", table, written[table], rows)
		}
	}
	again, err := w.Events()
	if err != nil || len(again) != 0 {
		t.Fatalf("events taken twice: %+v, %v", again, err)
	}
}
