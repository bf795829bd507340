package lintcheck

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
)

// The patterns Benthos v4.60 interpolates environment variables with
// (internal/config/env_vars.go, MIT): `${NAME}`, `${NAME:default}`, either with an
// optional `|base64decode`, and `${{NAME...}}`, which stands for the literal
// `${NAME...}`. Bloblang interpolations (`${! ... }`) match neither.
var (
	envPattern        = regexp.MustCompile(`\${[0-9A-Za-z_.]+(:((\${[^}]+})|[^}])*)?(?:\|[0-9A-Za-z]+)?}`)
	escapedEnvPattern = regexp.MustCompile(`\${({[0-9A-Za-z_.]+(:((\${[^}]+})|[^}])*)?})}`)
)

// ReplaceEnv interpolates environment variables in a config as Benthos does before
// parsing it: `${NAME}` is the variable's value (empty when unset; Benthos' lint
// reports that, this check does not), `${NAME:default}` is the default when the
// variable is unset or empty, newlines in values are escaped as `\n`, and `${{...}}`
// unescapes to `${...}`. lookup is usually os.LookupEnv.
func ReplaceEnv(in []byte, lookup func(string) (string, bool)) ([]byte, error) {
	var errs []string
	out := envPattern.ReplaceAllFunc(in, func(m []byte) []byte {
		body := m[2 : len(m)-1]
		var name, def, fn string
		hasDef := false
		if colon := bytes.IndexByte(body, ':'); colon >= 0 {
			name, def, hasDef = string(body[:colon]), string(body[colon+1:]), true
			if pipe := strings.LastIndexByte(def, '|'); pipe >= 0 {
				def, fn = def[:pipe], def[pipe+1:]
			}
		} else {
			name = string(body)
			if pipe := strings.LastIndexByte(name, '|'); pipe >= 0 {
				name, fn = name[:pipe], name[pipe+1:]
			}
		}
		value, _ := lookup(name)
		if hasDef && value == "" {
			value = def
		}
		switch fn {
		case "":
		case "base64decode":
			d, err := base64.StdEncoding.DecodeString(value)
			if err != nil {
				errs = append(errs, fmt.Sprintf("failed to decode base64-encoded env var: %v", err))
			}
			value = string(d)
		default:
			errs = append(errs, "unknown env var decode function: "+fn)
		}
		return []byte(strings.ReplaceAll(value, "\n", `\n`))
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return escapedEnvPattern.ReplaceAll(out, []byte("$$$1")), nil
}
