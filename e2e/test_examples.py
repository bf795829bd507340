"""The configs in examples/, as the README gives them: every one passes `floe lint`, and
each that needs only local services runs unchanged (from a copy of the repository's
examples/ folder, as if from its root) and is read back. The Kafka example runs in
test_kafka.py, beside its broker."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
from read_table import duckdb_connect  # noqa: E402
from services import free_port  # noqa: E402
from test_reliability import catalog  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
EXAMPLES = os.path.join(ROOT, "examples")
CONFIGS = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".yaml"))

# What the configs without defaults for them need to lint (credentials, by design).
LINT_ENV = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "example-secret"}


def test_the_readme_lists_every_example_and_each_exists():
    readme = open(os.path.join(ROOT, "README.md")).read()
    listed = set(re.findall(r"\(examples/([a-z0-9-]+\.yaml)\)", readme))
    assert listed == set(CONFIGS), (listed, CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_example_lints_clean(name):
    res = subprocess.run([FLOE, "lint", os.path.join(EXAMPLES, name)], capture_output=True,
                         text=True, env={**os.environ, **LINT_ENV}, timeout=60)
    assert res.returncode == 0 and res.stdout + res.stderr == "", res.stdout + res.stderr


@pytest.mark.parametrize("name", CONFIGS)
def test_no_example_holds_an_environment_variable_in_a_comment(name):
    """Benthos interpolates `${…}` in comments too, so lint would demand the variable."""
    for n, line in enumerate(open(os.path.join(EXAMPLES, name)), 1):
        comment = line.split("#", 1)[1] if "#" in line else ""
        assert "${" not in comment, f"{name}:{n}: {line.rstrip()}"


@pytest.fixture
def checkout(tmp_path):
    """A folder laid out as the repository's root for the examples: examples/ copied in."""
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    return tmp_path


def run(checkout, name, stdin=None, env=None, timeout=120):
    res = subprocess.run([FLOE, "run", f"examples/{name}"], cwd=checkout, input=stdin,
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def embedded_rows(checkout, table, order_by="id"):
    from pyiceberg.catalog import load_catalog
    wh = checkout / "warehouse"
    cat = load_catalog("floe", type="sql", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    t = cat.load_table(table)
    rows = duckdb_connect().execute(
        f"SELECT * FROM iceberg_scan('{t.metadata_location}') ORDER BY {order_by}").fetchall()
    names = [f.name for f in t.schema().fields]
    return names, rows, sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r[order_by])


def test_quickstart_and_stdin_write_demo_events_and_read_table_prints_it(checkout):
    run(checkout, "quickstart.yaml")
    run(checkout, "stdin.yaml", stdin='{"id": 6, "user": "kim", "event": "signup"}\n')
    names, rows, by_pyiceberg = embedded_rows(checkout, "demo.events")
    assert set(names) == {"id", "user", "event", "ts", "page", "amount"}
    assert [r["id"] for r in by_pyiceberg] == [1, 2, 3, 4, 5, 6]
    assert len(rows) == 6
    assert [(r["id"], r["page"], r["amount"]) for r in by_pyiceberg if r["page"] or r["amount"]] == \
        [(2, "/pricing", None), (4, None, 19.99)]
    # The README's read-back command, from the checkout's root.
    res = subprocess.run([sys.executable, "examples/read_table.py", "./warehouse", "demo.events"],
                         cwd=checkout, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "pyiceberg:" in res.stdout and "DuckDB:" in res.stdout and "/pricing" in res.stdout
    assert res.stdout.count("kim") == 2, res.stdout


def test_upserts_example_keeps_the_last_operation_per_key(checkout):
    run(checkout, "upserts.yaml")
    _, rows, by_pyiceberg = embedded_rows(checkout, "demo.customers")
    expected = [{"id": 1, "name": "Ada", "tier": "pro"}, {"id": 3, "name": "Kim", "tier": "pro"}]
    assert by_pyiceberg == expected
    assert [tuple(r.values()) for r in expected] == rows


def test_dead_letters_example_sends_only_the_bad_message_to_the_file(checkout):
    run(checkout, "dead-letters.yaml")
    dead = [json.loads(line) for line in (checkout / "dead-letters.out.ndjson").read_text().splitlines()]
    assert dead == [{"id": "three", "amount": 7}]
    _, rows, _ = embedded_rows(checkout, "demo.payments")
    assert rows == [(1, 10), (2, 12), (4, 5)]


def test_prometheus_example_runs_and_serves_the_output_metrics(checkout):
    run(checkout, "prometheus.yaml")
    _, rows, _ = embedded_rows(checkout, "demo.generated")
    assert len(rows) == 100_000
    # The same config, kept running (an endless generate) on a free port, is scraped.
    port = free_port()
    proc = subprocess.Popen([FLOE, "run", "--set", f"http.address=127.0.0.1:{port}",
                             "--set", "input.generate.count=0", "--set", "input.generate.interval=1ms",
                             "examples/prometheus.yaml"], cwd=checkout,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        text, deadline = "", time.time() + 60
        while time.time() < deadline:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                if re.search(r'^iceberg_row_operations_total\{[^}]*operation="insert"[^}]*\} [1-9]', text, re.M):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert re.search(r'^iceberg_row_operations_total\{[^}]*operation="insert"[^}]*\} [1-9]', text, re.M), text[-2000:]
        assert re.search(r"^iceberg_snapshots_total\{[^}]*\} [1-9]", text, re.M), text[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_rest_s3_example_writes_to_the_rest_catalog_on_s3(checkout, services):
    env = {"CATALOG_URL": services["rest_url"], "S3_BUCKET": services["bucket"],
           "S3_ENDPOINT": services["s3_endpoint"], "AWS_REGION": services["region"],
           "AWS_ACCESS_KEY_ID": services["access_key"], "AWS_SECRET_ACCESS_KEY": services["secret_key"]}
    res = run(checkout, "rest-s3.yaml", env=env)
    assert services["secret_key"] not in res.stdout + res.stderr
    table = catalog(services).load_table("demo.events")
    assert sorted(r["id"] for r in table.scan().to_arrow().to_pylist()) == [1, 2, 3, 4, 5]
    assert [f.transform.__class__.__name__ for f in table.spec().fields] == ["IdentityTransform"]
