// Package kafka registers a `kafka_franz` input on franz-go: the field names users of
// that input already know, offsets committed to the consumer group only after the
// pipeline acknowledged every record before them, and rebalances that never let a
// commit pass an unacknowledged record.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() {
	service.MustRegisterBatchInput("kafka_franz", inputSpec(), newInput)
}

func inputSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Stable().
		Categories("Services").
		Summary("Reads records from Kafka topics with franz-go, committing offsets to a consumer group once the pipeline acknowledged them.").
		Description(`
Offsets are committed per partition only up to the first record not yet acknowledged by
the output, every `+"`commit_period`"+` and when partitions are revoked. A rebalance that
moves a partition away ends this process's claim on its unacknowledged records: the new
owner reads them again (at-least-once). Pair it with the iceberg output's
`+"`commit.exactly_once`"+` (source `+"`${! meta(\"kafka_topic\") }/${! meta(\"kafka_partition\") }`"+`,
offset `+"`${! meta(\"kafka_offset\") }`"+`) to keep each record in the table once.

Metadata: kafka_key, kafka_topic, kafka_partition, kafka_offset, kafka_timestamp_unix,
kafka_timestamp_ms, kafka_tombstone_message, and every record header.`).
		Fields(
			service.NewStringListField("seed_brokers").
				Description("Addresses of brokers to connect to first; entries may hold several comma-separated addresses.").
				Example([]string{"127.0.0.1:9092"}),
			service.NewStringListField("topics").
				Description("Topics to read: `name`, `name:partition`, `name:first-last`, or regular expressions with `regexp_topics`."),
			service.NewBoolField("regexp_topics").Default(false).
				Description("Treat each entry of `topics` as a regular expression matched against the cluster's topics."),
			service.NewStringField("consumer_group").Optional().
				Description("A consumer group: partitions are balanced across its members, and offsets committed and resumed under its name."),
			service.NewStringField("client_id").Default("floe").Advanced().Description("The client id the brokers see (in their logs and quotas)."),
			service.NewStringField("rack_id").Default("").Advanced().Description("The rack (e.g. availability zone) this host runs in, so brokers with `replica.selector.class` set can serve fetches from a replica in the same rack."),
			service.NewBoolField("start_from_oldest").Default(true).
				Description("With no committed offset, start from the oldest record (else from the newest)."),
			service.NewIntField("checkpoint_limit").Default(1024).
				Description("Unacknowledged records of one partition allowed before reading waits."),
			service.NewDurationField("commit_period").Default("5s").
				Description("How often acknowledged offsets are committed to the group."),
			service.NewDurationField("session_timeout").Default("45s").Advanced().
				Description("How long the group waits for a silent member (a crashed host) before giving its partitions to others; the broker bounds it (group.min/max.session.timeout.ms)."),
			service.NewDurationField("rebalance_timeout").Default("60s").Advanced().
				Description("How long the group waits for members to rejoin during a rebalance."),
			service.NewDurationField("heartbeat_interval").Default("3s").Advanced().
				Description("How often the member tells the group it is alive; well below session_timeout."),
			service.NewStringField("fetch_max_bytes").Default("50MiB").Advanced().Description("Most bytes one fetch response may hold, over all partitions (at most 1GiB)."),
			service.NewStringField("fetch_max_partition_bytes").Default("1MiB").Advanced().Description("Most bytes one fetch returns for one partition."),
			service.NewDurationField("fetch_max_wait").Default("500ms").Advanced().Description("How long a broker may wait for records before answering a fetch (at least 10ms)."),
			service.NewTLSToggledField("tls"),
			saslField(),
			service.NewAutoRetryNacksToggleField(),
			service.NewBatchPolicyField("batching"),
		).
		LintRule(`root = if this.topics.or([]).length() == 0 { "topics: at least one topic is required" }`)
}

// config is the input's parsed settings.
type config struct {
	brokers           []string
	plan              topicPlan
	regexp            bool
	group             string
	clientID          string
	rack              string
	fromOldest        bool
	checkpointLimit   int
	commitPeriod      time.Duration
	sessionTimeout    time.Duration
	rebalanceTimeout  time.Duration
	heartbeat         time.Duration
	fetchMaxBytes     int32
	fetchMaxPartBytes int32
	fetchMaxWait      time.Duration
	opts              []kgo.Opt // TLS and SASL
	batching          service.BatchPolicy
}

func parseConfig(conf *service.ParsedConfig) (config, error) {
	var c config
	var err error
	if c.brokers, err = brokerList(conf); err != nil {
		return c, err
	}
	topics, err := conf.FieldStringList("topics")
	if err != nil {
		return c, err
	}
	if c.regexp, err = conf.FieldBool("regexp_topics"); err != nil {
		return c, err
	}
	if conf.Contains("consumer_group") {
		if c.group, err = conf.FieldString("consumer_group"); err != nil {
			return c, err
		}
	}
	if c.plan, err = parseTopics(topics, c.regexp, c.group); err != nil {
		return c, err
	}
	if c.clientID, err = conf.FieldString("client_id"); err != nil {
		return c, err
	}
	if c.rack, err = conf.FieldString("rack_id"); err != nil {
		return c, err
	}
	if c.fromOldest, err = conf.FieldBool("start_from_oldest"); err != nil {
		return c, err
	}
	if c.checkpointLimit, err = conf.FieldInt("checkpoint_limit"); err != nil {
		return c, err
	}
	if c.checkpointLimit < 1 {
		return c, fmt.Errorf("checkpoint_limit: %d: must be at least 1", c.checkpointLimit)
	}
	if c.commitPeriod, err = conf.FieldDuration("commit_period"); err != nil {
		return c, err
	}
	if c.commitPeriod < 100*time.Millisecond {
		return c, fmt.Errorf("commit_period: %v: must be at least 100ms", c.commitPeriod)
	}
	if c.sessionTimeout, err = conf.FieldDuration("session_timeout"); err != nil {
		return c, err
	}
	if c.rebalanceTimeout, err = conf.FieldDuration("rebalance_timeout"); err != nil {
		return c, err
	}
	if c.heartbeat, err = conf.FieldDuration("heartbeat_interval"); err != nil {
		return c, err
	}
	for field, d := range map[string]time.Duration{"session_timeout": c.sessionTimeout, "rebalance_timeout": c.rebalanceTimeout} {
		if d < 100*time.Millisecond || d > maxWireDuration {
			return c, fmt.Errorf("%s: %v: must be between 100ms and %v", field, d, maxWireDuration)
		}
	}
	if c.heartbeat <= 0 || c.heartbeat >= c.sessionTimeout {
		return c, fmt.Errorf("heartbeat_interval: %v must be positive and below session_timeout (%v)", c.heartbeat, c.sessionTimeout)
	}
	if c.fetchMaxBytes, err = byteSize(conf, "fetch_max_bytes"); err != nil {
		return c, err
	}
	if c.fetchMaxBytes > maxBrokerReadBytes {
		return c, fmt.Errorf("fetch_max_bytes: %d bytes: at most 1GiB (the largest response franz-go reads)", c.fetchMaxBytes)
	}
	if c.fetchMaxPartBytes, err = byteSize(conf, "fetch_max_partition_bytes"); err != nil {
		return c, err
	}
	if c.fetchMaxWait, err = conf.FieldDuration("fetch_max_wait"); err != nil {
		return c, err
	}
	if c.fetchMaxWait < 10*time.Millisecond || c.fetchMaxWait > maxWireDuration {
		return c, fmt.Errorf("fetch_max_wait: %v: must be between 10ms and %v", c.fetchMaxWait, maxWireDuration)
	}
	if c.opts, err = securityOpts(conf); err != nil {
		return c, err
	}
	if c.batching, err = conf.FieldBatchPolicy("batching"); err != nil {
		return c, err
	}
	return c, nil
}

// input reads records on one goroutine (`readLoop`) and hands batches to ReadBatch.
type input struct {
	conf    config
	log     *service.Logger
	res     *service.Resources
	lag     *service.MetricGauge
	commits *service.MetricCounter
	lags    lagBook

	mu      sync.Mutex
	client  *kgo.Client
	marker  atomic.Pointer[kgo.Client] // the client acknowledgements mark offsets on, read without mu
	cancel  context.CancelFunc
	done    chan struct{}
	batches chan delivery

	marks *checkpointer
}

// delivery is one batch for the pipeline and the spans its acknowledgement settles.
type delivery struct {
	batch service.MessageBatch
	spans []*span
}

func newInput(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
	c, err := parseConfig(conf)
	if err != nil {
		return nil, err
	}
	in := &input{
		conf:    c,
		marks:   newCheckpointer(c.checkpointLimit),
		log:     mgr.Logger(),
		res:     mgr,
		lag:     mgr.Metrics().NewGauge("input_kafka_lag", "topic", "partition"),
		commits: mgr.Metrics().NewCounter("input_kafka_offset_commits_total"),
	}
	return service.AutoRetryNacksBatchedToggled(conf, in)
}

// franz-go's limits, checked at start so that a setting beyond them names its field
// instead of failing every connect: durations travel as int32 milliseconds, and a
// response is read into at most 1 GiB.
const (
	maxWireDuration    = time.Duration(math.MaxInt32) * time.Millisecond
	maxBrokerReadBytes = 1 << 30
)

// brokerMaxReadBytes is franz-go's default limit on a response (100 MiB), raised to
// fetch_max_bytes where that is larger (franz-go refuses a fetch larger than it).
func brokerMaxReadBytes(c config) int32 {
	return max(100<<20, c.fetchMaxBytes)
}

// clientOpts builds franz-go's options from the config; callbacks reach `in`.
func (in *input) clientOpts() []kgo.Opt {
	c := in.conf
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.brokers...),
		kgo.ClientID(c.clientID),
		kgo.FetchMaxBytes(c.fetchMaxBytes),
		kgo.BrokerMaxReadBytes(brokerMaxReadBytes(c)),
		kgo.FetchMaxPartitionBytes(c.fetchMaxPartBytes),
		kgo.FetchMaxWait(c.fetchMaxWait),
		kgo.WithLogger(franzLogger{in.log}),
	}
	if c.rack != "" {
		opts = append(opts, kgo.Rack(c.rack))
	}
	start := kgo.NewOffset().AtEnd()
	if c.fromOldest {
		start = kgo.NewOffset().AtStart()
	}
	opts = append(opts, kgo.ConsumeResetOffset(start))
	if len(c.plan.partitions) > 0 {
		direct := map[string]map[int32]kgo.Offset{}
		for topic, parts := range c.plan.partitions {
			direct[topic] = map[int32]kgo.Offset{}
			for _, p := range parts {
				direct[topic][p] = start
			}
		}
		opts = append(opts, kgo.ConsumePartitions(direct))
	} else {
		opts = append(opts, kgo.ConsumeTopics(c.plan.topics...))
		if c.regexp {
			opts = append(opts, kgo.ConsumeRegex())
		}
	}
	if c.group != "" {
		opts = append(opts,
			kgo.ConsumerGroup(c.group),
			// Between a poll and the moment its records are tied to their ownership, no
			// rebalance may run (see readLoop).
			kgo.BlockRebalanceOnPoll(),
			kgo.AutoCommitMarks(),
			kgo.AutoCommitInterval(c.commitPeriod),
			kgo.SessionTimeout(c.sessionTimeout),
			kgo.RebalanceTimeout(c.rebalanceTimeout),
			kgo.HeartbeatInterval(c.heartbeat),
			kgo.AutoCommitCallback(in.committed),
			kgo.OnPartitionsAssigned(in.assigned),
			kgo.OnPartitionsRevoked(in.revoked),
			kgo.OnPartitionsLost(in.lost),
		)
	}
	return append(opts, c.opts...)
}

// Connect starts a client, checks a broker answers (so a wrong address or refused
// credentials are reported here, and retried by the host), and starts reading.
func (in *input) Connect(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.client != nil {
		return nil
	}
	var batcher *service.Batcher
	if !in.conf.batching.IsNoop() {
		b, err := in.conf.batching.NewBatcher(in.res)
		if err != nil {
			return fmt.Errorf("kafka_franz: batching: %w", err)
		}
		batcher = b
	}
	client, err := kgo.NewClient(in.clientOpts()...)
	if err != nil {
		if batcher != nil {
			_ = batcher.Close(ctx)
		}
		return err
	}
	if err := client.Ping(ctx); err != nil {
		client.Close()
		if batcher != nil {
			_ = batcher.Close(ctx)
		}
		return fmt.Errorf("kafka_franz: no broker of %v answered: %w", in.conf.brokers, err)
	}
	readCtx, cancel := context.WithCancel(context.Background())
	in.client, in.cancel = client, cancel
	in.marker.Store(client)
	in.marks.forgetAll() // a new client reads again from the group's committed offsets
	in.batches = make(chan delivery)
	in.done = make(chan struct{})
	go in.readLoop(readCtx, client, batcher, in.batches, in.done)
	go in.progress(readCtx, progressInterval)
	return nil
}

// ReadBatch hands the next batch to the pipeline; its ack settles the batch's spans.
func (in *input) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	in.mu.Lock()
	batches, done := in.batches, in.done
	in.mu.Unlock()
	if batches == nil {
		return nil, nil, service.ErrNotConnected
	}
	select {
	case d := <-batches:
		return d.batch, func(ctx context.Context, err error) error {
			if err != nil {
				// Replay is on (auto_replay_nacks): a nack here means replay was
				// turned off, and the user chose to drop what failed.
				in.log.Warnf("kafka_franz: %d messages not delivered and dropped (auto_replay_nacks: false): %v", len(d.batch), err)
			}
			in.settle(d.spans)
			return nil
		}, nil
	case <-done:
		in.mu.Lock()
		in.disconnectLocked()
		in.mu.Unlock()
		return nil, nil, service.ErrNotConnected
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// settle acknowledges spans and marks the offsets the group may now commit.
func (in *input) settle(spans []*span) {
	points := in.marks.ack(spans)
	if len(points) == 0 || in.conf.group == "" {
		return
	}
	marks := map[string]map[int32]kgo.EpochOffset{}
	for _, p := range points {
		if marks[p.tp.topic] == nil {
			marks[p.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		marks[p.tp.topic][p.tp.partition] = kgo.EpochOffset{Epoch: p.leaderEpoch, Offset: p.offset}
	}
	if client := in.marker.Load(); client != nil {
		client.MarkCommitOffsets(marks)
	}
}

// assigned starts fresh logs for newly owned partitions.
func (in *input) assigned(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	in.marks.reset(parts)
	in.log.Infof("kafka_franz: partitions assigned: %v", parts)
}

// revoked gives the pipeline a moment to acknowledge what it holds of the revoked
// partitions (fewer records read twice), then ends this process's claim on them and
// commits what was acknowledged, before the group hands them to another member.
func (in *input) revoked(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	in.drain(ctx, parts, 5*time.Second)
	in.marks.reset(parts)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		in.log.Warnf("kafka_franz: committing offsets of revoked partitions %v: %v (their new owner reads from the last committed offset)", parts, err)
	}
	in.clearLag(parts)
	in.log.Infof("kafka_franz: partitions revoked: %v", parts)
}

// clearLag sets the lag of partitions this host no longer owns to 0: their new owner
// reports it, and a stale value here would be counted twice by a sum across hosts.
func (in *input) clearLag(parts map[string][]int32) {
	for topic, ps := range parts {
		for _, p := range ps {
			in.forgetLag(topic, p)
		}
	}
}

// lost ends the claim on partitions the group took away without a revoke (a session
// timeout, a fenced member): a commit could not succeed, so none is tried.
func (in *input) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	in.marks.reset(parts)
	in.clearLag(parts)
	in.log.Warnf("kafka_franz: partitions lost: %v (unacknowledged records are read again by their new owner)", parts)
}

// drain waits up to `limit` for the partitions' records in flight to be acknowledged.
func (in *input) drain(ctx context.Context, parts map[string][]int32, limit time.Duration) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for in.marks.inFlight(parts) > 0 {
		select {
		case <-in.marks.waitChange():
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// committed counts offset commits and logs refused ones.
func (in *input) committed(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err != nil {
		in.log.Warnf("kafka_franz: committing offsets: %v", err)
		return
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
				in.log.Warnf("kafka_franz: committing the offset of %s/%d: %v", t.Topic, p.Partition, perr)
				return
			}
		}
	}
	in.commits.Incr(1)
}

// Close stops reading, commits what was acknowledged and leaves the group.
func (in *input) Close(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.disconnectLocked()
	return nil
}

// disconnectLocked stops the read loop and the client; in.mu is held.
func (in *input) disconnectLocked() {
	if in.client == nil {
		return
	}
	in.cancel()
	<-in.done
	// The host closes an input once what it delivered was acknowledged or abandoned:
	// nothing is left to wait for at the final revoke.
	in.marks.forgetAll()
	if in.conf.group != "" {
		commitCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := in.client.CommitMarkedOffsets(commitCtx); err != nil {
			in.log.Warnf("kafka_franz: committing offsets at close: %v", err)
		}
		cancel()
	}
	in.client.CloseAllowingRebalance()
	in.marker.Store(nil)
	in.client, in.batches = nil, nil
}

func brokerList(conf *service.ParsedConfig) ([]string, error) {
	raw, err := conf.FieldStringList("seed_brokers")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, entry := range raw {
		for _, b := range splitComma(entry) {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("seed_brokers: at least one broker address is required")
	}
	return out, nil
}

func byteSize(conf *service.ParsedConfig, field string) (int32, error) {
	s, err := conf.FieldString(field)
	if err != nil {
		return 0, err
	}
	n, err := parseBytes(s)
	if err != nil || n <= 0 || n > 1<<31-1 {
		return 0, fmt.Errorf("%s: %q: expected a size such as 1MiB, between 1 byte and 2GiB", field, s)
	}
	return int32(n), nil
}

func partitionLabel(p int32) string { return strconv.Itoa(int(p)) }
