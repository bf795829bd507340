// Package docsgen renders the reference pages of the components the floe binary adds
// (docs/components/*.md) from their registered specs, in the layout Redpanda Connect's
// component pages use: the summary, a config block of the common fields and one of all
// fields, each with its default, the description, then every field with its type,
// default, options and examples. The pages are generated, never edited by hand: a test
// fails when the committed pages drift from the specs.
package docsgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Component names one registered component: its kind (output, input, metrics) and name.
type Component struct {
	Kind string
	Name string
}

// Components are floe's own, one page each.
var Components = []Component{
	{Kind: "output", Name: "iceberg"},
	{Kind: "input", Name: "kafka_franz"},
	{Kind: "metrics", Name: "prometheus"},
}

// Page is the file a component's reference is written to, under the docs folder.
func (c Component) Page() string { return c.Name + ".md" }

// view is the component's registered spec.
func view(env *service.Environment, c Component) (*service.ConfigView, error) {
	var found *service.ConfigView
	pick := func(name string, v *service.ConfigView) {
		if name == c.Name {
			found = v
		}
	}
	switch c.Kind {
	case "output":
		env.WalkOutputs(pick)
	case "input":
		env.WalkInputs(pick)
	case "metrics":
		env.WalkMetrics(pick)
	default:
		return nil, fmt.Errorf("no component kind %q", c.Kind)
	}
	if found == nil {
		return nil, fmt.Errorf("no %s named %q is registered", c.Kind, c.Name)
	}
	return found, nil
}

// templateData is what the component's spec says about itself and its fields.
func templateData(env *service.Environment, c Component) (service.TemplateDataPlugin, error) {
	v, err := view(env, c)
	if err != nil {
		return service.TemplateDataPlugin{}, err
	}
	return v.TemplateData()
}

// Render is the component's reference page.
func Render(env *service.Environment, c Component) ([]byte, error) {
	data, err := templateData(env, c)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	err = page.Execute(&out, pageData{Kind: c.Kind, TemplateDataPlugin: data, Fields: fields(data.Fields)})
	return bytes.TrimRight(out.Bytes(), "\n"), err
}

// placeholder is what Benthos puts in place of a field's missing description.
const placeholder = "Sorry! This field is missing documentation."

// Undescribed lists the component's fields that have no description.
func Undescribed(env *service.Environment, c Component) ([]string, error) {
	data, err := templateData(env, c)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range data.Fields {
		if d := strings.TrimSpace(f.Description); d == "" || d == placeholder {
			missing = append(missing, f.FullName)
		}
	}
	return missing, nil
}

// WriteAll writes every component's page into dir.
func WriteAll(env *service.Environment, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range Components {
		text, err := Render(env, c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.Page()), append(text, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Drift lists the pages in dir that differ from what the specs render (or are missing).
func Drift(env *service.Environment, dir string) ([]string, error) {
	var stale []string
	for _, c := range Components {
		want, err := Render(env, c)
		if err != nil {
			return nil, err
		}
		have, err := os.ReadFile(filepath.Join(dir, c.Page()))
		if err != nil || !bytes.Equal(bytes.TrimRight(have, "\n"), want) {
			stale = append(stale, filepath.Join(dir, c.Page()))
		}
	}
	return stale, nil
}

type pageData struct {
	Kind string
	service.TemplateDataPlugin
	Fields []field
}

// field is one field as the page shows it.
type field struct {
	service.TemplateDataPluginField
	Default string
}

func fields(in []service.TemplateDataPluginField) []field {
	out := make([]field, 0, len(in))
	for _, f := range in {
		out = append(out, field{TemplateDataPluginField: f, Default: defaultText(f)})
	}
	return out
}

// defaultText is the field's default as YAML would read it, "" when it has none.
func defaultText(f service.TemplateDataPluginField) string {
	if f.DefaultMarshalled == "" {
		return ""
	}
	var v any
	if json.Unmarshal([]byte(f.DefaultMarshalled), &v) == nil {
		if s, ok := v.(string); ok {
			return fmt.Sprintf("%q", s)
		}
	}
	return f.DefaultMarshalled
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"trim": strings.TrimSpace,
	"join": func(items []string) string {
		quoted := make([]string, len(items))
		for i, s := range items {
			quoted[i] = "`" + s + "`"
		}
		return strings.Join(quoted, ", ")
	},
}).Parse(`# {{.Name}}

<!-- Generated from the registered spec by ` + "`make docs`" + ` (floe docs); do not edit. -->

{{.Kind}} · {{.Status}}

{{trim .Summary}}

## Common

` + "```yaml" + `
# Common config fields, showing default values
{{trim .CommonConfigYAML}}
` + "```" + `

## Advanced

` + "```yaml" + `
# All config fields, showing default values
{{trim .AdvancedConfigYAML}}
` + "```" + `
{{if .Description}}
{{trim .Description}}
{{end}}
## Fields
{{range .Fields}}
### ` + "`{{.FullName}}`" + `

{{trim .Description}}
{{if .IsSecret}}
This field holds a secret: floe never logs it.
{{end}}{{if .IsInterpolated}}
This field supports interpolation functions (evaluated per message).
{{end}}
*Type*: ` + "`{{.Type}}`" + `{{if .Default}}

*Default*: ` + "`{{.Default}}`" + `{{end}}{{if .AnnotatedOptions}}

| Option | Summary |
|---|---|
{{range .AnnotatedOptions}}| ` + "`{{index . 0}}`" + ` | {{index . 1}} |
{{end}}{{else if .Options}}

*Options*: {{join .Options}}{{end}}{{if .ExamplesMarshalled}}

` + "```yaml" + `
# Examples
{{range .ExamplesMarshalled}}
{{trim .}}
{{end}}` + "```" + `{{end}}
{{end}}`))
