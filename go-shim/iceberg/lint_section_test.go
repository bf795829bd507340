package iceberg

import (
	"slices"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"gopkg.in/yaml.v3"
)

// Each problem names the field it is about: a refused value by its path, a libfloe
// line by the field it starts with, a naming problem by its key; a line about the
// section as a whole has none.
func TestSectionProblemsNameTheirFields(t *testing.T) {
	section := yamlNode(t, "namespace: a\ntable: a/b\nmax_in_flight: four\n"+
		"commit: {max_retries: x, max_snapshots: 0}\ncatalog: {auth: {bearer: t, oauth2: {client_id: i, client_secret: s}}}\nnamespce: x\n")
	got := map[string]string{}
	for _, p := range SectionProblems(section) {
		got[p.Text] = strings.Join(p.Path, ".")
	}
	want := map[string]string{
		`commit.max_retries: expected an integer, got "x"`:                             "commit.max_retries",
		`max_in_flight: expected an integer, got "four"`:                               "max_in_flight",
		"field namespce is not a field of the iceberg output; did you mean namespace?": "namespce",
		"commit.max_snapshots must be greater than 0":                                  "commit.max_snapshots",
		"catalog.auth: set one of bearer, oauth2 and aws_sigv4":                        "catalog.auth",
		`table name "a/b" holds a path separator`:                                      "table",
	}
	for _, p := range SectionProblems(yamlNode(t, "namespace: a\ntable: t\nmax_in_flight: four\nparquet: {compression: zip}\ncommit: {linger: 5}\n")) {
		if want := strings.HasPrefix(p.Text, "max_in_flight"); p.Undecodable != want {
			t.Errorf("%q: undecodable %v, want %v (Benthos reads an enum's or a duration's text)", p.Text, p.Undecodable, want)
		}
	}
	for text, path := range want {
		if got[text] != path {
			t.Errorf("%q: path %q, want %q (all: %q)", text, got[text], path, got)
		}
	}
	if p := SectionProblems(yamlNode(t, "table: t\n")); len(p) != 1 || p[0].Text != "namespace is empty: give it (an unset environment variable leaves it empty) or interpolate it per message" || !slices.Equal(p[0].Path, []string{"namespace"}) {
		t.Errorf("an absent namespace: %+v", p)
	}
	if p := SectionProblems(yamlNode(t, "namespace: a\ntable: t\nmax_in_flight_bytes: -1\n")); len(p) != 1 || p[0].Text != "max_in_flight_bytes is -1: give a number of bytes, or 0 for no limit" || !slices.Equal(p[0].Path, []string{"max_in_flight_bytes"}) {
		t.Errorf("a negative max_in_flight_bytes: %+v", p)
	}
	if p := SectionProblems(yamlNode(t, "namespace: a\ntable: t\nmax_in_flight_bytes: lots\n")); len(p) != 1 || !strings.HasPrefix(p[0].Text, "max_in_flight_bytes") {
		t.Errorf("a max_in_flight_bytes that is not a number: %+v", p)
	}
	if p := SectionProblems(yamlNode(t, "namespace: a\ntable: t\nmax_process_in_flight_bytes: -5\n")); len(p) != 1 || p[0].Text != "max_process_in_flight_bytes is -5: give a number of bytes, or 0 for no limit" {
		t.Errorf("a negative max_process_in_flight_bytes: %+v", p)
	}
	if p := SectionProblems(yamlNode(t, "x")); len(p) != 1 || p[0].Path != nil {
		t.Errorf("a section that is not an object is the section's problem: %+v", p)
	}
	for text, want := range map[string][]string{
		"the config is not JSON":    nil,
		"`commit.linger`: bad":      {"commit", "linger"},
		"catalog.headers.X-A.b: no": {"catalog", "headers"},
		"":                          nil,
	} {
		if got := problemField(text); !slices.Equal(got, want) {
			t.Errorf("problemField(%q) = %q, want %q", text, got, want)
		}
	}
}

// Once the host's CLI lints the sections itself, the spec's rule prints nothing (its
// lines would repeat the host's at the section's first line).
func TestLeaveLintToHostQuietsTheRule(t *testing.T) {
	linter := service.GlobalEnvironment().NewComponentConfigLinter()
	section := "namespace: a\ntable: t\ncommit:\n  max_snapshots: 0\n"
	if got := ruleLints(t, linter, section); len(got) != 1 {
		t.Fatalf("the rule prints the problem: %q", got)
	}
	LeaveLintToHost()
	t.Cleanup(func() { hostLints.Store(false) })
	if got := ruleLints(t, linter, section); len(got) != 0 {
		t.Fatalf("the rule is quiet: %q", got)
	}
}

func yamlNode(t *testing.T, text string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(text), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// A text field takes any scalar as its text, as Benthos reads it against the spec (an
// AWS account id as the Glue warehouse, a number as a header's value, in a list, through
// an alias); the rest is read as YAML decodes it, so a wrong type is still named.
func TestSectionProblemsReadTextFieldsAsWritten(t *testing.T) {
	section := yamlNode(t, `namespace: 1
table: 2.50
catalog:
  url: http://127.0.0.1:1
  warehouse: 123456789012
  headers: {X-A: 1, X-B: true}
identifier_fields: [1, id]
schema_evolution: {enabled: true, partition_spec: &p 0x10}
commit: {exactly_once: {writer_id: *p, source: s, offset: o}}
`)
	if got := SectionProblems(section); len(got) != 0 {
		t.Fatalf("want none, got %+v", got)
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("table: 2.50\n"), &n); err != nil {
		t.Fatal(err)
	}
	value := specValue(n.Content[0], specFields()[""], "").(map[string]any)
	if value["table"] != "2.50" {
		t.Fatalf("table read as %#v", value["table"])
	}
	if got := ConfigProblems(map[string]any{"namespace": "a", "table": "t", "catalog": map[string]any{"warehouse": 123}}); len(got) != 0 {
		t.Fatalf("a decoded section's number for a text field: %q", got)
	}
}

// What start-up refuses, lint refuses (the fields the host reads itself), and what
// start-up takes, lint takes (YAML 1.1's words for booleans), naming the field.
func TestLintAgreesWithStartUp(t *testing.T) {
	for yamlText, want := range map[string]string{
		"max_in_flight: 0\n":          "max_in_flight is 0: give at least 1",
		"max_in_flight: -3\n":         "max_in_flight is -3: give at least 1",
		"progress_interval: 5\n":      `progress_interval: "5" is not a duration`,
		"batching: {period: '1 s'}\n": `batching.period: "1 s" is not a duration`,
		"row_operation: update\n":     `row_operation "update" is not one of insert, upsert or delete`,
		"schema_evolution: {enabled: on}\nparquet: {compression_level: 99}\n": "parquet.compression_level",
	} {
		problems := SectionProblems(yamlNode(t, "namespace: a\ntable: t\n"+yamlText))
		if len(problems) != 1 || !strings.Contains(problems[0].Text, want) {
			t.Errorf("%q: %+v, want one problem saying %q", yamlText, problems, want)
		}
	}
	for _, fine := range []string{"max_in_flight: 1\n", "progress_interval: 30s\n", "batching: {period: 500ms}\n",
		"row_operation: upsert\nidentifier_fields: [id]\n", "row_operation: '${! meta(\"op\") }'\nidentifier_fields: [id]\n", "schema_evolution: {enabled: yes}\n"} {
		if problems := SectionProblems(yamlNode(t, "namespace: a\ntable: t\n"+fine)); len(problems) != 0 {
			t.Errorf("%q: %+v, want none", fine, problems)
		}
	}
}

// A value given where a section holding secrets belongs may be the secret itself: no
// line quotes it.
func TestLintNeverQuotesWhatStandsForASecretSection(t *testing.T) {
	for _, yamlText := range []string{
		"catalog: https://alice:hunter2@catalog.example.com/api\n",
		"catalog: {url: 'http://127.0.0.1:1', auth: 'Bearer hunter2'}\n",
		"catalog: {url: 'http://127.0.0.1:1', headers: 'Authorization: Bearer hunter2'}\n",
		"storage: {aws_s3: {bucket: b, credentials: 'AKIA:hunter2'}}\n",
	} {
		problems := SectionProblems(yamlNode(t, "namespace: a\ntable: t\n"+yamlText))
		if len(problems) == 0 {
			t.Errorf("%q: no problem", yamlText)
		}
		for _, p := range problems {
			if strings.Contains(p.Text, "hunter2") {
				t.Errorf("%q: a line quotes the secret: %q", yamlText, p.Text)
			}
		}
	}
	if problems := SectionProblems(yamlNode(t, "https://alice:hunter2@x\n")); len(problems) != 1 || strings.Contains(problems[0].Text, "hunter2") {
		t.Errorf("a section given as text: %+v", problems)
	}
}
