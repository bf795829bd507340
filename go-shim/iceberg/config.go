package iceberg

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/floe-dev/floe/go-shim/floe"
	"github.com/redpanda-data/benthos/v4/public/bloblang"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// libfloe owns the config: its defaults, its validation and the table of fields floe
// refuses. The output declares the fields (for the host's docs and type checks), takes
// their defaults from libfloe, and hands libfloe the whole section except what the host
// evaluates itself (hostOnly). Lint and start-up check the section against the spec
// first (lint_types.go: unknown keys, enum values, types, durations, each named by its
// path), take those values out, and ask libfloe about the rest: the same question, so
// `floe lint` and `floe run` print the same lines, all of them.

// hostOnly are the fields the output evaluates per message or hands to the host; the
// rest of the section goes to libfloe as written.
var hostOnly = [][]string{
	{fBatching},
	{"max_in_flight"},
	{fMaxInFlightBytes},
	{fMaxProcessInFlightBytes},
	{fRowOperation},
	{fCommit, "exactly_once", "source"},
	{fCommit, "exactly_once", "offset"},
	{fEvolution, "new_column_type_mapping"},
	{fPermanent},
	{fProgress},
}

// rustDefaults are libfloe's defaults, read once.
var rustDefaults = func() map[string]any {
	d, err := floe.ConfigDefaults()
	if err != nil {
		panic(err)
	}
	return d
}()

// def is libfloe's default for a dotted field path. A path libfloe has no default for
// is a bug in this file, found by any test that builds the spec.
func def(path string) any {
	var node any = rustDefaults
	for _, key := range strings.Split(path, ".") {
		fields, ok := node.(map[string]any)
		if !ok {
			panic("libfloe has no default for " + path)
		}
		if node, ok = fields[key]; !ok {
			panic("libfloe has no default for " + path)
		}
	}
	return plainNumbers(node)
}

// defaultNote is a field description ending with libfloe's default, for fields of an
// optional section: a declared default would make the host fill in the section.
func defaultNote(text, path string) string {
	return fmt.Sprintf("%s Default: `%v`.", text, def(path))
}

// plainNumbers turns JSON numbers into the int and float64 values the host's fields hold.
func plainNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return int(i)
		}
		f, _ := t.Float64()
		return f
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = plainNumbers(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = plainNumbers(e)
		}
		return out
	}
	return v
}

// lintMethod names the Bloblang method the spec's lint rule calls.
const lintMethod = "floe_iceberg_config_problems"

// registerConfigLint adds the method the lint rule uses to check a config as written
// (against the spec, then by libfloe). Registered before the spec is built (the rule
// is parsed then).
func registerConfigLint() {
	spec := bloblang.NewPluginSpec().
		Description("The problems with an iceberg output config (the spec's, then libfloe's), one string each.")
	err := bloblang.RegisterMethodV2(lintMethod, spec, func(*bloblang.ParsedParams) (bloblang.Method, error) {
		return func(v any) (any, error) {
			section, ok := v.(map[string]any)
			if !ok || hostLints.Load() {
				return []any{}, nil
			}
			problems := []any{}
			for _, p := range configProblems(section, 0) {
				problems = append(problems, p)
			}
			return problems, nil
		}, nil
	})
	if err != nil {
		panic(err)
	}
}

// checkedConfig is libfloe's JSON config for a parsed section, or every problem with
// it, as lint printed them (joined by "; ").
func checkedConfig(conf *service.ParsedConfig) ([]byte, error) {
	section, err := conf.FieldAny()
	if err != nil {
		return nil, err
	}
	fields, ok := section.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("iceberg output config is a %T, not an object", section)
	}
	maxInFlight, err := conf.FieldMaxInFlight()
	if err != nil {
		return nil, err
	}
	cfg, problems := checkSection(fields, maxInFlight)
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problemTexts(problems), "; "))
	}
	return cfg, nil
}

// checkSection is libfloe's JSON config for a section and every problem with it: what
// the spec refuses, then what libfloe says about the rest. The refused values are taken
// out first, as libfloe's parse stops at the first value it cannot take. Each problem
// carries the field it is about (libfloe's by the path its line starts with), for lint
// lines at the field's position.
func checkSection(section map[string]any, maxInFlight int) ([]byte, []specProblem) {
	refused := typeProblems(section)
	problems := slices.Clone(refused)
	cfg, err := libfloeConfig(withoutProblems(section, refused), maxInFlight)
	if err != nil {
		return nil, append(problems, libfloeProblem(err.Error()))
	}
	// The section as written: a namespace refused for its type is not also "empty".
	problems = append(problems, namingProblems(section)...)
	problems = append(problems, inFlightBytesProblems(section, refused)...)
	problems = append(problems, hostFieldProblems(section, refused)...)
	for _, line := range floe.CheckConfig(cfg) {
		problems = append(problems, libfloeProblem(line))
	}
	return cfg, problems
}

// namingProblems: the host names every message's table from `namespace` and `table`,
// so each must be given and, when static, not empty (an unset `${VAR:}` leaves it
// empty, and every message would then fail).
func namingProblems(section map[string]any) []specProblem {
	var problems []specProblem
	for _, key := range []string{fNamespace, fTable} {
		raw, present := section[key]
		text, isText := raw.(string)
		if present && !isText {
			continue // a YAML scalar that is not text (`table: 5`) names the table `5`
		}
		if is, err := service.NewInterpolatedString(text); err == nil {
			if value, static := is.Static(); static && strings.TrimSpace(value) == "" {
				problems = append(problems, specProblem{path: []string{key}, text: fmt.Sprintf("%s is empty: give it (an unset environment variable leaves it empty) or interpolate it per message", key)})
			}
		}
	}
	return problems
}

// hostFieldProblems: the fields the host reads itself, not libfloe, checked as start-up
// reads them, so that lint refuses what start-up refuses: max_in_flight of at least 1,
// progress_interval and batching.period as Go durations (`5` has no unit), and a static
// row_operation that is one of the operations.
func hostFieldProblems(section map[string]any, refused []specProblem) []specProblem {
	var problems []specProblem
	isRefused := func(path ...string) bool {
		return slices.ContainsFunc(refused, func(p specProblem) bool { return slices.Equal(p.path, path) })
	}
	if n, ok := section["max_in_flight"].(int); ok && n < 1 && !isRefused("max_in_flight") {
		problems = append(problems, specProblem{path: []string{"max_in_flight"}, text: fmt.Sprintf("max_in_flight is %d: give at least 1", n)})
	}
	for _, path := range [][]string{{"progress_interval"}, {"batching", "period"}} {
		v, ok := valueAt(section, path)
		text, isText := v.(string)
		if !ok || !isText || strings.TrimSpace(text) == "" || isRefused(path...) {
			continue
		}
		if _, err := time.ParseDuration(text); err != nil {
			problems = append(problems, specProblem{path: path, text: fmt.Sprintf("%s: %q is not a duration (a number with a unit: 500ms, 5s, 1m)", strings.Join(path, "."), text)})
		}
	}
	if text, ok := section[fRowOperation].(string); ok && !isRefused(fRowOperation) {
		if is, err := service.NewInterpolatedString(text); err == nil {
			if value, static := is.Static(); static && !slices.Contains([]string{"insert", "upsert", "delete"}, value) {
				problems = append(problems, specProblem{path: []string{fRowOperation}, text: fmt.Sprintf("row_operation %q is not one of insert, upsert or delete (or an interpolation that gives one per message)", value)})
			}
		}
	}
	return problems
}

// inFlightBytesProblems: max_in_flight_bytes and max_process_in_flight_bytes are byte
// counts, 0 for no limit. (A value of the wrong type is already among refused.)
func inFlightBytesProblems(section map[string]any, refused []specProblem) []specProblem {
	var problems []specProblem
	for _, field := range []string{fMaxInFlightBytes, fMaxProcessInFlightBytes} {
		if slices.ContainsFunc(refused, func(p specProblem) bool { return len(p.path) == 1 && p.path[0] == field }) {
			continue
		}
		if n, ok := section[field].(int); ok && n < 0 {
			problems = append(problems, specProblem{path: []string{field}, text: fmt.Sprintf("%s is %d: give a number of bytes, or 0 for no limit", field, n)})
		}
	}
	return problems
}

// configProblems is every problem with a section (checkSection), [] when none.
func configProblems(section map[string]any, maxInFlight int) []string {
	_, problems := checkSection(section, maxInFlight)
	return problemTexts(problems)
}

// libfloeConfig is the section without the host's fields, as JSON. A namespace or table
// that interpolates per message stays with the host too; a static one is libfloe's
// default for messages. maxInFlight (when known) lets group commit wait for that many
// concurrent calls.
func libfloeConfig(section map[string]any, maxInFlight int) ([]byte, error) {
	out := copyTree(section).(map[string]any)
	for _, path := range hostOnly {
		deletePath(out, path)
	}
	for _, key := range []string{fNamespace, fTable} {
		text, isText := out[key].(string)
		if !isText {
			continue
		}
		// A static value is the text with escapes (`${{!`) resolved.
		if is, err := service.NewInterpolatedString(text); err != nil {
			delete(out, key)
		} else if value, static := is.Static(); static {
			out[key] = value
		} else {
			delete(out, key)
		}
	}
	if maxInFlight > 0 {
		out["max_in_flight"] = maxInFlight
	}
	return json.Marshal(out)
}

// copyTree copies maps and lists, so the host's parsed config is never changed.
func copyTree(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = copyTree(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = copyTree(e)
		}
		return out
	}
	return v
}

func deletePath(tree map[string]any, path []string) {
	for _, key := range path[:len(path)-1] {
		next, ok := tree[key].(map[string]any)
		if !ok {
			return
		}
		tree = next
	}
	delete(tree, path[len(path)-1])
}
