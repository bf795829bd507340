package iceberg

import (
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The direct read of one metadata value must give what the interpolation gives, for
// every kind of value a message may carry (and none).
func TestRowOperationReadsMetadataAsTheInterpolationDoes(t *testing.T) {
	texts := []string{`${! meta("op") }`, `${!meta("op")}`, `${! @op }`, `${!@op}`}
	values := []any{"upsert", " Delete ", "", 5, 2.5, true, nil, map[string]any{"a": 1}}
	for _, text := range texts {
		interpolated, err := service.NewInterpolatedString(text)
		if err != nil {
			t.Fatal(err)
		}
		op := newRowOperation(text, interpolated)
		if op.metaKey != "op" {
			t.Fatalf("%s: read through the interpolation, not directly", text)
		}
		for _, value := range values {
			m := service.NewMessage([]byte(`{"id":1}`))
			if value != nil {
				m.MetaSetMut("op", value)
			}
			want, wantErr := interpolated.TryString(m)
			got, gotErr := op.of(m)
			if got != want || (gotErr == nil) != (wantErr == nil) {
				t.Errorf("%s with %#v: got %q (%v), the interpolation gives %q (%v)", text, value, got, gotErr, want, wantErr)
			}
		}
	}
}

func TestRowOperationInterpolatesAnythingElse(t *testing.T) {
	for _, text := range []string{`${! meta("op").lowercase() }`, `op-${! @op }`, `${! json("op") }`, `upsert`} {
		interpolated, err := service.NewInterpolatedString(text)
		if err != nil {
			t.Fatal(err)
		}
		if op := newRowOperation(text, interpolated); op.metaKey != "" {
			t.Errorf("%s read as metadata %q", text, op.metaKey)
		}
	}
}

func BenchmarkRowOperation(b *testing.B) {
	for _, text := range []string{`${! meta("op") }`, `${! meta("op").string() }`} {
		interpolated, _ := service.NewInterpolatedString(text)
		op := newRowOperation(text, interpolated)
		m := service.NewMessage([]byte(`{"id":1}`))
		m.MetaSet("op", "upsert")
		b.Run(text, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := op.of(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
