// Command iceberg-go-append is the "iceberg-go" peer in floe's sink benchmarks.
//
// Why it exists: floe's throughput only means something next to what a user
// would get from an established Iceberg writer doing the same job. This
// program appends NDJSON events to an Iceberg table the way an iceberg-go user
// naturally would: a REST catalog, S3 file IO, arrow-go's JSON reader to turn
// each chunk of lines into Arrow, and one Table.AppendTable (one Iceberg
// commit) per chunk. It shares its CLI and its single-line JSON report with
// the pyiceberg peer and floe's own bench, so a sweep runner can run all of
// them side by side.
//
// The events file is loaded into memory before the clock starts; decoding and
// appending are timed. The one JSON report goes to stdout, progress to stderr.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	iceio "github.com/apache/iceberg-go/io"
	// Registers the s3:// scheme with iceberg-go's file IO registry.
	_ "github.com/apache/iceberg-go/io/gocloud/s3"
	"github.com/apache/iceberg-go/table"
)

const peerName = "iceberg-go"

// options are the command-line settings shared by every peer benchmark.
type options struct {
	restURL     string
	s3Endpoint  string
	s3AccessKey string
	s3SecretKey string
	s3Region    string
	namespace   string
	table       string
	ndjsonPath  string
	batch       int
	rows        int
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet(peerName+"-append", flag.ContinueOnError)
	fs.StringVar(&o.restURL, "rest-url", "", "REST catalog base URL")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 endpoint URL (path-style)")
	fs.StringVar(&o.s3AccessKey, "s3-access-key", "", "S3 access key id")
	fs.StringVar(&o.s3SecretKey, "s3-secret-key", "", "S3 secret access key")
	fs.StringVar(&o.s3Region, "s3-region", "us-east-1", "S3 region")
	fs.StringVar(&o.namespace, "namespace", "", "Iceberg namespace (created if missing)")
	fs.StringVar(&o.table, "table", "", "Iceberg table (dropped and recreated)")
	fs.StringVar(&o.ndjsonPath, "ndjson", "", "NDJSON events file")
	fs.IntVar(&o.batch, "batch", 0, "rows per append (one commit each)")
	fs.IntVar(&o.rows, "rows", 0, "use only the first N lines (0 = all)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.validate()
}

func (o options) validate() error {
	required := map[string]string{
		"--rest-url": o.restURL, "--s3-endpoint": o.s3Endpoint,
		"--s3-access-key": o.s3AccessKey, "--s3-secret-key": o.s3SecretKey,
		"--namespace": o.namespace, "--table": o.table, "--ndjson": o.ndjsonPath,
	}
	var missing []string
	for name, value := range required {
		if value == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("missing required flags: %s", strings.Join(missing, ", "))
	}
	if o.batch <= 0 {
		return errors.New("--batch must be a positive number of rows")
	}
	if o.rows < 0 {
		return errors.New("--rows must not be negative")
	}
	return nil
}

// eventLines holds the events file in one buffer plus where each line ends,
// so a chunk of consecutive lines is a slice of the buffer with no copying.
type eventLines struct {
	data []byte
	ends []int // ends[i] is the offset just past line i (excluding its '\n')
}

func (l eventLines) count() int { return len(l.ends) }

// span returns the bytes of lines [from, to).
func (l eventLines) span(from, to int) []byte {
	start := 0
	if from > 0 {
		start = l.ends[from-1] + 1
	}
	return l.data[start:l.ends[to-1]]
}

// loadLines reads the file and indexes its first limit lines (all when limit is 0).
func loadLines(path string, limit int) (eventLines, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return eventLines{}, err
	}
	var ends []int
	for offset := 0; offset < len(data) && (limit == 0 || len(ends) < limit); {
		length := bytes.IndexByte(data[offset:], '\n')
		if length < 0 {
			length = len(data) - offset
		}
		if length == 0 {
			return eventLines{}, fmt.Errorf("%s: empty line %d", path, len(ends)+1)
		}
		ends = append(ends, offset+length)
		offset += length + 1
	}
	if limit > 0 && len(ends) < limit {
		return eventLines{}, fmt.Errorf("--rows %d exceeds the %d lines in %s", limit, len(ends), path)
	}
	if len(ends) == 0 {
		return eventLines{}, fmt.Errorf("%s has no events", path)
	}
	return eventLines{data: data, ends: ends}, nil
}

// eventSchema is the benchmark table: all fields optional, ids 1..6.
func eventSchema() *iceberg.Schema {
	return iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 2, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 3, Name: "event_type", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 4, Name: "value", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 5, Name: "info", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 6, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz},
	)
}

// fileIOProperties configure iceberg-go's S3 IO for a path-style, plain-http endpoint.
func fileIOProperties(o options) iceberg.Properties {
	return iceberg.Properties{
		iceio.S3EndpointURL:            o.s3Endpoint,
		iceio.S3AccessKeyID:            o.s3AccessKey,
		iceio.S3SecretAccessKey:        o.s3SecretKey,
		iceio.S3Region:                 o.s3Region,
		iceio.S3ForceVirtualAddressing: "false",
	}
}

func openCatalog(ctx context.Context, o options) (*rest.Catalog, error) {
	cat, err := rest.NewCatalog(ctx, "bench", o.restURL, rest.WithAdditionalProps(fileIOProperties(o)))
	if err != nil {
		return nil, fmt.Errorf("opening REST catalog %s: %w", o.restURL, err)
	}
	return cat, nil
}

func ensureNamespace(ctx context.Context, cat *rest.Catalog, namespace table.Identifier) error {
	err := cat.CreateNamespace(ctx, namespace, nil)
	if err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return fmt.Errorf("creating namespace %v: %w", namespace, err)
	}
	return nil
}

// recreateTable drops the table if it exists and creates it empty, so every
// run starts from the same state.
func recreateTable(ctx context.Context, cat *rest.Catalog, ident table.Identifier) (*table.Table, error) {
	if err := ensureNamespace(ctx, cat, catalog.NamespaceFromIdent(ident)); err != nil {
		return nil, err
	}
	if err := cat.DropTable(ctx, ident); err != nil && !errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, fmt.Errorf("dropping table %v: %w", ident, err)
	}
	tbl, err := cat.CreateTable(ctx, ident, eventSchema())
	if err != nil {
		return nil, fmt.Errorf("creating table %v: %w", ident, err)
	}
	return tbl, nil
}

// decodeChunk parses NDJSON into a single-batch Arrow table of the given schema.
func decodeChunk(ndjson []byte, schema *arrow.Schema, wantRows int) (arrow.Table, error) {
	reader := array.NewJSONReader(bytes.NewReader(ndjson), schema, array.WithChunk(-1))
	defer reader.Release()
	if !reader.Next() {
		if err := reader.Err(); err != nil {
			return nil, fmt.Errorf("decoding JSON: %w", err)
		}
		return nil, errors.New("decoding JSON: no rows")
	}
	if err := reader.Err(); err != nil {
		return nil, fmt.Errorf("decoding JSON: %w", err)
	}
	record := reader.RecordBatch()
	if int(record.NumRows()) != wantRows {
		return nil, fmt.Errorf("decoding JSON: got %d rows, expected %d", record.NumRows(), wantRows)
	}
	return array.NewTableFromRecords(schema, []arrow.RecordBatch{record}), nil
}

// appendChunk decodes lines and appends them in one commit; it returns the
// table's new state and how long the append call took.
func appendChunk(ctx context.Context, tbl *table.Table, schema *arrow.Schema, ndjson []byte, rows int) (*table.Table, time.Duration, error) {
	data, err := decodeChunk(ndjson, schema, rows)
	if err != nil {
		return nil, 0, err
	}
	defer data.Release()
	started := time.Now()
	next, err := tbl.AppendTable(ctx, data, int64(rows), nil)
	elapsed := time.Since(started)
	if err != nil {
		return nil, 0, fmt.Errorf("appending %d rows: %w", rows, err)
	}
	return next, elapsed, nil
}

// appendAll appends the lines in chunks of batch rows and returns each
// append's duration plus the total wall time.
func appendAll(ctx context.Context, tbl *table.Table, lines eventLines, batch int) ([]time.Duration, time.Duration, error) {
	schema, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		return nil, 0, err
	}
	commits := (lines.count() + batch - 1) / batch
	appendTimes := make([]time.Duration, 0, commits)
	started := time.Now()
	for from := 0; from < lines.count(); from += batch {
		to := min(from+batch, lines.count())
		var took time.Duration
		tbl, took, err = appendChunk(ctx, tbl, schema, lines.span(from, to), to-from)
		if err != nil {
			return nil, 0, fmt.Errorf("commit %d of %d: %w", len(appendTimes)+1, commits, err)
		}
		appendTimes = append(appendTimes, took)
		logProgress(len(appendTimes), commits, to, time.Since(started))
	}
	return appendTimes, time.Since(started), nil
}

func logProgress(done, total, rows int, elapsed time.Duration) {
	step := max(1, total/10)
	if done%step == 0 || done == total {
		fmt.Fprintf(os.Stderr, "%s: %d/%d commits, %d rows, %.1fs\n", peerName, done, total, rows, elapsed.Seconds())
	}
}

// commitStats summarises append-call durations in milliseconds.
type commitStats struct {
	P50      float64 `json:"p50"`
	P95      float64 `json:"p95"`
	FirstP50 float64 `json:"first_p50"`
	LastP50  float64 `json:"last_p50"`
}

// report is the one JSON line every peer prints.
type report struct {
	Peer     string      `json:"peer"`
	Batch    int         `json:"batch"`
	Rows     int         `json:"rows"`
	Seconds  float64     `json:"seconds"`
	RowsPerS float64     `json:"rows_per_s"`
	Commits  int         `json:"commits"`
	CommitMs commitStats `json:"commit_ms"`
}

// percentile interpolates linearly between the closest ranks of sorted values.
func percentile(sorted []float64, q float64) float64 {
	position := q * float64(len(sorted)-1)
	lower := int(math.Floor(position))
	upper := int(math.Ceil(position))
	return sorted[lower] + (sorted[upper]-sorted[lower])*(position-float64(lower))
}

func median(values []float64) float64 {
	return percentile(slices.Sorted(slices.Values(values)), 0.5)
}

func roundTo(value float64, decimals int) float64 {
	scale := math.Pow(10, float64(decimals))
	return math.Round(value*scale) / scale
}

// summarizeCommits reports overall p50/p95 and, to show growth with table
// history, the median of the first and of the last 10% of appends.
func summarizeCommits(appendTimes []time.Duration) commitStats {
	ms := make([]float64, len(appendTimes))
	for i, d := range appendTimes {
		ms[i] = float64(d.Microseconds()) / 1000
	}
	tenth := int(math.Ceil(float64(len(ms)) / 10))
	sorted := slices.Sorted(slices.Values(ms))
	return commitStats{
		P50:      roundTo(percentile(sorted, 0.5), 3),
		P95:      roundTo(percentile(sorted, 0.95), 3),
		FirstP50: roundTo(median(ms[:tenth]), 3),
		LastP50:  roundTo(median(ms[len(ms)-tenth:]), 3),
	}
}

func buildReport(batch, rows int, appendTimes []time.Duration, wall time.Duration) report {
	seconds := wall.Seconds()
	return report{
		Peer:     peerName,
		Batch:    batch,
		Rows:     rows,
		Seconds:  roundTo(seconds, 6),
		RowsPerS: roundTo(float64(rows)/seconds, 1),
		Commits:  len(appendTimes),
		CommitMs: summarizeCommits(appendTimes),
	}
}

func run(args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	lines, err := loadLines(o.ndjsonPath, o.rows)
	if err != nil {
		return err
	}
	ctx := context.Background()
	cat, err := openCatalog(ctx, o)
	if err != nil {
		return err
	}
	defer cat.Close()
	tbl, err := recreateTable(ctx, cat, table.Identifier{o.namespace, o.table})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s: appending %d rows in batches of %d to %s.%s\n",
		peerName, lines.count(), o.batch, o.namespace, o.table)
	appendTimes, wall, err := appendAll(ctx, tbl, lines, o.batch)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(buildReport(o.batch, lines.count(), appendTimes, wall))
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "%s-append: error: %v\n", peerName, err)
		}
		os.Exit(1)
	}
}
