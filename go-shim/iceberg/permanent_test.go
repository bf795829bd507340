package iceberg

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/floe-dev/floe/go-shim/floe"
)

func TestPermanentErrorsAreTheOnesARetryCannotCure(t *testing.T) {
	cases := map[floe.Status]bool{
		floe.StatusConfig: true, floe.StatusNotFound: true, floe.StatusRejected: true,
		floe.StatusUnavailable: false, floe.StatusConflict: false, floe.StatusCommitStateUnknown: false,
		floe.StatusData: false, floe.StatusCancelled: false, floe.StatusInternal: false,
	}
	for status, want := range cases {
		err := fmt.Errorf("table t: %w", &floe.Error{Status: status, Message: "x"})
		if got := isPermanent(err); got != want {
			t.Errorf("status %d: permanent %v, want %v", status, got, want)
		}
	}
	if isPermanent(errors.New("not libfloe's")) {
		t.Error("an error that is not libfloe's counted as permanent")
	}
}

func TestAPreviewIsOneLineCutAtACharacter(t *testing.T) {
	if got := preview([]byte("{\"a\":\n1}")); got != `"{\"a\":\n1}"` {
		t.Errorf("short payload: %s", got)
	}
	long := []byte(strings.Repeat("é", 100)) // 200 bytes
	got := preview(long)
	if !strings.HasSuffix(got, "… (200 bytes)") || strings.Contains(got, `\x`) {
		t.Errorf("long payload: %s", got)
	}
	if strings.Count(got, "é") != previewBytes/2 {
		t.Errorf("cut at %d characters, want %d: %s", strings.Count(got, "é"), previewBytes/2, got)
	}
}
