package kafka

import (
	"reflect"
	"strings"
	"testing"
)

func TestTopicsAsUsersWriteThem(t *testing.T) {
	plan, err := parseTopics([]string{"a, b", "c"}, false, "g")
	if err != nil || !reflect.DeepEqual(plan.topics, []string{"a", "b", "c"}) {
		t.Fatalf("%v %v", plan.topics, err)
	}
	plan, err = parseTopics([]string{"a:0", "b:1-3"}, false, "")
	if err != nil || !reflect.DeepEqual(plan.partitions, map[string][]int32{"a": {0}, "b": {1, 2, 3}}) {
		t.Fatalf("%v %v", plan.partitions, err)
	}
	plan, err = parseTopics([]string{"orders-.*"}, true, "g")
	if err != nil || !reflect.DeepEqual(plan.topics, []string{"orders-.*"}) {
		t.Fatalf("%v %v", plan.topics, err)
	}
}

func TestTopicsThatCannotWorkAreRefusedPrecisely(t *testing.T) {
	for _, c := range []struct {
		topics []string
		regexp bool
		group  string
		want   string
	}{
		{[]string{"a:0"}, false, "g", "remove consumer_group"},
		{[]string{"a:0", "b"}, false, "", "cannot be mixed"},
		{[]string{"a:3-1"}, false, "", "first <= last"},
		{[]string{"a:x"}, false, "", "topic:partition"},
		{[]string{":1"}, false, "", "names no topic"},
		{[]string{"("}, true, "", "not a regular expression"},
		{[]string{" , "}, false, "", "at least one topic"},
	} {
		_, err := parseTopics(c.topics, c.regexp, c.group)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.topics, err, c.want)
		}
	}
}

func TestSizesAsKafkaFranzReadsThem(t *testing.T) {
	for in, want := range map[string]int64{"1MiB": 1 << 20, "50MB": 50 << 20, "512KB": 512 << 10, "100": 100, "7B": 7} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	if _, err := parseBytes("lots"); err == nil {
		t.Error("a size without a number was accepted")
	}
}
