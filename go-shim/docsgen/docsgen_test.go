package docsgen_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/floe-dev/floe/go-shim/docsgen"
	_ "github.com/floe-dev/floe/go-shim/iceberg"
	_ "github.com/floe-dev/floe/go-shim/kafka"
	_ "github.com/floe-dev/floe/go-shim/prometheus"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// The committed reference pages are what the registered specs render: a field added,
// renamed or re-described without `make docs` fails here.
func TestCommittedPagesMatchTheSpecs(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "components")
	stale, err := docsgen.Drift(service.GlobalEnvironment(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Fatalf("pages out of date, run `make docs`: %v", stale)
	}
}

// Every field of floe's components says what it does.
func TestEveryFieldHasADescription(t *testing.T) {
	for _, c := range docsgen.Components {
		missing, err := docsgen.Undescribed(service.GlobalEnvironment(), c)
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) > 0 {
			t.Errorf("%s %s: fields without a description: %s", c.Kind, c.Name, strings.Join(missing, ", "))
		}
	}
}

// A page shows nested sections with their defaults (not `catalog: {}`), each field's
// type and default, and the options of an enumerated field.
func TestAPageShowsNestedDefaultsTypesAndOptions(t *testing.T) {
	page, err := docsgen.Render(service.GlobalEnvironment(), docsgen.Components[0])
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	for _, want := range []string{
		"    commit:\n      max_snapshot_age: 24h\n",
		"### `commit.max_snapshots`",
		"*Default*: `500`",
		"### `merge_strategy`",
		"`copy-on-write`",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the iceberg page lacks %q", want)
		}
	}
	if strings.Contains(text, "catalog: {}") {
		t.Error("the iceberg page shows the catalog section as {}")
	}
}
