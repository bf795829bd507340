"""The benchmark sweep runs end to end on a fresh machine: a tiny grid of every pipeline
config on both catalogs, and floe's sink beside pyiceberg (the iceberg-go peer, five
minutes of CPU to build, is left to `make bench`, whose sweep reads its tables back the
same way). Checks that every run's table was read back with exactly its rows and that the
reports and plots were written; the timings it prints are not checked (they are the
sweep's output, not a test's)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = os.path.join(ROOT, "bench-configs", "sweep")


def test_tiny_sweep_verifies_every_run_and_writes_reports(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, SWEEP, "--catalog", "both", "--batches", "1000", "--in-flight", "1,4",
         "--cores", "1,2", "--runs", "1", "--seconds", "0.5", "--min-rows", "20000",
         "--sink-batches", "1000,5000", "--sink-rows", "10000", "--warm-services", "1",
         "--upsert-rows", "4000", "--peers", "pyiceberg", "--out", str(out)],
        capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    # The upsert pipelines ran for every strategy, each read back (upserts.py exits
    # non-zero otherwise, failing the sweep).
    upserts = (out / "upserts.md").read_text()
    for strategy in ("insert", "merge-on-read", "merge-on-read-positional", "copy-on-write"):
        assert f"| {strategy} | 1 |" in upserts and f"| {strategy} | 4 |" in upserts, upserts

    runs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    pipelines = [r for r in runs if r["kind"] == "pipeline"]
    sinks = [r for r in runs if r["kind"] == "sink"]
    points = {(r["config"], r["catalog"], r["cores"], r["in_flight"]) for r in pipelines}
    for catalog in ("rest", "embedded"):
        for cores in (1, 2):
            assert {("iceberg", catalog, cores, 1), ("iceberg", catalog, cores, 4)} <= points
        assert ("transform", catalog, 2, 4) in points and ("file", catalog, 2, 4) in points
    assert {(d, "–", c, 1) for d in ("drop", "drop_bytes") for c in (1, 2)} <= points
    assert {(r["sink"], r["batch"]) for r in sinks} == {
        (s, b) for s in ("floe-x1", "floe-x4", "pyiceberg") for b in (1000, 5000)}

    for r in runs:
        assert r["status"] == 0 and not r.get("error"), r
        assert r["rows_per_s"] > 0 and r["peak_rss_mb"], r
        if r.get("config") not in ("drop", "drop_bytes"):
            # Every table held exactly the rows its run was given, read back by DuckDB.
            assert r["verified"] and r["counted"] == r["rows"], r
    for r in pipelines:
        if r["config"] not in ("drop", "drop_bytes"):
            assert r["committed"] == r["rows"] and r["commits"] >= 1 and r["data_files"] >= 1, r

    report = (out / "results.md").read_text()
    assert "| rest | iceberg | 1 | 1000 | 4 |" in report
    assert "floe ×1 / pyiceberg" in report and "floe ×4 / pyiceberg" in report
    for png in ("pipeline.png", "sinks.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
