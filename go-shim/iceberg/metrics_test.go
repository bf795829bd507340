package iceberg

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/floe-dev/floe/go-shim/floe"
)

func TestTableLabelsAreBounded(t *testing.T) {
	m := &metrics{tables: map[string]bool{}}
	for i := range maxTableLabels {
		if got := m.table(fmt.Sprintf("ns.t%d", i)); got != fmt.Sprintf("ns.t%d", i) {
			t.Fatalf("table %d labelled %q", i, got)
		}
	}
	if got := m.table("ns.late"); got != otherTable {
		t.Fatalf("table past the bound labelled %q, want %q", got, otherTable)
	}
	if got := m.table("ns.t0"); got != "ns.t0" {
		t.Fatalf("a known table lost its label: %q", got)
	}
	if len(m.tables) != maxTableLabels {
		t.Fatalf("%d labels kept", len(m.tables))
	}
}

func TestFailureClasses(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&floe.Error{Status: floe.StatusRejected, Message: "403"}, "rejected"},
		{fmt.Errorf("wrapped: %w", &floe.Error{Status: floe.StatusData, Message: "bad"}), "data"},
		{&floe.Error{Status: floe.StatusPanic}, "internal"},
		{service.ErrNotConnected, "unavailable"},
		{context.Canceled, "cancelled"},
		{errors.New("message 3: table interpolation: boom"), "invalid_input"},
	} {
		got := errorClass(c.err)
		if got != c.want {
			t.Errorf("%v: class %q, want %q", c.err, got, c.want)
		}
		found := false
		for _, k := range failureClasses {
			found = found || k == got
		}
		if !found {
			t.Errorf("class %q is not among failureClasses (not zeroed at start)", got)
		}
	}
}

func TestFailingNamesTakeNoLabelAndInvalidUTF8IsReplaced(t *testing.T) {
	m := &metrics{tables: map[string]bool{}}
	if got := m.knownTable("demo.refused/name"); got != otherTable {
		t.Fatalf("a failing table took label %q", got)
	}
	if len(m.tables) != 0 {
		t.Fatalf("a failing table took a slot: %v", m.tables)
	}
	if got := m.table("demo.bad\xffname"); got != "demo.bad\uFFFDname" {
		t.Fatalf("label %q", got)
	}
	if got := m.knownTable("demo.bad\xffname"); got != "demo.bad\uFFFDname" {
		t.Fatalf("a written table's failures labelled %q", got)
	}
}
