"""The soak's harness (bench-configs/long_run.py) for half a minute, so its report cannot
rot: it must write soak.md and soak.png with a row per window, RSS and a latency report
from Benthos's logger exporter. The figures themselves are not asserted."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def test_a_short_soak_reports_every_window(tmp_path):
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench-configs", "long_run.py"), "--minutes", "0.5",
         "--window", "0.1", "--every", "2", "--report", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    report = (tmp_path / "soak.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| 0")]
    assert len(rows) >= 3, report
    # Every window has a peak RSS, and the windows a latency report (p50 / p90 / p99).
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in rows]
    assert all(c[4] != "–" and float(c[4]) > 0 for c in cells), report
    assert sum(1 for c in cells if " / " in c[3]) >= 2, report
    assert (tmp_path / "soak.png").stat().st_size > 10_000
