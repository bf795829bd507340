package iceberg

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// A message built by a Bloblang mapping holds a structured value and no bytes. Asking
// the host for its bytes runs encoding/json's reflection-based encoder, which costs
// about as much CPU per row as everything else the host does. The output encodes such
// values itself, without reflection, for the types Bloblang produces; a value holding
// any other type goes through the host's encoder as before.

// maxEncodeDepth bounds the recursion; deeper values go through the host's encoder
// (and libfloe refuses documents deeper than its own limit anyway).
const maxEncodeDepth = 512

// maxPayloadBuffer caps the buffer reserved up front for a batch (the guess comes from
// earlier batches, which may have held one huge message); past it the buffer grows as
// needed.
const maxPayloadBuffer = 64 << 20

// encodePayloads gives each message's JSON, encoding structured-only messages into one
// buffer for the batch. A message with no JSON to give (a structured value neither
// encoder can write) fails alone: failures[i] says why.
func encodePayloads(batch service.MessageBatch, sizeHint int, failures []error) [][]byte {
	out := make([][]byte, len(batch))
	var arena []byte
	for i, m := range batch {
		if m.HasStructured() && !m.HasBytes() {
			if arena == nil {
				arena = make([]byte, 0, min(sizeHint, maxPayloadBuffer))
			}
			v, err := m.AsStructured()
			start := len(arena)
			var ok bool
			if err == nil {
				arena, ok = appendJSON(arena, v, 0)
			}
			if ok {
				// Later appends may move the arena; this slice keeps the bytes it has.
				out[i] = arena[start:len(arena):len(arena)]
				continue
			}
			arena = arena[:start]
		}
		b, err := m.AsBytes()
		if err != nil {
			failures[i] = fmt.Errorf("message %d: no JSON for its structured value: %w", i, err)
			continue
		}
		out[i] = b
	}
	return out
}

// appendJSON appends the JSON text of v, as encoding/json writes it with HTML escaping
// off (Benthos' setting), except that object keys keep map order instead of being
// sorted (JSON objects are unordered; libfloe matches keys by name). ok is false when v
// holds a type this encoder does not handle, or a value JSON cannot hold (NaN, ±Inf, an
// invalid json.Number, a year outside 0–9999): the caller then asks the host.
func appendJSON(dst []byte, v any, depth int) ([]byte, bool) {
	if depth > maxEncodeDepth {
		return dst, false
	}
	switch t := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case string:
		return appendString(dst, t), true
	case map[string]any:
		return appendObject(dst, t, depth)
	case []any:
		return appendArray(dst, t, depth)
	case bool:
		return strconv.AppendBool(dst, t), true
	case int64:
		return strconv.AppendInt(dst, t, 10), true
	case float64:
		return appendFloat(dst, t, 64)
	case json.Number:
		return appendNumber(dst, t)
	case int:
		return strconv.AppendInt(dst, int64(t), 10), true
	case int32:
		return strconv.AppendInt(dst, int64(t), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(t), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(t), 10), true
	case uint64:
		return strconv.AppendUint(dst, t, 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(t), 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(t), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(t), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(t), 10), true
	case float32:
		return appendFloat(dst, float64(t), 32)
	case time.Time:
		return appendTime(dst, t)
	case []byte:
		if t == nil {
			return append(dst, "null"...), true
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, t)
		return append(dst, '"'), true
	}
	return dst, false
}

func appendObject(dst []byte, m map[string]any, depth int) ([]byte, bool) {
	if m == nil {
		return append(dst, "null"...), true
	}
	dst = append(dst, '{')
	first := true
	for k, v := range m {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, k)
		dst = append(dst, ':')
		var ok bool
		if dst, ok = appendJSON(dst, v, depth+1); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

func appendArray(dst []byte, a []any, depth int) ([]byte, bool) {
	if a == nil {
		return append(dst, "null"...), true
	}
	dst = append(dst, '[')
	for i, v := range a {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = appendJSON(dst, v, depth+1); !ok {
			return dst, false
		}
	}
	return append(dst, ']'), true
}

// appendFloat writes the shortest text that reads back as the same float of that
// size: plain notation from 1e-6 up to 1e21, exponent notation outside it (with the
// exponent's leading zero dropped, `1e-7`), as encoding/json does.
func appendFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		small, large := abs < 1e-6, abs >= 1e21
		if bits == 32 {
			small, large = float32(abs) < 1e-6, float32(abs) >= 1e21
		}
		if small || large {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// appendNumber writes a json.Number as its text; "" is 0, as encoding/json writes it.
func appendNumber(dst []byte, n json.Number) ([]byte, bool) {
	if n == "" {
		return append(dst, '0'), true
	}
	if !isJSONNumber(string(n)) {
		return dst, false
	}
	return append(dst, n...), true
}

// isJSONNumber reports whether s is a number by JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	i := 0
	digits := func() int {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// appendTime writes RFC 3339 with nanoseconds, quoted, as time.Time's MarshalJSON.
// Like it, years outside 0–9999 and zone offsets of 24 hours or more (which RFC 3339
// cannot say) are refused.
func appendTime(dst []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return dst, false
	}
	if _, offset := t.Zone(); offset <= -24*3600 || offset >= 24*3600 {
		return dst, false
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), true
}

const hexDigits = "0123456789abcdef"

// appendString writes s quoted: `"` and `\` escaped, control characters as \n, \r, \t,
// \b, \f or \u00XX, invalid UTF-8 as \ufffd, and U+2028 / U+2029 escaped (JavaScript
// line terminators); everything else, '<', '>' and '&' included, as is.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
