package kafka

import (
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, yaml string) (config, error) {
	t.Helper()
	conf, err := inputSpec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	return parseConfig(conf)
}

func TestDefaultsAreKafkaFranzs(t *testing.T) {
	c, err := parse(t, "seed_brokers: [ 'a:9092,b:9092' ]\ntopics: [ orders ]\nconsumer_group: g")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.brokers) != 2 || c.checkpointLimit != 1024 || c.commitPeriod != 5*time.Second ||
		!c.fromOldest || c.sessionTimeout != 45*time.Second || c.fetchMaxBytes != 50<<20 || !c.batching.IsNoop() {
		t.Fatalf("%+v", c)
	}
}

func TestSettingsThatCannotWorkAreRefusedWithTheirField(t *testing.T) {
	for yaml, want := range map[string]string{
		"seed_brokers: [ ' , ' ]\ntopics: [ t ]":                              "seed_brokers",
		"seed_brokers: [ a ]\ntopics: [ t ]\ncheckpoint_limit: 0":             "checkpoint_limit",
		"seed_brokers: [ a ]\ntopics: [ t ]\ncommit_period: 0s":               "commit_period",
		"seed_brokers: [ a ]\ntopics: [ t ]\nheartbeat_interval: 50s":         "heartbeat_interval",
		"seed_brokers: [ a ]\ntopics: [ t ]\nfetch_max_partition_bytes: 3GiB": "fetch_max_partition_bytes",
		"seed_brokers: [ a ]\ntopics: [ 't:1' ]\nconsumer_group: g":           "remove consumer_group",
		"seed_brokers: [ a ]\ntopics: [ t ]\nsasl: [ { mechanism: PLAIN } ]":  "needs a username",
		// franz-go's own limits, which failed every connect instead of the start.
		"seed_brokers: [ a ]\ntopics: [ t ]\nfetch_max_bytes: 2047MiB":                        "fetch_max_bytes",
		"seed_brokers: [ a ]\ntopics: [ t ]\nfetch_max_bytes: 17179869185GiB":                 "fetch_max_bytes",
		"seed_brokers: [ a ]\ntopics: [ t ]\nfetch_max_wait: 0s":                              "fetch_max_wait",
		"seed_brokers: [ a ]\ntopics: [ t ]\nfetch_max_wait: 1000h":                           "fetch_max_wait",
		"seed_brokers: [ a ]\ntopics: [ t ]\ncommit_period: 50ms":                             "commit_period",
		"seed_brokers: [ a ]\ntopics: [ t ]\nsession_timeout: 50ms\nheartbeat_interval: 10ms": "session_timeout",
		"seed_brokers: [ a ]\ntopics: [ t ]\nrebalance_timeout: 10ms":                         "rebalance_timeout",
	} {
		if _, err := parse(t, yaml); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %q", yaml, err, want)
		}
	}
}

// A fetch_max_bytes above franz-go's default broker read limit (100 MiB) raises that
// limit with it: 200MiB failed every connect.
func TestLargeFetchSizesRaiseTheBrokerReadLimit(t *testing.T) {
	c, err := parse(t, "seed_brokers: [ a ]\ntopics: [ t ]\nfetch_max_bytes: 200MiB")
	if err != nil {
		t.Fatal(err)
	}
	if got := brokerMaxReadBytes(c); got != 200<<20 {
		t.Fatalf("broker read limit %d", got)
	}
	if c, _ := parse(t, "seed_brokers: [ a ]\ntopics: [ t ]"); brokerMaxReadBytes(c) != 100<<20 {
		t.Fatalf("the default limit is franz-go's")
	}
}
