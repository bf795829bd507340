package lintcheck

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// fakeIcebergEnv is the global environment plus a stand-in `iceberg` output (the
// real one needs libfloe) with the fields the check reads.
func fakeIcebergEnv(t *testing.T) *service.Environment {
	t.Helper()
	env := service.GlobalEnvironment().Clone()
	spec := service.NewConfigSpec().Fields(
		service.NewInterpolatedStringField("namespace"),
		service.NewInterpolatedStringField("table"),
		service.NewInterpolatedStringField("row_operation").Default("insert"),
	)
	err := env.RegisterBatchOutput("iceberg", spec,
		func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			return dropOutput{}, service.BatchPolicy{}, 1, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

type dropOutput struct{}

func (dropOutput) Connect(context.Context) error                          { return nil }
func (dropOutput) WriteBatch(context.Context, service.MessageBatch) error { return nil }
func (dropOutput) Close(context.Context) error                            { return nil }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const runnable = `
http: { enabled: false }
logger: { level: none }
input:
  generate: { count: 1, interval: "", mapping: 'root = {"id": 1}' }
pipeline:
  threads: ${FLOE_TEST_THREADS:-1}
  processors:
    - mapping: root = this
`

func writeFile(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// `floe lint` through the Benthos CLI: the finding is printed in Benthos' format
// and fails lint; a clean config passes; Benthos' own lints still run.
func TestHookLint(t *testing.T) {
	env := fakeIcebergEnv(t)
	dir := t.TempDir()
	keyed := writeFile(t, dir, "keyed.yaml", runnable+`
output:
  iceberg: { namespace: crm, table: customers, row_operation: '${! meta("op") }' }
`)
	inserts := writeFile(t, dir, "inserts.yaml", runnable+`
output:
  iceberg: { namespace: crm, table: customers }
`)
	keyedAndBad := writeFile(t, dir, "bad.yaml", runnable+`
output:
  iceberg: { namespace: crm, table: customers, row_operation: upsert, nope: 1 }
`)
	viaResource := writeFile(t, dir, "main.yaml", runnable+`
output: { resource: lake }
`)
	res := writeFile(t, dir, "res.yaml", `
output_resources:
  - label: lake
    iceberg: { namespace: crm, table: customers, row_operation: upsert }
`)

	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{name: "keyed", args: []string{"lint", keyed}, code: 1,
			want: keyed + "(7,3) pipeline.processors run on one thread per CPU (pipeline.threads: -1)"},
		{name: "keyed, threads 1", args: []string{"lint", keyed}, env: map[string]string{"FLOE_TEST_THREADS": "1"}},
		{name: "inserts", args: []string{"lint", inserts}},
		{name: "keyed and a Benthos lint", args: []string{"lint", keyedAndBad}, code: 1, want: keyedAndBad + "(7,3) "},
		{name: "resource flag", args: []string{"lint", "-r", res, viaResource}, code: 1,
			want: viaResource + "(7,3) "},
		{name: "root resource flag", args: []string{"-r", res, "lint", viaResource}, code: 1,
			want: viaResource + "(7,3) "},
		// Benthos does not lint resource references, and without -r the iceberg
		// output is not in view.
		{name: "no resource flag", args: []string{"lint", viaResource}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			h := Hook{Stderr: &out}
			opts := append(h.CLIOpts(),
				service.CLIOptSetEnvironment(env),
				service.CLIOptSetArgs(append([]string{"floe"}, tc.args...)...))
			code, err := service.RunCLIToCode(context.Background(), opts...)
			if err != nil {
				t.Logf("cli error: %v", err)
			}
			if code = h.ExitCode(code); code != tc.code {
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			if tc.want == "" {
				if out.Len() != 0 {
					t.Errorf("want no lint line, got %q", out.String())
				}
			} else if !strings.HasPrefix(out.String(), tc.want) {
				t.Errorf("want a line starting %q, got %q", tc.want, out.String())
			}
		})
	}
}

// `floe run` logs the finding as a warning and runs on.
func TestHookRun(t *testing.T) {
	env := fakeIcebergEnv(t)
	dir := t.TempDir()
	keyed := writeFile(t, dir, "keyed.yaml", runnable+`
output:
  iceberg: { namespace: crm, table: customers, row_operation: upsert }
`)
	viaResource := writeFile(t, dir, "main.yaml", runnable+`
output: { resource: lake }
`)
	res := writeFile(t, dir, "res.yaml", `
output_resources:
  - label: lake
    iceberg: { namespace: crm, table: customers, row_operation: upsert }
`)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		warn string
	}{
		{name: "keyed", args: []string{"run", keyed},
			warn: "pipeline.processors run on one thread per CPU (pipeline.threads: -1) and may reorder messages, but the iceberg output output.iceberg (row_operation: upsert)"},
		{name: "threads 1", args: []string{"run", keyed}, env: map[string]string{"FLOE_TEST_THREADS": "1"}},
		{name: "threads 1 by --set", args: []string{"run", "--set", "pipeline.threads=1", keyed}},
		{name: "resource file", args: []string{"run", "-r", res, viaResource},
			warn: "output_resources.0.iceberg (label lake) in " + res + " (line 4, row_operation: upsert)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var logs syncBuffer
			var h Hook
			opts := append(h.CLIOpts(),
				service.CLIOptSetEnvironment(env),
				service.CLIOptAddTeeLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))),
				service.CLIOptSetArgs(append([]string{"floe"}, tc.args...)...))
			code, err := service.RunCLIToCode(context.Background(), opts...)
			if err != nil || h.ExitCode(code) != 0 {
				t.Fatalf("exit code %d, %v; logs:\n%s", code, err, logs.String())
			}
			got := logs.String()
			if tc.warn == "" {
				if strings.Contains(got, "pipeline.processors") {
					t.Errorf("want no warning, got:\n%s", got)
				}
				return
			}
			if !strings.Contains(got, "level=WARN") || !strings.Contains(got, tc.warn) {
				t.Errorf("want a warning with %q, got:\n%s", tc.warn, got)
			}
		})
	}
}
