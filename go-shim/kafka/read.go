package kafka

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// batchBuilder gathers read records into batches: one per partition per poll without a
// batching policy, or as the policy says (count, size, period, processors).
type batchBuilder struct {
	batcher *service.Batcher // nil without a policy
	msgs    []*service.Message
	recs    []record
	logs    []*partitionLog // the ownership each record was polled under
}

// polled is one partition's records from one poll, with the ownership they were polled
// under.
type polled struct {
	fp  kgo.FetchTopicPartition
	log *partitionLog
}

// readLoop polls the brokers and hands batches to `out` until ctx ends or the client
// closes. It runs on its own goroutine; `done` is closed when it returns.
func (in *input) readLoop(ctx context.Context, client *kgo.Client, batcher *service.Batcher,
	out chan<- delivery, done chan struct{}) {
	defer close(done)
	b := &batchBuilder{batcher: batcher}
	if batcher != nil {
		defer batcher.Close(context.Background())
	}
	errs := newErrorThrottle(10 * time.Second)
	for {
		pollCtx, cancel := in.pollContext(ctx, b)
		fetches := client.PollRecords(pollCtx, 0)
		periodOver := errors.Is(pollCtx.Err(), context.DeadlineExceeded)
		cancel()
		// Rebalances wait (BlockRebalanceOnPoll) until each partition's records are tied
		// to the ownership they were polled under; then they may run.
		parts := in.ownedAtPoll(fetches)
		client.AllowRebalance()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			if errs.allow(err.Error()) {
				in.log.Errorf("kafka_franz: reading %s/%d: %v", topic, partition, err)
			}
		})
		for _, p := range parts {
			if !in.addPartition(ctx, b, p, out) {
				return
			}
		}
		if b.batcher != nil && (periodOver || in.periodOver(b)) && !in.flush(ctx, b, out) {
			return
		}
	}
}

// ownedAtPoll ties each polled partition's records to its present ownership.
func (in *input) ownedAtPoll(fetches kgo.Fetches) []polled {
	var parts []polled
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		parts = append(parts, polled{fp: fp, log: in.marks.current(topicPartition{fp.Topic, fp.Partition})})
	})
	return parts
}

// addPartition adds one partition's polled records; without a batching policy they are
// flushed as one batch. False when ctx ended.
func (in *input) addPartition(ctx context.Context, b *batchBuilder, p polled, out chan<- delivery) bool {
	last := p.fp.Records[len(p.fp.Records)-1]
	in.setLag(p.fp.Topic, p.fp.Partition, max(p.fp.HighWatermark-last.Offset-1, 0))
	in.countRead(len(p.fp.Records))
	for _, r := range p.fp.Records {
		added, ok := in.add(ctx, b, r, p.log, out)
		if !ok {
			return false
		}
		if !added {
			break // the ownership ended: the partition's next owner reads these again
		}
	}
	if b.batcher == nil {
		return in.flush(ctx, b, out)
	}
	return true
}

// periodOver tells whether the batching period of what was gathered has passed.
func (in *input) periodOver(b *batchBuilder) bool {
	if len(b.msgs) == 0 {
		return false
	}
	wait, set := b.batcher.UntilNext()
	return set && wait <= time.Millisecond
}

// pollContext bounds a poll by the batching period, so a partial batch is flushed on time.
func (in *input) pollContext(ctx context.Context, b *batchBuilder) (context.Context, context.CancelFunc) {
	if b.batcher != nil && len(b.msgs) > 0 {
		if wait, set := b.batcher.UntilNext(); set {
			return context.WithTimeout(ctx, max(wait, time.Millisecond))
		}
	}
	return context.WithCancel(ctx)
}

// add appends one record polled under `log` to the batch being built, first flushing
// and waiting while that ownership holds `checkpoint_limit` unacknowledged records.
// added is false when the ownership ended (the record is skipped); ok is false when
// ctx ended.
func (in *input) add(ctx context.Context, b *batchBuilder, r *kgo.Record, log *partitionLog, out chan<- delivery) (added, ok bool) {
	if in.marks.full(log) {
		if !in.flush(ctx, b, out) {
			return false, false
		}
		stale, err := in.marks.waitForRoom(ctx, log)
		if err != nil {
			return false, false
		}
		if stale {
			return false, true
		}
	}
	if !in.marks.take(log) {
		return false, true
	}
	msg := toMessage(r)
	b.msgs = append(b.msgs, msg)
	b.recs = append(b.recs, record{tp: log.tp, offset: r.Offset, leaderEpoch: r.LeaderEpoch})
	b.logs = append(b.logs, log)
	if b.batcher != nil && b.batcher.Add(msg) {
		return true, in.flush(ctx, b, out)
	}
	return true, true
}

// flush hands what was gathered to the pipeline. False when ctx ended first.
func (in *input) flush(ctx context.Context, b *batchBuilder, out chan<- delivery) bool {
	if len(b.msgs) == 0 {
		return true
	}
	batch := service.MessageBatch(b.msgs)
	if b.batcher != nil {
		// nil: the batching processors dropped every message, or failed (the host logs
		// why and drops the batch). Either way nothing goes on, and the records count
		// as handled.
		processed, err := b.batcher.Flush(ctx)
		if err != nil {
			in.log.Errorf("kafka_franz: batching: %v", err)
		}
		batch = processed
	}
	spans := in.marks.track(b.recs, b.logs)
	b.msgs, b.recs, b.logs = nil, nil, nil
	if len(batch) == 0 {
		in.settle(spans)
		return true
	}
	select {
	case out <- delivery{batch: batch, spans: spans}:
		in.marks.delivered(spans)
		return true
	case <-ctx.Done():
		return false
	}
}

// toMessage turns a record into a message with kafka_franz's metadata.
func toMessage(r *kgo.Record) *service.Message {
	msg := service.NewMessage(r.Value)
	// Headers first: a header named like kafka_offset (a topic written by a pipeline that
	// copied metadata into headers) must not replace the record's own position, which
	// exactly-once keys on.
	for _, h := range r.Headers {
		msg.MetaSetMut(h.Key, string(h.Value))
	}
	msg.MetaSetMut("kafka_key", string(r.Key))
	msg.MetaSetMut("kafka_topic", r.Topic)
	msg.MetaSetMut("kafka_partition", int(r.Partition))
	msg.MetaSetMut("kafka_offset", int(r.Offset))
	msg.MetaSetMut("kafka_timestamp_unix", r.Timestamp.Unix())
	msg.MetaSetMut("kafka_timestamp_ms", r.Timestamp.UnixMilli())
	msg.MetaSetMut("kafka_tombstone_message", r.Value == nil)
	return msg
}

// errorThrottle lets one log line per distinct error through per interval: a broker
// that is down makes every poll fail the same way.
type errorThrottle struct {
	mu       sync.Mutex
	interval time.Duration
	last     map[string]time.Time
}

func newErrorThrottle(interval time.Duration) *errorThrottle {
	return &errorThrottle{interval: interval, last: map[string]time.Time{}}
}

func (t *errorThrottle) allow(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if at, seen := t.last[key]; seen && now.Sub(at) < t.interval {
		return false
	}
	t.last[key] = now
	return true
}
