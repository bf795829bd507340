package iceberg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/floe-dev/floe/go-shim/floe"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// What the output does with a permanent error: one that the same call meets again
// however often it is retried, until someone changes the config, the table or the
// catalog's grants (a catalog refusing the credentials, a missing table without schema
// evolution, a warehouse folder that cannot be made, a table this config cannot write).
const (
	fPermanent = "permanent_errors"
	// permanentFail fails the call with the error, as every Benthos output does with
	// its errors: a fallback output receives the messages; without one, the input's
	// nack handling applies (most inputs deliver them again) and each failure is logged.
	permanentFail = "fail"
	// permanentStop stops the host with a non-zero exit; nothing unwritten is
	// acknowledged, so an input that re-delivers sends it again after the restart.
	permanentStop = "stop"
	// permanentRetry retries the batch until it commits, as for an outage.
	permanentRetry = "retry"
)

// isPermanent tells whether a libfloe failure will recur on retry: a config error (the
// table does not suit the config), a missing table or namespace, or a request the
// catalog refused (401/403, validation). Outages, conflicts, unknown outcomes and
// storage refusals (vended or rotated credentials cure those) are not.
func isPermanent(err error) bool {
	var fe *floe.Error
	if !errors.As(err, &fe) {
		return false
	}
	switch fe.Status {
	case floe.StatusConfig, floe.StatusNotFound, floe.StatusRejected:
		return true
	}
	return false
}

// hostExit is the exit code the output asks of the host: 1 once a permanent error
// stopped it or messages were left unwritten when it closed.
var hostExit atomic.Int32

// ExitCode is the exit code floe's outputs ask of the host (0: nothing to report). The
// floe binary exits with it when Benthos itself would exit 0.
func ExitCode() int { return int(hostExit.Load()) }

// stopHost asks the host to shut down (Benthos stops its inputs, drains and closes).
// The floe binary sets it to cancel the context the CLI runs in (SetStopHost); other
// hosts get SIGTERM, as on ctrl-C, which kills a host that has not yet set up its
// signal handling.
var stopHost = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) }

// SetStopHost sets how `permanent_errors: stop` stops the host; the floe binary cancels
// the context service.RunCLIToCode runs in, which Benthos takes as a request to stop.
func SetStopHost(stop func()) { stopHost = stop }

var stopOnce sync.Once

// permanentFailure reports a permanent error once per cause (rate-limited), and under
// `permanent_errors: stop` stops the host with exit code 1. Under `fail` it waits a
// little before the call fails (250 ms, doubling to 1 s while the error lasts): an
// input that delivers failed messages again at once (most do) would otherwise spin.
//
// It returns the error the call fails with: err under `fail`, ErrNotConnected under
// `stop`, which the host neither acknowledges nor hands to a fallback output.
func (o *output) permanentFailure(ctx context.Context, err error) error {
	if o.permanent == permanentStop {
		stopOnce.Do(func() {
			hostExit.Store(1)
			o.log.Errorf("iceberg output: stopping the host (permanent_errors: stop): %v", err)
			stopHost()
		})
		return service.ErrNotConnected
	}
	o.outage.say(fmt.Sprintf("iceberg output: batch not written, failing it (permanent_errors: %s; a fallback output receives it): %v", o.permanent, err), err, o.log)
	select {
	case <-time.After(min(o.outage.backoff(), time.Second)):
	case <-ctx.Done():
	}
	return err
}

// openFailed is Connect's answer when libfloe cannot open. Benthos would otherwise retry
// Connect about once a second for ever, logging every attempt, and hand the output no
// batch meanwhile, so a host stopped then exits 0 and counts nothing unwritten. Connect
// therefore reports success, and each write call opens again or ends unwritten
// (ErrNotConnected: the host calls Connect, which waits the outage's backoff, and
// retries the batch): a permanent error fails the calls or stops the host
// (permanentFailure), any other is logged once per cause (outage.say), and what is
// left when the host stops is counted (reportUnwritten).
func (o *output) openFailed(ctx context.Context, err error) error {
	if o.givesUp(err) {
		o.permanentFailure(ctx, err)
		return nil
	}
	o.outage.say(fmt.Sprintf("iceberg output: not connected, retrying it with backoff (batches wait; none is routed to a fallback output): %v", err), err, o.log)
	return nil
}

// pending counts the messages of calls that ended unwritten and have not been written
// since: a call the host will retry (ErrNotConnected) or one cut short by the host
// stopping. The host hands a retried batch over in new message values, so a batch is
// known by its contents; they are hashed only when a call fails, or succeeds while
// some batch is pending. What is left when the output closes was never written.
type pending struct {
	mu      sync.Mutex
	batches map[uint64]int
}

// contentKey identifies a batch by its messages' bytes.
func contentKey(batch service.MessageBatch) uint64 {
	h := fnv.New64a()
	var size [8]byte
	for _, m := range batch {
		b, _ := m.AsBytes()
		binary.LittleEndian.PutUint64(size[:], uint64(len(b)))
		h.Write(size[:])
		h.Write(b)
	}
	return h.Sum64()
}

func (p *pending) unwritten(batch service.MessageBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.batches == nil {
		p.batches = map[uint64]int{}
	}
	p.batches[contentKey(batch)] = len(batch)
}

func (p *pending) answered(batch service.MessageBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.batches) > 0 {
		delete(p.batches, contentKey(batch))
	}
}

func (p *pending) messages() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, size := range p.batches {
		n += size
	}
	return n
}

// finished records how a call ended: answered (committed, or failed to the host, which
// then owns the messages), or unwritten: left for the host's retry, or cut short by the
// host stopping.
func (o *output) finished(batch service.MessageBatch, err error, stopping bool) {
	var batchErr *service.BatchError
	if err != nil && (errors.Is(err, service.ErrNotConnected) || (stopping && !errors.As(err, &batchErr))) {
		o.pending.unwritten(batch)
		return
	}
	o.pending.answered(batch)
}

// reportUnwritten logs, at close, the messages handed to the output and never written,
// and makes the host's exit non-zero.
func (o *output) reportUnwritten() {
	if n := o.pending.messages(); n > 0 {
		hostExit.Store(1)
		o.log.Errorf("iceberg output: %d messages were not written when the output closed (none of them was acknowledged: an input that delivers them again, as most do after a restart, sends them again)", n)
	}
}

// messageLog logs failed messages, each with its index, reason and the start of its
// payload, at most messageLogBurst lines per messageLogWindow; the lines it holds back
// are counted in the next one.
type messageLog struct {
	mu      sync.Mutex
	window  time.Time
	logged  int
	skipped int
}

const (
	messageLogBurst  = 20
	messageLogWindow = 10 * time.Second
	previewBytes     = 120
)

func (l *messageLog) failed(log *service.Logger, i, n int, err error, payload []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.window) > messageLogWindow {
		if l.skipped > 0 {
			log.Errorf("iceberg output: %d more messages failed in the last %s (not logged one by one)", l.skipped, messageLogWindow)
		}
		l.window, l.logged, l.skipped = now, 0, 0
	}
	if l.logged >= messageLogBurst {
		l.skipped++
		return
	}
	l.logged++
	if text := err.Error(); strings.HasPrefix(text, fmt.Sprintf("message %d:", i)) {
		// libfloe's errors name the message already.
		log.Errorf("iceberg output: not written: %s (of %d messages; payload: %s)", text, n, preview(payload))
		return
	}
	log.Errorf("iceberg output: message %d of %d not written: %v (payload: %s)", i, n, err, preview(payload))
}

// preview is the start of a payload on one line: control characters escaped, cut at a
// character boundary.
func preview(payload []byte) string {
	cut := payload
	if len(cut) > previewBytes {
		cut = cut[:previewBytes]
		for len(cut) > 0 && !utf8.Valid(cut) {
			cut = cut[:len(cut)-1]
		}
	}
	text := fmt.Sprintf("%q", cut)
	if len(cut) < len(payload) {
		text += fmt.Sprintf(" … (%d bytes)", len(payload))
	}
	return text
}
