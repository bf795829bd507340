"""The upserts.py pipeline (400,000 messages over 100,000 clustered keys, 1,000 × 4) on the
REST fixture + SeaweedFS under several GOGC settings, taking turns (each round starts at
the next setting; the first two rounds are not counted). Prints per setting the rows/s,
the host process's CPU per row and its peak RSS, median [min–max].

    python gogc_run.py 100,400 6 insert
    python gogc_run.py 100,200,400 5 merge-on-read
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench-configs"))
sys.path.insert(0, os.path.join(ROOT, "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import upserts  # noqa: E402
from services import Services  # noqa: E402

ROWS, KEYS, WARMUP = 400_000, 100_000, 2


def run(s, gogc, strategy, table):
    cfg = upserts.pipeline(s, table, ROWS, KEYS, 1000, 4, strategy, "clustered")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(cfg)
    env = dict(os.environ, GOGC=gogc)
    t0 = time.perf_counter()
    p = subprocess.Popen([upserts.FLOE, "run", f.name], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    os.unlink(f.name)
    if status != 0:
        sys.exit(f"floe failed (GOGC={gogc})")
    cpu = (usage.ru_utime + usage.ru_stime) / ROWS * 1e6
    return ROWS / wall, cpu, usage.ru_maxrss / 1024


def main():
    settings = sys.argv[1].split(",")
    rounds = int(sys.argv[2])
    strategy = sys.argv[3] if len(sys.argv) > 3 else "insert"
    results = {g: [] for g in settings}
    with Services() as s:
        for r in range(rounds + WARMUP):
            for g in settings[r % len(settings):] + settings[:r % len(settings)]:
                one = run(s, g, strategy, f"g_{g}_{r}_{int(time.time() * 1000)}")
                if r >= WARMUP:
                    results[g].append(one)
    for g, runs in results.items():
        cols = list(zip(*runs))
        fmt = ["{:,.0f}", "{:.2f}", "{:.0f}"]
        cells = [f"{fmt[i].format(statistics.median(c))} [{fmt[i].format(min(c))}–{fmt[i].format(max(c))}]"
                 for i, c in enumerate(cols)]
        print(f"GOGC={g}: {cells[0]} rows/s, host CPU {cells[1]} µs/row, peak RSS {cells[2]} MiB")


if __name__ == "__main__":
    main()
