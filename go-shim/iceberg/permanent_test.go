package iceberg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/go-shim/floe"
	"github.com/redpanda-data/benthos/v4/public/service"
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

func TestAMissingTableIsGivenUpOnOnlyWithoutEvolutionAndNothingUnderRetry(t *testing.T) {
	missing := &floe.Error{Status: floe.StatusNotFound, Message: "table t does not exist"}
	refused := &floe.Error{Status: floe.StatusRejected, Message: "401"}
	for _, c := range []struct {
		mode    string
		evolves bool
		err     error
		want    bool
	}{
		{permanentFail, false, missing, true},
		{permanentFail, true, missing, false},
		{permanentStop, true, refused, true},
		{permanentRetry, false, refused, false},
		{permanentFail, false, &floe.Error{Status: floe.StatusUnavailable, Message: "503"}, false},
	} {
		o := &output{permanent: c.mode, evolves: c.evolves}
		if got := o.givesUp(c.err); got != c.want {
			t.Errorf("%s, evolution %v, %v: gives up %v, want %v", c.mode, c.evolves, c.err, got, c.want)
		}
	}
}

func TestUnderFailOnlyThePermanentFailuresAndThoseHeldBackBehindThemSettle(t *testing.T) {
	o := &output{permanent: permanentFail}
	failures := []error{
		nil,
		&floe.Error{Status: floe.StatusConfig, Message: "message 1: row_operation upsert cannot use the table's key"},
		&floe.Error{Status: floe.StatusUnavailable, Message: "message 2: held back behind an earlier message"},
		&floe.Error{Status: floe.StatusUnavailable, Message: "table u: 503 Service Unavailable"},
	}
	settled := make([]bool, len(failures))
	if cause := o.permanentAmong(failures, settled); cause != failures[1] {
		t.Fatalf("cause %v, want the config error", cause)
	}
	for i, f := range failures {
		settled[i] = f != nil && (o.givesUp(f) || heldBack(f))
	}
	if want := []bool{false, true, true, false}; fmt.Sprint(settled) != fmt.Sprint(want) {
		t.Fatalf("settled %v, want %v: the other table's outage is retried, not failed", settled, want)
	}
	if o.permanentAmong(failures, settled) != nil {
		t.Fatal("a settled failure was given up on again")
	}
}

// A catalog that cannot be reached when the output connects: Connect reports success
// (Benthos would otherwise retry it once a second, logging each time, and hand over no
// batch), the write call ends unwritten for the host to retry, and what is left when
// the output closes is counted and makes the exit non-zero.
func TestAnUnreachableCatalogLeavesTheBatchesUnwrittenAndCountsThem(t *testing.T) {
	t.Cleanup(func() { hostExit.Store(0) })
	out := outputFor(t, "catalog: {url: \"http://127.0.0.1:1\"}\nnamespace: p\ntable: t\n")
	ctx := context.Background()
	if err := out.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if err := out.WriteBatch(ctx, batchOf(`{"id": 1}`, `{"id": 2}`)); !errors.Is(err, service.ErrNotConnected) {
		t.Fatalf("write: %v, want ErrNotConnected", err)
	}
	if err := out.Connect(ctx); err != nil {
		t.Fatalf("Connect again: %v", err)
	}
	if out.outage.failures != 2 || out.outage.backoff() == 0 {
		t.Fatalf("each Connect counts the outage (%d) and backs off (%s)", out.outage.failures, out.outage.backoff())
	}
	if err := out.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ExitCode() != 1 || out.pending.messages() != 2 {
		t.Fatalf("exit code %d, %d messages unwritten; want 1 and 2", ExitCode(), out.pending.messages())
	}
}

// Each failed message is logged with its index, its reason and the start of its
// payload, at most messageLogBurst lines per window; the rest are counted in the next
// line.
func TestFailedMessagesAreLoggedWithIndexReasonAndPreviewRateLimited(t *testing.T) {
	var out bytes.Buffer
	log := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(&out, nil)))
	var l messageLog
	for i := range messageLogBurst + 5 {
		l.failed(log, i, 100, fmt.Errorf("message %d: field `id`: expected a long", i), []byte(fmt.Sprintf(`{"id": "x%d"}`, i)))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != messageLogBurst {
		t.Fatalf("%d lines logged, want %d:\n%s", len(lines), messageLogBurst, out.String())
	}
	if want := `not written: message 3: field ` + "`id`" + `: expected a long (of 100 messages; payload: \"{\\\"id\\\": \\\"x3\\\"}\")`; !strings.Contains(lines[3], want) {
		t.Fatalf("line %q lacks %q", lines[3], want)
	}
	l.failed(log, 1, 2, errors.New("a reason of the host's"), []byte("p"))
	if strings.Count(out.String(), "\n") != messageLogBurst {
		t.Fatal("a line past the burst was logged within the window")
	}
	// The next window's first line counts those held back.
	l.window = l.window.Add(-2 * messageLogWindow)
	l.failed(log, 1, 2, errors.New("a reason of the host's"), []byte("p"))
	if tail := out.String()[strings.LastIndex(strings.TrimSpace(out.String()), "\n"):]; !strings.Contains(tail, "message 1 of 2 not written: a reason of the host's") {
		t.Fatalf("last line %q", tail)
	}
	if !strings.Contains(out.String(), "6 more messages failed in the last 10s") {
		t.Fatalf("held-back lines not counted:\n%s", out.String())
	}
}

// An error repeated by every retry is one line, again when its cause changes or 30 s
// later, not one per batch.
func TestRepeatedIdenticalErrorsAreOneLinePerCause(t *testing.T) {
	var out bytes.Buffer
	log := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(&out, nil)))
	var o outage
	down := &floe.Error{Status: floe.StatusUnavailable, Message: "catalog unreachable"}
	for range 50 {
		o.failed(down, log)
	}
	o.failed(&floe.Error{Status: floe.StatusRejected, Message: "403"}, log)
	o.failed(down, log)
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Fatalf("%d lines for 52 failures of two causes, want 3:\n%s", n, out.String())
	}
	o.lastLog = o.lastLog.Add(-31 * time.Second)
	o.failed(down, log)
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Fatalf("the cause is logged again after 30 s: %d lines", n)
	}
	if o.failures != 53 || o.backoff() != 10*time.Second {
		t.Fatalf("failures %d, backoff %s", o.failures, o.backoff())
	}
}
