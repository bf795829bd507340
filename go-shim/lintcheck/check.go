// Package lintcheck finds configs whose keyed iceberg writes can be reordered by
// Benthos' pipeline threads, for `floe lint` (a lint line) and `floe run` (a warning
// logged at start-up).
//
// Keyed writes (an iceberg output whose `row_operation` is anything but a constant
// `insert`) need each key's operations to reach the output in input order: the last
// operation per key wins. Benthos runs `pipeline.processors` on `pipeline.threads`
// goroutines (default -1: one per CPU), which hand messages on in whatever order they
// finish, so with more than one thread a later value of a key can be overtaken by an
// earlier one. The input's own `processors` run in order, on the input's goroutine.
//
// It also runs a given check on every iceberg output section as YAML decodes it
// (sections.go), printing each problem at its field's line.
//
// The package has no cgo import, so its tests run without libfloe.
package lintcheck

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Doc is one parsed config file.
type Doc struct {
	// Name is the file's path. Messages name resource files by it; the checked
	// config's own name is left out (the lint line starts with it).
	Name string
	// Root is the parsed YAML (a document node or its content).
	Root *yaml.Node
}

// Finding is one ordering hazard in a config.
type Finding struct {
	// Line and Column point into the checked config: at `pipeline.threads` when it is
	// set, else at `pipeline.processors`. Both are 0 when the config has no positions
	// (e.g. one encoded from a parsed value).
	Line, Column int
	Message      string
}

// maxDepth bounds the walk, in case aliases make the tree deeper than any real config.
const maxDepth = 200

// Check reports, at most once, a config (main) that runs pipeline processors on more
// than one thread while an iceberg output anywhere in it, or in the resource files
// loaded with it, makes keyed writes.
func Check(main Doc, resources ...Doc) []Finding {
	root := resolve(main.Root)
	pipeline := field(root, "pipeline")
	procsKey, procs := fieldKV(pipeline, "processors")
	// A pipeline without processors is never built: Benthos' stream constructor
	// (internal/stream/type.go, v4.60) creates the pipeline layer only when
	// `len(pipeline.processors) > 0`, so inputs feed the output directly and
	// `pipeline.threads` changes nothing.
	if procs == nil || procs.Kind != yaml.SequenceNode || len(procs.Content) == 0 {
		return nil
	}
	threadsKey, threadsNode := fieldKV(pipeline, "threads")
	threads, threadsSet := -1, false
	if threadsNode != nil && !isNull(threadsNode) {
		n, err := strconv.Atoi(strings.TrimSpace(threadsNode.Value))
		if err != nil || threadsNode.Kind != yaml.ScalarNode {
			return nil // not a number: Benthos' own lint reports it
		}
		threads, threadsSet = n, true
	}
	// threads: 1 builds a single processor (pipeline.New, internal/pipeline/
	// constructor.go); any other value builds a pool, where <= 0 means one per CPU.
	if threads == 1 {
		return nil
	}

	var outs []keyedOutput
	outs = append(outs, keyedOutputs(Doc{Root: main.Root})...)
	for _, r := range resources {
		outs = append(outs, keyedOutputs(r)...)
	}
	if len(outs) == 0 {
		return nil
	}

	at := procsKey
	var threadsDesc string
	switch {
	case !threadsSet:
		threadsDesc = "pipeline.processors run on one thread per CPU (pipeline.threads unset, default -1)"
	case threads <= 0:
		threadsDesc = fmt.Sprintf("pipeline.processors run on one thread per CPU (pipeline.threads: %d)", threads)
	default:
		threadsDesc = fmt.Sprintf("pipeline.processors run on %d threads (pipeline.threads: %d)", threads, threads)
	}
	if threadsSet {
		at = threadsKey
	}

	descs := make([]string, len(outs))
	for i, o := range outs {
		descs[i] = o.describe()
	}
	what := "the iceberg output " + descs[0] + " makes"
	if len(descs) > 1 {
		what = "the iceberg outputs " + strings.Join(descs, ", ") + " make"
	}
	msg := threadsDesc + " and may reorder messages, but " + what +
		" keyed writes, which need each key's operations in input order (else a superseded value can win):" +
		" set pipeline.threads: 1, or move the processors into the input's processors, which run in order"

	f := Finding{Message: msg}
	if at != nil {
		f.Line, f.Column = at.Line, at.Column
	}
	return []Finding{f}
}

// keyedOutput is an iceberg output with keyed writes.
type keyedOutput struct {
	file  string
	path  string
	label string
	line  int
	op    string
}

func (o keyedOutput) describe() string {
	var b strings.Builder
	b.WriteString(o.path)
	if o.label != "" {
		fmt.Fprintf(&b, " (label %s)", o.label)
	}
	if o.file != "" {
		fmt.Fprintf(&b, " in %s", o.file)
	}
	b.WriteString(" (")
	if o.line > 0 {
		fmt.Fprintf(&b, "line %d, ", o.line)
	}
	fmt.Fprintf(&b, "row_operation: %s)", o.op)
	return b.String()
}

// keyedOutputs lists the iceberg outputs with keyed writes in a config: under the
// top-level `output` (through any broker, fallback, switch, retry, ... nesting) and in
// `output_resources`. floe has no iceberg input, processor or cache, so an `iceberg`
// key holding an object below those is always an output.
func keyedOutputs(d Doc) []keyedOutput {
	root := resolve(d.Root)
	var outs []keyedOutput
	for _, top := range []string{"output", "output_resources"} {
		if v := field(root, top); v != nil {
			walk(v, top, 0, func(path, label string, key, ice *yaml.Node) {
				if op, keyed := rowOperation(ice); keyed {
					outs = append(outs, keyedOutput{file: d.Name, path: path, label: label, line: key.Line, op: op})
				}
			})
		}
	}
	return outs
}

// walk calls visit for every `iceberg` key with an object value under n, with the
// `label` beside it, if any.
func walk(n *yaml.Node, path string, depth int, visit func(path, label string, key, ice *yaml.Node)) {
	n = resolve(n)
	if n == nil || depth > maxDepth {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		label := ""
		if l := field(n, "label"); l != nil && l.Kind == yaml.ScalarNode {
			label = l.Value
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], resolve(n.Content[i+1])
			p := path + "." + k.Value
			if k.Value == "iceberg" && v != nil && v.Kind == yaml.MappingNode {
				visit(p, label, k, v)
				continue
			}
			walk(v, p, depth+1, visit)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			walk(c, path+"."+strconv.Itoa(i), depth+1, visit)
		}
	}
}

// rowOperation says whether an iceberg output's config makes keyed writes, the way
// the output decides whether to evaluate an operation per message (iceberg/output.go):
// anything but a static `insert` (any case, surrounding space ignored). Absent means
// the default, `insert`. A Bloblang interpolation (`${! ... }`) is never static.
func rowOperation(ice *yaml.Node) (op string, keyed bool) {
	v := field(ice, "row_operation")
	if v == nil || isNull(v) {
		return "", false
	}
	if v.Kind != yaml.ScalarNode {
		return "", false // not a string: Benthos' own lint reports it
	}
	if !strings.Contains(v.Value, "${!") && strings.EqualFold(strings.TrimSpace(v.Value), "insert") {
		return "", false
	}
	return v.Value, true
}

// resolve unwraps document nodes and aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && i < maxDepth; i++ {
		switch {
		case n.Kind == yaml.DocumentNode && len(n.Content) > 0:
			n = n.Content[0]
		case n.Kind == yaml.AliasNode && n.Alias != nil:
			n = n.Alias
		default:
			return n
		}
	}
	return n
}

func field(m *yaml.Node, name string) *yaml.Node {
	_, v := fieldKV(m, name)
	return v
}

// fieldKV finds a mapping's key and (resolved) value by name; the last one wins, as
// when the YAML is decoded.
func fieldKV(m *yaml.Node, name string) (key, value *yaml.Node) {
	m = resolve(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			key, value = m.Content[i], resolve(m.Content[i+1])
		}
	}
	return key, value
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && (n.Tag == "!!null" || (n.Tag == "" && n.Value == ""))
}
