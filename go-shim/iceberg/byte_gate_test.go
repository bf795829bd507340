package iceberg

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestByteGateNeverHoldsMoreThanItsLimit(t *testing.T) {
	const limit = 1000
	g := newByteGate(limit)
	var peak, now atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			r := rand.New(rand.NewSource(seed))
			for j := 0; j < 50; j++ {
				want := int64(1 + r.Intn(400))
				got, err := g.enter(context.Background(), want)
				if err != nil || got != want {
					t.Errorf("enter(%d) = %d, %v", want, got, err)
					return
				}
				if n := now.Add(got); n > peak.Load() {
					peak.Store(n)
				}
				time.Sleep(time.Duration(r.Intn(200)) * time.Microsecond)
				now.Add(-got)
				g.leave(got)
			}
		}(int64(i))
	}
	wg.Wait()
	if peak.Load() > limit {
		t.Fatalf("held %d bytes at once, limit %d", peak.Load(), limit)
	}
	if g.inUse() != 0 {
		t.Fatalf("%d bytes still held after every call left", g.inUse())
	}
}

func TestByteGateLetsACallLargerThanTheLimitPassAlone(t *testing.T) {
	g := newByteGate(100)
	small, _ := g.enter(context.Background(), 10)
	passed := make(chan int64)
	go func() {
		got, _ := g.enter(context.Background(), 5000)
		passed <- got
	}()
	select {
	case <-passed:
		t.Fatal("the large call passed while another call held bytes")
	case <-time.After(50 * time.Millisecond):
	}
	g.leave(small)
	if got := <-passed; got != 100 {
		t.Fatalf("the large call holds %d, want the whole limit (100)", got)
	}
}

func TestByteGateKeepsArrivalOrder(t *testing.T) {
	g := newByteGate(100)
	first, _ := g.enter(context.Background(), 60)
	order := make(chan string, 2)
	go func() {
		b, _ := g.enter(context.Background(), 95) // does not fit until first leaves
		order <- "large"
		g.leave(b)
	}()
	time.Sleep(20 * time.Millisecond)
	go func() {
		b, _ := g.enter(context.Background(), 10) // would fit now, but arrived later
		order <- "small"
		g.leave(b)
	}()
	time.Sleep(20 * time.Millisecond)
	select {
	case who := <-order:
		t.Fatalf("%s passed while an earlier call waited", who)
	default:
	}
	g.leave(first)
	if a, b := <-order, <-order; a != "large" || b != "small" {
		t.Fatalf("passed in order %s, %s; want large, small", a, b)
	}
}

func TestByteGateWaiterLeavingOnCancelLetsTheNextIn(t *testing.T) {
	g := newByteGate(100)
	held, _ := g.enter(context.Background(), 50)
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error)
	go func() {
		_, err := g.enter(ctx, 90)
		cancelled <- err
	}()
	time.Sleep(20 * time.Millisecond)
	next := make(chan int64)
	go func() {
		b, _ := g.enter(context.Background(), 40)
		next <- b
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-cancelled; err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	select {
	case b := <-next:
		g.leave(b)
	case <-time.After(time.Second):
		t.Fatal("the call behind a cancelled one never passed, though it fits")
	}
	g.leave(held)
	if g.inUse() != 0 {
		t.Fatalf("%d bytes held after all left", g.inUse())
	}
}

func TestByteGateWithoutALimitHoldsNothing(t *testing.T) {
	g := newByteGate(0)
	if b, err := g.enter(context.Background(), 1<<40); b != 0 || err != nil {
		t.Fatalf("enter = %d, %v", b, err)
	}
}

// Concurrent write calls through a real output (embedded catalog) under a small
// max_in_flight_bytes: the calls past the gate never hold more than the limit, keyed
// calls (which keep arrival order) do not deadlock behind it, and every row commits.
func TestWriteCallsStayUnderMaxInFlightBytes(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		wh := t.TempDir()
		yaml := fmt.Sprintf("catalog: {warehouse: %q}\nnamespace: gotest\ntable: t\nschema_evolution: {enabled: true}\nmax_in_flight_bytes: 300\n", wh)
		if keyed {
			yaml += "row_operation: upsert\nidentifier_fields: [id]\nmerge_strategy: copy-on-write\n"
		}
		out := newTestOutput(t, yaml)
		peak := samplePeak(out.gate)
		var wg sync.WaitGroup
		const calls, rows = 16, 4
		for c := 0; c < calls; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				var msgs []string
				for r := 0; r < rows; r++ {
					msgs = append(msgs, fmt.Sprintf(`{"id": %d, "note": "padding-padding"}`, c*rows+r))
				}
				if err := out.WriteBatch(context.Background(), batchOf(msgs...)); err != nil {
					t.Errorf("call %d: %v", c, err)
				}
			}(c)
		}
		wg.Wait()
		most := peak()
		if most > 300 {
			t.Fatalf("keyed %v: calls past the gate held %d bytes, limit 300", keyed, most)
		}
		if most == 0 {
			t.Fatalf("keyed %v: no call was seen past the gate", keyed)
		}
		if got := readCount(t, wh, "gotest.t"); got != calls*rows {
			t.Fatalf("keyed %v: %d rows committed, want %d", keyed, got, calls*rows)
		}
	}
}

func TestTheProcessLimitIsTheSmallestAnyOutputSet(t *testing.T) {
	g := newByteGate(0)
	if got := g.lowerTo(0); got != 0 {
		t.Fatalf("0 set a limit: %d", got)
	}
	if got := g.lowerTo(500); got != 500 {
		t.Fatalf("limit %d, want 500", got)
	}
	if got := g.lowerTo(800); got != 500 {
		t.Fatalf("a larger limit raised it: %d", got)
	}
	if got := g.lowerTo(0); got != 500 {
		t.Fatalf("an output without a limit lifted it: %d", got)
	}
	if got := g.lowerTo(200); got != 200 {
		t.Fatalf("limit %d, want 200", got)
	}
}

// Two outputs of one process (embedded catalogs), each without a limit of its own but
// with max_process_in_flight_bytes: their calls together never hold more than it, none
// deadlocks (keyed calls of one, plain calls of the other), and every row commits.
func TestOutputsOfAProcessStayUnderTheProcessLimit(t *testing.T) {
	saved := processGate
	processGate = newByteGate(0)
	t.Cleanup(func() { processGate = saved })
	var outs []*output
	var warehouses []string
	for i, keyed := range []bool{false, true} {
		wh := t.TempDir()
		yaml := fmt.Sprintf("catalog: {warehouse: %q}\nnamespace: gotest\ntable: t%d\nschema_evolution: {enabled: true}\n"+
			"max_in_flight_bytes: 0\nmax_process_in_flight_bytes: 300\n", wh, i)
		if keyed {
			yaml += "row_operation: upsert\nidentifier_fields: [id]\nmerge_strategy: copy-on-write\n"
		}
		outs = append(outs, newTestOutput(t, yaml))
		warehouses = append(warehouses, wh)
	}
	peak := samplePeak(processGate)
	var wg sync.WaitGroup
	const calls, rows = 12, 4
	for o, out := range outs {
		for c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var msgs []string
				for r := range rows {
					msgs = append(msgs, fmt.Sprintf(`{"id": %d, "note": "padding-padding"}`, c*rows+r))
				}
				if err := out.WriteBatch(context.Background(), batchOf(msgs...)); err != nil {
					t.Errorf("output %d call %d: %v", o, c, err)
				}
			}()
		}
	}
	wg.Wait()
	if most := peak(); most > 300 || most == 0 {
		t.Fatalf("the outputs' calls held at most %d bytes together, limit 300", most)
	}
	for i, wh := range warehouses {
		if got := readCount(t, wh, fmt.Sprintf("gotest.t%d", i)); got != calls*rows {
			t.Fatalf("output %d: %d rows committed, want %d", i, got, calls*rows)
		}
	}
}

// samplePeak watches the bytes held past g every 50 µs until the returned function is
// called, which stops it and says the most seen.
func samplePeak(g *byteGate) func() int64 {
	var peak atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := g.inUse(); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			default:
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-sampled
		return peak.Load()
	}
}
