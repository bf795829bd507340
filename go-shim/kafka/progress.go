package kafka

import (
	"context"
	"sync"
	"time"
)

// progressInterval is how often the input logs its lag (nothing while it has none and
// reads nothing): beside the iceberg output's progress line, how far behind the
// pipeline is.
const progressInterval = time.Minute

// lagBook keeps each owned partition's lag for the progress line (the gauge holds it for
// the exporter, but cannot be read back).
type lagBook struct {
	mu    sync.Mutex
	parts map[topicPartition]int64
	read  int64
}

// setLag records a partition's lag in the gauge and the book.
func (in *input) setLag(topic string, partition int32, lag int64) {
	in.lag.Set(lag, topic, partitionLabel(partition))
	in.lags.mu.Lock()
	defer in.lags.mu.Unlock()
	if in.lags.parts == nil {
		in.lags.parts = map[topicPartition]int64{}
	}
	in.lags.parts[topicPartition{topic, partition}] = lag
}

// forgetLag drops a partition this host no longer owns.
func (in *input) forgetLag(topic string, partition int32) {
	in.lag.Set(0, topic, partitionLabel(partition))
	in.lags.mu.Lock()
	defer in.lags.mu.Unlock()
	delete(in.lags.parts, topicPartition{topic, partition})
}

// countRead adds records read, for the progress line.
func (in *input) countRead(n int) {
	in.lags.mu.Lock()
	in.lags.read += int64(n)
	in.lags.mu.Unlock()
}

// total is the summed lag, the partitions it is over and the records read since the
// last call.
func (b *lagBook) total() (lag int64, parts int, read int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.parts {
		lag += l
	}
	read, b.read = b.read, 0
	return lag, len(b.parts), read
}

// progress logs the lag every progressInterval until ctx ends.
func (in *input) progress(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lag, parts, read := in.lags.total()
		if lag == 0 && read == 0 {
			continue
		}
		in.log.Infof("kafka_franz: %d records read in the last %s; lag %d records over %d owned partitions", read, interval, lag, parts)
	}
}
