package kafka

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// topicPlan is what the `topics` list asks for: whole topics (balanced by the group, or
// every partition when there is no group), regular expressions, or explicit partitions.
type topicPlan struct {
	topics     []string
	partitions map[string][]int32 // explicit `topic:partition` and `topic:start-end` entries
}

// parseTopics reads `topics` the way kafka_franz users write it: each entry may hold
// several comma-separated names; `name:3` and `name:0-3` name explicit partitions.
// Explicit partitions are consumed without a group, so they cannot be mixed with whole
// topics, regular expressions or `consumer_group` — a precise error says which entry.
func parseTopics(entries []string, regexpTopics bool, group string) (topicPlan, error) {
	plan := topicPlan{partitions: map[string][]int32{}}
	for _, entry := range entries {
		for _, name := range strings.Split(entry, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if regexpTopics {
				if _, err := regexp.Compile(name); err != nil {
					return plan, fmt.Errorf("topics: %q is not a regular expression: %w", name, err)
				}
				plan.topics = append(plan.topics, name)
				continue
			}
			topic, parts, explicit, err := splitPartitions(name)
			if err != nil {
				return plan, err
			}
			if !explicit {
				plan.topics = append(plan.topics, topic)
				continue
			}
			plan.partitions[topic] = append(plan.partitions[topic], parts...)
		}
	}
	if len(plan.topics) == 0 && len(plan.partitions) == 0 {
		return plan, fmt.Errorf("topics: at least one topic is required")
	}
	if len(plan.partitions) > 0 {
		if len(plan.topics) > 0 {
			return plan, fmt.Errorf("topics: explicit partitions (%s) cannot be mixed with whole topics (%s)",
				firstKey(plan.partitions), plan.topics[0])
		}
		if group != "" {
			return plan, fmt.Errorf("topics: explicit partitions (%s) are consumed without a group: remove consumer_group, or list whole topics",
				firstKey(plan.partitions))
		}
	}
	return plan, nil
}

// splitPartitions reads `topic`, `topic:N` or `topic:A-B`.
func splitPartitions(name string) (topic string, parts []int32, explicit bool, err error) {
	i := strings.LastIndex(name, ":")
	if i < 0 {
		return name, nil, false, nil
	}
	topic, spec := name[:i], name[i+1:]
	if topic == "" {
		return "", nil, false, fmt.Errorf("topics: %q names no topic before the colon", name)
	}
	lo, hi := spec, spec
	if j := strings.Index(spec, "-"); j >= 0 {
		lo, hi = spec[:j], spec[j+1:]
	}
	first, err1 := strconv.ParseInt(lo, 10, 32)
	last, err2 := strconv.ParseInt(hi, 10, 32)
	if err1 != nil || err2 != nil || first < 0 || last < first {
		return "", nil, false, fmt.Errorf("topics: %q: expected topic:partition or topic:first-last with first <= last", name)
	}
	for p := first; p <= last; p++ {
		parts = append(parts, int32(p))
	}
	return topic, parts, true, nil
}

func firstKey(m map[string][]int32) string {
	for k, v := range m {
		return fmt.Sprintf("%s:%d", k, v[0])
	}
	return ""
}
