"""The committer through the real binary: exactly-once across SIGKILLs, and several
processes appending to one table. SeaweedFS + Apache's REST fixture; DuckDB reads back."""
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from read_table import duckdb_connect  # noqa: E402
from conftest import keep_output  # noqa: E402


def iceberg_output(services, table, extra=""):
    return textwrap.dedent(f"""\
        iceberg:
          catalog:
            url: {services['rest_url']}
          namespace: e2e_commit
          table: {table}
          storage:
            aws_s3:
              bucket: {services['bucket']}
              region: {services['region']}
              endpoint: {services['s3_endpoint']}
              force_path_style_urls: true
              credentials:
                id: {services['access_key']}
                secret: {services['secret_key']}
          schema_evolution:
            enabled: true
          max_in_flight: 4
          batching:
            count: 1000
        """) + textwrap.indent(textwrap.dedent(extra), "  ")


def table_stats(services, table):
    """(rows, distinct seq, snapshots) of e2e_commit.<table>, or None before it exists."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError
    cat = load_catalog("rest", type="rest", uri=services["rest_url"], **{
        "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
        "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
        "s3.path-style-access": "true"})
    try:
        t = cat.load_table(f"e2e_commit.{table}")
    except NoSuchTableError:
        return None
    if t.current_snapshot() is None:
        return (0, 0, 0)
    con = duckdb_connect({"key": services["access_key"], "secret": services["secret_key"],
                          "endpoint": services["s3_endpoint"], "region": services["region"]})
    n, distinct = con.execute(
        f"SELECT count(*), count(DISTINCT seq) FROM iceberg_scan('{t.metadata_location}')").fetchone()
    return (n, distinct, len(t.metadata.snapshots))


def test_exactly_once_survives_sigkill_at_random_points(tmp_path, services):
    rows = 200_000
    data = tmp_path / "events.ndjson"
    with open(data, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"seq": i, "user_id": i % 10_000, "event_type": f"t{i % 5}",
                                "info": f"session-{i % 977}-abcdefghijklmnopq"}) + "\n")
    cfg = tmp_path / "replay.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        http:
          enabled: false
        input:
          file:
            paths: [ {data} ]
            scanner:
              lines: {{}}
        output:
        """) + textwrap.indent(iceberg_output(services, "replay", """\
        commit:
          exactly_once:
            writer_id: replay-test
            source: '${! meta("path") }'
            offset: '${! json("seq") }'
        """), "  "))
    rng = random.Random(20261130)
    progress = []
    for trial in range(20):
        proc = subprocess.Popen([FLOE, "run", str(cfg)], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.3, 3.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        keep_output(tmp_path, f"trial{trial}", "", proc.stderr.read())
        proc.stderr.close()
        stats = table_stats(services, "replay")
        progress.append(stats)
        if stats:
            n, distinct, _ = stats
            assert n == distinct, f"trial {trial}: {n} rows but {distinct} distinct after SIGKILL"
    # A last run to the end of the file.
    res = subprocess.run([FLOE, "run", str(cfg)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    keep_output(tmp_path, "last", res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr[-3000:]
    n, distinct, snapshots = table_stats(services, "replay")
    print(f"rows after each SIGKILL: {[p[0] if p else None for p in progress]}; "
          f"final {n} rows in {snapshots} snapshots")
    assert (n, distinct) == (rows, rows)
    partial = [p for p in progress if p and 0 < p[0] < rows]
    assert len(partial) >= 3, f"too few kills landed mid-run to prove anything: {progress}"


def test_four_processes_append_to_one_table(tmp_path, services):
    procs = []
    per_process = 25_000
    for k in range(4):
        cfg = tmp_path / f"p{k}.yaml"
        cfg.write_text(textwrap.dedent(f"""\
            http:
              enabled: false
            input:
              generate:
                count: {per_process}
                interval: ""
                batch_size: 1000
                mapping: |
                  root.seq = count("p") - 1 + {k * per_process}
                  root.user_id = root.seq % 10000
                  root.event_type = "t" + (root.seq % 5).string()
            output:
            """) + textwrap.indent(iceberg_output(services, "scale_out"), "  "))
        procs.append(subprocess.Popen([FLOE, "run", str(cfg)], cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for k, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        keep_output(tmp_path, f"p{k}", out, err)
        assert p.returncode == 0, err[-3000:]
    n, distinct, snapshots = table_stats(services, "scale_out")
    print(f"4 processes: {n} rows in {snapshots} snapshots")
    assert (n, distinct) == (4 * per_process, 4 * per_process)
