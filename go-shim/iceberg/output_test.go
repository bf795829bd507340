package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/go-shim/floe"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
)

func outputYAML(warehouse, extra string) string {
	return fmt.Sprintf(`
iceberg:
  catalog:
    warehouse: %q
  namespace: gotest
  table: events
  schema_evolution:
    enabled: true
  max_in_flight: 2
%s`, warehouse, extra)
}

// testPython is the Python with the test packages: $PYTHON (the Makefile exports its
// virtual environment's), else the repository's .venv (after `make py-deps`), else python3.
func testPython(here string) string {
	if p := os.Getenv("PYTHON"); p != "" {
		return p
	}
	venv := filepath.Join(here, "..", "..", ".venv", "bin", "python3")
	if _, err := os.Stat(venv); err == nil {
		return venv
	}
	return "python3"
}

// readCount reads the table back with pyiceberg (an independent reader).
func readCount(t *testing.T, warehouse, table string) int {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "tests", "support", "read_table.py")
	args, _ := json.Marshal(map[string]string{
		"uri":       "sqlite:///" + filepath.Join(warehouse, "catalog.db"),
		"warehouse": "file://" + warehouse,
		"table":     table,
	})
	out, err := exec.Command(testPython(filepath.Dir(file)), script, "pyiceberg-sql", string(args)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("reader failed: %s", ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct{ Count int }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	return res.Count
}

func buildStream(t *testing.T, yaml string) (*service.Stream, service.MessageBatchHandlerFunc) {
	t.Helper()
	b := service.NewStreamBuilder()
	send, err := b.AddBatchProducerFunc()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddOutputYAML(yaml); err != nil {
		t.Fatal(err)
	}
	s, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return s, send
}

func batchOf(msgs ...string) service.MessageBatch {
	var b service.MessageBatch
	for _, m := range msgs {
		b = append(b, service.NewMessage([]byte(m)))
	}
	return b
}

func TestAckAfterCommitAndPerMessageFailure(t *testing.T) {
	wh := t.TempDir()
	s, send := buildStream(t, outputYAML(wh, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() { _ = s.Run(ctx) }()

	if err := send(ctx, batchOf(`{"id": 1, "name": "a"}`, `{"id": 2, "name": "b"}`)); err != nil {
		t.Fatalf("good batch nacked: %v", err)
	}
	if got := readCount(t, wh, "gotest.events"); got != 2 {
		t.Fatalf("after ack, table has %d rows, want 2", got)
	}

	// A partly bad batch is nacked (only its bad messages are replayed by the host)...
	if err := send(ctx, batchOf(`{"id": 3}`, `{"id": "three"}`, `not json`, `{"id": 4}`)); err == nil {
		t.Fatal("a batch with bad messages must be nacked")
	}
	// ...and its good messages are committed.
	if got := readCount(t, wh, "gotest.events"); got != 4 {
		t.Fatalf("good messages of a partly bad batch must commit: %d rows, want 4", got)
	}
	_ = s.Stop(ctx)
}

func newTestOutput(t *testing.T, yaml string) *output {
	t.Helper()
	out := outputFor(t, yaml)
	if err := out.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close(context.Background()) })
	return out
}

func TestWriteBatchNamesExactlyTheFailedMessages(t *testing.T) {
	wh := t.TempDir()
	out := newTestOutput(t, fmt.Sprintf("catalog: {warehouse: %q}\nnamespace: gotest\ntable: t\nschema_evolution: {enabled: true}\n", wh))
	batch := batchOf(`{"id": 3}`, `{"id": "three"}`, `not json`, `{"id": 4}`)
	failed := failedMessages(t, batch, func(b service.MessageBatch) error { return out.WriteBatch(context.Background(), b) })
	if len(failed) != 2 || !strings.Contains(failed[1], "field `id`") || !strings.Contains(failed[2], "invalid JSON") {
		t.Fatalf("unexpected failures: %v", failed)
	}
	if got := readCount(t, wh, "gotest.t"); got != 2 {
		t.Fatalf("%d rows committed, want 2", got)
	}
}

// failedMessages is the per-message errors of a BatchError, by index.
func failedMessages(t *testing.T, batch service.MessageBatch, write func(service.MessageBatch) error) map[int]string {
	t.Helper()
	indexer := batch.Index()
	err := write(batch)
	var be *service.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("want a BatchError, got %v", err)
	}
	failed := map[int]string{}
	be.WalkMessagesIndexedBy(indexer, func(i int, _ *service.Message, err error) bool {
		if err != nil {
			failed[i] = err.Error()
		}
		return true
	})
	return failed
}

// A message whose own metadata cannot give its position or its table fails alone, as
// docs/failures.md promises: the rest of its batch commits, and only it goes to a fallback.
func TestAMessageWithoutItsPositionOrTableFailsAlone(t *testing.T) {
	wh := t.TempDir()
	out := newTestOutput(t, fmt.Sprintf(`catalog: {warehouse: %q}
namespace: gotest
table: '${! meta("tbl").or(throw("this message names no table")) }'
schema_evolution: {enabled: true}
commit:
  exactly_once:
    writer_id: w
    source: src/0
    offset: '${! meta("off") }'
`, wh))
	msg := func(body, tbl, off string) *service.Message {
		m := service.NewMessage([]byte(body))
		if tbl != "" {
			m.MetaSetMut("tbl", tbl)
		}
		if off != "" {
			m.MetaSetMut("off", off)
		}
		return m
	}
	batch := service.MessageBatch{
		msg(`{"id": 1}`, "t", "1"),
		msg(`{"id": 2}`, "t", ""),   // no offset
		msg(`{"id": 3}`, "t", "x3"), // an offset that is no integer
		msg(`{"id": 4}`, "", "4"),   // no table
		msg(`{"id": 5}`, "t", "5"),
		msg(`not json`, "t", "6"), // libfloe refuses it, naming its index in the batch
	}
	write := func(b service.MessageBatch) error { return out.WriteBatch(context.Background(), b) }
	failed := failedMessages(t, batch, write)
	if len(failed) != 4 || !strings.Contains(failed[1], "exactly_once.offset") ||
		!strings.Contains(failed[2], `"x3" is not an integer`) || !strings.Contains(failed[3], "this message names no table") ||
		!strings.HasPrefix(failed[5], "message 5:") {
		t.Fatalf("want messages 1, 2, 3 and 5 failed, each saying why: %v", failed)
	}
	if got := readCount(t, wh, "gotest.t"); got != 2 {
		t.Fatalf("%d rows committed, want the 2 messages with a position and a table", got)
	}
	// A batch where no message can be handed to libfloe fails each one alone too.
	batch = service.MessageBatch{msg(`{"id": 6}`, "t", "")}
	if failed := failedMessages(t, batch, write); len(failed) != 1 {
		t.Fatalf("want the one message failed alone: %v", failed)
	}
}

func TestPerMessageTablesFromInterpolation(t *testing.T) {
	wh := t.TempDir()
	out := newTestOutput(t, fmt.Sprintf("catalog: {warehouse: %q}\nnamespace: gotest\ntable: '${! json(\"kind\") }'\nschema_evolution: {enabled: true}\n", wh))
	batch := batchOf(`{"kind": "a", "v": 1}`, `{"kind": "b", "v": 2}`, `{"kind": "a", "v": 3}`)
	if err := out.WriteBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if a, b := readCount(t, wh, "gotest.a"), readCount(t, wh, "gotest.b"); a != 2 || b != 1 {
		t.Fatalf("rows per table: a=%d b=%d, want 2 and 1", a, b)
	}
}

func TestCancellationReturnsPromptly(t *testing.T) {
	// Not t.TempDir: the host may still be replaying the nacked batch while the stream
	// is torn down, and a late file must not fail the test's cleanup.
	wh, err := os.MkdirTemp("", "floe-cancel-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(wh) })
	s, send := buildStream(t, outputYAML(wh, ""))
	runCtx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	done := make(chan struct{})
	go func() { _ = s.Run(runCtx); close(done) }()
	// A first batch makes sure the output is connected (no file is still being created
	// in the background when the temp dir is removed).
	if err := send(runCtx, batchOf(`{"id": 0}`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(runCtx)
	cancel()
	if err := send(ctx, batchOf(`{"id": 1}`)); err == nil {
		t.Fatal("a cancelled send must not be acknowledged")
	}
	// The nacked batch may be in a retry loop: give shutdown a short deadline.
	stopCtx, stopCancel := context.WithTimeout(runCtx, 3*time.Second)
	defer stopCancel()
	_ = s.Stop(stopCtx)
	stop() // ends Run, so the output has closed its catalog before the temp dir goes
	<-done
}

// libfloe owns validation: `floe lint` (the spec's lint rule) and start-up (newOutput)
// print libfloe's lines, the same ones, for unsupported fields, wrong types and values
// that cannot work; and a valid config passes both.
func TestLintAndStartUpPrintLibfloesSameProblems(t *testing.T) {
	cases := map[string]struct{ extra, want string }{
		"gcs":        {"storage:\n  gcp_cloud_storage:\n    credentials_type: service_account\n", "storage.gcp_cloud_storage.credentials_type: service_account needs credentials_file or credentials_json"},
		"sigv4":      {"catalog:\n  url: http://127.0.0.1:1\n  auth:\n    aws_sigv4:\n      region: us-east-1\n      credentials:\n        id: \"\"\n        secret: s\n", "catalog.auth.aws_sigv4.credentials: id and secret must both be set (leave credentials out to use the environment or ~/.aws/credentials)"},
		"two auths":  {"catalog:\n  url: http://127.0.0.1:1\n  auth:\n    bearer: t\n    aws_sigv4:\n      region: us-east-1\n", "catalog.auth: set one of bearer, oauth2 and aws_sigv4"},
		"azure":      {"storage:\n  azure_blob_storage:\n    container: c\n", `catalog.warehouse: storage.azure_blob_storage.container is "c"`},
		"retries":    {"commit:\n  max_retries: -1\n", "commit.max_retries: invalid value: integer `-1`, expected u32"},
		"snapshots":  {"commit:\n  max_snapshots: 0\n", "commit.max_snapshots must be greater than 0"},
		"zstd":       {"parquet:\n  compression: zstd\n  compression_level: 40\n", "parquet.compression_level 40 is outside zstd's 1..=22"},
		"spec":       {"schema_evolution:\n  partition_spec: (bucket(x, id))\n", `schema_evolution.partition_spec term "bucket(x, id)": bucket count is not a whole number from 1`},
		"url":        {"catalog:\n  url: ftp://x\n", `catalog.url "ftp://x" must start with http://, https:// (REST) or sqlite: (embedded)`},
		"metadata":   {"schema_evolution:\n  require_schema_metadata: true\n", "schema_evolution.require_schema_metadata needs schema_evolution.schema_metadata (the metadata key holding the types)"},
		"bucket":     {"catalog:\n  warehouse: /tmp/wh\nstorage:\n  aws_s3:\n    bucket: lake\n", `catalog.warehouse: storage.aws_s3.bucket is "lake"`},
		"valid":      {"commit:\n  max_snapshot_age: 90m\n", ""},
		"oauth2":     {"catalog:\n  url: http://127.0.0.1:1\n  auth:\n    oauth2:\n      client_id: abc\n", "catalog.auth.oauth2: missing field `client_secret`"},
		"duration":   {"commit:\n  linger: 99999999999999999999h\n", `commit.linger: "99999999999999999999h" is longer than the longest duration (2562047h)`},
		"gzip":       {"parquet:\n  compression: gzip\n  compression_level: 12\n", "parquet.compression_level 12 is outside gzip's 1..=9"},
		"zeros":      {"parquet:\n  compression: \"\"\n  compression_level: 0\n  row_group_size: 0\n  page_size: 0\n  page_row_limit: 0\n", ""},
		"embedded":   {"catalog:\n  url: \"\"\n  auth:\n    bearer: t0ken\n", "catalog.auth.bearer: only a REST catalog uses it"},
		"password":   {"catalog:\n  url: user:hunter2@catalog.example:8181\n", `catalog.url "redacted@catalog.example:8181" must start with`},
		"format":     {"schema_evolution:\n  format_version: 4\n", "schema_evolution.format_version must be 2 or 3 (the Iceberg format of tables floe creates), not 4"},
		"v3 rewrite": {"merge_strategy: copy-on-write\nschema_evolution:\n  format_version: 3\n", ""},
		"v3":         {"merge_strategy: merge-on-read-positional\nschema_evolution:\n  format_version: 3\n", ""},
	}
	linter := service.GlobalEnvironment().NewComponentConfigLinter()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			section := "namespace: a\ntable: ${! meta(\"t\") }\n" + c.extra
			lints, err := linter.LintOutputYAML([]byte("iceberg:\n" + indent(section)))
			if err != nil {
				t.Fatal(err)
			}
			var linted []string
			for _, l := range lints {
				linted = append(linted, l.What)
			}
			conf, err := ConfigSpec().ParseYAML(section, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, startErr := newOutput(conf, service.MockResources())
			if c.want == "" {
				if len(linted) > 0 || startErr != nil {
					t.Fatalf("a valid config must pass: lint %q, start-up %v", linted, startErr)
				}
				return
			}
			if len(linted) != 1 || !strings.HasPrefix(linted[0], c.want) {
				t.Fatalf("lint printed %q, want %q", linted, c.want)
			}
			if startErr == nil || startErr.Error() != linted[0] {
				t.Fatalf("start-up said %v, lint said %q", startErr, linted[0])
			}
		})
	}
}

// The spec's defaults are libfloe's: what the docs show is what libfloe applies.
func TestSpecDefaultsAreLibfloes(t *testing.T) {
	got := libfloeJSON(t, "namespace: a\ntable: b\n")
	want, _ := floe.ConfigDefaults()
	for _, section := range []string{fCommit, fJSON} {
		g, _ := json.Marshal(got[section])
		w, _ := json.Marshal(want[section])
		if string(g) != string(w) {
			t.Fatalf("%s: the spec gives %s, libfloe's defaults are %s", section, g, w)
		}
	}
	// Optional sections stay out unless written (the host fills a section that has a
	// field with a declared default).
	catalog, _ := got[fCatalog].(map[string]any)
	if _, ok := catalog["auth"]; ok {
		t.Fatalf("catalog.auth appeared unasked: %v", got)
	}
	storage, _ := got[fStorage].(map[string]any)
	if _, ok := storage["aws_s3"]; ok {
		t.Fatalf("storage.aws_s3 appeared unasked: %v", got)
	}
	if got[fCaseSensitive] != want[fCaseSensitive] || got["schema_evolution"].(map[string]any)["unknown_fields"] != "error" {
		t.Fatalf("top-level defaults differ: %v", got)
	}
}

func indent(text string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(text, "\n"), "\n", "\n  ") + "\n"
}

func TestConfigMapsToRust(t *testing.T) {
	conf, err := ConfigSpec().ParseYAML(`
catalog:
  url: http://127.0.0.1:8181
  warehouse: wh
  auth:
    bearer: SECRET
namespace: a.b
table: ${! meta("t") }
storage:
  aws_s3:
    bucket: bk
    endpoint: http://127.0.0.1:8333
    force_path_style_urls: true
    credentials: {id: k, secret: s}
parquet:
  compression: zstd
  compression_level: 3
schema_evolution:
  unknown_fields: ignore
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := checkedConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.Unmarshal(raw, &got)
	if got["namespace"] != "a.b" || got["table"] != nil {
		t.Fatalf("static namespace must pass, interpolated table must not: %s", raw)
	}
	escaped, _ := ConfigSpec().ParseYAML("namespace: a\ntable: 'x${{!y}}'\n", nil)
	if raw, err := checkedConfig(escaped); err != nil || !strings.Contains(string(raw), `"table":"x${!y}"`) {
		t.Fatalf("a static table is passed with its escapes resolved: %s %v", raw, err)
	}
	if got["namespace"] != "a.b" || got["table"] != nil {
		t.Fatalf("static namespace must pass, interpolated table must not: %s", raw)
	}
	s3 := got["storage"].(map[string]any)["aws_s3"].(map[string]any)
	if s3["force_path_style_urls"] != true || s3["endpoint"] != "http://127.0.0.1:8333" {
		t.Fatalf("storage not mapped: %s", raw)
	}
	if got["parquet"].(map[string]any)["compression_level"] != float64(3) {
		t.Fatalf("parquet not mapped: %s", raw)
	}
	if got["schema_evolution"].(map[string]any)["unknown_fields"] != "ignore" {
		t.Fatalf("schema_evolution.unknown_fields not mapped: %s", raw)
	}
}

func TestCommitSectionMapsToRust(t *testing.T) {
	conf, err := ConfigSpec().ParseYAML(`
namespace: a
table: t
max_in_flight: 6
commit:
  max_snapshot_age: 90m
  linger: 15ms
  manifest_merge_enabled: false
  exactly_once:
    writer_id: w1
    source: '${! meta("kafka_partition") }'
    offset: '${! meta("kafka_offset") }'
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := checkedConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Commit      map[string]any `json:"commit"`
		MaxInFlight int            `json:"max_in_flight"`
	}
	_ = json.Unmarshal(raw, &got)
	if got.MaxInFlight != 6 {
		t.Fatalf("max_in_flight must reach libfloe (group commit waits for that many calls): %s", raw)
	}
	c := got.Commit
	if c["max_snapshot_age"] != "90m" || c["linger"] != "15ms" || c["manifest_merge_enabled"] != false ||
		c["cleanup_on_failure"] != true || c["max_retries"] != float64(3) {
		t.Fatalf("commit not mapped: %s", raw)
	}
	if eo := c["exactly_once"].(map[string]any); eo["writer_id"] != "w1" || len(eo) != 1 {
		t.Fatalf("exactly_once must carry only the writer id (positions travel per message): %s", raw)
	}
	bad, _ := ConfigSpec().ParseYAML(`
namespace: a
table: t
commit:
  exactly_once: {writer_id: " ", source: x, offset: "1"}
`, nil)
	if _, err := checkedConfig(bad); err == nil || !strings.Contains(err.Error(), "writer_id") {
		t.Fatalf("want an empty writer_id refused, got %v", err)
	}
}

// Only a message's own fault (StatusData) may reach a fallback output; every other
// failure is retried, for exactly the messages that failed.
func TestOnlyDataFailuresAreTheMessagesFault(t *testing.T) {
	if !atFault(&floe.Error{Status: floe.StatusData}) {
		t.Fatal("a conversion failure is the message's fault")
	}
	for _, st := range []floe.Status{floe.StatusUnavailable, floe.StatusConflict, floe.StatusCommitStateUnknown, floe.StatusRejected, floe.StatusNotFound, floe.StatusInternal} {
		if atFault(&floe.Error{Status: st}) {
			t.Fatalf("status %d must be retried, not dead-lettered", st)
		}
		if !retryWhole(&floe.Error{Status: st}) {
			t.Fatalf("a whole-call status %d must be retried by the host", st)
		}
	}
	if retryWhole(&floe.Error{Status: floe.StatusCancelled}) || retryWhole(errors.New("not from libfloe")) {
		t.Fatal("cancellation and foreign errors are not retried as outages")
	}
	b := floe.Batch{
		Messages: [][]byte{[]byte("a"), []byte("b"), []byte("c")},
		Tables:   []string{"t0", "t1", "t2"},
		Sources:  []string{"s", "s", "s"},
		Offsets:  []int64{10, 11, 12},
	}
	sub := subset(b, []int{0, 2})
	if string(sub.Messages[1]) != "c" || sub.Tables[1] != "t2" || sub.Offsets[1] != 12 || sub.Namespaces != nil {
		t.Fatalf("subset: %+v", sub)
	}
}

func TestCountOnlyBatchPolicyGetsAPeriod(t *testing.T) {
	log := service.MockResources().Logger()
	p := guardBatchPolicy(service.BatchPolicy{Count: 500}, log)
	if p.Period != partialBatchFlush {
		t.Fatalf("period %q", p.Period)
	}
	p = guardBatchPolicy(service.BatchPolicy{Count: 500, Period: "5s"}, log)
	if p.Period != "5s" {
		t.Fatalf("a chosen period is kept, got %q", p.Period)
	}
	// A period that never fires is none; a byte size alone needs one too.
	for _, bp := range []service.BatchPolicy{{Count: 5, Period: "0s"}, {Count: 5, Period: "-1s"}, {ByteSize: 1 << 20}} {
		if p := guardBatchPolicy(bp, log); p.Period != partialBatchFlush {
			t.Fatalf("%+v: period %q", bp, p.Period)
		}
	}
	if p := guardBatchPolicy(service.BatchPolicy{Period: "-1s"}, log); p.Period != "" {
		t.Fatalf("a negative period alone is no batching, got %q", p.Period)
	}
	if d := backoffAfter(1); d != 250*time.Millisecond {
		t.Fatalf("first backoff %v", d)
	}
	if d := backoffAfter(50); d != 10*time.Second {
		t.Fatalf("backoff is capped: %v", d)
	}
}

// Explicit types per message: metadata merged under the mapping's result, a missing
// key refused when required, a `null` metadata value refused (it crashed the merge),
// and retried subsets keep their types.
func TestTypesFromMetadataAndMapping(t *testing.T) {
	out := outputFor(t, `
namespace: a
table: b
schema_evolution:
  enabled: true
  schema_metadata: types
  require_schema_metadata: true
  new_column_type_mapping: 'root = {"ts": "timestamptz"}'
`)
	msg := func(meta string, set bool) *service.Message {
		m := service.NewMessage([]byte(`{"ts": "2026-12-01T00:00:00Z"}`))
		if set {
			m.MetaSetMut("types", meta)
		}
		return m
	}
	failures := make([]error, 3)
	got := out.types(service.MessageBatch{
		msg(`{"price": "decimal(10, 2)", "ts": "string"}`, true),
		msg("", false),
		msg("null", true),
	}, failures)
	var merged map[string]string
	if err := json.Unmarshal(got[0], &merged); err != nil || merged["price"] != "decimal(10, 2)" || merged["ts"] != "timestamptz" {
		t.Fatalf("the mapping wins over the metadata: %s", got[0])
	}
	if failures[1] == nil || !strings.HasPrefix(failures[1].Error(), "message 1: no schema metadata") || failures[0] != nil {
		t.Fatalf("a missing key must fail its message alone, saying why: %v", failures)
	}
	if string(got[2]) != "null" {
		t.Fatalf("a null metadata value must reach libfloe as given (refused there): %s", got[2])
	}
	full := floe.Batch{Messages: [][]byte{[]byte("{}"), []byte("{}")}, Types: [][]byte{[]byte("a"), []byte("b")}}
	if s := subset(full, []int{1}); len(s.Types) != 1 || string(s.Types[0]) != "b" {
		t.Fatalf("a retried subset keeps its types: %q", s.Types)
	}
	bad, _ := ConfigSpec().ParseYAML("namespace: a\ntable: b\nschema_evolution: {require_schema_metadata: true}\n", nil)
	if _, err := newOutput(bad, service.MockResources()); err == nil || !strings.Contains(err.Error(), "schema_metadata") {
		t.Fatalf("require_schema_metadata without a key must be refused: %v", err)
	}
}

// catalog.name is libfloe's embedded-catalog name: the binary's spec declared no such
// field, so `floe lint` and start-up refused a setting libfloe takes.
func TestEmbeddedCatalogNameReachesLibfloe(t *testing.T) {
	got := libfloeJSON(t, "catalog: {name: lake, warehouse: /tmp/x}\nnamespace: a\ntable: b\n")
	if got["catalog"].(map[string]any)["name"] != "lake" {
		t.Fatalf("catalog.name not passed on: %v", got)
	}
}

// An empty namespace or table (e.g. an unset `${NS:}`) is a config problem for lint and
// start-up alike: every message failed with "no namespace".
func TestAnEmptyNamespaceOrTableIsRefused(t *testing.T) {
	for _, yaml := range []string{"namespace: ''\ntable: b\n", "namespace: a\ntable: '  '\n", "table: b\n"} {
		conf, err := ConfigSpec().ParseYAML(yaml, nil)
		if err != nil {
			continue // the spec itself refuses it
		}
		if _, err := checkedConfig(conf); err == nil || !strings.Contains(err.Error(), "is empty") {
			t.Fatalf("%q: %v", yaml, err)
		}
		section, _ := conf.FieldAny()
		if problems := configProblems(section.(map[string]any), 0); len(problems) == 0 {
			t.Fatalf("%q: lint saw no problem", yaml)
		}
	}
	conf, _ := ConfigSpec().ParseYAML("namespace: a\ntable: '${! meta(\"t\") }'\n", nil)
	if _, err := checkedConfig(conf); err != nil {
		t.Fatalf("an interpolated table is fine: %v", err)
	}
}

// With case_sensitive_columns: false the mapping's path wins over the metadata's in any
// case (the metadata's `f_at` won over the mapping's `F_AT`); a mapping that gives no
// object fails its message, saying so.
func TestMappedTypesWinInAnyCaseAndBadMappingsSayWhy(t *testing.T) {
	out := outputFor(t, `
namespace: a
table: b
case_sensitive_columns: false
schema_evolution:
  enabled: true
  schema_metadata: types
  new_column_type_mapping: 'root = if this.bad == true { "x" } else { {"F_AT": "timestamptz"} }'
`)
	good := service.NewMessage([]byte(`{"f_at": 1}`))
	good.MetaSetMut("types", `{"f_at": "string"}`)
	bad := service.NewMessage([]byte(`{"bad": true}`))
	failures := make([]error, 2)
	got := out.types(service.MessageBatch{good, bad}, failures)
	var merged map[string]string
	if err := json.Unmarshal(got[0], &merged); err != nil || len(merged) != 1 || merged["F_AT"] != "timestamptz" {
		t.Fatalf("the mapping's F_AT must replace the metadata's f_at: %s", got[0])
	}
	if failures[1] == nil || !strings.Contains(failures[1].Error(), "must give an object") {
		t.Fatalf("a mapping giving a string must say so: %v", failures[1])
	}
}

// libfloeJSON is the config libfloe gets for an output section given as YAML.
func libfloeJSON(t *testing.T, yaml string) map[string]any {
	t.Helper()
	conf, err := ConfigSpec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := checkedConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// outputFor is the output a YAML section makes, which must start.
func outputFor(t *testing.T, yaml string) *output {
	t.Helper()
	conf, err := ConfigSpec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := newOutput(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	return out
}
