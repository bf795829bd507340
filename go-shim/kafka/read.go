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
	logs    []*partitionLog // each record's log when it was read
}

// readLoop polls the brokers and hands batches to `out` until ctx ends or the client
// closes. It runs on its own goroutine; `done` is closed when it returns.
func (in *input) readLoop(ctx context.Context, client *kgo.Client, out chan<- delivery, done chan struct{}) {
	defer close(done)
	b := &batchBuilder{}
	if !in.conf.batching.IsNoop() {
		batcher, err := in.conf.batching.NewBatcher(in.res)
		if err != nil {
			in.stopWith(err)
			return
		}
		defer batcher.Close(context.Background())
		b.batcher = batcher
	}
	errs := newErrorThrottle(10 * time.Second)
	for {
		pollCtx, cancel := in.pollContext(ctx, b)
		fetches := client.PollRecords(pollCtx, 0)
		cancel()
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
		ok := true
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if !ok || len(fp.Records) == 0 {
				return
			}
			last := fp.Records[len(fp.Records)-1]
			in.lag.Set(max(fp.HighWatermark-last.Offset-1, 0), fp.Topic, partitionLabel(fp.Partition))
			for _, r := range fp.Records {
				if ok = in.add(ctx, b, r, out); !ok {
					return
				}
			}
			if b.batcher == nil {
				ok = in.flush(ctx, b, out)
			}
		})
		if !ok {
			return
		}
		if b.batcher != nil {
			if wait, set := b.batcher.UntilNext(); set && wait <= 0 && !in.flush(ctx, b, out) {
				return
			}
		}
	}
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

// add appends one record to the batch being built, first flushing and waiting while its
// partition holds `checkpoint_limit` unacknowledged records. False when ctx ended.
func (in *input) add(ctx context.Context, b *batchBuilder, r *kgo.Record, out chan<- delivery) bool {
	tp := topicPartition{r.Topic, r.Partition}
	if in.marks.unackedOf(tp) >= in.conf.checkpointLimit {
		if !in.flush(ctx, b, out) || in.marks.waitForRoom(ctx, tp) != nil {
			return false
		}
	}
	in.marks.buffered(tp)
	msg := toMessage(r)
	b.msgs = append(b.msgs, msg)
	b.recs = append(b.recs, record{tp: tp, offset: r.Offset, leaderEpoch: r.LeaderEpoch})
	b.logs = append(b.logs, in.marks.logOf(tp))
	if b.batcher != nil && b.batcher.Add(msg) {
		return in.flush(ctx, b, out)
	}
	return true
}

// flush hands what was gathered to the pipeline. False when ctx ended first.
func (in *input) flush(ctx context.Context, b *batchBuilder, out chan<- delivery) bool {
	if len(b.msgs) == 0 {
		return true
	}
	batch := service.MessageBatch(b.msgs)
	if b.batcher != nil {
		processed, err := b.batcher.Flush(ctx)
		switch {
		case err != nil:
			in.log.Errorf("kafka_franz: batching processors failed, passing the batch on unprocessed: %v", err)
		case processed != nil:
			batch = processed
		}
	}
	spans := in.marks.track(b.recs, b.logs)
	b.msgs, b.recs, b.logs = nil, nil, nil
	if len(batch) == 0 {
		in.settle(spans) // the batching processors dropped everything: nothing to wait for
		return true
	}
	select {
	case out <- delivery{batch: batch, spans: spans}:
		return true
	case <-ctx.Done():
		return false
	}
}

// stopWith records why the read loop stopped on its own.
func (in *input) stopWith(err error) {
	in.mu.Lock()
	in.readErr = err
	in.mu.Unlock()
}

// toMessage turns a record into a message with kafka_franz's metadata.
func toMessage(r *kgo.Record) *service.Message {
	msg := service.NewMessage(r.Value)
	msg.MetaSetMut("kafka_key", string(r.Key))
	msg.MetaSetMut("kafka_topic", r.Topic)
	msg.MetaSetMut("kafka_partition", int(r.Partition))
	msg.MetaSetMut("kafka_offset", int(r.Offset))
	msg.MetaSetMut("kafka_timestamp_unix", r.Timestamp.Unix())
	msg.MetaSetMut("kafka_timestamp_ms", r.Timestamp.UnixMilli())
	msg.MetaSetMut("kafka_tombstone_message", r.Value == nil)
	for _, h := range r.Headers {
		msg.MetaSetMut(h.Key, string(h.Value))
	}
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
