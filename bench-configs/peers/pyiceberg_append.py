"""The "pyiceberg" peer in floe's sink benchmarks.

Why it exists: floe's throughput only means something next to what a user would
get from an established Iceberg writer doing the same job. This script appends
NDJSON events to an Iceberg table the way a pyiceberg user naturally would: a
REST catalog with pyarrow's S3 file IO, `pyarrow.json.read_json` with an explicit
schema to turn each chunk of lines into Arrow, and one `Table.append` (one Iceberg
commit) per chunk. It shares its CLI and single-line JSON report with the
iceberg-go peer and floe's own bench, so a sweep runner can run them side by side.

The events file is loaded into memory before the clock starts; decoding and
appending are timed. The one JSON report goes to stdout, progress to stderr.

Usage: python3 pyiceberg_append.py --rest-url URL --s3-endpoint URL
           --s3-access-key K --s3-secret-key S [--s3-region R]
           --namespace NS --table T --ndjson PATH --batch N [--rows N]
"""
import argparse
import json
import math
import sys
import time

import pyarrow as pa
import pyarrow.json as pa_json
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

PEER = "pyiceberg"

# The benchmark table: every field optional, ids 1..6.
EVENT_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "user_id", LongType(), required=False),
    NestedField(3, "event_type", StringType(), required=False),
    NestedField(4, "value", DoubleType(), required=False),
    NestedField(5, "info", StringType(), required=False),
    NestedField(6, "ts", TimestamptzType(), required=False),
)

# The same schema as Arrow: nullable fields (Iceberg optional), microsecond UTC
# timestamps (Iceberg timestamptz), so append() accepts the decoded table as is.
EVENT_ARROW_SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=True),
    pa.field("user_id", pa.int64(), nullable=True),
    pa.field("event_type", pa.string(), nullable=True),
    pa.field("value", pa.float64(), nullable=True),
    pa.field("info", pa.string(), nullable=True),
    pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=True),
])
JSON_PARSE_OPTIONS = pa_json.ParseOptions(explicit_schema=EVENT_ARROW_SCHEMA, unexpected_field_behavior="error")


def log(message: str):
    print(f"{PEER}: {message}", file=sys.stderr, flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rest-url", required=True, help="REST catalog base URL")
    parser.add_argument("--s3-endpoint", required=True, help="S3 endpoint URL (path-style)")
    parser.add_argument("--s3-access-key", required=True)
    parser.add_argument("--s3-secret-key", required=True)
    parser.add_argument("--s3-region", default="us-east-1")
    parser.add_argument("--namespace", required=True, help="created if missing")
    parser.add_argument("--table", required=True, help="dropped and recreated")
    parser.add_argument("--ndjson", required=True, help="NDJSON events file")
    parser.add_argument("--batch", type=int, required=True, help="rows per append (one commit each)")
    parser.add_argument("--rows", type=int, default=0, help="use only the first N lines (default all)")
    args = parser.parse_args(argv)
    if args.batch <= 0:
        parser.error("--batch must be a positive number of rows")
    if args.rows < 0:
        parser.error("--rows must not be negative")
    return args


class EventLines:
    """The events file in one buffer plus where each line ends, so a chunk of
    consecutive lines is a zero-copy slice of the buffer."""

    def __init__(self, data: bytes, ends: list):
        self.data = memoryview(data)
        self.ends = ends  # ends[i] is the offset just past line i (excluding its '\n')

    def count(self) -> int:
        return len(self.ends)

    def span(self, start: int, stop: int) -> memoryview:
        """The bytes of lines [start, stop)."""
        first = self.ends[start - 1] + 1 if start > 0 else 0
        return self.data[first:self.ends[stop - 1]]


def load_lines(path: str, limit: int) -> EventLines:
    """Reads the file and indexes its first `limit` lines (all when 0)."""
    with open(path, "rb") as f:
        data = f.read()
    ends = []
    offset = 0
    while offset < len(data) and (limit == 0 or len(ends) < limit):
        end = data.find(b"\n", offset)
        if end < 0:
            end = len(data)
        if end == offset:
            raise ValueError(f"{path}: empty line {len(ends) + 1}")
        ends.append(end)
        offset = end + 1
    if limit and len(ends) < limit:
        raise ValueError(f"--rows {limit} exceeds the {len(ends)} lines in {path}")
    if not ends:
        raise ValueError(f"{path} has no events")
    return EventLines(data, ends)


def file_io_properties(args) -> dict:
    """pyiceberg's pyarrow S3 IO for a path-style, plain-http endpoint.

    pyiceberg has no `s3.path-style-access` (that is Java's name); path style is
    `s3.force-virtual-addressing=false`.
    """
    return {
        "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
        "s3.endpoint": args.s3_endpoint,
        "s3.access-key-id": args.s3_access_key,
        "s3.secret-access-key": args.s3_secret_key,
        "s3.region": args.s3_region,
        "s3.force-virtual-addressing": "false",
    }


def recreate_table(catalog, namespace: str, table: str):
    """Drops the table if it exists and creates it empty, so every run starts
    from the same state."""
    catalog.create_namespace_if_not_exists(namespace)
    identifier = (namespace, table)
    try:
        catalog.drop_table(identifier)
    except NoSuchTableError:
        pass
    return catalog.create_table(identifier, schema=EVENT_SCHEMA)


def decode_chunk(ndjson: memoryview, want_rows: int) -> pa.Table:
    """Parses NDJSON into an Arrow table of EVENT_ARROW_SCHEMA."""
    decoded = pa_json.read_json(pa.BufferReader(pa.py_buffer(ndjson)), parse_options=JSON_PARSE_OPTIONS)
    if decoded.num_rows != want_rows:
        raise ValueError(f"decoding JSON: got {decoded.num_rows} rows, expected {want_rows}")
    return decoded


def append_chunk(table, ndjson: memoryview, rows: int) -> float:
    """Decodes lines and appends them in one commit; returns the append call's seconds."""
    decoded = decode_chunk(ndjson, rows)
    started = time.perf_counter()
    table.append(decoded)
    return time.perf_counter() - started


def log_progress(done: int, total: int, rows: int, elapsed: float):
    step = max(1, total // 10)
    if done % step == 0 or done == total:
        log(f"{done}/{total} commits, {rows} rows, {elapsed:.1f}s")


def append_all(table, lines: EventLines, batch: int):
    """Appends the lines in chunks of `batch` rows; returns each append's seconds
    and the total wall seconds."""
    commits = math.ceil(lines.count() / batch)
    append_seconds = []
    started = time.perf_counter()
    for start in range(0, lines.count(), batch):
        stop = min(start + batch, lines.count())
        try:
            append_seconds.append(append_chunk(table, lines.span(start, stop), stop - start))
        except Exception as e:
            raise RuntimeError(f"commit {len(append_seconds) + 1} of {commits}: {e}") from e
        log_progress(len(append_seconds), commits, stop, time.perf_counter() - started)
    return append_seconds, time.perf_counter() - started


def percentile(sorted_values: list, q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    position = q * (len(sorted_values) - 1)
    lower, upper = math.floor(position), math.ceil(position)
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * (position - lower)


def median(values: list) -> float:
    return percentile(sorted(values), 0.5)


def summarize_commits(append_seconds: list) -> dict:
    """Overall p50/p95 and, to show growth with table history, the median of the
    first and of the last 10% of appends, in milliseconds."""
    ms = [s * 1000 for s in append_seconds]
    tenth = math.ceil(len(ms) / 10)
    ordered = sorted(ms)
    return {
        "p50": round(percentile(ordered, 0.5), 3),
        "p95": round(percentile(ordered, 0.95), 3),
        "first_p50": round(median(ms[:tenth]), 3),
        "last_p50": round(median(ms[-tenth:]), 3),
    }


def build_report(batch: int, rows: int, append_seconds: list, wall: float) -> dict:
    return {
        "peer": PEER,
        "batch": batch,
        "rows": rows,
        "seconds": round(wall, 6),
        "rows_per_s": round(rows / wall, 1),
        "commits": len(append_seconds),
        "commit_ms": summarize_commits(append_seconds),
    }


def run(argv) -> dict:
    args = parse_args(argv)
    lines = load_lines(args.ndjson, args.rows)
    catalog = load_catalog("bench", type="rest", uri=args.rest_url, **file_io_properties(args))
    table = recreate_table(catalog, args.namespace, args.table)
    log(f"appending {lines.count()} rows in batches of {args.batch} to {args.namespace}.{args.table}")
    append_seconds, wall = append_all(table, lines, args.batch)
    return build_report(args.batch, lines.count(), append_seconds, wall)


def main():
    try:
        report = run(sys.argv[1:])
    except Exception as e:
        print(f"{PEER}_append: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
