package lintcheck

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// lintDisable is the first line with which Benthos skips linting a file.
const lintDisable = "# BENTHOS LINT DISABLE"

// ReadDoc reads a config file, interpolates environment variables (ReplaceEnv) and
// parses it. disabled says the file starts with `# BENTHOS LINT DISABLE`.
func ReadDoc(path string, lookup func(string) (string, bool)) (d Doc, disabled bool, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Doc{}, false, err
	}
	b, err := ReplaceEnv(raw, lookup)
	if err != nil {
		return Doc{}, false, err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return Doc{}, false, err
	}
	return Doc{Name: path, Root: &n}, bytes.HasPrefix(raw, []byte(lintDisable)), nil
}

// ExpandTargets expands `floe lint` arguments as Benthos does: a path ending in `...`
// is every .yaml/.yml file below it; others are globs (a path matching nothing and
// holding no glob characters is kept, so its read error is Benthos' to report). `**`
// is not special here, unlike in Benthos.
func ExpandTargets(args []string) ([]string, error) {
	var walked, globbed []string
	for _, p := range args {
		if !strings.HasSuffix(p, "...") {
			globbed = append(globbed, p)
			continue
		}
		root := strings.TrimSuffix(p, "/...")
		if p == "..." || p == "./..." {
			root = "."
		}
		if err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() && (strings.HasSuffix(path, "yaml") || strings.HasSuffix(path, "yml")) {
				walked = append(walked, path)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	g, err := Globs(globbed)
	if err != nil {
		return nil, err
	}
	return append(walked, g...), nil
}

// Globs expands glob patterns (as `-r`/`--resources` paths are), without duplicates.
func Globs(patterns []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range patterns {
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			add(f)
		}
		if len(m) == 0 && !strings.ContainsAny(p, `*?[\`) {
			add(p)
		}
	}
	return out, nil
}

// LintFiles checks each target (a main config) together with the resource files
// (globs), and prints each finding to w in the format of Benthos' lint lines,
// `path(line,column) message`. It reports whether anything was printed. Files that
// do not read or parse are skipped: Benthos' lint reports them. Markdown targets,
// whose YAML snippets Benthos lints, are not checked.
func LintFiles(w io.Writer, targets, resources []string, lookup func(string) (string, bool)) bool {
	resPaths, _ := Globs(resources)
	var res []Doc
	isRes := map[string]bool{}
	for _, p := range resPaths {
		isRes[filepath.Clean(p)] = true
		if d, _, err := ReadDoc(p, lookup); err == nil {
			res = append(res, d)
		}
	}
	found := false
	for _, t := range targets {
		if t == "" || filepath.Ext(t) == ".md" || isRes[filepath.Clean(t)] {
			continue
		}
		d, disabled, err := ReadDoc(t, lookup)
		if err != nil || disabled {
			continue
		}
		for _, f := range Check(d, res...) {
			line, col := f.Line, f.Column
			if line < 1 {
				line = 1
			}
			if col < 1 {
				col = 1
			}
			fmt.Fprintf(w, "%v(%v,%v) %v\n", t, line, col, f.Message)
			found = true
		}
	}
	return found
}
