package iceberg

import (
	"fmt"
	"strings"
	"sync/atomic"

	"gopkg.in/yaml.v3"
)

// Benthos runs the spec's lint rule only on a section it can decode against the spec:
// one value of a wrong YAML type (`max_in_flight: four`) and the rule never runs, so lint
// printed nothing and every other problem of the section stayed hidden. The rule's lines
// also all point at the section's first line. The floe binary's CLI hook therefore reads
// each iceberg section from the config file itself, as YAML decodes it without the spec,
// and prints SectionProblems at the line of each problem's field; the rule stays quiet
// while it does (LeaveLintToHost), so no line is printed twice.

// Problem is one problem with an iceberg output's config section: Path is the keys of
// the field it is about (nil: the section as a whole), Text the line lint prints.
// Undecodable: a value of a wrong type, at which Benthos' own reading of the section
// stops (start-up then names that value alone).
type Problem struct {
	Path        []string
	Text        string
	Undecodable bool
}

// SectionProblems is every problem with an iceberg output's config section as written
// (ConfigProblems), each with the field it is about. The section is read as Benthos
// reads it against the spec where it can (specValue), and as YAML decodes it where it
// cannot, so that a value of a wrong type is there to be named.
func SectionProblems(section *yaml.Node) []Problem {
	for section != nil && (section.Kind == yaml.DocumentNode || section.Kind == yaml.AliasNode) {
		if section.Kind == yaml.AliasNode {
			section = section.Alias
		} else if len(section.Content) > 0 {
			section = section.Content[0]
		} else {
			section = nil
		}
	}
	var value any
	if section != nil {
		value = specValue(section, specFields()[""], "")
	}
	if value == nil {
		value = map[string]any{}
	}
	fields, ok := value.(map[string]any)
	if !ok {
		// Never quoted: the text may hold a catalog's URL with its password.
		return []Problem{{Text: fmt.Sprintf("the iceberg output's config must be an object, got %s", given(value, true))}}
	}
	_, problems := checkSection(fields, 0)
	out := make([]Problem, len(problems))
	for i, p := range problems {
		out[i] = Problem{Path: p.path, Text: p.text, Undecodable: p.undecodable}
	}
	return out
}

// specValue is a YAML value as Benthos reads it for a field of the spec (f, at path;
// nil: not a field): a text field takes any scalar as its text as written
// (`warehouse: 123456789012` is "123456789012", not a number), and an object's fields,
// a list's or a map's elements are read by their own fields; anything else is what YAML
// decodes (so `max_in_flight: four` stays the text "four" for the check to name).
func specValue(n *yaml.Node, f *specField, path string) any {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return specValue(n.Alias, f, path)
	}
	if f == nil || isComponent(f) || f.typ == "unknown" {
		return decoded(n)
	}
	switch {
	case n.Kind == yaml.MappingNode && f.layout == "map":
		return mapValue(n, func(_ string, v *yaml.Node) any { return scalarValue(v, f) })
	case n.Kind == yaml.MappingNode && f.typ == "object" && f.layout == "scalar":
		return mapValue(n, func(key string, v *yaml.Node) any {
			at := joinPath(path, key)
			return specValue(v, specFields()[at], at)
		})
	case n.Kind == yaml.SequenceNode && f.layout == "array":
		list := make([]any, len(n.Content))
		for i, e := range n.Content {
			list[i] = scalarValue(e, f)
		}
		return list
	}
	return scalarValue(n, f)
}

// mapValue reads a mapping's entries with value; one with a merge key (`<<: *base`) is
// left to YAML's decoder, which merges.
func mapValue(n *yaml.Node, value func(key string, v *yaml.Node) any) any {
	out := map[string]any{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			return decoded(n)
		}
		out[k.Value] = value(k.Value, n.Content[i+1])
	}
	return out
}

// scalarValue: a scalar given to a text field is its text; one of YAML 1.1's words for
// a boolean (`on`, `yes`, …) given to a boolean field is that boolean, as Benthos reads
// it at start-up; anything else is decoded.
func scalarValue(n *yaml.Node, f *specField) any {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && f.typ == "string" && n.ShortTag() != "!!null" {
		return n.Value
	}
	if n.Kind == yaml.ScalarNode && f.typ == "bool" && n.ShortTag() == "!!str" {
		if b, ok := yamlBool(n.Value); ok {
			return b
		}
	}
	return decoded(n)
}

// decoded is a YAML value as it decodes without the spec (nil if it does not).
func decoded(n *yaml.Node) any {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil
	}
	return v
}

// hostLints is set once the host's CLI prints every section's problems itself.
var hostLints atomic.Bool

// LeaveLintToHost makes the spec's lint rule print nothing from now on: the host's CLI
// prints SectionProblems for every iceberg section it lints. The floe binary calls it
// before `floe lint` checks the files; `floe run` keeps the rule, which stops a start-up
// with problems before anything runs.
func LeaveLintToHost() { hostLints.Store(true) }

// libfloeProblem is one of libfloe's lines, with the field it names first.
func libfloeProblem(text string) specProblem {
	return specProblem{path: problemField(text), text: text}
}

// problemField is the field a line starts with (`commit.max_snapshots must be …`,
// `catalog.auth: set one of …`, `table name "a/b" …`): the longest leading part of its
// first word that is a field of the spec; nil when the first word names none.
func problemField(text string) []string {
	word, _, _ := strings.Cut(text, " ")
	word = strings.Trim(strings.TrimRight(word, ":,;"), "`\"'")
	if word == "" {
		return nil
	}
	parts := strings.Split(word, ".")
	for n := len(parts); n > 0; n-- {
		if _, ok := specFields()[strings.Join(parts[:n], ".")]; ok {
			return parts[:n]
		}
	}
	return nil
}
