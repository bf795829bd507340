"""The Databricks harness (e2e/databricks/harness.py) run in `make test` against the local
stand-in for Unity Catalog (unity_front.py over the REST fixture and SeaweedFS), with
short windows, so its code cannot rot; and its one-line skip when no workspace is named."""
import json
import os
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import harness  # noqa: E402
from unity_front import UnityFront  # noqa: E402


def test_the_harness_runs_locally_and_each_scenario_holds(tmp_path, services):
    token = "dapi-test-" + uuid.uuid4().hex
    with UnityFront(services["rest_url"], token) as front:
        target = harness.LocalTarget(services, front, token)
        options = type("Args", (), {"window": 6.0, "commit_sizes": [500, 5000],
                                    "cow_sizes": [100, 1000, 5000], "cow_batches": 3})
        results = harness.run_all(target, options, str(tmp_path))
        refused = dict(front.refused)
    text = harness.report(results, str(tmp_path / "out"))
    print(text)
    rt = results["round_trip"]
    assert rt["ok"], rt
    assert rt["rows"] == 1000 + 50 - 50
    # The catalog refused identifier-field ids; floe created its tables without them.
    assert results["identifier_refusal"]["ok"], results["identifier_refusal"]
    assert refused.get("identifier-fields") == 1, refused  # the probe's, not floe's
    # floe's own property was refused once per table it created, then stripped.
    assert refused.get("properties", 0) >= 1, refused
    # Upserts on Unity are copy-on-write without being told: no commit added delete files.
    assert "delete-files" not in refused, refused
    assert results["floe_logged_unity"]
    for point in results["throughput"]:
        assert point["rows"] > 0 and point["rows"] == point["stats_rows"], point
        assert point["snapshots"] >= 1, point
    bigger = results["throughput"][-1]["rows_per_commit"]
    assert bigger > results["throughput"][0]["rows_per_commit"], results["throughput"]
    cow = results["cow_latency"]
    assert cow["table_rows"] == cow["expected_rows"], cow
    for c in cow["sizes"]:
        assert c["commits"] >= 3 and c["commit_p50_ms"] > 0, c
    out = tmp_path / "out"
    assert json.loads((out / "results.json").read_text())["target"] == "local"
    assert (out / "throughput.svg").read_text().count("<circle") == 2


def test_without_a_workspace_the_harness_says_so_in_one_line():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABRICKS_")}
    res = subprocess.run([sys.executable, os.path.join(HERE, "harness.py")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("databricks harness: skipped"), res.stdout
    assert "DATABRICKS_HOST" in lines[0]


def test_the_command_line_runs_it_locally_with_its_own_services(tmp_path):
    """`harness.py --local`, as docs/catalogs-and-storage.md gives it (tiny windows): it starts and stops
    its own services and writes its results."""
    out = tmp_path / "cli"
    res = subprocess.run([sys.executable, os.path.join(HERE, "harness.py"), "--local",
                          "--window", "3", "--commit-sizes", "500", "--cow-sizes", "100",
                          "--cow-batches", "1", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["round_trip"]["ok"] and results["identifier_refusal"]["ok"], results
    assert "| 500 |" in (out / "results.md").read_text()
