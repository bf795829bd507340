"""Reliability through the real binary: what goes to a dead-letter output and what must
not, and several processes appending to one table from files. SeaweedFS + Apache's
REST fixture; DuckDB reads back, and every row must be there exactly once.

The dead-letter pattern is Benthos's `fallback: [iceberg, file]`: a message the
iceberg output fails goes on to the file. Messages that can never fit the table belong
there; messages that hit a storage or catalog outage, or credentials the store refuses,
do not: the output has to keep them (retry) until the service is back.

Benthos logs to stdout (to stderr only when the output is stdout), so log assertions
read both streams of the process.
"""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from faultproxy import FaultProxy  # noqa: E402
from read_table import duckdb_connect  # noqa: E402
from services import free_port  # noqa: E402

NAMESPACE = "e2e_reliability"
# Distinctive, so that finding it in a log can only mean the secret leaked.
WRONG_SECRET = "wrong-secret-Zq81xV-do-not-log"


# -- pipeline text -------------------------------------------------------------------

def iceberg_output(services, table, *, s3_endpoint=None, secret=None, catalog_url=None,
                   batching="count: 100", max_in_flight=4):
    """An `iceberg:` output block (unindented) for e2e_reliability.<table>. `batching=None`
    leaves the output unbatched: the input's batches reach it as they are."""
    block = textwrap.dedent(f"""\
        iceberg:
          catalog:
            url: {catalog_url or services['rest_url']}
          namespace: {NAMESPACE}
          table: {table}
          storage:
            aws_s3:
              bucket: {services['bucket']}
              region: {services['region']}
              endpoint: {s3_endpoint or services['s3_endpoint']}
              force_path_style_urls: true
              credentials:
                id: {services['access_key']}
                secret: {secret or services['secret_key']}
          schema_evolution:
            enabled: true
          max_in_flight: {max_in_flight}
        """)
    if batching is None:
        return block
    return block + "  batching:\n" + textwrap.indent(textwrap.dedent(batching).strip() + "\n", " " * 4)


def with_dead_letter(iceberg_block, dlq_path):
    """`fallback: [iceberg, file]`: what the iceberg output fails is appended to dlq_path.

    The iceberg block must not batch (batch at the input): Benthos turns the per-message
    errors of an output-level batch into one error for every message of each input batch
    in it, so the fallback would receive whole input batches (see docs/failures.md)."""
    return ("fallback:\n"
            + textwrap.indent(iceberg_block, "    ").replace("    iceberg:", "  - iceberg:", 1)
            + "  - file:\n"
            + f"      path: {dlq_path}\n"
            + "      codec: lines\n")


def generate_input(count, mapping, batch_size=100, interval='""'):
    return textwrap.dedent(f"""\
        generate:
          count: {count}
          interval: {interval}
          batch_size: {batch_size}
          mapping: |
        """) + textwrap.indent(textwrap.dedent(mapping).strip() + "\n", " " * 4)


def pipeline(input_block, output_block):
    return ("http:\n  enabled: false\ninput:\n" + textwrap.indent(input_block, "  ")
            + "output:\n" + textwrap.indent(output_block, "  "))


GOOD_MAPPING = """\
    let i = count("{counter}") - 1
    root.seq = $i
    root.user_id = $i % 1000
    root.info = "row-" + $i.string()
"""


# -- processes -----------------------------------------------------------------------

class Floe:
    """`floe run` on a config written to <tmp>/<name>.yaml; stdout/stderr go to files
    (no pipe can fill up while the test waits), and stop() kills it by PID."""

    def __init__(self, tmp_path, name, yaml_text):
        self.name = name
        self.cfg = tmp_path / f"{name}.yaml"
        self.cfg.write_text(yaml_text)
        self.out_path = tmp_path / f"{name}.stdout"
        self.err_path = tmp_path / f"{name}.stderr"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([FLOE, "run", str(self.cfg)], cwd=tmp_path,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc.poll() is None

    def wait(self, timeout):
        """Exit code, or None if still running after `timeout` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def run_for(self, seconds):
        """Lets it run for `seconds` unless it exits first; returns its exit code (None:
        still running), leaving it running."""
        return self.wait(seconds)

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)

    def output(self):
        """stdout + stderr so far (Benthos logs to stdout)."""
        text = ""
        for p in (self.out_path, self.err_path):
            if os.path.exists(p):
                text += open(p, encoding="utf-8", errors="replace").read()
        return text

    def tail(self, n=3000):
        return f"--- {self.name} (pid {self.pid}) output, last {n} chars ---\n{self.output()[-n:]}"


def read_dlq(path):
    """Messages in the dead-letter file, one JSON document a line ([] if absent)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# -- read-back -----------------------------------------------------------------------

def catalog(services):
    from pyiceberg.catalog import load_catalog
    return load_catalog("rest", type="rest", uri=services["rest_url"], **{
        "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
        "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
        "s3.path-style-access": "true"})


def load(cat, table):
    from pyiceberg.exceptions import NoSuchTableError
    try:
        return cat.load_table(f"{NAMESPACE}.{table}")
    except NoSuchTableError:
        return None


def committed_rows(services, cat, table):
    """Rows in the current snapshot by its summary (no data read); 0 before any commit,
    None before the table exists."""
    t = load(cat, table)
    if t is None:
        return None
    snap = t.current_snapshot()
    if snap is None:
        return 0
    total = snap.summary["total-records"]
    if total is None:  # a summary without totals: count
        return scan(services, table, "SELECT count(*) FROM $T")[0][0]
    return int(total)


def scan(services, table, sql):
    """Runs `sql` with $T standing for the table (DuckDB over its current metadata);
    None if the table does not exist, [] if it has no snapshot."""
    t = load(catalog(services), table)
    if t is None:
        return None
    if t.current_snapshot() is None:
        return []
    con = duckdb_connect({"key": services["access_key"], "secret": services["secret_key"],
                          "endpoint": services["s3_endpoint"], "region": services["region"]})
    return con.execute(sql.replace("$T", f"iceberg_scan('{t.metadata_location}')")).fetchall()


def table_stats(services, table):
    """(rows, distinct seq, min seq, max seq, snapshots), or None before the table exists."""
    t = load(catalog(services), table)
    if t is None:
        return None
    snapshots = len(t.metadata.snapshots)
    rows = scan(services, table, "SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM $T")
    if not rows:
        return (0, 0, None, None, snapshots)
    return tuple(rows[0]) + (snapshots,)


def s3_host_port(services):
    host, port = services["s3_endpoint"].split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


# -- 2. dead letters: bad messages yes, outages no --------------------------------------

def test_dead_letter_gets_bad_messages(tmp_path, services):
    """Every 100th message has a string where the table has a long: exactly those go to
    the dead-letter file, every other row is in the table once, and the run exits 0."""
    total = 2000
    bad = [i for i in range(total) if i % 100 == 50]
    good = [i for i in range(total) if i % 100 != 50]
    dlq = tmp_path / "dlq.ndjson"
    # Message i % 100 == 0 opens each batch of 100 and is good, so the table is created
    # (schema inferred from the first batch) with seq as a long.
    mapping = """\
        let i = count("dlq_bad_messages") - 1
        root.id = $i
        root.seq = if $i % 100 == 50 { "not-a-number" } else { $i }
        root.info = "row-" + $i.string()
    """
    floe = Floe(tmp_path, "bad_messages", pipeline(
        generate_input(total, mapping),
        with_dead_letter(iceberg_output(services, "bad_messages", batching=None), dlq)))
    try:
        rc = floe.wait(300)
        assert rc is not None, "floe did not finish 2,000 messages in 300 s\n" + floe.tail()
        assert rc == 0, floe.tail()
    finally:
        floe.stop()

    dead = read_dlq(dlq)
    print(f"dead letters: {len(dead)}")
    assert sorted(m["id"] for m in dead) == bad, (
        f"dead-letter file should hold exactly the {len(bad)} bad messages, once each; "
        f"it holds ids {sorted(m['id'] for m in dead)[:50]}")
    assert all(m["seq"] == "not-a-number" for m in dead)
    rows = scan(services, "bad_messages", "SELECT seq FROM $T ORDER BY seq")
    assert rows is not None, "the table was never created"
    seqs = [r[0] for r in rows]
    print(f"table rows: {len(seqs)}")
    assert seqs == good, f"table should hold the {len(good)} good rows once each; has {len(seqs)}"


def test_dead_letter_not_used_for_s3_slowdown(tmp_path, services):
    """S3 answers 503 SlowDown to everything for 10 s in the middle of the run: the output
    rides it out. No message goes to the dead-letter file; all 2,000 rows land once."""
    total = 2000
    dlq = tmp_path / "dlq.ndjson"
    with FaultProxy(*s3_host_port(services), name="s3-slowdown") as proxy:
        # Paced (a batch of 100 every 500 ms, ~10 s in all) so the outage starts mid-run.
        floe = Floe(tmp_path, "slowdown", pipeline(
            generate_input(total, GOOD_MAPPING.format(counter="dlq_slowdown"), interval="500ms"),
            with_dead_letter(iceberg_output(services, "slowdown", s3_endpoint=proxy.endpoint, batching=None), dlq)))
        try:
            cat = catalog(services)
            deadline = time.time() + 120
            rows_at_outage = None
            while time.time() < deadline and floe.running():
                rows = committed_rows(services, cat, "slowdown")
                if rows:
                    proxy.outage(10)
                    rows_at_outage = rows
                    break
                time.sleep(0.2)
            assert rows_at_outage is not None, (
                "no commit seen before the run ended or within 120 s; cannot start the outage "
                "mid-run\n" + floe.tail())
            rc = floe.wait(300)
            assert rc is not None, "floe did not finish within 300 s\n" + floe.tail()
        finally:
            floe.stop()
        traffic = proxy.stats()
    print(f"outage began at {rows_at_outage} committed rows; proxy {traffic}")
    assert rows_at_outage < total, "the run was over before the outage began"
    assert traffic["faults"] > 0, "the outage answered no request of floe's: it proved nothing"
    dead = read_dlq(dlq)
    assert dead == [], (f"{len(dead)} of {total} messages went to the dead-letter file during a "
                        f"storage outage (seq {sorted(m.get('seq') for m in dead)[:20]}...)\n"
                        + floe.tail())
    assert rc == 0, floe.tail()
    stats = table_stats(services, "slowdown")
    assert stats is not None, "the table was never created"
    n, distinct, lo, hi, snapshots = stats
    print(f"slowdown: {n} rows in {snapshots} snapshots")
    assert (n, distinct, lo, hi) == (total, total, 0, total - 1)


def test_dead_letter_not_used_for_rejected_credentials(tmp_path, services):
    """A wrong S3 secret: SeaweedFS answers 403 SignatureDoesNotMatch to every upload.
    The messages are not dead letters (the table is fine, the setup is not): the output
    keeps them and retries, logs the storage failure clearly, and never logs the secret."""
    total = 2000
    dlq = tmp_path / "dlq.ndjson"
    floe = Floe(tmp_path, "wrong_secret", pipeline(
        generate_input(total, GOOD_MAPPING.format(counter="dlq_wrong_secret")),
        with_dead_letter(iceberg_output(services, "wrong_secret", secret=WRONG_SECRET, batching=None), dlq)))
    try:
        rc = floe.run_for(20)
    finally:
        floe.stop()
    log = floe.output()
    print(f"exit code after 20 s: {rc} (None: still running)")
    assert WRONG_SECRET not in log, "the S3 secret appears in floe's output"
    dead = read_dlq(dlq)
    assert dead == [], (f"{len(dead)} of {total} messages went to the dead-letter file because "
                        f"the store refused the credentials\n" + floe.tail())
    assert rc != 0, ("floe exited 0 although nothing could be written: messages were "
                     "acknowledged without being stored\n" + floe.tail())
    refused = re.compile(r"SignatureDoesNotMatch|AccessDenied|Access Denied|\b403\b")
    lines = [line for line in log.splitlines() if refused.search(line)]
    assert lines, ("no log line names the storage failure (403 SignatureDoesNotMatch)\n"
                   + floe.tail())
    print(f"storage failure reported as: {lines[0][:500]}")
    stats = table_stats(services, "wrong_secret")
    assert stats is None or stats[0] == 0, f"rows were committed with a refused secret: {stats}"


def test_dead_letter_not_used_for_unreachable_catalog(tmp_path, services):
    """The REST catalog URL points at a port nobody listens on: the log says which URL
    failed and why (connection refused), and no message goes to the dead-letter file."""
    port = free_port()  # bound and released: nothing listens there
    url = f"http://127.0.0.1:{port}"
    dlq = tmp_path / "dlq.ndjson"
    floe = Floe(tmp_path, "no_catalog", pipeline(
        generate_input(200, GOOD_MAPPING.format(counter="dlq_no_catalog")),
        with_dead_letter(iceberg_output(services, "no_catalog", catalog_url=url, batching=None), dlq)))
    try:
        rc = floe.run_for(15)
    finally:
        floe.stop()
    log = floe.output()
    print(f"exit code after 15 s: {rc} (None: still running)")
    dead = read_dlq(dlq)
    assert dead == [], (f"{len(dead)} messages went to the dead-letter file because the "
                        f"catalog was unreachable\n" + floe.tail())
    assert rc != 0, ("floe exited 0 although the catalog was never reached\n" + floe.tail())
    # "connect" alone would match Benthos's own "Failed to connect to iceberg"; the cause
    # is the refused connection, on a line that also names the address.
    lines = [line for line in log.splitlines()
             if f"127.0.0.1:{port}" in line and "refused" in line.lower()]
    assert lines, (f"no log line names the catalog address 127.0.0.1:{port} together with the "
                   f"cause (connection refused)\n" + floe.tail())
    print(f"catalog failure reported as: {lines[0][:500]}")


# -- 3. four processes, files in, every row once ----------------------------------------

@pytest.mark.parametrize("period", ["1s", None], ids=["count_and_period", "count_only"])
def test_four_processes_file_input_every_row_once(tmp_path, services, period):
    per_process = 25_000
    table = "four_files_period" if period else "four_files_count"
    batching = "count: 500" + (f"\nperiod: {period}" if period else "")
    procs = []
    try:
        for k in range(4):
            data = tmp_path / f"events{k}.ndjson"
            with open(data, "w") as f:
                for i in range(per_process):
                    seq = k * per_process + i
                    f.write(json.dumps({"seq": seq, "user_id": seq % 10_000,
                                        "event_type": f"t{seq % 5}",
                                        "info": f"session-{seq % 977}-abcdefghijklmnopq"}) + "\n")
            input_block = textwrap.dedent(f"""\
                file:
                  paths: [ {data} ]
                  scanner:
                    lines: {{}}
                """)
            procs.append(Floe(tmp_path, f"p{k}", pipeline(
                input_block, iceberg_output(services, table, batching=batching))))

        deadline = time.time() + 600
        codes = {}
        for p in procs:
            codes[p.name] = p.wait(max(1.0, deadline - time.time()))
        hung = [f"{p.name} (pid {p.pid})" for p in procs if codes[p.name] is None]
        if hung:
            for p in procs:
                p.stop()
            pytest.fail(f"still running after 600 s: {', '.join(hung)}\n"
                        + "\n".join(p.tail(1500) for p in procs if codes[p.name] is None))
    finally:
        for p in procs:
            p.stop()

    for p in procs:
        assert codes[p.name] == 0, p.tail()
    for p in procs:
        failed = [line for line in p.output().splitlines() if "messages failed" in line]
        assert not failed, f"{p.name} logged failed messages:\n" + "\n".join(failed[:5])
    stats = table_stats(services, table)
    assert stats is not None, "the table was never created"
    n, distinct, lo, hi, snapshots = stats
    print(f"4 processes, file input, batching {batching!r}: {n} rows in {snapshots} snapshots")
    total = 4 * per_process
    assert (n, distinct, lo, hi) == (total, total, 0, total - 1)
