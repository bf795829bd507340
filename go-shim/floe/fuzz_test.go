package floe

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
)

// fuzzDir is the temporary folder of fuzzWriter's catalog, once it is opened.
var fuzzDir string

// fuzzWriter is one writer per fuzzing process (opening one per input would spend the
// run on table creation), on an embedded catalog in a temporary folder (removed by
// TestMain). Tables are created on first use and evolve as random keys arrive.
var fuzzWriter = sync.OnceValues(func() (*Writer, error) {
	dir, err := os.MkdirTemp("", "floe-fuzz-")
	if err != nil {
		return nil, err
	}
	fuzzDir = dir
	cfg, _ := json.Marshal(map[string]any{
		"catalog":   map[string]any{"warehouse": dir},
		"namespace": "fuzz",
		"table":     "t",
		"schema_evolution": map[string]any{
			"enabled": true,
			"schema": map[string]any{"type": "struct", "schema-id": 0, "fields": []any{
				map[string]any{"id": 1, "name": "id", "required": false, "type": "long"},
				map[string]any{"id": 2, "name": "s", "required": false, "type": "string"},
				map[string]any{"id": 3, "name": "l", "required": false, "type": map[string]any{
					"type": "list", "element-id": 4, "element": "double", "element-required": false}},
			}},
		},
	})
	return Open(cfg)
})

// TestMain closes the fuzzing writer and removes its folder once the package's tests
// ran, so repeated runs leave nothing behind in the temporary directory.
func TestMain(m *testing.M) {
	code := m.Run()
	if fuzzDir != "" {
		if w, err := fuzzWriter(); err == nil {
			w.Close()
		}
		os.RemoveAll(fuzzDir)
	}
	os.Exit(code)
}

// tableChoices are what a message's table entry may be: the config's table, another
// valid one, names the catalog must refuse, and bytes that are not UTF-8.
var tableChoices = []string{"", "", "other", "bad.name", " ", "\xff\xfe"}

// FuzzWritePacking sends random batches through the binding's packing into libfloe:
// messages are the input split at 0x1e, each given a table and maybe explicit types
// chosen by the layout bytes. Whatever the bytes, the call must succeed and account
// for every message: committed as one row, or failed through its own fault
// (StatusData), never anything else.
func FuzzWritePacking(f *testing.F) {
	f.Add([]byte(`{"id": 1, "s": "a"}`+"\x1e"+`{"id": "2"}`+"\x1e"+`[1]`), []byte{0, 2, 3})
	f.Add([]byte(`{"l": [1.5, null, "NaN"]}`+"\x1e\x1e"+`{"s": "\ud800"}`), []byte{1, 4, 5, 9})
	f.Add([]byte("\x1e\x1e\x1e"), []byte{})
	f.Add([]byte(`{"id": 99999999999999999999}`+"\x1e"+`{"s": 1}`), []byte{7, 7})
	f.Fuzz(func(t *testing.T, data []byte, layout []byte) {
		w, err := fuzzWriter()
		if err != nil {
			t.Fatal(err)
		}
		messages := bytes.Split(data, []byte{0x1e})
		if len(messages) > 64 {
			messages = messages[:64]
		}
		b := Batch{Messages: messages}
		if len(layout) > 0 {
			b.Tables = make([]string, len(messages))
			b.Types = make([][]byte, len(messages))
			for i := range messages {
				choice := layout[i%len(layout)]
				b.Tables[i] = tableChoices[int(choice)%len(tableChoices)]
				if choice&0x40 != 0 {
					b.Types[i] = []byte(`{"id": "long"}`)
				}
				if choice&0x80 != 0 {
					b.Types[i] = layout
				}
			}
		}
		res, err := w.Write(context.Background(), b)
		if err != nil {
			t.Fatalf("the call failed for %d messages: %v", len(messages), err)
		}
		if len(res.Failures) != len(messages) {
			t.Fatalf("%d outcomes for %d messages", len(res.Failures), len(messages))
		}
		failed := 0
		for i, e := range res.Failures {
			if e == nil {
				continue
			}
			failed++
			var fe *Error
			if !asFloeError(e, &fe) || fe.Status != StatusData {
				t.Fatalf("message %d (%q) failed with %v, not through its own fault", i, messages[i], e)
			}
		}
		if failed != res.FailedCount || res.Rows != len(messages)-failed {
			t.Fatalf("%d messages: %d rows committed, %d failed (count %d)", len(messages), res.Rows, failed, res.FailedCount)
		}
	})
}

func asFloeError(err error, target **Error) bool {
	fe, ok := err.(*Error)
	if ok {
		*target = fe
	}
	return ok
}
