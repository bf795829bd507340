package iceberg

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/floe-dev/floe/go-shim/floe"
	"github.com/redpanda-data/benthos/v4/public/service"
	"gopkg.in/yaml.v3"
)

// libfloe parses the section with serde, which stops at the first value it cannot
// take: an unknown field, an enum value that is not a variant, a wrong type. Every
// other problem of the section then goes unreported until that one is fixed. The host
// can see these from the output's own spec, so it checks the section against the spec
// first, names each such value with its path, what the field takes and what was given,
// and hands libfloe the rest.
//
// What reaches the check: Benthos decodes the section against the spec before lint's
// rule and start-up see it, so values of a wrong YAML type for a typed field stop there
// (lint runs no rule for such a section; start-up prints Benthos' decode error). The
// check sees unknown keys, enum values and durations, and every type when given the
// section as YAML decodes it without the spec (ConfigProblems, SectionProblems), as the
// floe binary's `lint` and `run` hooks give it (lint_section.go).

// specField is what the output's spec says about one field.
type specField struct {
	typ          string // string, int, float, bool, object, unknown, or a component type
	layout       string // scalar, array, 2darray or map
	options      []string
	interpolated bool
	secret       bool
	fields       []string // an object's field names, in the spec's order
}

// specFields is every field of the registered iceberg output, by dotted path ("" is
// the section itself), read once: the registered spec is what Benthos checks against,
// so the host's check cannot drift from it.
var specFields = sync.OnceValue(func() map[string]*specField {
	table, err := readSpecFields()
	if err != nil {
		panic(err)
	}
	return table
})

// specJSON is a field as Benthos' ConfigView.FormatJSON gives it. TemplateData would
// lose what the check needs: it gives a map of strings and a list alike as "object"
// and "array", without their elements' type.
type specJSON struct {
	Name             string      `json:"name"`
	Type             string      `json:"type"`
	Kind             string      `json:"kind"`
	Options          []string    `json:"options"`
	AnnotatedOptions [][2]string `json:"annotated_options"`
	Interpolated     bool        `json:"interpolated"`
	IsSecret         bool        `json:"is_secret"`
	Children         []specJSON  `json:"children"`
}

// readSpecFields builds the table from the registered output's spec.
func readSpecFields() (map[string]*specField, error) {
	view, ok := service.GlobalEnvironment().GetOutputConfig("iceberg")
	if !ok {
		return nil, fmt.Errorf("iceberg: the output is not registered")
	}
	raw, err := view.FormatJSON()
	if err != nil {
		return nil, err
	}
	var spec struct {
		Config specJSON `json:"config"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("iceberg: the output's spec is not JSON: %w", err)
	}
	if len(spec.Config.Children) == 0 {
		return nil, fmt.Errorf("iceberg: the output's spec lists no fields")
	}
	table := map[string]*specField{}
	addSpecField(table, "", spec.Config)
	return table, nil
}

// addSpecField adds a field and, for an object, its fields below it.
func addSpecField(table map[string]*specField, path string, f specJSON) {
	field := &specField{
		typ:          f.Type,
		layout:       f.Kind,
		options:      f.Options,
		interpolated: f.Interpolated,
		secret:       f.IsSecret,
	}
	for _, o := range f.AnnotatedOptions {
		field.options = append(field.options, o[0])
	}
	if field.layout == "" {
		field.layout = "scalar"
	}
	table[path] = field
	for _, c := range f.Children {
		field.fields = append(field.fields, c.Name)
		addSpecField(table, joinPath(path, c.Name), c)
	}
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// specProblem is one value the spec refuses: path (its keys, as a header name may hold
// a dot) is what is taken out before libfloe sees the section.
type specProblem struct {
	path []string
	text string
	// undecodable: Benthos cannot read the section against the spec with this value
	// (a wrong YAML type), so its start-up would stop there, naming it alone.
	undecodable bool
}

// typeProblems checks a section against the spec, in the spec's field order, and its
// durations.
func typeProblems(section map[string]any) []specProblem {
	return append(objectProblems(nil, section, specFields()[""]), durationProblems(section)...)
}

// objectProblems checks an object's known fields in the spec's order, then its
// unknown keys (sorted, so the lines come out the same every time).
func objectProblems(path []string, obj map[string]any, f *specField) []specProblem {
	var problems []specProblem
	for _, name := range f.fields {
		if v, ok := obj[name]; ok {
			at := appendPath(path, name)
			problems = append(problems, valueProblems(at, v, specFields()[strings.Join(at, ".")])...)
		}
	}
	for _, key := range sortedKeys(obj) {
		if !slices.Contains(f.fields, key) {
			problems = append(problems, unknownField(appendPath(path, key), f.fields))
		}
	}
	return problems
}

// appendPath copies, so sibling paths never share an array.
func appendPath(path []string, key string) []string {
	return append(slices.Clip(path), key)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// unknownField names a key the spec does not have, with the nearest field of the same
// object when one is close (a typo, or a different case).
func unknownField(path []string, siblings []string) specProblem {
	dotted := strings.Join(path, ".")
	text := fmt.Sprintf("field %s is not a field of the iceberg output", dotted)
	if near := nearest(path[len(path)-1], siblings); near != "" {
		text += "; did you mean " + joinPath(strings.Join(path[:len(path)-1], "."), near) + "?"
	}
	return specProblem{path: path, text: text}
}

// valueProblems checks one value by its field's layout: a null is what Benthos takes
// for a field left empty, so it passes.
func valueProblems(path []string, v any, f *specField) []specProblem {
	if v == nil || isComponent(f) {
		return nil // a component's own spec checks it (batching.processors)
	}
	switch f.layout {
	case "array", "2darray":
		return listProblems(path, v, f)
	case "map":
		return mapProblems(path, v, f)
	}
	return scalarProblems(path, v, f)
}

// isComponent: a field holding another component (a processor) has a type that is
// none of the plain ones.
func isComponent(f *specField) bool {
	switch f.typ {
	case "string", "int", "float", "bool", "object", "unknown":
		return false
	}
	return true
}

// listProblems: a list whose elements are each what the field's type takes (a
// 2D list's elements are lists, left to Benthos).
func listProblems(path []string, v any, f *specField) []specProblem {
	list, ok := v.([]any)
	if !ok {
		return []specProblem{wrongType(path, "a list", v, f)}
	}
	if f.layout == "2darray" {
		return nil
	}
	for _, e := range list {
		if e != nil && !scalarOK(e, f) {
			return []specProblem{wrongType(path, "a list of "+plural(f), e, f)}
		}
	}
	return nil
}

// mapProblems: an object of names to values of the field's type; a bad value is taken
// out alone, so the other entries still reach libfloe.
func mapProblems(path []string, v any, f *specField) []specProblem {
	m, ok := v.(map[string]any)
	if !ok {
		return []specProblem{wrongType(path, "an object of names to "+plural(f), v, f)}
	}
	var problems []specProblem
	for _, key := range sortedKeys(m) {
		if e := m[key]; e != nil && !scalarOK(e, f) {
			problems = append(problems, wrongType(appendPath(path, key), expected(f), e, f))
		}
	}
	return problems
}

// scalarProblems checks a single value: an object is checked field by field, an enum
// against its options, anything else by its type.
func scalarProblems(path []string, v any, f *specField) []specProblem {
	if f.typ == "object" {
		obj, ok := v.(map[string]any)
		if !ok {
			return []specProblem{wrongType(path, "an object", v, f)}
		}
		return objectProblems(path, obj, f)
	}
	if !scalarOK(v, f) {
		return []specProblem{wrongType(path, expected(f), v, f)}
	}
	if len(f.options) > 0 {
		return optionProblems(path, v, f)
	}
	return nil
}

// scalarOK is whether Benthos takes a YAML value for a field of this type, as its
// decoder (yaml.v3) does: any scalar is text; an integer field takes whole numbers
// only (the decoder would drop a fraction without a word); a boolean also takes the
// YAML 1.1 words (yes, off, ...).
func scalarOK(v any, f *specField) bool {
	switch f.typ {
	case "unknown":
		return true
	case "string":
		return isScalar(v)
	case "int":
		return isWhole(v)
	case "float":
		return isNumber(v)
	case "bool":
		return isBool(v)
	}
	return false
}

func isScalar(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return false
	}
	return true
}

func isNumber(v any) bool {
	switch v.(type) {
	case int, int64, uint64, float64:
		return true
	}
	return false
}

// isWhole: a number the decoder turns into an int without losing anything.
func isWhole(v any) bool {
	switch t := v.(type) {
	case int, int64:
		return true
	case uint64:
		return t <= math.MaxInt64
	case float64:
		return t == math.Trunc(t) && t >= math.MinInt64 && t < math.MaxInt64
	}
	return false
}

// yamlTrue and yamlFalse are the words yaml.v3 decodes into a bool besides true and
// false (YAML 1.1's), yamlBools both.
var (
	yamlTrue  = []string{"y", "Y", "yes", "Yes", "YES", "on", "On", "ON"}
	yamlFalse = []string{"n", "N", "no", "No", "NO", "off", "Off", "OFF"}
	yamlBools = slices.Concat(yamlTrue, yamlFalse)
)

// yamlBool is the boolean one of yamlBools stands for.
func yamlBool(text string) (bool, bool) {
	switch {
	case slices.Contains(yamlTrue, text):
		return true, true
	case slices.Contains(yamlFalse, text):
		return false, true
	}
	return false, false
}

func isBool(v any) bool {
	switch t := v.(type) {
	case bool:
		return true
	case string:
		return slices.Contains(yamlBools, t)
	}
	return false
}

// optionProblems: an enum's value must be one of its options exactly (libfloe and the
// host compare them exactly, though Benthos' own lint ignores case).
func optionProblems(path []string, v any, f *specField) []specProblem {
	text := fmt.Sprint(v)
	if slices.Contains(f.options, text) {
		return nil
	}
	problem := wrongType(path, "one of "+optionList(f.options), v, f)
	problem.undecodable = false // text, which Benthos reads
	if near := nearest(text, f.options); near != "" {
		problem.text += "; did you mean " + near + "?"
	}
	return []specProblem{problem}
}

// optionList is `"", zstd, snappy or lz4`: the empty option shown as `""`.
func optionList(options []string) string {
	shown := make([]string, len(options))
	for i, o := range options {
		shown[i] = o
		if o == "" {
			shown[i] = `""`
		}
	}
	if len(shown) == 1 {
		return shown[0]
	}
	return strings.Join(shown[:len(shown)-1], ", ") + " or " + shown[len(shown)-1]
}

// expected names what a field's type takes, in the words of a YAML user.
func expected(f *specField) string {
	switch f.typ {
	case "int":
		return "an integer"
	case "float":
		return "a number"
	case "bool":
		return "a boolean (true or false)"
	case "string":
		return "text"
	}
	return "a " + f.typ
}

// plural names a field type's values, for lists and maps of them.
func plural(f *specField) string {
	switch f.typ {
	case "int":
		return "integers"
	case "float":
		return "numbers"
	case "bool":
		return "booleans"
	}
	return "text"
}

// wrongType is the line for a value a field does not take.
func wrongType(path []string, want string, v any, f *specField) specProblem {
	return specProblem{
		path:        path,
		text:        fmt.Sprintf("%s: expected %s, got %s", strings.Join(path, "."), want, given(v, f.secret || holdsSecrets(path))),
		undecodable: true,
	}
}

// holdsSecrets: a section that holds a secret field (catalog, catalog.auth, a storage's
// credentials), or catalog.headers (whose values are tokens): a value given in its place
// may be the secret itself (`catalog: https://user:password@…`, `auth: "Bearer …"`), so
// a line never quotes it.
func holdsSecrets(path []string) bool {
	at := strings.Join(path, ".")
	if at == "" || at == "catalog.headers" || strings.HasPrefix(at, "catalog.headers.") {
		return true
	}
	for name, f := range specFields() {
		if f.secret && strings.HasPrefix(name, at+".") {
			return true
		}
	}
	return false
}

// maxShown bounds how much of a given text a line quotes.
const maxShown = 40

// given describes a value as the line shows it: scalars as written (text quoted and
// cut short), objects and lists by kind only, and a secret field's value never.
func given(v any, secret bool) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	if secret {
		return "a value that is not shown (the field is secret)"
	}
	if text, ok := v.(string); ok {
		if utf8.RuneCountInString(text) > maxShown {
			text = string([]rune(text)[:maxShown]) + "…"
		}
		return fmt.Sprintf("%q", text)
	}
	return fmt.Sprint(v)
}

// nearest is the candidate a mistyped name most likely meant: the same name in another
// case, else the closest within two edits (and fewer edits than the name has
// letters, so `ab` does not suggest `id`); "" when none is.
func nearest(name string, candidates []string) string {
	best, bestDistance := "", 3
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if strings.EqualFold(c, name) {
			return c
		}
		if d := editDistance(name, c); d < bestDistance && d < utf8.RuneCountInString(name) {
			best, bestDistance = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between two names, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// Durations are text to Benthos (its spec has no duration type), so the check above
// passes any; libfloe parses them, and its parse stops at a bad one. Asked about each
// duration alone, libfloe gives the same line it would give for the whole section
// (no check of its relates a duration to another field), and the rest of the section
// is then checked without it.

// durationPaths are the spec's text fields that libfloe reads as durations: those
// whose libfloe default is a duration text (`24h`, `0s`).
var durationPaths = sync.OnceValue(func() [][]string {
	var paths [][]string
	var walk func(path []string, v any)
	walk = func(path []string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(t) {
				walk(appendPath(path, k), t[k])
			}
		case string:
			f := specFields()[strings.Join(path, ".")]
			if _, err := time.ParseDuration(t); err == nil && f != nil && f.typ == "string" && !f.interpolated {
				paths = append(paths, path)
			}
		}
	}
	walk(nil, rustDefaults)
	return paths
})

// durationProblems asks libfloe about each duration the section gives, alone.
func durationProblems(section map[string]any) []specProblem {
	var problems []specProblem
	for _, path := range durationPaths() {
		v, ok := valueAt(section, path)
		if !ok || v == nil || !isScalar(v) {
			continue // absent, or refused for its type already
		}
		alone, err := json.Marshal(nestAt(path, fmt.Sprint(v)))
		if err != nil {
			continue
		}
		// Only the duration's own line: a value alone may lack the context other
		// checks ask for (a SigV4 setting without a REST catalog's url).
		for _, line := range floe.CheckConfig(alone) {
			if strings.HasPrefix(line, strings.Join(path, ".")+":") {
				problems = append(problems, specProblem{path: path, text: line})
			}
		}
	}
	return problems
}

// valueAt is the value at a path of a section, if it is there.
func valueAt(tree map[string]any, path []string) (any, bool) {
	var node any = tree
	for _, key := range path {
		fields, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = fields[key]; !ok {
			return nil, false
		}
	}
	return node, true
}

// nestAt is a config holding one value at a path.
func nestAt(path []string, v any) map[string]any {
	for i := len(path) - 1; i > 0; i-- {
		v = map[string]any{path[i]: v}
	}
	return map[string]any{path[0]: v}
}

// withoutProblems is the section (copied) without the values the spec refused, so that
// libfloe reports everything else.
func withoutProblems(section map[string]any, problems []specProblem) map[string]any {
	out := copyTree(section).(map[string]any)
	for _, p := range problems {
		deletePath(out, p.path)
	}
	return out
}

func problemTexts(problems []specProblem) []string {
	texts := make([]string, len(problems))
	for i, p := range problems {
		texts[i] = p.text
	}
	return texts
}

// ConfigProblems is every problem with an iceberg output's config section as YAML
// decodes it without the spec (e.g. read from the config file by a CLI hook), one line
// each, the lines lint prints: values of the wrong type are named here, where
// Benthos' own decoding would stop lint's rule (it runs no rule for a section it
// cannot decode) or start-up at the first one. An absent section is an empty one.
func ConfigProblems(section any) []string {
	var n yaml.Node
	if err := n.Encode(section); err != nil {
		return []string{fmt.Sprintf("the iceberg output's config is not YAML: %v", err)}
	}
	problems := SectionProblems(&n)
	texts := make([]string, len(problems))
	for i, p := range problems {
		texts[i] = p.Text
	}
	return texts
}
