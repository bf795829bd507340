package lintcheck

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"gopkg.in/yaml.v3"
)

// Benthos lints an output section only once it decodes against the output's spec: one
// value of a wrong YAML type and the output's own lint rule never runs, so its other
// problems go unreported, and the rule's lines point at the section's first line. A
// SectionCheck given to the Hook is run instead on every iceberg output section as
// written, and each problem printed at the line of its field.

// Problem is one problem with an iceberg output section: Path is the keys of the field
// it is about below the section (nil: the section as a whole), Text the lint line.
// Undecodable: Benthos cannot read the section with this value (a wrong YAML type), so
// its start-up would stop at the first such value, naming no other problem.
type Problem struct {
	Path        []string
	Text        string
	Undecodable bool
}

// SectionCheck gives every problem of one iceberg output section, given as written (its
// mapping node: the check reads it against its own spec, where Benthos would stop at the
// first value of a wrong type).
type SectionCheck func(section *yaml.Node) []Problem

// sectionProblem is a problem found in a config: where its section is (e.g.
// `output.broker.outputs.0.iceberg`) and the node it points at.
type sectionProblem struct {
	section     string
	at          *yaml.Node
	text        string
	undecodable bool
}

// checkSections runs check on every iceberg output section of a config: under `output`
// and `output_resources`, through any nesting. A problem points at its field's key, or
// at the section's `iceberg` key when the field is not in the YAML.
func checkSections(d Doc, check SectionCheck) []sectionProblem {
	root := resolve(d.Root)
	var out []sectionProblem
	for _, top := range []string{"output", "output_resources"} {
		v := field(root, top)
		if v == nil {
			continue
		}
		walk(v, top, 0, func(path, _ string, key, ice *yaml.Node) {
			for _, p := range check(ice) {
				at := fieldKey(ice, p.Path)
				if at == nil {
					at = key
				}
				out = append(out, sectionProblem{section: path, at: at, text: p.Text, undecodable: p.Undecodable})
			}
		})
	}
	return out
}

// SectionFindings are the problems of every iceberg output section of a config, in the
// order of their positions.
func SectionFindings(d Doc, check SectionCheck) []Finding {
	var out []Finding
	for _, p := range checkSections(d, check) {
		out = append(out, Finding{Line: p.at.Line, Column: p.at.Column, Message: p.text})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Line != out[j].Line {
			return out[i].Line < out[j].Line
		}
		return out[i].Column < out[j].Column
	})
	return out
}

// fieldKey is the key node of the field at path below a section (the deepest one the
// YAML has), nil when not even the first key is there.
func fieldKey(section *yaml.Node, path []string) *yaml.Node {
	var key *yaml.Node
	node := section
	for _, name := range path {
		k, v := fieldKV(node, name)
		if k == nil {
			break
		}
		key, node = k, v
	}
	return key
}

// LintSections prints, in the format of Benthos' lint lines, every problem check finds
// in the iceberg output sections of the files Benthos lints: the targets and the
// resource files (globs), each once, and the YAML snippets of markdown targets. It
// reports whether anything was printed. Files that do not read or parse, or that
// start with `# BENTHOS LINT DISABLE`, are skipped (Benthos reports or skips them too).
func LintSections(w io.Writer, targets, resources []string, lookup func(string) (string, bool), check SectionCheck) bool {
	resPaths, _ := Globs(resources)
	seen := map[string]bool{}
	found := false
	for _, t := range append(append([]string(nil), targets...), resPaths...) {
		if t == "" || seen[filepath.Clean(t)] {
			continue
		}
		seen[filepath.Clean(t)] = true
		var findings []Finding
		if filepath.Ext(t) == ".md" {
			findings = markdownFindings(t, check)
		} else if d, disabled, err := ReadDoc(t, lookup); err == nil && !disabled {
			findings = SectionFindings(d, check)
		}
		for _, f := range findings {
			fmt.Fprintf(w, "%v(%v,%v) %v\n", t, max(f.Line, 1), max(f.Column, 1), f.Message)
			found = true
		}
	}
	return found
}

// markdownFindings checks the ```yaml snippets of a markdown file as Benthos' lint
// reads them (without interpolating environment variables), at their lines in the file.
func markdownFindings(path string, check SectionCheck) []Finding {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	startTag, endTag := []byte("```yaml"), []byte("```")
	var out []Finding
	for rest, offset := raw, 0; ; {
		start := bytes.Index(rest, startTag)
		if start < 0 {
			return out
		}
		body := rest[start+len(startTag):]
		end := bytes.Index(body, endTag)
		if end < 0 {
			return out // Benthos reports the unterminated snippet
		}
		snippetLine := bytes.Count(raw[:offset+start+len(startTag)], []byte("\n")) + 1
		var n yaml.Node
		if yaml.Unmarshal(body[:end], &n) == nil {
			for _, f := range SectionFindings(Doc{Root: &n}, check) {
				f.Line += snippetLine - 1
				out = append(out, f)
			}
		}
		consumed := start + len(startTag) + end + len(endTag)
		rest, offset = rest[consumed:], offset+consumed
	}
}
