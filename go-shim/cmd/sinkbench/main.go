// Command sinkbench is floe's side of the sink-against-sink benchmark: NDJSON already in
// memory → committed rows, through the Go binding exactly as the Benthos output calls it,
// but without a pipeline in front. The peers under bench-configs/peers take the same
// flags and print the same JSON line, so the sweep runner compares like with like.
//
//	sinkbench --rest-url URL --s3-endpoint URL --s3-access-key K --s3-secret-key S \
//	    --bucket B --namespace NS --table T --ndjson events.ndjson --batch 1000 --in-flight 4
//
// The table must exist (the runner creates it with the peers' schema). Without
// --rest-url the embedded catalog in --warehouse is used and the table is created from
// the data.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/floe-dev/floe/go-shim/floe"
)

type options struct {
	restURL, s3Endpoint, accessKey, secretKey, region, bucket string
	warehouse, namespace, table, ndjson, maxSnapshotAge       string
	batch, rows, inFlight                                     int
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.restURL, "rest-url", "", "REST catalog URL; empty: embedded catalog in --warehouse")
	flag.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 endpoint (path-style)")
	flag.StringVar(&o.accessKey, "s3-access-key", "", "S3 access key")
	flag.StringVar(&o.secretKey, "s3-secret-key", "", "S3 secret key")
	flag.StringVar(&o.region, "s3-region", "us-east-1", "S3 region")
	flag.StringVar(&o.bucket, "bucket", "", "S3 bucket the catalog's warehouse is in")
	flag.StringVar(&o.warehouse, "warehouse", "", "embedded catalog folder (without --rest-url)")
	flag.StringVar(&o.namespace, "namespace", "bench", "namespace")
	flag.StringVar(&o.table, "table", "events", "table")
	flag.StringVar(&o.ndjson, "ndjson", "", "events, one JSON object per line")
	flag.IntVar(&o.batch, "batch", 1000, "rows per write call")
	flag.IntVar(&o.rows, "rows", 0, "use only the first N lines (0: all)")
	flag.IntVar(&o.inFlight, "in-flight", 1, "concurrent write calls (max_in_flight)")
	flag.StringVar(&o.maxSnapshotAge, "max-snapshot-age", "", "commit.max_snapshot_age (empty: floe's default)")
	flag.Parse()
	return o
}

// writerConfig is libfloe's JSON config for these options.
func writerConfig(o options) ([]byte, error) {
	cfg := map[string]any{"namespace": o.namespace, "table": o.table, "max_in_flight": o.inFlight}
	if o.maxSnapshotAge != "" {
		cfg["commit"] = map[string]any{"max_snapshot_age": o.maxSnapshotAge}
	}
	if o.restURL == "" {
		cfg["catalog"] = map[string]any{"warehouse": o.warehouse}
		cfg["schema_evolution"] = map[string]any{"enabled": true}
	} else {
		cfg["catalog"] = map[string]any{"url": o.restURL}
		cfg["storage"] = map[string]any{"aws_s3": map[string]any{
			"bucket": o.bucket, "region": o.region, "endpoint": o.s3Endpoint,
			"force_path_style_urls": true,
			"credentials":           map[string]any{"id": o.accessKey, "secret": o.secretKey},
		}}
	}
	return json.Marshal(cfg)
}

// readLines returns the file's non-empty lines as views into one buffer (no copies).
func readLines(path string, limit int) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var lines [][]byte
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if limit > 0 && len(lines) == limit {
			break
		}
		if len(line) > 0 {
			lines = append(lines, line)
		}
	}
	return lines, nil
}

func chunks(lines [][]byte, size int) [][][]byte {
	var out [][][]byte
	for start := 0; start < len(lines); start += size {
		out = append(out, lines[start:min(start+size, len(lines))])
	}
	return out
}

// writeAll runs inFlight callers over the batches and returns each call's duration.
func writeAll(w *floe.Writer, batches [][][]byte, inFlight int) ([]time.Duration, error) {
	next := make(chan [][]byte)
	latencies := make([]time.Duration, 0, len(batches))
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msgs := range next {
				t0 := time.Now()
				res, err := w.Write(context.Background(), floe.Batch{Messages: msgs})
				took := time.Since(t0)
				if err == nil && res.FailedCount > 0 {
					err = fmt.Errorf("%d messages failed, first: %v", res.FailedCount, firstFailure(res))
				}
				mu.Lock()
				latencies = append(latencies, took)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	for _, b := range batches {
		next <- b
	}
	close(next)
	wg.Wait()
	return latencies, firstErr
}

func firstFailure(res *floe.Result) error {
	for _, f := range res.Failures {
		if f != nil {
			return f
		}
	}
	return nil
}

func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return ms(sorted[min(len(sorted)-1, int(q*float64(len(sorted))))])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// tenth is the first or last 10% (at least one) of the calls, in call order.
func tenth(ds []time.Duration, last bool) []time.Duration {
	n := max(1, len(ds)/10)
	if last {
		return ds[len(ds)-n:]
	}
	return ds[:n]
}

func run(o options) error {
	lines, err := readLines(o.ndjson, o.rows)
	if err != nil {
		return err
	}
	cfg, err := writerConfig(o)
	if err != nil {
		return err
	}
	w, err := floe.Open(cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	batches := chunks(lines, o.batch)
	t0 := time.Now()
	latencies, err := writeAll(w, batches, o.inFlight)
	seconds := time.Since(t0).Seconds()
	if err != nil {
		return err
	}
	st, err := w.Stats()
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"peer": "floe", "batch": o.batch, "in_flight": o.inFlight,
		"rows": st.Rows, "seconds": seconds, "rows_per_s": float64(st.Rows) / seconds,
		"commits": st.Snapshots, "data_files": st.DataFiles,
		// Call durations, comparable with the peers' append durations.
		"commit_ms": map[string]float64{
			"p50": quantile(latencies, 0.5), "p95": quantile(latencies, 0.95),
			"first_p50": quantile(tenth(latencies, false), 0.5),
			"last_p50":  quantile(tenth(latencies, true), 0.5),
		},
		// The commit stage alone, from libfloe's counters.
		"commit_stage_ms": map[string]float64{"p50": ms(st.CommitP50), "p95": ms(st.CommitP95)},
	})
}

func main() {
	if err := run(parseFlags()); err != nil {
		fmt.Fprintln(os.Stderr, "sinkbench:", err)
		os.Exit(1)
	}
}
