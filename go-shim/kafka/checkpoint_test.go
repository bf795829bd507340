package kafka

import (
	"context"
	"testing"
	"time"
)

var tp0 = topicPartition{"events", 0}

// read polls n records of tp starting at first under its present ownership.
func read(c *checkpointer, tp topicPartition, first int64, n int) ([]record, []*partitionLog) {
	return readUnder(c, c.current(tp), first, n)
}

// readUnder adds n records polled under `log`, as the read loop does: a record whose
// ownership ended is skipped.
func readUnder(c *checkpointer, log *partitionLog, first int64, n int) ([]record, []*partitionLog) {
	var recs []record
	var logs []*partitionLog
	for i := 0; i < n; i++ {
		if !c.take(log) {
			break
		}
		recs = append(recs, record{tp: log.tp, offset: first + int64(i), leaderEpoch: 1})
		logs = append(logs, log)
	}
	return recs, logs
}

func TestCommitNeverPassesAnUnacknowledgedBatch(t *testing.T) {
	c := newCheckpointer(100)
	a := c.track(read(c, tp0, 0, 10))
	b := c.track(read(c, tp0, 10, 10))
	if got := c.ack(b); len(got) != 0 {
		t.Fatalf("acking the second batch before the first committed %v", got)
	}
	got := c.ack(a)
	if len(got) != 1 || got[0].offset != 20 {
		t.Fatalf("after both batches: %v, want offset 20", got)
	}
	if n := unacked(c, tp0); n != 0 {
		t.Fatalf("%d records still counted", n)
	}
}

func TestAnAcknowledgementAfterARevokeMovesNothing(t *testing.T) {
	c := newCheckpointer(100)
	old := c.track(read(c, tp0, 0, 10))
	c.reset(map[string][]int32{"events": {0}}) // revoked, then assigned again
	fresh := c.track(read(c, tp0, 0, 5))       // the new ownership reads from offset 0
	if got := c.ack(old); len(got) != 0 {
		t.Fatalf("an acknowledgement from the old ownership committed %v", got)
	}
	if got := c.ack(fresh); len(got) != 1 || got[0].offset != 5 {
		t.Fatalf("the new ownership's acknowledgement: %v, want offset 5", got)
	}
}

func TestRecordsReadBeforeARevokeAreNotTracked(t *testing.T) {
	c := newCheckpointer(100)
	recs, logs := read(c, tp0, 0, 10)
	c.reset(map[string][]int32{"events": {0}})
	if spans := c.track(recs, logs); len(spans) != 0 {
		t.Fatalf("records read under the old ownership were tracked: %d spans", len(spans))
	}
	if n := unacked(c, tp0); n != 0 {
		t.Fatalf("the new ownership starts with %d unacknowledged records", n)
	}
}

// A reviewer's finding: records polled under one ownership, added only after the
// partition was revoked and assigned back (the read loop was waiting at the limit), must
// not join the new ownership's log, or acknowledging them commits past records the new
// ownership has not acknowledged.
func TestRecordsPolledBeforeARevokeAndReassignNeverMoveTheNewCommit(t *testing.T) {
	c := newCheckpointer(100)
	polledUnder := c.current(tp0)
	c.track(readUnder(c, polledUnder, 1000, 10)) // ownership 1, in flight
	c.reset(map[string][]int32{"events": {0}})   // revoked
	c.reset(map[string][]int32{"events": {0}})   // assigned back
	stale := c.track(readUnder(c, polledUnder, 1010, 10))
	fresh := c.track(read(c, tp0, 1000, 10)) // the new ownership reads from committed 1000
	if pts := c.ack(stale); len(pts) > 0 {
		t.Fatalf("records polled under the old ownership committed %v", pts)
	}
	if n := unacked(c, tp0); n != 10 {
		t.Fatalf("the new ownership counts %d unacknowledged records, want 10", n)
	}
	if pts := c.ack(fresh); len(pts) != 1 || pts[0].offset != 1010 {
		t.Fatalf("the new ownership's commit point: %v, want 1010", pts)
	}
}

func TestAWaitAtTheLimitEndsWhenTheOwnershipDoes(t *testing.T) {
	c := newCheckpointer(5)
	log := c.current(tp0)
	c.track(readUnder(c, log, 0, 5))
	go func() { time.Sleep(20 * time.Millisecond); c.reset(map[string][]int32{"events": {0}}) }()
	stale, err := c.waitForRoom(context.Background(), log)
	if err != nil || !stale {
		t.Fatalf("stale=%v err=%v, want the wait to report the ended ownership", stale, err)
	}
	if c.take(log) {
		t.Fatal("a record was counted under an ended ownership")
	}
}

func TestOnlyDeliveredRecordsAreWaitedForAtARevoke(t *testing.T) {
	c := newCheckpointer(100)
	a := c.track(read(c, tp0, 0, 10))
	c.track(read(c, tp0, 10, 5)) // tracked, never delivered
	c.delivered(a)
	read(c, tp0, 15, 3) // polled, in a batch being built
	if n := c.inFlight(map[string][]int32{"events": {0}}); n != 10 {
		t.Fatalf("%d in flight, want the 10 delivered", n)
	}
}

func unacked(c *checkpointer, tp topicPartition) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.currentLocked(tp).unacked
}

func TestOneBatchSpanningPartitionsSettlesEach(t *testing.T) {
	c := newCheckpointer(100)
	tp1 := topicPartition{"events", 1}
	r0, l0 := read(c, tp0, 0, 3)
	r1, l1 := read(c, tp1, 7, 2)
	spans := c.track(append(r0, r1...), append(l0, l1...))
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per partition", len(spans))
	}
	got := map[int32]int64{}
	for _, p := range c.ack(spans) {
		got[p.tp.partition] = p.offset
	}
	if got[0] != 3 || got[1] != 9 {
		t.Fatalf("commit points %v, want p0 at 3 and p1 at 9", got)
	}
}

func TestReadingWaitsAtTheCheckpointLimitUntilAnAck(t *testing.T) {
	c := newCheckpointer(10)
	log := c.current(tp0)
	spans := c.track(readUnder(c, log, 0, 10))
	if !c.full(log) {
		t.Fatal("10 unacknowledged records with checkpoint_limit 10 is not full")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.waitForRoom(ctx, log); err == nil {
		t.Fatal("reading went on past checkpoint_limit")
	}
	go func() { time.Sleep(20 * time.Millisecond); c.ack(spans) }()
	if stale, err := c.waitForRoom(context.Background(), log); err != nil || stale {
		t.Fatal(stale, err)
	}
}

func TestAckingTwiceCountsOnce(t *testing.T) {
	c := newCheckpointer(100)
	a := c.track(read(c, tp0, 0, 4))
	b := c.track(read(c, tp0, 4, 4))
	c.ack(a)
	c.ack(a)
	if n := unacked(c, tp0); n != 4 {
		t.Fatalf("%d unacknowledged, want 4", n)
	}
	if got := c.ack(b); len(got) != 1 || got[0].offset != 8 {
		t.Fatalf("%v, want offset 8", got)
	}
}
