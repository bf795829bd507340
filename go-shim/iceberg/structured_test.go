package iceberg

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// hostJSON is what the host's encoder writes for v (Benthos: encoding/json, HTML
// escaping off, no trailing newline); nil when it refuses v.
func hostJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func decodeNumbers(t *testing.T, text []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, text)
	}
	return v
}

// pieces of the strings the generator builds: ASCII, every escape, HTML characters,
// multi-byte UTF-8, JavaScript line terminators, and bytes that are not UTF-8.
var stringPieces = []string{
	"a", "Z", "0", " ", "session-", "\"", "\\", "/", "\n", "\r", "\t", "\b", "\f", "\x00",
	"\x01", "\x1f", "\x7f", "<", ">", "&", "é", "ß", "日本", "😀", "\u2028", "\u2029",
	"\ufffd", "\xff", "\xc3", "\xe2\x82", "\xed\xa0\x80",
}

func randomString(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(8) {
		b.WriteString(stringPieces[r.IntN(len(stringPieces))])
	}
	return b.String()
}

var floatEdges = []float64{
	0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 123456789.125,
	math.MaxFloat64, math.SmallestNonzeroFloat64, -math.MaxFloat64, 5e-324, 1.5e300,
}

// randomValue builds a value of the types Bloblang produces, nested up to depth.
func randomValue(r *rand.Rand, depth int) any {
	kinds := 12
	if depth == 0 {
		kinds = 10
	}
	switch r.IntN(kinds) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return int64(r.Uint64())
	case 3:
		if r.IntN(3) == 0 {
			return floatEdges[r.IntN(len(floatEdges))]
		}
		return math.Float64frombits(r.Uint64()&^(0x7FF<<52)) * math.Pow(10, float64(r.IntN(40)-20))
	case 4:
		return json.Number([]string{"0", "-1", "12345678901234567890123", "1.5e300", "-0.25", "1E+2"}[r.IntN(6)])
	case 5:
		return randomString(r)
	case 6:
		return time.Unix(r.Int64N(253402300799), r.Int64N(1e9)).In(time.FixedZone("", (r.IntN(48)-24)*1800))
	case 7:
		return uint64(r.Uint64())
	case 8:
		return float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30)))
	case 9:
		b := make([]byte, r.IntN(6))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	case 10:
		a := make([]any, r.IntN(4))
		for i := range a {
			a[i] = randomValue(r, depth-1)
		}
		return a
	default:
		m := map[string]any{}
		for range r.IntN(4) {
			m[randomString(r)] = randomValue(r, depth-1)
		}
		return m
	}
}

// hasManyKeys reports whether v holds a map of more than one key, whose key order the
// host sorts and this encoder keeps.
func hasManyKeys(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		if len(t) > 1 {
			return true
		}
		for _, e := range t {
			if hasManyKeys(e) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if hasManyKeys(e) {
				return true
			}
		}
	}
	return false
}

// Property: for random values of every type Bloblang produces, the encoder writes JSON
// that decodes to exactly what the host's encoding decodes to (numbers compared as
// text), and the same bytes wherever key order cannot differ.
func TestStructuredEncodingMatchesTheHost(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sameBytes := 0
	for i := range 20000 {
		v := randomValue(r, 4)
		ours, ok := appendJSON(nil, v, 0)
		host := hostJSON(v)
		if !ok {
			t.Fatalf("value %d (%#v) refused; the host writes %s", i, v, host)
		}
		if host == nil {
			t.Fatalf("value %d (%#v): the host refuses it, floe wrote %s", i, v, ours)
		}
		if !reflect.DeepEqual(decodeNumbers(t, ours), decodeNumbers(t, host)) {
			t.Fatalf("value %d differs:\nfloe: %s\nhost: %s", i, ours, host)
		}
		if !hasManyKeys(v) {
			sameBytes++
			if !bytes.Equal(ours, host) {
				t.Fatalf("value %d: bytes differ:\nfloe: %q\nhost: %q", i, ours, host)
			}
		}
	}
	if sameBytes < 5000 {
		t.Fatalf("only %d values were compared byte for byte", sameBytes)
	}
}

// Values JSON cannot hold, and types Bloblang does not produce, go to the host's
// encoder (which writes them, or refuses them as before).
func TestStructuredEncodingRefusesWhatItDoesNotKnow(t *testing.T) {
	for name, v := range map[string]any{
		"NaN":           math.NaN(),
		"Inf":           math.Inf(-1),
		"nested NaN":    map[string]any{"a": []any{1.0, math.NaN()}},
		"bad number":    json.Number("1.2.3"),
		"leading zero":  json.Number("01"),
		"year 10000":    time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		"string map":    map[string]string{"a": "b"},
		"string slice":  []string{"a"},
		"struct":        struct{ A int }{1},
		"too deep":      deepValue(maxEncodeDepth + 2),
		"pointer":       new(int),
		"nested struct": map[string]any{"a": struct{}{}},
	} {
		if out, ok := appendJSON(nil, v, 0); ok {
			t.Errorf("%s: want it left to the host, got %s", name, out)
		}
	}
	if out, ok := appendJSON(nil, json.Number(""), 0); !ok || string(out) != "0" {
		t.Errorf("an empty json.Number is 0, as the host writes it: %s", out)
	}
}

// A zone offset of 24 hours or more is refused by the host's encoder (RFC 3339 cannot
// say it): this encoder leaves it to the host too, so the message fails as before.
func TestTimeZonesOutsideRFC3339GoToTheHost(t *testing.T) {
	for _, hours := range []int{24, -24, 30} {
		v := time.Date(2020, 1, 1, 0, 0, 0, 0, time.FixedZone("", hours*3600))
		if out, ok := appendJSON(nil, v, 0); ok {
			t.Errorf("offset %dh: want it left to the host (which refuses it), got %s", hours, out)
		}
	}
	edge := time.Date(2020, 1, 1, 0, 0, 0, 0, time.FixedZone("", 23*3600+59*60))
	if out, ok := appendJSON(nil, edge, 0); !ok || string(out) != string(hostJSON(edge)) {
		t.Errorf("+23:59 is written as the host writes it: %s", out)
	}
}

// The buffer guess comes from earlier batches: one huge message before a large batch
// of small ones must not make the next batch reserve gigabytes (it crashed the process).
func TestPayloadBufferGuessIsBounded(t *testing.T) {
	batch := service.MessageBatch{}
	for i := range 3 {
		m := service.NewMessage(nil)
		m.SetStructured(map[string]any{"id": int64(i)})
		batch = append(batch, m)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	failures := make([]error, len(batch))
	got := encodePayloads(batch, 1<<34, failures)
	runtime.ReadMemStats(&after)
	if failures[2] != nil || len(got) != 3 || string(got[2]) != `{"id":2}` {
		t.Fatalf("got %q, %v", got, failures)
	}
	if reserved := after.TotalAlloc - before.TotalAlloc; reserved > 2*maxPayloadBuffer {
		t.Fatalf("reserved %d bytes for a 3-message batch", reserved)
	}
}

func deepValue(depth int) any {
	var v any = "leaf"
	for range depth {
		v = []any{v}
	}
	return v
}

// The batch's payloads: structured-only messages are encoded here, messages with bytes
// keep them, and a value the encoder refuses gets the host's bytes.
func TestPayloadsEncodeStructuredMessages(t *testing.T) {
	structured := service.NewMessage(nil)
	structured.SetStructured(map[string]any{"id": int64(7), "s": "<é>"})
	raw := service.NewMessage([]byte(`{"id": 8}`))
	odd := service.NewMessage(nil)
	odd.SetStructured(map[string]any{"tags": []string{"x"}})
	failures := make([]error, 3)
	got := encodePayloads(service.MessageBatch{structured, raw, odd}, 0, failures)
	if failures[0] != nil || failures[1] != nil || failures[2] != nil {
		t.Fatal(failures)
	}
	want := []string{`{"id":7,"s":"<é>"}`, `{"id": 8}`, `{"tags":["x"]}`}
	for i := range want {
		if !reflect.DeepEqual(decodeNumbers(t, got[i]), decodeNumbers(t, []byte(want[i]))) {
			t.Errorf("message %d: got %s, want %s", i, got[i], want[i])
		}
	}
	if structured.HasBytes() {
		t.Errorf("the host's encoder ran for a message floe encodes")
	}
}

// FuzzAppendString: any string, valid UTF-8 or not, decodes to what the host's
// encoding decodes to, with the same bytes.
func FuzzAppendString(f *testing.F) {
	for _, s := range stringPieces {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ours := appendString(nil, s)
		if host := hostJSON(s); !bytes.Equal(ours, host) {
			t.Fatalf("floe %q, host %q", ours, host)
		}
	})
}

// eventValue is the sweep's event (bench-configs/events.yaml) as a Bloblang mapping
// builds it.
func eventValue(i int64) map[string]any {
	return map[string]any{
		"id":         i,
		"user_id":    i % 10000,
		"event_type": []string{"click", "view", "purchase", "signup", "logout"}[i%5],
		"value":      float64(i%1000) / 10,
		"info":       "session-" + strconv.FormatInt(i%977, 10) + "-abcdefghijklmnopqrstuvwxyz0123",
		"ts":         "2026-12-01T05:41:20.123456Z",
	}
}

// Encoding the sweep's events: floe's encoder against the host's.
//
//	go test ./iceberg -run XXX -bench Encode
func BenchmarkEncodeEvents(b *testing.B) {
	events := make([]any, 1000)
	for i := range events {
		events[i] = eventValue(int64(i))
	}
	b.Run("floe", func(b *testing.B) {
		var buf []byte
		for range b.N {
			buf = buf[:0]
			for _, e := range events {
				buf, _ = appendJSON(buf, e, 0)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/row")
	})
	b.Run("host", func(b *testing.B) {
		for range b.N {
			for _, e := range events {
				_ = hostJSON(e)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/row")
	})
}
