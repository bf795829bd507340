package iceberg

import (
	"context"
	"sync"
)

// byteGate bounds the message bytes of the write calls in flight (`max_in_flight_bytes`).
// A call waits at the gate until its bytes fit; while calls wait, the host's
// `max_in_flight` calls fill up and the input stops reading, so memory is bounded by a
// limit rather than by what the input happens to deliver.
//
// Calls pass in arrival order (a large call is not overtaken by small ones for ever),
// and a call larger than the whole limit passes alone, once nothing else holds bytes.
// A call takes its place before its call ticket (see writeBatch), so one that holds
// bytes never waits for a later call: the gate cannot deadlock with the per-key order.
// fMaxInFlightBytes is the field of the limit; defaultMaxInFlightBytes (256 MiB) bounds
// a pipeline's calls out of the box and is far above what ordinary batches hold.
const (
	fMaxInFlightBytes       = "max_in_flight_bytes"
	defaultMaxInFlightBytes = 256 << 20
	// fMaxProcessInFlightBytes bounds the calls of every iceberg output of the process
	// together (processGate); 0, the default, leaves each output to its own limit.
	fMaxProcessInFlightBytes = "max_process_in_flight_bytes"
)

// processGate is shared by every iceberg output of the process: a pipeline with several
// outputs (a switch, a broker) holds at most its limit in their calls together. A call
// enters its output's gate first and this one second, so a call holding bytes here
// never waits at its own output's gate again: the two gates cannot deadlock.
var processGate = newByteGate(0)

type byteGate struct {
	mu      sync.Mutex
	limit   int64 // 0: no limit
	held    int64
	waiting []*gateWaiter // in arrival order
}

type gateWaiter struct {
	bytes int64
	ready chan struct{}
}

func newByteGate(limit int64) *byteGate {
	return &byteGate{limit: limit}
}

// enter waits until bytes fit under the limit (or ctx ends: the error is ctx's). The
// caller must leave with the value enter returned once its call is answered.
func (g *byteGate) enter(ctx context.Context, bytes int64) (int64, error) {
	g.mu.Lock()
	if g.limit <= 0 {
		g.mu.Unlock()
		return 0, nil
	}
	if bytes > g.limit {
		bytes = g.limit
	}
	if len(g.waiting) == 0 && g.held+bytes <= g.limit {
		g.held += bytes
		g.mu.Unlock()
		return bytes, nil
	}
	w := &gateWaiter{bytes: bytes, ready: make(chan struct{})}
	g.waiting = append(g.waiting, w)
	g.mu.Unlock()
	select {
	case <-w.ready:
		return bytes, nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		select {
		case <-w.ready:
			// Let in just as ctx ended: give the bytes back.
			g.held -= bytes
			g.admit()
		default:
			g.remove(w)
			// The first waiter may fit now that a larger one ahead of it left.
			g.admit()
		}
		return 0, ctx.Err()
	}
}

// lowerTo makes limit the gate's limit if it is positive and below the one in force
// (or none is), and returns the limit in force: outputs that set the process-wide limit
// differently get the smallest.
func (g *byteGate) lowerTo(limit int64) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if limit > 0 && (g.limit <= 0 || limit < g.limit) {
		g.limit = limit
	}
	return g.limit
}

// leave gives back what enter returned.
func (g *byteGate) leave(bytes int64) {
	if bytes == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held -= bytes
	g.admit()
}

// inUse is the bytes of the calls past the gate.
func (g *byteGate) inUse() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// admit lets waiters in, in order, while the first one fits. Called with mu held.
func (g *byteGate) admit() {
	for len(g.waiting) > 0 {
		w := g.waiting[0]
		if g.held+w.bytes > g.limit {
			return
		}
		g.held += w.bytes
		g.waiting = g.waiting[1:]
		close(w.ready)
	}
}

func (g *byteGate) remove(w *gateWaiter) {
	for i, x := range g.waiting {
		if x == w {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			return
		}
	}
}

// payloadBytes is the bytes of a call's messages.
func payloadBytes(payloads [][]byte) int64 {
	var n int64
	for _, p := range payloads {
		n += int64(len(p))
	}
	return n
}
