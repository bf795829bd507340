// Package prometheus registers a `prometheus` metrics exporter: every metric of the host
// (the iceberg output's counters and latencies, the Kafka input's lag per partition,
// the host's own input/output counters) on `/metrics` of the host's HTTP server.
package prometheus

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redpanda-data/benthos/v4/public/service"
)

func init() {
	service.MustRegisterMetricsExporter("prometheus", spec(), newExporter)
}

func spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Summary("Serves the host's metrics in Prometheus' text format on `/metrics` of the HTTP server (`http.address`).").
		Description(`
Timings (names ending in `+"`_ns`"+`, in nanoseconds inside the host) are exported in
seconds under the same name with `+"`_seconds`"+` in place of `+"`_ns`"+`, as histograms
(or summaries with `+"`use_histogram_timing: false`"+`).`).
		Fields(
			service.NewBoolField("use_histogram_timing").Default(true).
				Description("Export timings as histograms (aggregatable across hosts); false exports summaries with quantiles."),
			service.NewFloatListField("histogram_buckets").
				Default([]any{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0}).
				Description("Bucket bounds in seconds for timing histograms."),
			service.NewBoolField("add_process_metrics").Default(true).
				Description("Also export the process's CPU, memory and file descriptors."),
			service.NewBoolField("add_go_metrics").Default(true).
				Description("Also export the Go runtime's metrics (goroutines, GC, heap)."),
		)
}

// exporter keeps one registry; each metric name is registered once as a vector, and
// every set of label values the host asks for is a child of it.
type exporter struct {
	registry   *prometheus.Registry
	histograms bool
	buckets    []float64

	mu         sync.Mutex
	counters   map[string]*prometheus.CounterVec
	gauges     map[string]*prometheus.GaugeVec
	histos     map[string]*prometheus.HistogramVec
	summaries  map[string]*prometheus.SummaryVec
	registered map[string]string   // name -> kind, to refuse one name used as two kinds
	labels     map[string][]string // name -> label keys, to refuse one name with two label sets
	log        *service.Logger
}

func newExporter(conf *service.ParsedConfig, log *service.Logger) (service.MetricsExporter, error) {
	e := &exporter{
		registry:   prometheus.NewRegistry(),
		counters:   map[string]*prometheus.CounterVec{},
		gauges:     map[string]*prometheus.GaugeVec{},
		histos:     map[string]*prometheus.HistogramVec{},
		summaries:  map[string]*prometheus.SummaryVec{},
		registered: map[string]string{},
		labels:     map[string][]string{},
		log:        log,
	}
	var err error
	if e.histograms, err = conf.FieldBool("use_histogram_timing"); err != nil {
		return nil, err
	}
	if e.buckets, err = conf.FieldFloatList("histogram_buckets"); err != nil {
		return nil, err
	}
	for i := 1; i < len(e.buckets); i++ {
		if e.buckets[i] <= e.buckets[i-1] {
			return nil, fmt.Errorf("histogram_buckets: must be increasing (%v after %v)", e.buckets[i], e.buckets[i-1])
		}
	}
	if on, err := conf.FieldBool("add_process_metrics"); err != nil {
		return nil, err
	} else if on {
		e.registry.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if on, err := conf.FieldBool("add_go_metrics"); err != nil {
		return nil, err
	} else if on {
		e.registry.MustRegister(collectors.NewGoCollector())
	}
	return e, nil
}

// HandlerFunc is served by the host's HTTP server at /metrics (and /stats).
func (e *exporter) HandlerFunc() http.HandlerFunc {
	return promhttp.HandlerFor(e.registry, promhttp.HandlerOpts{}).ServeHTTP
}

var invalidName = regexp.MustCompile(`[^a-zA-Z0-9_:]`)

// metricName makes a host metric name a valid Prometheus name.
func metricName(name string) string {
	name = invalidName.ReplaceAllString(name, "_")
	if name != "" && name[0] >= '0' && name[0] <= '9' {
		name = "_" + name
	}
	return name
}

func labelNames(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = metricName(k)
	}
	return out
}

// claimLocked records that `name` is a metric of `kind` with `keys`; false (and a log
// line) when the name is already another kind or has other labels: those values then go
// nowhere rather than crash the host.
func (e *exporter) claimLocked(name, kind string, keys []string) bool {
	if have, ok := e.registered[name]; ok {
		if have != kind || !sameKeys(e.labels[name], keys) {
			e.log.Warnf("prometheus: metric %s is already a %s with labels %v; the %s with labels %v is not exported",
				name, have, e.labels[name], kind, keys)
			return false
		}
		return true
	}
	e.registered[name] = kind
	e.labels[name] = append([]string(nil), keys...)
	return true
}

// registerLocked adds a collector; false (and a log line) when the registry refuses it,
// e.g. a host metric named like one of the process or Go runtime metrics.
func (e *exporter) registerLocked(name string, c prometheus.Collector) bool {
	if err := e.registry.Register(c); err != nil {
		e.log.Warnf("prometheus: metric %s is not exported: %v", name, err)
		delete(e.registered, name)
		delete(e.labels, name)
		return false
	}
	return true
}

func sameKeys(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (e *exporter) NewCounterCtor(name string, labelKeys ...string) service.MetricsExporterCounterCtor {
	name = metricName(name)
	e.mu.Lock()
	defer e.mu.Unlock()
	noCounter := func(...string) service.MetricsExporterCounter { return discard{} }
	if !e.claimLocked(name, "counter", labelKeys) {
		return noCounter
	}
	vec, ok := e.counters[name]
	if !ok {
		vec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "Host counter " + name}, labelNames(labelKeys))
		if !e.registerLocked(name, vec) {
			return noCounter
		}
		e.counters[name] = vec
	}
	return func(values ...string) service.MetricsExporterCounter {
		return counter{vec.WithLabelValues(validLabels(values)...)}
	}
}

func (e *exporter) NewGaugeCtor(name string, labelKeys ...string) service.MetricsExporterGaugeCtor {
	name = metricName(name)
	e.mu.Lock()
	defer e.mu.Unlock()
	noGauge := func(...string) service.MetricsExporterGauge { return discard{} }
	if !e.claimLocked(name, "gauge", labelKeys) {
		return noGauge
	}
	vec, ok := e.gauges[name]
	if !ok {
		vec = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "Host gauge " + name}, labelNames(labelKeys))
		if !e.registerLocked(name, vec) {
			return noGauge
		}
		e.gauges[name] = vec
	}
	return func(values ...string) service.MetricsExporterGauge {
		return gauge{vec.WithLabelValues(validLabels(values)...)}
	}
}

// NewTimerCtor exports a timing in seconds: `x_ns` becomes `x_seconds`.
func (e *exporter) NewTimerCtor(name string, labelKeys ...string) service.MetricsExporterTimerCtor {
	name = metricName(strings.TrimSuffix(name, "_ns") + "_seconds")
	e.mu.Lock()
	defer e.mu.Unlock()
	noTimer := func(...string) service.MetricsExporterTimer { return discard{} }
	if !e.claimLocked(name, "timer", labelKeys) {
		return noTimer
	}
	help := "Host timing " + name + " in seconds"
	if e.histograms {
		vec, ok := e.histos[name]
		if !ok {
			vec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: e.buckets}, labelNames(labelKeys))
			if !e.registerLocked(name, vec) {
				return noTimer
			}
			e.histos[name] = vec
		}
		return func(values ...string) service.MetricsExporterTimer {
			return timer{vec.WithLabelValues(validLabels(values)...)}
		}
	}
	vec, ok := e.summaries[name]
	if !ok {
		vec = prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: name, Help: help,
			Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		}, labelNames(labelKeys))
		if !e.registerLocked(name, vec) {
			return noTimer
		}
		e.summaries[name] = vec
	}
	return func(values ...string) service.MetricsExporterTimer {
		return timer{vec.WithLabelValues(validLabels(values)...)}
	}
}

func (e *exporter) Close(context.Context) error { return nil }

// validLabels replaces the invalid bytes of label values (any component's, e.g. a name
// taken from a message) with U+FFFD: the Prometheus client panics on a value that is
// not UTF-8.
func validLabels(values []string) []string {
	for i, v := range values {
		if !utf8.ValidString(v) {
			values[i] = strings.ToValidUTF8(v, "\uFFFD")
		}
	}
	return values
}

type counter struct{ c prometheus.Counter }

func (c counter) Incr(n int64)          { c.c.Add(float64(n)) }
func (c counter) IncrFloat64(n float64) { c.c.Add(n) }

type gauge struct{ g prometheus.Gauge }

func (g gauge) Set(v int64)          { g.g.Set(float64(v)) }
func (g gauge) SetFloat64(v float64) { g.g.Set(v) }

type timer struct{ o prometheus.Observer }

func (t timer) Timing(ns int64) { t.o.Observe(float64(ns) / 1e9) }

// discard takes the values of a metric that cannot be exported.
type discard struct{}

func (discard) Incr(int64)   {}
func (discard) Set(int64)    {}
func (discard) Timing(int64) {}
