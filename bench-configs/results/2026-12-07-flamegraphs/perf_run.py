"""Runs the upserts.py pipeline (400,000 messages over 100,000 clustered keys,
max_in_flight 4) once per strategy on the REST fixture + SeaweedFS; with `perf`, each
strategy's `floe run` under `perf record` (cpu-clock, 499 Hz, DWARF stacks) into
<strategy>.data in the working directory. A first insert run warms the services up.

    python perf_run.py insert,merge-on-read perf
    perf script -i insert.data | inferno-collapse-perf | inferno-flamegraph > insert.svg
"""
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench-configs"))
sys.path.insert(0, os.path.join(ROOT, "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import upserts  # noqa: E402
from services import Services, cpu_seconds  # noqa: E402

ROWS, KEYS = 400_000, 100_000


def main():
    strategies = sys.argv[1].split(",")
    profile = len(sys.argv) > 2 and sys.argv[2] == "perf"
    with Services() as s:
        for n, strategy in enumerate(["insert"] + strategies):
            table = f"perf_{strategy.replace('-', '_')}_{int(time.time() * 1000)}"
            cfg = upserts.pipeline(s, table, ROWS, KEYS, 1000, 4, strategy, "clustered")
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(cfg)
            cmd = [upserts.FLOE, "run", f.name]
            if profile and n > 0:
                cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "499",
                       "--call-graph", "dwarf,16384", "-o", f"{strategy}.data", "--"] + cmd
            before = {name: cpu_seconds(pid) for name, pid in s.pids.items()}
            t0 = time.perf_counter()
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wall = time.perf_counter() - t0
            os.unlink(f.name)
            services = {name: round((cpu_seconds(pid) - before[name]) / ROWS * 1e6, 2)
                        for name, pid in s.pids.items()}
            label = strategy if n > 0 else "warm-up"
            print(label, f"{ROWS / wall:,.0f} rows/s", "services CPU µs/row", services,
                  r.returncode, r.stderr[-300:], flush=True)


if __name__ == "__main__":
    main()
