"""The metrics operators look for, scraped from a running `floe` (embedded catalog,
Prometheus exporter): per-table counters exist at 0 before anything happens, commits,
files, bytes, latencies and failures by class are counted under the table's label, the
write-call latency carries its outcome, the progress line is logged, and every metric the
Grafana dashboard in docs/ queries is served."""
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

from services import free_port

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
from read_table import duckdb_connect  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
DASHBOARD = os.path.join(ROOT, "docs", "grafana-dashboard.json")

# Every 50th message is a JSON string, not an object: it fails alone (class "data") and
# the fallback drops it; the rest commit.
PIPELINE = """
http:
  address: 127.0.0.1:{port}
input:
  generate:
    count: 0
    interval: 5ms
    batch_size: 100
    mapping: |
      let n = count("events")
      root = if $n % 50 == 0 {{ "not an object" }} else {{ {{"id": $n, "kind": "k" + ($n % 3).string()}} }}
output:
  fallback:
    - iceberg:
        namespace: demo
        table: metered
        schema_evolution:
          enabled: true
        max_in_flight: 4
        progress_interval: 1s
    - drop: {{}}
metrics:
  prometheus: {{}}
"""


# Two outputs (two writers) appending every batch to one table: their commits conflict.
# The host stays up (shutdown_delay) after the input ends, to be scraped.
CONTENDED = """
shutdown_delay: 60s
http:
  address: 127.0.0.1:{port}
input:
  generate:
    count: {count}
    interval: 1ms
    batch_size: 50
    mapping: 'root.id = count("events")'
output:
  broker:
    pattern: fan_out
    outputs:
      - iceberg: {{namespace: demo, table: shared, schema_evolution: {{enabled: true}}, max_in_flight: 4}}
      - iceberg: {{namespace: demo, table: shared, schema_evolution: {{enabled: true}}, max_in_flight: 4}}
metrics:
  prometheus: {{}}
"""


def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


@contextlib.contextmanager
def host(tmp_path, name, config, log=None):
    """`floe run` of `config` in tmp_path (output to `log`), stopped by SIGTERM after."""
    (tmp_path / name).write_text(config)
    out = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen([FLOE, "run", name], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if log:
            out.close()


def scrape_until(port, done, timeout):
    """Scrapes /metrics until `done(text)` or the timeout; the last text."""
    text, deadline = "", time.time() + timeout
    while time.time() < deadline:
        try:
            text = scrape(port)
        except OSError:
            text = ""
        if done(text):
            break
        time.sleep(0.5)
    return text


def samples(text, name, **labels):
    """The values of every sample of `name` whose labels include `labels`."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                out.append(float(line.rsplit(" ", 1)[1]))
    return out


def sample(text, name, **labels):
    """The value of the sample of `name` whose labels include `labels`, or None."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def test_the_output_serves_per_table_metrics_and_logs_progress(tmp_path):
    port = free_port()
    log = tmp_path / "floe.log"
    t = {"table": "demo.metered"}

    def enough(text):
        return (sample(text, "iceberg_snapshots_total", **t) or 0) >= 3 and \
            (sample(text, "iceberg_rows_failed_total", **t, **{"class": "data"}) or 0) >= 1 and \
            "rows committed in the last 1s" in log.read_text()

    with host(tmp_path, "metered.yaml", PIPELINE.format(port=port), log):
        text = scrape_until(port, enough, 60)
        # Never incremented here, but there from the start at 0.
        assert sample(text, "iceberg_commit_failures_total", **t, **{"class": "rejected"}) == 0, text[-3000:]
        assert sample(text, "iceberg_write_failures_total", **{"class": "unavailable"}) == 0
        assert sample(text, "iceberg_row_operations_total", **t, operation="delete") == 0
        assert sample(text, "iceberg_commit_conflicts_total", **t) == 0
        # What the commits did.
        snapshots = sample(text, "iceberg_snapshots_total", **t)
        assert snapshots >= 3, text[-3000:]
        assert sample(text, "iceberg_row_operations_total", **t, operation="insert") >= 98
        assert sample(text, "iceberg_rows_failed_total", **t, **{"class": "data"}) >= 1
        assert sample(text, "iceberg_data_files_total", **t) >= snapshots
        assert sample(text, "iceberg_data_bytes_total", **t) > 1000
        for timing in ("iceberg_commit_latency_seconds", "iceberg_catalog_commit_latency_seconds",
                       "iceberg_upload_latency_seconds"):
            assert sample(text, timing + "_count", **t) >= 1, timing
            assert sample(text, timing + "_bucket", **t, le="+Inf") >= 1, timing
        assert sample(text, "iceberg_write_batch_latency_seconds_count", outcome="committed") >= 1
        # The dashboard queries nothing the host does not serve.
        queried = set(re.findall(r"\b((?:iceberg|input_kafka)_[a-z_]+)", open(DASHBOARD).read()))
        served = {re.sub(r"_(bucket|sum|count)$", "", line.split("{")[0].split(" ")[0])
                  for line in text.splitlines() if line and not line.startswith("#")}
        kafka_only = {"input_kafka_lag"}
        missing = {m.removesuffix("_bucket") for m in queried} - served - kafka_only
        assert not missing, missing
        json.load(open(DASHBOARD))
    lines = (tmp_path / "floe.log").read_text()
    progress = [line for line in lines.splitlines() if "rows committed in the last 1s" in line]
    assert progress, lines[-3000:]
    assert re.search(r"\d+ rows committed in the last 1s \(\d+ rows/s\), \d+ snapshots, \d+ messages failed, \d+ waiting to be retried, \d+ calls in flight", progress[0]), progress[0]


def test_conflicts_are_counted_and_the_counters_agree_with_the_table(tmp_path):
    """Two writers contend for one table: conflicts are counted, and the rows and snapshots
    the metrics report are those the table holds (read back by DuckDB and pyiceberg)."""
    from pyiceberg.catalog import load_catalog

    port, count = free_port(), 10_000
    t = {"table": "demo.shared"}
    with host(tmp_path, "contended.yaml", CONTENDED.format(port=port, count=count)):
        scrape_until(port, lambda text: sum(samples(
            text, "iceberg_row_operations_total", **t, operation="insert")) == 2 * count, 120)
        time.sleep(1)  # the last calls' events drained
        text = scrape(port)
    inserted = sum(samples(text, "iceberg_row_operations_total", **t, operation="insert"))
    assert inserted == 2 * count, text[-3000:]
    assert sum(samples(text, "iceberg_commit_conflicts_total", **t)) >= 1, text[-3000:]
    snapshots = sum(samples(text, "iceberg_snapshots_total", **t))
    assert sum(samples(text, "iceberg_commit_latency_seconds_count", **t)) == snapshots

    wh = tmp_path / "warehouse"
    table = load_catalog("floe", type="sql", uri=f"sqlite:///{wh}/catalog.db",
                         warehouse=f"file://{wh}").load_table("demo.shared")
    (rows,) = duckdb_connect().execute(
        f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}')").fetchone()
    assert rows == inserted == len(table.scan().to_arrow())
    # Appends only: every data file committed is live.
    files = table.inspect.files().to_pylist()
    assert sum(samples(text, "iceberg_data_files_total", **t)) == len(files)
    assert sum(samples(text, "iceberg_data_bytes_total", **t)) == sum(f["file_size_in_bytes"] for f in files)


# Message 1 names a table that is no single folder name (refused, its own fault), message
# 2 one whose name is not UTF-8; the third, a good table. The first two fail alone.
BAD_NAMES = """
shutdown_delay: 60s
http:
  address: 127.0.0.1:{port}
input:
  generate:
    count: 3
    interval: ""
    mapping: |
      root.id = count("events")
      meta t = ["a/b", "bad\\xffname", "good"].index(root.id - 1)
output:
  fallback:
    - iceberg:
        namespace: demo
        table: '${{! meta("t") }}'
        schema_evolution:
          enabled: true
    - drop: {{}}
metrics:
  prometheus: {{}}
"""

# Every batch fails whole (a missing table, no evolution) to the fallback.
FAILED_WHOLE = """
shutdown_delay: 60s
http:
  address: 127.0.0.1:{port}
input:
  generate:
    count: 30
    interval: ""
    batch_size: 10
    mapping: 'root.id = count("events")'
output:
  fallback:
    - iceberg:
        namespace: demo
        table: missing
        permanent_errors: fail
    - drop: {{}}
metrics:
  prometheus: {{}}
"""


def test_failed_names_take_no_table_label_and_crash_nothing(tmp_path):
    port = free_port()
    with host(tmp_path, "bad.yaml", BAD_NAMES.format(port=port)) as proc:
        text = scrape_until(port, lambda text: (sample(text, "iceberg_row_operations_total",
                                                       table="demo.good") or 0) >= 1, 60)
        text = scrape_until(port, lambda text: sum(samples(text, "iceberg_rows_failed_total")) >= 2, 10)
        assert proc.poll() is None, "the host exited"
    assert sample(text, "iceberg_row_operations_total", table="demo.good", operation="insert") == 1, text[-3000:]
    failed = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("iceberg_rows_failed_total{") and not line.endswith(" 0")}
    assert sum(failed.values()) == 2 and all('table="_other"' in k for k in failed), failed


def test_a_batch_failed_whole_counts_its_messages_as_failed(tmp_path):
    port = free_port()
    t = {"table": "demo.missing"}
    with host(tmp_path, "whole.yaml", FAILED_WHOLE.format(port=port)):
        text = scrape_until(port, lambda text: sum(samples(text, "iceberg_rows_failed_total", **t)) >= 30, 60)
    assert sum(samples(text, "iceberg_rows_failed_total", **t)) == 30, text[-3000:]
    assert sample(text, "iceberg_rows_failed_total", **t, **{"class": "not_found"}) == 30
    assert sample(text, "iceberg_write_failures_total", **{"class": "not_found"}) == 3
