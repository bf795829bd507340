package kafka

import (
	"context"
	"testing"
	"time"
)

var tp0 = topicPartition{"events", 0}

// read counts n records of tp starting at first and returns them with their logs.
func read(c *checkpointer, tp topicPartition, first int64, n int) ([]record, []*partitionLog) {
	var recs []record
	var logs []*partitionLog
	for i := 0; i < n; i++ {
		c.buffered(tp)
		recs = append(recs, record{tp: tp, offset: first + int64(i), leaderEpoch: 1})
		logs = append(logs, c.logOf(tp))
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
	if n := c.unackedOf(tp0); n != 0 {
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
	if n := c.unackedOf(tp0); n != 0 {
		t.Fatalf("the new ownership starts with %d unacknowledged records", n)
	}
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
	spans := c.track(read(c, tp0, 0, 10))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.waitForRoom(ctx, tp0); err == nil {
		t.Fatal("reading went on past checkpoint_limit")
	}
	go func() { time.Sleep(20 * time.Millisecond); c.ack(spans) }()
	if err := c.waitForRoom(context.Background(), tp0); err != nil {
		t.Fatal(err)
	}
}

func TestARevokeWakesAReaderWaitingAtTheLimit(t *testing.T) {
	c := newCheckpointer(1)
	c.track(read(c, tp0, 0, 1))
	go func() { time.Sleep(20 * time.Millisecond); c.reset(map[string][]int32{"events": {0}}) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.waitForRoom(ctx, tp0); err != nil {
		t.Fatal("a revoke did not wake the waiting reader")
	}
}

func TestAckingTwiceCountsOnce(t *testing.T) {
	c := newCheckpointer(100)
	a := c.track(read(c, tp0, 0, 4))
	b := c.track(read(c, tp0, 4, 4))
	c.ack(a)
	c.ack(a)
	if n := c.unackedOf(tp0); n != 4 {
		t.Fatalf("%d unacknowledged, want 4", n)
	}
	if got := c.ack(b); len(got) != 1 || got[0].offset != 8 {
		t.Fatalf("%v, want offset 8", got)
	}
}
