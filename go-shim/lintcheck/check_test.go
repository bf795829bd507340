package lintcheck

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func parse(t *testing.T, name, src string) Doc {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return Doc{Name: name, Root: &n}
}

const keyedIceberg = `
output:
  iceberg:
    namespace: crm
    table: customers
    row_operation: ${! meta("op") }
`

func TestCheck(t *testing.T) {
	cases := []struct {
		name      string
		config    string
		resources []string
		// want is empty for no finding, else substrings of its message.
		want []string
		line int
	}{
		{
			name: "threads unset with processors",
			config: `
pipeline:
  processors:
    - mapping: root = this
` + keyedIceberg,
			want: []string{"one thread per CPU (pipeline.threads unset, default -1)",
				`output.iceberg (line 7, row_operation: ${! meta("op") })`,
				"set pipeline.threads: 1", "input's processors"},
			line: 3,
		},
		{
			name: "threads 1",
			config: `
pipeline:
  threads: 1
  processors:
    - mapping: root = this
` + keyedIceberg,
		},
		{
			name: "threads 4",
			config: `
pipeline:
  threads: 4
  processors:
    - mapping: root = this
` + keyedIceberg,
			want: []string{"run on 4 threads (pipeline.threads: 4)"},
			line: 3,
		},
		{
			name: "threads -1",
			config: `
pipeline:
  threads: -1
  processors: [ { mapping: root = this } ]
` + keyedIceberg,
			want: []string{"one thread per CPU (pipeline.threads: -1)"},
			line: 3,
		},
		{
			name: "threads 0",
			config: `
pipeline:
  threads: 0
  processors: [ { mapping: root = this } ]
` + keyedIceberg,
			want: []string{"one thread per CPU (pipeline.threads: 0)"},
			line: 3,
		},
		{
			// Without processors Benthos builds no pipeline layer: threads do nothing.
			name: "no processors, threads 4",
			config: `
pipeline:
  threads: 4
  processors: []
` + keyedIceberg,
		},
		{
			name:   "no pipeline",
			config: keyedIceberg,
		},
		{
			name: "row_operation absent",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  iceberg: { namespace: crm, table: customers }
`,
		},
		{
			name: "row_operation insert",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  iceberg: { namespace: crm, table: customers, row_operation: " Insert " }
`,
		},
		{
			name: "row_operation upsert",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  iceberg: { namespace: crm, table: customers, row_operation: upsert }
`,
			want: []string{"row_operation: upsert"},
			line: 3,
		},
		{
			name: "row_operation interpolated",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  iceberg:
    namespace: crm
    table: customers
    row_operation: '${! if meta("deleted") == "1" { "delete" } else { "upsert" } }'
`,
			want: []string{`row_operation: ${! if meta("deleted")`},
			line: 3,
		},
		{
			name: "nested in broker",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  broker:
    pattern: fan_out
    outputs:
      - stdout: {}
      - iceberg:
          namespace: crm
          table: customers
          row_operation: delete
`,
			want: []string{"output.broker.outputs.1.iceberg (line 9, row_operation: delete)"},
			line: 3,
		},
		{
			name: "nested in fallback",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  fallback:
    - iceberg: { namespace: crm, table: customers, row_operation: upsert }
    - drop: {}
`,
			want: []string{"output.fallback.0.iceberg (line 6, row_operation: upsert)"},
			line: 3,
		},
		{
			name: "nested in switch, two outputs",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  switch:
    cases:
      - check: this.kind == "a"
        output:
          iceberg: { namespace: a, table: t, row_operation: upsert }
      - output:
          retry:
            output:
              iceberg: { namespace: b, table: t, row_operation: '${! meta("op") }' }
`,
			want: []string{"the iceberg outputs output.switch.cases.0.output.iceberg (line 9, row_operation: upsert), " +
				`output.switch.cases.1.output.retry.output.iceberg (line 13, row_operation: ${! meta("op") }) make`},
			line: 3,
		},
		{
			name: "switch with inserts only",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  switch:
    cases:
      - output:
          iceberg: { namespace: a, table: t }
`,
		},
		{
			name: "output_resources",
			config: `
pipeline:
  threads: 2
  processors: [ { mapping: root = this } ]
output:
  resource: lake
output_resources:
  - label: lake
    iceberg: { namespace: crm, table: customers, row_operation: upsert }
`,
			want: []string{"output_resources.0.iceberg (label lake) (line 9, row_operation: upsert)"},
			line: 3,
		},
		{
			name: "output_resources in a resource file",
			config: `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  resource: lake
`,
			resources: []string{`
output_resources:
  - label: lake
    iceberg: { namespace: crm, table: customers, row_operation: upsert }
`},
			want: []string{"output_resources.0.iceberg (label lake) in res0.yaml (line 4, row_operation: upsert)"},
			line: 3,
		},
		{
			name: "iceberg under the input is not an output",
			config: `
input:
  broker:
    inputs:
      - iceberg: { row_operation: upsert }
pipeline:
  processors: [ { mapping: root = this } ]
output:
  drop: {}
`,
		},
		{
			name: "aliases",
			config: `
x-keyed: &keyed { namespace: crm, table: customers, row_operation: upsert }
pipeline:
  processors: [ { mapping: root = this } ]
output:
  iceberg: *keyed
`,
			want: []string{"output.iceberg (line 6, row_operation: upsert)"},
			line: 4,
		},
		{
			name: "threads not a number",
			config: `
pipeline:
  threads: lots
  processors: [ { mapping: root = this } ]
` + keyedIceberg,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var res []Doc
			for i, r := range tc.resources {
				res = append(res, parse(t, "res"+string(rune('0'+i))+".yaml", r))
			}
			got := Check(parse(t, "pipeline.yaml", tc.config), res...)
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("want no finding, got %+v", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("want one finding, got %+v", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0].Message, w) {
					t.Errorf("message lacks %q:\n%s", w, got[0].Message)
				}
			}
			if got[0].Line != tc.line {
				t.Errorf("line %d, want %d", got[0].Line, tc.line)
			}
		})
	}
}

// A config encoded from a parsed value (as `run` checks it) has no lines.
func TestCheckEncodedValue(t *testing.T) {
	v := map[string]any{
		"pipeline": map[string]any{"threads": -1, "processors": []any{map[string]any{"mapping": "root = this"}}},
		"output":   map[string]any{"iceberg": map[string]any{"row_operation": "upsert"}},
	}
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		t.Fatal(err)
	}
	got := Check(Doc{Root: &n})
	if len(got) != 1 || !strings.Contains(got[0].Message, "output.iceberg (row_operation: upsert)") || got[0].Line != 0 {
		t.Fatalf("got %+v", got)
	}
}

func TestReplaceEnv(t *testing.T) {
	env := map[string]string{"THREADS": "4", "EMPTY": "", "B64": "dXBzZXJ0", "NL": "a\nb"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cases := []struct{ in, want string }{
		{"threads: ${THREADS}", "threads: 4"},
		{"threads: ${THREADS:1}", "threads: 4"},
		{"threads: ${UNSET:1}", "threads: 1"},
		{"threads: ${EMPTY:1}", "threads: 1"},
		{"threads: ${UNSET}", "threads: "},
		{"op: ${B64|base64decode}", "op: upsert"},
		{"op: ${UNSET:dXBzZXJ0|base64decode}", "op: upsert"},
		{"x: ${NL}", `x: a\nb`},
		{`row_operation: ${! meta("op") }`, `row_operation: ${! meta("op") }`},
		{"lit: ${{THREADS}}", "lit: ${THREADS}"},
		{"lit: ${{THREADS:1}}", "lit: ${THREADS:1}"},
	}
	for _, tc := range cases {
		got, err := ReplaceEnv([]byte(tc.in), lookup)
		if err != nil || string(got) != tc.want {
			t.Errorf("ReplaceEnv(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := ReplaceEnv([]byte("${THREADS|nope}"), lookup); err == nil {
		t.Error("unknown decode function: want an error")
	}
}

func TestLintFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	threadsFromEnv := write("env.yaml", `
pipeline:
  threads: ${FLOE_TEST_THREADS:1}
  processors: [ { mapping: root = this } ]
`+keyedIceberg)
	viaResource := write("main.yaml", `
pipeline:
  processors: [ { mapping: root = this } ]
output:
  resource: lake
`)
	res := write("res.yaml", `
output_resources:
  - label: lake
    iceberg: { namespace: crm, table: customers, row_operation: upsert }
`)
	disabled := write("disabled.yaml", "# BENTHOS LINT DISABLE\npipeline:\n  processors: [ { mapping: root = this } ]\n"+keyedIceberg)

	for _, tc := range []struct {
		name      string
		env       map[string]string
		targets   []string
		resources []string
		want      string
	}{
		{name: "env default 1", targets: []string{threadsFromEnv}},
		{name: "env 8", env: map[string]string{"FLOE_TEST_THREADS": "8"}, targets: []string{threadsFromEnv},
			want: threadsFromEnv + "(3,3) pipeline.processors run on 8 threads (pipeline.threads: 8)"},
		{name: "resource file", targets: []string{viaResource, res}, resources: []string{filepath.Join(dir, "res*.yaml")},
			want: viaResource + "(3,3) pipeline.processors run on one thread per CPU"},
		{name: "without the resource file", targets: []string{viaResource}},
		{name: "lint disabled", targets: []string{disabled}},
		{name: "missing file", targets: []string{filepath.Join(dir, "nope.yaml")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			found := LintFiles(&out, tc.targets, tc.resources, lookup)
			if tc.want == "" {
				if found || out.Len() != 0 {
					t.Fatalf("want nothing, got %q", out.String())
				}
				return
			}
			if !found || !strings.HasPrefix(out.String(), tc.want) || strings.Count(out.String(), "\n") != 1 {
				t.Fatalf("want one line starting %q, got %q", tc.want, out.String())
			}
		})
	}
}

func TestExpandTargets(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a.yaml", "b.yml", "c.txt", "sub/d.yaml"} {
		p = filepath.Join(dir, p)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ExpandTargets([]string{dir + "/...", filepath.Join(dir, "*.yaml"), filepath.Join(dir, "missing.yaml"), filepath.Join(dir, "none*.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.yaml", "b.yml", "sub/d.yaml", "a.yaml", "missing.yaml"}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if got[i] != filepath.Join(dir, want[i]) {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}
