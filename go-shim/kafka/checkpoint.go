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
	delivered   bool
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
	unacked int     // records polled and not yet acknowledged (in a batch being built, or delivered)
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

// currentLocked returns tp's log for the present ownership, starting one when there is
// none; c.mu is held.
func (c *checkpointer) currentLocked(tp topicPartition) *partitionLog {
	log := c.logs[tp]
	if log == nil {
		log = &partitionLog{tp: tp}
		c.logs[tp] = log
	}
	return log
}

// current returns the log of tp's present ownership. The read loop takes it right after
// a poll, before anything can block, so records polled under one ownership are never
// counted in the next one's log.
func (c *checkpointer) current(tp topicPartition) *partitionLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.currentLocked(tp)
}

// isCurrentLocked tells whether log's ownership is still the present one; c.mu is held.
func (c *checkpointer) isCurrentLocked(log *partitionLog) bool {
	return c.logs[log.tp] == log
}

// reset ends the ownership of partitions assigned, revoked or lost: records polled and
// acknowledgements made under the old ownership no longer count or move the committed
// offset (the group's next owner reads them again from the committed offset).
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

// forgetAll ends every ownership: for a new client, which reads from the committed
// offsets, and for a client about to close, which has nothing left to wait for.
func (c *checkpointer) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs = map[topicPartition]*partitionLog{}
	c.wakeLocked()
}

// take counts one record polled under log's ownership as read and not yet
// acknowledged. False when that ownership has ended: the record must be skipped.
func (c *checkpointer) take(log *partitionLog) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.isCurrentLocked(log) {
		return false
	}
	log.unacked++
	return true
}

// full tells whether log's ownership holds `limit` unacknowledged records.
func (c *checkpointer) full(log *partitionLog) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isCurrentLocked(log) && log.unacked >= c.limit
}

// waitForRoom blocks until log holds fewer than `limit` unacknowledged records. It
// returns stale = true when log's ownership ended meanwhile (its remaining records are
// to be skipped), or ctx's error.
func (c *checkpointer) waitForRoom(ctx context.Context, log *partitionLog) (stale bool, err error) {
	for {
		c.mu.Lock()
		current := c.isCurrentLocked(log)
		room := log.unacked < c.limit
		changed := c.changed
		c.mu.Unlock()
		if !current {
			return true, nil
		}
		if room {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-changed:
		}
	}
}

// record is what a span needs of one Kafka record.
type record struct {
	tp          topicPartition
	offset      int64
	leaderEpoch int32
}

// track turns the records of one batch (in read order, each counted by `take` under the
// log it was polled with) into spans, one per partition run. Records whose ownership
// ended since they were polled belong to no log: their acknowledgement moves nothing.
func (c *checkpointer) track(recs []record, logs []*partitionLog) []*span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var spans []*span
	var last *span
	for i, r := range recs {
		log := logs[i]
		if !c.isCurrentLocked(log) {
			continue
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

// delivered notes that spans reached the pipeline: only those are worth waiting for
// when their partitions are revoked.
func (c *checkpointer) delivered(spans []*span) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range spans {
		s.delivered = true
	}
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
		if !c.isCurrentLocked(s.log) {
			continue // ownership ended: this acknowledgement moves nothing
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

// inFlight counts the records of the given partitions that reached the pipeline and
// were not acknowledged yet.
func (c *checkpointer) inFlight(parts map[string][]int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for topic, ps := range parts {
		for _, p := range ps {
			log := c.logs[topicPartition{topic, p}]
			if log == nil {
				continue
			}
			for _, s := range log.pending {
				if s.delivered && !s.acked {
					n += s.count
				}
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
