"""Seeded random streams of keyed inserts, upserts and deletes for the end-to-end upsert
tests (e2e/test_upsert_writers.py, e2e/test_upsert_crashes.py), the pipelines that write
them into a REST table on SeaweedFS, and the check of the table against the stream's
model by independent readers.

Why the model is exact at `max_in_flight: 4` (docs/upserts.md): a key's operations apply
in message order within a batch, and across batches in the order the output's calls
began. Calls begin in the order the host hands batches over, except that workers taking
consecutive batches within microseconds of each other may begin in either order. So a
stream here repeats a key freely inside one batch (deletes then re-upserts, inserts
beside upserts), and across batches only `GAP` batches later, by when every call of the
earlier batch has long begun: a worker reaches a batch `GAP` = 2 × max_in_flight later
only after the other workers finished whole calls (each a catalog commit). The batch
boundaries must then be the stream's, so the inputs cut the batches, by count alone
(file replays from the start cut the same way; a one-partition topic read from committed
offsets, which sit on batch boundaries, too), and the output takes them as they come. Not
the output's own `batching`: floe gives it a 1 s period when none is set, and a batcher
that waited longer than its period for a free call (commits slowed by conflicts) flushes
its next batch after one message, shifting every boundary after it.
"""
import json
import os
import random
import sys
import textwrap
import time
import urllib.request
from dataclasses import dataclass

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))
from read_table import duckdb_connect  # noqa: E402
from java_reader import JavaReader  # noqa: E402
from test_reliability import NAMESPACE, catalog, iceberg_output, load, scan  # noqa: E402

MAX_IN_FLIGHT = 4
GAP = 2 * MAX_IN_FLIGHT
STRATEGIES = ["merge-on-read", "copy-on-write", "merge-on-read-positional"]
# Weights of the operations drawn for each message.
OPERATIONS = {"upsert": 55, "delete": 25, "insert": 20}


_SEED = []


def run_seed() -> int:
    """The session's seed: FLOE_E2E_SEED when set (to replay a failure), else one drawn
    once; every test derives its own random streams from it. Printed by every test, so
    pytest shows it beside any failure."""
    if not _SEED:
        given = os.environ.get("FLOE_E2E_SEED")
        _SEED.append(int(given) if given else random.randrange(1 << 31))
    print(f"FLOE_E2E_SEED={_SEED[0]}")
    return _SEED[0]


# -- the stream and its model ------------------------------------------------------------

@dataclass(frozen=True)
class Op:
    n: int       # position in the stream: the exactly-once offset and the row's tag
    batch: int   # which of the stream's batches holds it
    id: int      # the key
    op: str      # insert, upsert or delete
    writer: str  # which stream it belongs to, so values of two streams never collide

    @property
    def value(self) -> str:
        return f"{self.writer}{self.n}"

    def line(self) -> str:
        """The message: a delete carries only the key (and its position)."""
        doc = {"id": self.id, "op": self.op, "n": self.n}
        if self.op != "delete":
            doc["v"] = self.value
        return json.dumps(doc)

    def describe(self) -> str:
        return f"#{self.n}/b{self.batch} {self.op}" + ("" if self.op == "delete" else f" {self.value}")


def keyed_stream(rng, keys, batches, batch_size, writer="a"):
    """`batches` × `batch_size` operations on `keys`. Each batch takes keys that no batch of
    the last GAP - 1 touched, some of them several times (a run of 1-4 operations per
    key, its messages spread through the batch), with random operations, so keys recur
    within a batch and across batches, deletes are followed by re-upserts and inserts
    meet rows already there."""
    keys = list(keys)
    assert len(keys) >= GAP * batch_size, "too few keys for every batch to find free ones"
    names, weights = list(OPERATIONS), list(OPERATIONS.values())
    last_batch = {}
    ops = []
    for b in range(batches):
        free = [k for k in keys if b - last_batch.get(k, -GAP) >= GAP]
        slots = []
        while len(slots) < batch_size:
            k = free.pop(rng.randrange(len(free)))
            last_batch[k] = b
            slots += [k] * min(batch_size - len(slots), rng.choice((1, 1, 2, 3, 4)))
        rng.shuffle(slots)
        for k in slots:
            ops.append(Op(len(ops), b, k, rng.choices(names, weights)[0], writer))
    return ops


def model(ops):
    """key → the values of its rows after `ops` in order: an upsert replaces them, a
    delete removes them, an insert adds one."""
    rows = {}
    for o in ops:
        if o.op == "upsert":
            rows[o.id] = [o.value]
        elif o.op == "delete":
            rows.pop(o.id, None)
        else:
            rows.setdefault(o.id, []).append(o.value)
    return rows


def stream_shape(ops):
    """What a stream exercises, for the test's output: operations by kind, keys repeated
    inside one batch, and deletes later upserted again."""
    kinds = {k: sum(1 for o in ops if o.op == k) for k in OPERATIONS}
    per_batch = {}
    for o in ops:
        per_batch[(o.batch, o.id)] = per_batch.get((o.batch, o.id), 0) + 1
    deleted, reupserted = set(), 0
    for o in ops:
        if o.op == "delete":
            deleted.add(o.id)
        elif o.op == "upsert" and o.id in deleted:
            deleted.discard(o.id)
            reupserted += 1
    return {**kinds, "keys repeated in a batch": sum(1 for c in per_batch.values() if c > 1),
            "re-upserts after a delete": reupserted}


# -- pipelines ------------------------------------------------------------------------

def keyed_output(services, table, strategy, exactly_once=None):
    """The iceberg output (REST fixture, SeaweedFS, max_in_flight 4) upserting by `id` with
    each message's `op`, taking the input's batches as they are. `exactly_once` is a
    (writer_id, source, offset) triple."""
    block = iceberg_output(services, table, max_in_flight=MAX_IN_FLIGHT, batching=None)
    block += textwrap.indent(textwrap.dedent(f"""\
        row_operation: '${{! json("op") }}'
        identifier_fields: [id]
        merge_strategy: {strategy}
        """), "  ")
    if exactly_once:
        writer_id, source, offset = exactly_once
        block += textwrap.indent(textwrap.dedent(f"""\
            commit:
              exactly_once:
                writer_id: {writer_id}
                source: '{source}'
                offset: '{offset}'
            """), "  ")
    return block


def file_input(path, batch_size, processors=None):
    """The file's lines, read from the start, in batches of exactly `batch_size`; with
    `processors` (YAML list items), run on each line inside the input, in order."""
    steps = ""
    if processors:
        steps = "      processors:\n" + textwrap.indent(textwrap.dedent(processors), " " * 8)
    return (textwrap.dedent(f"""\
        broker:
          inputs:
            - file:
                paths: [ {path} ]
                scanner:
                  lines: {{}}
        """) + steps + f"  batching:\n    count: {batch_size}\n")



def throttled_file_input(path, batch_size, rate):
    """file_input at most `rate` operations a second, in bursts of four batches (so four
    calls can still be in flight together), throttled inside the input (before its
    batching), so message order is kept: a rate_limit in the pipeline would run on
    several threads. Returns the input and the rate limit resource (top-level YAML)."""
    burst = 4 * batch_size
    reader = file_input(path, batch_size, "- rate_limit:\n    resource: file_rate\n")
    return reader, textwrap.dedent(f"""\
        rate_limit_resources:
          - label: file_rate
            local:
              count: {burst}
              interval: {1000 * burst // rate}ms
        """)

def write_lines(path, ops):
    with open(path, "w") as f:
        f.writelines(o.line() + "\n" for o in ops)


def host_config(input_block, output_block, metrics_port=None):
    """A host; with `metrics_port`, serving /metrics there and staying up after its input
    ends (shutdown_delay), so the last counters can still be scraped."""
    head = "http:\n  enabled: false\n"
    if metrics_port:
        head = (f"shutdown_delay: 60s\nhttp:\n  address: 127.0.0.1:{metrics_port}\n"
                "metrics:\n  prometheus: {}\n")
    return (head + "input:\n" + textwrap.indent(input_block, "  ")
            + "output:\n" + textwrap.indent(output_block, "  "))


# -- what the table says --------------------------------------------------------------

def offsets_of(t, writer_id):
    """The offsets a loaded table records as committed by `writer_id` (the property
    floe.offsets.<writer_id>, set in the same commit as the rows), merged over sources."""
    value = t.properties.get(f"floe.offsets.{writer_id}")
    if value is None:
        return set()
    ranges = json.loads(value)["offsets"].values()
    return {n for spans in ranges for a, b in spans for n in range(a, b + 1)}


def committed_offsets(services, table, writer_id):
    """offsets_of the table as the catalog has it now (empty before it exists)."""
    t = load(catalog(services), table)
    return offsets_of(t, writer_id) if t is not None else set()


def committed_state(services, table, writer_id):
    """(the offsets committed by `writer_id`, the rows by key as DuckDB reads them), both
    from one load of the table, so they describe the same commit."""
    t = load(catalog(services), table)
    if t is None:
        return set(), {}
    if t.current_snapshot() is None:
        return offsets_of(t, writer_id), {}
    con = duckdb_connect({"key": services["access_key"], "secret": services["secret_key"],
                          "endpoint": services["s3_endpoint"], "region": services["region"]})
    rows = con.execute(f"SELECT id, v FROM iceberg_scan('{t.metadata_location}')").fetchall()
    return offsets_of(t, writer_id), rows_by_key(rows)


def rows_by_key(pairs):
    out = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return out


def read_duckdb(services, table):
    return rows_by_key(scan(services, table, "SELECT id, v FROM $T") or [])


def read_pyiceberg(services, table):
    t = load(catalog(services), table)
    return rows_by_key((r["id"], r["v"]) for r in t.scan(selected_fields=("id", "v")).to_arrow().to_pylist())


@pytest.fixture(scope="module")
def java():
    """Apache Iceberg's Java reader, one JVM for a test module (a fixture the test
    modules import)."""
    reader = JavaReader()
    yield reader
    reader.close()


def read_java(java, services, table):
    """Apache Iceberg's Java reader (applies equality and position deletes)."""
    props = {"s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
             "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
             "s3.path-style-access": "true"}
    rows = java.read({"uri": services["rest_url"], "table": f"{NAMESPACE}.{table}",
                      "props": props, "columns": ["id", "v"]})
    return rows_by_key((r["id"], r["v"]) for r in rows)


def readers(strategy, java):
    """(name, read(services, table)) of every reader that applies the strategy's delete
    files: DuckDB and Iceberg's Java reader always; pyiceberg, which reads no equality
    deletes, only without them."""
    chosen = [("DuckDB", read_duckdb), ("Iceberg Java", lambda s, t: read_java(java, s, t))]
    if strategy != "merge-on-read":
        chosen.append(("pyiceberg", read_pyiceberg))
    return chosen


def differences(got, want, ops, seed, limit=5):
    """None when the table's rows per key equal the model's; else a description of the
    first `limit` keys that differ, each with what was expected, what was read and every
    operation of the stream on it, in order, and the seed that replays the stream."""
    keys = sorted(k for k in set(got) | set(want) if sorted(got.get(k, [])) != sorted(want.get(k, [])))
    if not keys:
        return None
    history = {}
    for o in ops:
        history.setdefault(o.id, []).append(o.describe())
    lines = [f"{len(keys)} keys differ (replay: FLOE_E2E_SEED={seed}); the first {min(limit, len(keys))}:"]
    for k in keys[:limit]:
        lines.append(f"  id {k}: want {sorted(want.get(k, []))}, read {sorted(got.get(k, []))}; "
                     f"operations: {', '.join(history.get(k, []))}")
    return "\n".join(lines)


def check_table(services, table, strategy, java, ops, seed, want=None):
    """Problems found by every reader of `table` against the model of `ops` (or `want`)."""
    want = model(ops) if want is None else want
    problems = []
    for name, read in readers(strategy, java):
        diff = differences(read(services, table), want, ops, seed)
        if diff:
            problems.append(f"{name}: {diff}")
    return problems


# -- metrics --------------------------------------------------------------------------

def metric_sum(text, name):
    """The sum of every sample of `name` (all tables, operations, classes; 0 if none)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def scrape(port):
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return ""


def scrape_until_acknowledged(port, count, timeout, host):
    """Scrapes the host's /metrics until it acknowledged `count` messages (every
    operation counts) or the timeout passes, or the host exits; the last text."""
    deadline, text = time.time() + timeout, ""
    while time.time() < deadline and host.proc.poll() is None:
        text = scrape(port) or text
        if metric_sum(text, "iceberg_row_operations_total") >= count:
            time.sleep(0.5)  # the last call's events drained
            return scrape(port) or text
        time.sleep(0.3)
    return text
