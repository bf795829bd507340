"""Runs the upserts.py pipeline (400,000 messages over 100,000 clustered keys,
max_in_flight 4) per strategy on the REST fixture + SeaweedFS with Prometheus metrics
on 127.0.0.1:4195, and prints each run's mean commit-stage, catalog-commit, upload and
write-call latency (ms) with their counts, scraped once every message is acknowledged.
Strategies take turns in the order given, after one uncounted insert run.

    python metrics_run.py insert,merge-on-read,copy-on-write 3
"""
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench-configs"))
sys.path.insert(0, os.path.join(ROOT, "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import upserts  # noqa: E402
from services import Services  # noqa: E402

ROWS, KEYS, PORT = 400_000, 100_000, 4195
HISTOGRAMS = ["iceberg_commit_latency_seconds", "iceberg_catalog_commit_latency_seconds",
              "iceberg_upload_latency_seconds", "iceberg_write_batch_latency_seconds"]


def scrape():
    return urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=2).read().decode()


def means(text):
    out = {}
    for h in HISTOGRAMS:
        sums = [float(v) for v in re.findall(rf"^{h}_sum(?:{{[^}}]*}})? (\S+)$", text, re.M)]
        counts = [float(v) for v in re.findall(rf"^{h}_count(?:{{[^}}]*}})? (\S+)$", text, re.M)]
        if sum(counts):
            name = h.replace("iceberg_", "").replace("_seconds", "")
            out[name] = (round(sum(sums) / sum(counts) * 1000, 2), int(sum(counts)))
    return out


def acknowledged(text):
    return sum(float(v) for v in re.findall(r"^iceberg_row_operations_total{[^}]*} (\S+)$",
                                            text, re.M))


def run(s, strategy):
    table = f"m_{strategy.replace('-', '_')}_{int(time.time() * 1000)}"
    cfg = upserts.pipeline(s, table, ROWS, KEYS, 1000, 4, strategy, "clustered")
    cfg = cfg.replace("http:\n  enabled: false\n",
                      f"http:\n  enabled: true\n  address: 127.0.0.1:{PORT}\n"
                      "metrics:\n  prometheus: {}\nshutdown_delay: 2s\n")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(cfg)
    t0 = time.perf_counter()
    p = subprocess.Popen([upserts.FLOE, "run", f.name], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    text, wall = "", None
    while p.poll() is None and wall is None:
        try:
            text = scrape()
            if acknowledged(text) >= ROWS:
                wall = time.perf_counter() - t0
                time.sleep(0.3)
                text = scrape()
        except OSError:
            pass
        time.sleep(0.05)
    p.wait()
    os.unlink(f.name)
    return wall, means(text)


def main():
    strategies = sys.argv[1].split(",")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with Services() as s:
        run(s, "insert")
        for _ in range(runs):
            for strategy in strategies:
                wall, m = run(s, strategy)
                rate = f"{ROWS / wall:,.0f} rows/s" if wall else "did not finish"
                print(strategy, rate, m, flush=True)


if __name__ == "__main__":
    main()
