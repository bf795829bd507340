package lintcheck

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"gopkg.in/yaml.v3"
)

// fakeSectionCheck stands in for the iceberg output's check: a problem for every key
// whose value is the text `bad` or `undecodable` (at its path), and one for the section
// as a whole when it has a key `whole`.
func fakeSectionCheck(node *yaml.Node) []Problem {
	var section any
	if err := node.Decode(&section); err != nil {
		return []Problem{{Text: err.Error()}}
	}
	var out []Problem
	var visit func(path []string, v any)
	visit = func(path []string, v any) {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if k == "whole" && len(path) == 0 {
					out = append(out, Problem{Text: "the section as a whole"})
					continue
				}
				visit(append(slices.Clip(path), k), t[k])
			}
		case string:
			if t == "bad" || t == "undecodable" {
				out = append(out, Problem{Path: path, Text: strings.Join(path, ".") + " is " + t, Undecodable: t == "undecodable"})
			}
		}
	}
	visit(nil, section)
	return out
}

// Every iceberg section of a file is checked as YAML decodes it, wherever it is (a
// broker, a resource), each problem at its field's key, in line order; a field not in
// the YAML (or the section itself) points at the `iceberg` key.
func TestLintSections(t *testing.T) {
	dir := t.TempDir()
	main := writeFile(t, dir, "main.yaml", `output:
  broker:
    outputs:
      - iceberg:
          namespace: bad
          commit:
            max_snapshots: four
            linger: bad
      - iceberg: { table: bad, whole: 1 }
`)
	res := writeFile(t, dir, "res.yaml", `output_resources:
  - label: lake
    iceberg:
      table: bad
`)
	disabled := writeFile(t, dir, "off.yaml", "# BENTHOS LINT DISABLE\noutput:\n  iceberg: { table: bad }\n")
	md := writeFile(t, dir, "doc.md", "# Doc\n\n```yaml\noutput:\n  iceberg:\n    table: bad\n```\n\ntext\n\n```yaml\noutput:\n  iceberg: { namespace: bad }\n```\n")
	lookup := func(string) (string, bool) { return "", false }

	var out bytes.Buffer
	if !LintSections(&out, []string{main, md, disabled, main}, []string{filepath.Join(dir, "res*.yaml")}, lookup, fakeSectionCheck) {
		t.Fatal("nothing found")
	}
	want := []string{
		main + "(5,11) namespace is bad",
		main + "(8,13) commit.linger is bad",
		main + "(9,9) the section as a whole",
		main + "(9,20) table is bad",
		md + "(6,5) table is bad",
		md + "(13,14) namespace is bad",
		res + "(4,7) table is bad",
	}
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); !slices.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	out.Reset()
	clean := writeFile(t, dir, "clean.yaml", "output:\n  iceberg: { table: t }\n")
	if LintSections(&out, []string{clean, filepath.Join(dir, "nope.yaml")}, nil, lookup, fakeSectionCheck) || out.Len() != 0 {
		t.Fatalf("a clean file prints nothing: %q", out.String())
	}
}

// Through the Benthos CLI: lint prints the sections' problems, calls SectionsLinted
// first, and fails; run refuses to start when a section holds a value Benthos cannot
// read, naming every problem with its section, and leaves the others to the output.
func TestHookSections(t *testing.T) {
	env := fakeIcebergEnv(t)
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", runnable+`
output:
  iceberg:
    namespace: bad
    table: undecodable
`)
	readable := writeFile(t, dir, "readable.yaml", runnable+`
output:
  iceberg: { namespace: bad, table: b }
`)
	good := writeFile(t, dir, "good.yaml", runnable+`
output:
  iceberg: { namespace: a, table: b }
`)
	run := func(h *Hook, args ...string) (int, string) {
		var logs syncBuffer
		opts := append(h.CLIOpts(),
			service.CLIOptSetEnvironment(env),
			service.CLIOptAddTeeLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))),
			service.CLIOptSetArgs(append([]string{"floe"}, args...)...))
		code, err := service.RunCLIToCode(context.Background(), opts...)
		if err != nil {
			_, _ = fmt.Fprintf(&logs, "cli error: %v\n", err)
		}
		return h.ExitCode(code), logs.String()
	}

	var out bytes.Buffer
	linted := false
	h := &Hook{Stderr: &out, Sections: fakeSectionCheck, SectionsLinted: func() { linted = true }}
	if code, logs := run(h, "lint", bad); code != 1 || !linted {
		t.Fatalf("lint: code %d, linted %v, %s", code, linted, logs)
	}
	if want := bad + "(13,5) namespace is bad\n" + bad + "(14,5) table is undecodable\n"; out.String() != want {
		t.Fatalf("lint printed %q, want %q", out.String(), want)
	}

	out.Reset()
	if code, logs := run(&Hook{Stderr: &out, Sections: fakeSectionCheck}, "lint", good); code != 0 || out.Len() != 0 {
		t.Fatalf("lint of a clean file: code %d, %q, %s", code, out.String(), logs)
	}

	code, logs := run(&Hook{Sections: fakeSectionCheck}, "run", bad)
	if code == 0 || !strings.Contains(logs, "iceberg output config: output.iceberg: namespace is bad") ||
		!strings.Contains(logs, "output.iceberg: table is undecodable") {
		t.Fatalf("run: code %d, logs:\n%s", code, logs)
	}
	for _, path := range []string{readable, good} {
		if code, logs := run(&Hook{Sections: fakeSectionCheck}, "run", path); code != 0 || strings.Contains(logs, "iceberg output config") {
			t.Fatalf("run of %s: code %d, logs:\n%s", path, code, logs)
		}
	}
}
