package prometheus

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

func newTestExporter(t *testing.T, yaml string) *exporter {
	t.Helper()
	conf, err := spec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newExporter(conf, service.MockResources().Logger())
	if err != nil {
		t.Fatal(err)
	}
	return e.(*exporter)
}

func scrape(t *testing.T, e *exporter) string {
	t.Helper()
	rec := httptest.NewRecorder()
	e.HandlerFunc()(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

func TestHostMetricsAppearInPrometheusTextWithTheirLabels(t *testing.T) {
	e := newTestExporter(t, "add_process_metrics: false\nadd_go_metrics: false")
	e.NewCounterCtor("iceberg_row_operations_total", "operation")("insert").Incr(42)
	e.NewGaugeCtor("input_kafka_lag", "topic", "partition")("events", "3").Set(17)
	e.NewTimerCtor("iceberg_write_batch_latency_ns")().Timing(250_000_000)
	body := scrape(t, e)
	for _, want := range []string{
		`iceberg_row_operations_total{operation="insert"} 42`,
		`input_kafka_lag{partition="3",topic="events"} 17`,
		`iceberg_write_batch_latency_seconds_bucket{le="0.25"} 1`,
		`iceberg_write_batch_latency_seconds_bucket{le="0.1"} 0`,
		`iceberg_write_batch_latency_seconds_sum 0.25`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %q in:\n%s", want, body)
		}
	}
}

func TestSummariesWhenHistogramsAreOff(t *testing.T) {
	e := newTestExporter(t, "use_histogram_timing: false\nadd_process_metrics: false\nadd_go_metrics: false")
	e.NewTimerCtor("output_latency_ns")().Timing(1_000_000)
	if body := scrape(t, e); !strings.Contains(body, `output_latency_seconds{quantile="0.5"} 0.001`) {
		t.Errorf("no summary quantile in:\n%s", body)
	}
}

func TestOneNameAsTwoKindsDoesNotCrashTheHost(t *testing.T) {
	e := newTestExporter(t, "add_process_metrics: false\nadd_go_metrics: false")
	e.NewCounterCtor("x")().Incr(1)
	e.NewGaugeCtor("x")().Set(5) // dropped with a warning
	if body := scrape(t, e); !strings.Contains(body, "x 1") {
		t.Errorf("the counter is gone:\n%s", body)
	}
}

func TestOneNameWithTwoLabelSetsOrARuntimeNameDoesNotCrashTheHost(t *testing.T) {
	e := newTestExporter(t, "add_process_metrics: true\nadd_go_metrics: true")
	e.NewCounterCtor("requests", "code")("200").Incr(3)
	e.NewCounterCtor("requests", "code", "path")("500", "/x").Incr(1) // dropped with a warning
	e.NewGaugeCtor("go_goroutines")().Set(1)                          // the runtime's name: dropped
	body := scrape(t, e)
	if !strings.Contains(body, `requests{code="200"} 3`) {
		t.Errorf("the first label set is gone:\n%s", body)
	}
}

func TestNamesAreMadeValid(t *testing.T) {
	if got := metricName("input.kafka-lag"); got != "input_kafka_lag" {
		t.Errorf("got %s", got)
	}
	if got := metricName("9lives"); got != "_9lives" {
		t.Errorf("got %s", got)
	}
}

func TestBucketsMustIncrease(t *testing.T) {
	conf, err := spec().ParseYAML("histogram_buckets: [1, 0.5]", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newExporter(conf, service.MockResources().Logger()); err == nil || !strings.Contains(err.Error(), "increasing") {
		t.Fatalf("decreasing buckets: %v", err)
	}
}

func TestALabelValueThatIsNotUTF8IsReplacedNotAPanic(t *testing.T) {
	e := newTestExporter(t, "add_process_metrics: false\nadd_go_metrics: false")
	e.NewCounterCtor("x_total", "table")("bad\xffname").Incr(1)
	if text := scrape(t, e); !strings.Contains(text, "x_total{table=\"bad\uFFFDname\"} 1") {
		t.Fatalf("scraped:\n%s", text)
	}
}
