package kafka

import (
	"context"
	"sync"
)

// topicPartition names one partition of one topic.
type topicPartition struct {
	topic     string
	partition int32
}

// span is a run of one partition's records handed to the pipeline in one batch: the
// commit may pass `last` only once this span and every span before it were acknowledged.
type span struct {
	log         *partitionLog
	last        int64
	leaderEpoch int32
	count       int
	acked       bool
}

// partitionLog is one partition's records from delivery to acknowledgement during one
// ownership of it. A rebalance that revokes the partition replaces its log, so an
// acknowledgement arriving afterwards for the old ownership moves no offset: the new owner
// reads those records again from the group's committed offset (at-least-once), and never
// skips one that was not acknowledged.
type partitionLog struct {
	tp      topicPartition
	pending []*span // in offset order
	unacked int     // records delivered or buffered and not yet acknowledged
}

// commitPoint is an offset the group may commit: every record before it was acknowledged.
type commitPoint struct {
	tp          topicPartition
	offset      int64
	leaderEpoch int32
}

// checkpointer keeps each owned partition's log and applies `checkpoint_limit`: at most
// that many records of one partition may be unacknowledged before reading waits.
type checkpointer struct {
	mu      sync.Mutex
	limit   int
	logs    map[topicPartition]*partitionLog
	changed chan struct{} // closed and replaced on every change, to wake waiters
}

func newCheckpointer(limit int) *checkpointer {
	return &checkpointer{limit: limit, logs: map[topicPartition]*partitionLog{}, changed: make(chan struct{})}
}

// wakeLocked tells waiters something changed; c.mu is held.
func (c *checkpointer) wakeLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// current returns tp's log for the present ownership, starting one when there is none.
func (c *checkpointer) currentLocked(tp topicPartition) *partitionLog {
	log := c.logs[tp]
	if log == nil {
		log = &partitionLog{tp: tp}
		c.logs[tp] = log
	}
	return log
}

// reset starts new logs for partitions assigned, revoked or lost: acknowledgements of
// records read under the old ownership no longer move the committed offset.
func (c *checkpointer) reset(parts map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			delete(c.logs, topicPartition{topic, p})
		}
	}
	c.wakeLocked()
}

// forgetAll drops every log, for a new client that reads from the committed offsets.
func (c *checkpointer) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs = map[topicPartition]*partitionLog{}
	c.wakeLocked()
}

// unackedOf counts tp's unacknowledged records in the present ownership.
func (c *checkpointer) unackedOf(tp topicPartition) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.currentLocked(tp).unacked
}

// waitForRoom blocks until tp has fewer than `limit` unacknowledged records (or ctx ends).
// A rebalance that replaces tp's log also wakes it.
func (c *checkpointer) waitForRoom(ctx context.Context, tp topicPartition) error {
	for {
		c.mu.Lock()
		room := c.currentLocked(tp).unacked < c.limit
		changed := c.changed
		c.mu.Unlock()
		if room {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// buffered counts one record read for tp and not yet delivered in a batch.
func (c *checkpointer) buffered(tp topicPartition) {
	c.mu.Lock()
	c.currentLocked(tp).unacked++
	c.mu.Unlock()
}

// record is what a span needs of one Kafka record.
type record struct {
	tp          topicPartition
	offset      int64
	leaderEpoch int32
}

// track turns the records of one batch (in read order, each counted by `buffered`) into
// spans, one per partition run. Records of a partition whose ownership changed since they
// were read belong to no log: their acknowledgement will move nothing.
func (c *checkpointer) track(recs []record, logsAtRead []*partitionLog) []*span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var spans []*span
	var last *span
	for i, r := range recs {
		log := logsAtRead[i]
		if c.logs[r.tp] != log {
			continue // revoked (and maybe reassigned) since it was read
		}
		if last != nil && last.log == log {
			last.last, last.leaderEpoch = r.offset, r.leaderEpoch
			last.count++
			continue
		}
		last = &span{log: log, last: r.offset, leaderEpoch: r.leaderEpoch, count: 1}
		log.pending = append(log.pending, last)
		spans = append(spans, last)
	}
	return spans
}

// logOf returns tp's current log, for `track` to tell later whether ownership changed.
func (c *checkpointer) logOf(tp topicPartition) *partitionLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.currentLocked(tp)
}

// ack marks spans acknowledged and returns, per partition whose acknowledged prefix
// grew, the offset the group may now commit.
func (c *checkpointer) ack(spans []*span) []commitPoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	touched := map[*partitionLog]bool{}
	for _, s := range spans {
		if s.acked {
			continue
		}
		s.acked = true
		if c.logs[s.log.tp] != s.log {
			continue // ownership changed: this acknowledgement moves nothing
		}
		s.log.unacked -= s.count
		touched[s.log] = true
	}
	var points []commitPoint
	for log := range touched {
		var done *span
		for len(log.pending) > 0 && log.pending[0].acked {
			done = log.pending[0]
			log.pending = log.pending[1:]
		}
		if done != nil {
			points = append(points, commitPoint{tp: log.tp, offset: done.last + 1, leaderEpoch: done.leaderEpoch})
		}
	}
	c.wakeLocked()
	return points
}

// inFlight counts the unacknowledged records of the given partitions.
func (c *checkpointer) inFlight(parts map[string][]int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for topic, ps := range parts {
		for _, p := range ps {
			if log := c.logs[topicPartition{topic, p}]; log != nil {
				n += log.unacked
			}
		}
	}
	return n
}

// waitChange returns a channel closed at the next change.
func (c *checkpointer) waitChange() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}
