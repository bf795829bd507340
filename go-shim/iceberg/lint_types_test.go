package iceberg

import (
	"slices"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"gopkg.in/yaml.v3"
)

// rawSection is a section as YAML decodes it without the spec (ints as int, fractions
// as float64, "100" as text): what ConfigProblems is given.
func rawSection(t *testing.T, text string) map[string]any {
	t.Helper()
	section := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &section); err != nil {
		t.Fatal(err)
	}
	return section
}

// Each value the spec refuses is one line naming its path, what the field takes and
// what was given; values Benthos takes (a number for a text field, `yes` for a
// boolean, a whole 1e3 for an integer) pass.
func TestSpecCheckNamesEachRefusedValue(t *testing.T) {
	cases := map[string]struct {
		yaml string
		want []string
	}{
		"valid":                {"namespace: a\ntable: b\nmax_in_flight: 4\ncommit: {max_snapshots: 1e3, linger: 20ms}\ncatalog: {tls_skip_verify: yes, headers: {X-A: 1}}\nschema_evolution: {schema: {type: struct, fields: []}}\n", nil},
		"word for int":         {"max_in_flight: four\n", []string{`max_in_flight: expected an integer, got "four"`}},
		"text for int":         {"commit: {max_snapshots: \"100\"}\n", []string{`commit.max_snapshots: expected an integer, got "100"`}},
		"fraction":             {"parquet: {page_size: 1.5}\n", []string{"parquet.page_size: expected an integer, got 1.5"}},
		"nested text":          {"commit: {exactly_once: {writer_id: 5}}\n", nil},
		"interpolated":         {"table: 5\nrow_operation: true\n", nil},
		"bool":                 {"catalog: {tls_skip_verify: maybe}\n", []string{`catalog.tls_skip_verify: expected a boolean (true or false), got "maybe"`}},
		"object":               {"commit: 5\n", []string{"commit: expected an object, got 5"}},
		"text given an object": {"table: {a: 1}\n", []string{"table: expected text, got an object"}},
		"list":                 {"identifier_fields: id\n", []string{`identifier_fields: expected a list, got "id"`}},
		"list element":         {"identifier_fields: [id, [x]]\n", []string{"identifier_fields: expected a list of text, got a list"}},
		"map":                  {"catalog: {headers: [a]}\n", []string{"catalog.headers: expected an object of names to text, got a list"}},
		"map value":            {"catalog: {headers: {A: 1, B: {c: d}}}\n", []string{"catalog.headers.B: expected text, got an object"}},
		"secret":               {"catalog: {auth: {bearer: {t: x}}}\n", []string{"catalog.auth.bearer: expected text, got an object"}},
		"enum":                 {"parquet: {compression: zip}\n", []string{`parquet.compression: expected one of "", zstd, snappy, lz4, gzip or uncompressed, got "zip"; did you mean gzip?`}},
		"enum case":            {"permanent_errors: STOP\n", []string{`permanent_errors: expected one of retry, fail or stop, got "STOP"; did you mean stop?`}},
		"enum far":             {"json: {epoch_unit: seconds}\n", []string{`json.epoch_unit: expected one of s, ms, us or ns, got "seconds"`}},
		"unknown":              {"namespce: a\n", []string{"field namespce is not a field of the iceberg output; did you mean namespace?"}},
		"unknown nested":       {"commit: {max_snapshot: 5, Linger: 1s}\n", []string{"field commit.Linger is not a field of the iceberg output; did you mean commit.linger?", "field commit.max_snapshot is not a field of the iceberg output; did you mean commit.max_snapshots?"}},
		"unknown far":          {"wibble: 1\n", []string{"field wibble is not a field of the iceberg output"}},
		"batching":             {"batching: {count: x, processors: [{mapping: 'root = this'}]}\n", []string{`batching.count: expected an integer, got "x"`}},
		"duration":             {"commit: {linger: 5, retry_timeout: -1s}\n", []string{`commit.linger: "5" is not a duration like 500ms, 30s, 24h or 1h30m`, `commit.retry_timeout: "-1s" is negative`}},
		"tcp durations":        {"catalog: {auth: {aws_sigv4: {tcp: {connect_timeout: soon, keep_alive: {idle: -1s, interval: x}}}}}\n", []string{`catalog.auth.aws_sigv4.tcp.connect_timeout: "soon" is not a duration like 500ms, 30s, 24h or 1h30m`, `catalog.auth.aws_sigv4.tcp.keep_alive.interval: "x" is not a duration like 500ms, 30s, 24h or 1h30m`}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := problemTexts(typeProblems(rawSection(t, c.yaml)))
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %q\nwant %q", got, c.want)
			}
		})
	}
}

// The refused values are taken out before libfloe checks the section: two wrongly
// typed values no longer hide libfloe's own problems with the rest.
func TestRefusedValuesHideNoOtherProblem(t *testing.T) {
	got := ConfigProblems(rawSection(t, "namespace: a\ntable: a/b\nmax_in_flight: four\ncommit: {max_retries: \"x\", max_snapshots: 0}\n"))
	want := []string{
		`commit.max_retries: expected an integer, got "x"`,
		`max_in_flight: expected an integer, got "four"`,
		"commit.max_snapshots must be greater than 0",
		`table name "a/b" holds a path separator`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := ConfigProblems(rawSection(t, "namespace: a\ntable: b\n")); len(got) != 0 {
		t.Fatalf("a valid section has no problem: %q", got)
	}
	if got := ConfigProblems([]any{1}); len(got) != 1 || got[0] != "the iceberg output's config must be an object, got a list" {
		t.Fatalf("a list is no section: %q", got)
	}
}

// Through Benthos: `floe lint` (the spec's rule) prints the check's lines and libfloe's,
// all of them, and start-up refuses with the same lines joined.
func TestLintAndStartUpPrintEverySpecProblem(t *testing.T) {
	cases := map[string]struct {
		extra string
		want  []string
	}{
		"valid":    {"commit:\n  exactly_once:\n    writer_id: 5\n    source: s\n    offset: ${! 1 }\n", nil},
		"enum":     {"parquet:\n  compression: zip\n", []string{`parquet.compression: expected one of "", zstd, snappy, lz4, gzip or uncompressed, got "zip"; did you mean gzip?`}},
		"unknown":  {"commti:\n  linger: 1s\n", []string{"field commti is not a field of the iceberg output; did you mean commit?"}},
		"nested":   {"catalog:\n  tls_skip_verfy: true\n", []string{"field catalog.tls_skip_verfy is not a field of the iceberg output; did you mean catalog.tls_skip_verify?"}},
		"duration": {"commit:\n  linger: 5\n  max_snapshots: 0\n", []string{`commit.linger: "5" is not a duration like 500ms, 30s, 24h or 1h30m`, "commit.max_snapshots must be greater than 0"}},
		"two and libfloe": {
			"json:\n  epoch_unit: sec\nparquet:\n  compression: zip\ncommit:\n  max_snapshots: 0\n",
			[]string{
				`parquet.compression: expected one of "", zstd, snappy, lz4, gzip or uncompressed, got "zip"; did you mean gzip?`,
				`json.epoch_unit: expected one of s, ms, us or ns, got "sec"; did you mean s?`,
				"commit.max_snapshots must be greater than 0",
			},
		},
	}
	linter := service.GlobalEnvironment().NewComponentConfigLinter()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			section := "namespace: a\ntable: ${! meta(\"t\") }\n" + c.extra
			linted := ruleLints(t, linter, section)
			if !slices.Equal(linted, c.want) {
				t.Fatalf("lint printed %q\nwant %q", linted, c.want)
			}
			conf, err := ConfigSpec().ParseYAML(section, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, startErr := newOutput(conf, service.MockResources())
			if c.want == nil {
				if startErr != nil {
					t.Fatalf("a valid config must start: %v", startErr)
				}
				return
			}
			if startErr == nil || startErr.Error() != strings.Join(linted, "; ") {
				t.Fatalf("start-up said %v, lint said %q", startErr, linted)
			}
		})
	}
}

// ruleLints are the lines the output's lint rule printed for a section, without
// Benthos' own lints (its "not recognised", "not a valid option" lines).
func ruleLints(t *testing.T, linter *service.ComponentConfigLinter, section string) []string {
	t.Helper()
	lints, err := linter.LintOutputYAML([]byte("iceberg:\n" + indent(section)))
	if err != nil {
		t.Fatal(err)
	}
	var linted []string
	for _, l := range lints {
		if l.Type == service.LintCustom {
			linted = append(linted, l.What)
		}
	}
	return linted
}

// The table is the registered spec's: nested paths, enums with their options, maps,
// lists, components, secrets, and libfloe's durations.
func TestSpecTableIsTheRegisteredSpec(t *testing.T) {
	fields := specFields()
	checks := map[string]func(f *specField) bool{
		"commit.exactly_once.writer_id": func(f *specField) bool { return f.typ == "string" && f.layout == "scalar" },
		"table":                         func(f *specField) bool { return f.interpolated },
		"parquet.compression": func(f *specField) bool {
			return slices.Equal(f.options, []string{"", "zstd", "snappy", "lz4", "gzip", "uncompressed"})
		},
		"catalog.headers":     func(f *specField) bool { return f.layout == "map" && f.typ == "string" },
		"identifier_fields":   func(f *specField) bool { return f.layout == "array" },
		"batching.processors": isComponent,
		"catalog.auth.bearer": func(f *specField) bool { return f.secret },
		"max_in_flight":       func(f *specField) bool { return f.typ == "int" },
	}
	for path, ok := range checks {
		if f := fields[path]; f == nil || !ok(f) {
			t.Errorf("%s: %+v", path, f)
		}
	}
	var durations []string
	for _, p := range durationPaths() {
		durations = append(durations, strings.Join(p, "."))
	}
	if want := []string{"catalog.auth.aws_sigv4.tcp.connect_timeout", "catalog.auth.aws_sigv4.tcp.keep_alive.idle", "catalog.auth.aws_sigv4.tcp.keep_alive.interval", "catalog.auth.aws_sigv4.tcp.tcp_user_timeout", "commit.linger", "commit.max_snapshot_age", "commit.retry_timeout", "commit.table_idle_timeout"}; !slices.Equal(durations, want) {
		t.Errorf("durations %q, want %q", durations, want)
	}
}

func TestNearestName(t *testing.T) {
	candidates := []string{"namespace", "table", "id", "commit"}
	for name, want := range map[string]string{"namespce": "namespace", "TABLE": "table", "tabel": "table", "ab": "", "xyz": "", "comit": "commit"} {
		if got := nearest(name, candidates); got != want {
			t.Errorf("nearest(%q) = %q, want %q", name, got, want)
		}
	}
}
