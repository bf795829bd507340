#!/usr/bin/env python3
"""Many tables in one process: a `generate` → iceberg pipeline whose messages route to
--tables tables by an interpolated `table` (message n goes to table n mod N, so every
batch writes to many tables and each table has its own committer), on Apache's REST
fixture + SeaweedFS (started here).

Per table count, over --runs runs (median [min–max]): rows/s over the `floe run` wall time
(process start included), commits/s (snapshots summed over the tables, read back), the
floe process's peak RSS, the most TCP connections it held at once (sampled every 50 ms
from /proc), and CPU per row of floe, the catalog and the object store (each process's
user + system time over the rows). The catalog and the object store share this
machine's cores with floe: on a two-core machine every figure here is capped by their
CPU, so compare table counts within one run, not against another machine.

Every table is read back (pyiceberg: its rows, all of them, no more). Figures only:
nothing is asserted beyond the read-back.

    bench-configs/many_tables.py --tables 10,100,1000 --rows 100000 --runs 3
    bench-configs/many_tables.py --tables 3,10 --atomic off,on   # commit.atomic_tables
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
sys.path.insert(0, os.path.join(ROOT, "e2e"))
from services import Services, cpu_seconds  # noqa: E402


def pipeline(s, prefix, rows, tables, batch, in_flight, idle, atomic):
    return f"""
http:
  enabled: false
logger:
  level: warn
input:
  generate:
    count: {rows}
    interval: ""
    batch_size: {batch}
    mapping: |
      root.n = count("{prefix}")
      root.user = "user-" + (root.n % 977).string()
      root.payload = "abcdefghijklmnopqrstuvwxyz0123456789-" + root.n.string()
      meta table = "{prefix}_" + (root.n % {tables}).string()
output:
  iceberg:
{s.output_connection()}    namespace: many
    table: ${{! meta("table") }}
    schema_evolution:
      enabled: true
    commit:
      table_idle_timeout: {idle}
      atomic_tables: {str(atomic).lower()}
    max_in_flight: {in_flight}
    batching:
      count: {batch}
"""


def tcp_connections(pid):
    """Sockets the process holds (each a connection to the catalog or the store)."""
    n = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    n += 1
            except OSError:
                pass
    except OSError:
        pass
    return n


def run(s, catalog, prefix, args, tables, atomic=False):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(pipeline(s, prefix, args.rows, tables, args.batch, args.in_flight, args.idle,
                         atomic))
    services_cpu = {name: cpu_seconds(pid) for name, pid in s.pids.items()}
    t0 = time.perf_counter()
    proc = subprocess.Popen([FLOE, "run", f.name], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    most, stop = [0], threading.Event()

    def sample():
        while not stop.wait(0.05):
            most[0] = max(most[0], tcp_connections(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    os.unlink(f.name)
    if status != 0:
        sys.exit(f"floe failed:\n{stderr[-3000:]}")
    services_cpu = {name: cpu_seconds(pid) - services_cpu[name] for name, pid in s.pids.items()}
    commits = rows = 0
    for t in range(tables):
        table = catalog.load_table(f"many.{prefix}_{t}")
        commits += len(table.metadata.snapshots)
        rows += table.scan().to_arrow().num_rows
    if rows != args.rows:
        sys.exit(f"{prefix}: {rows} rows read back, {args.rows} written")
    per_row = lambda seconds: seconds / args.rows * 1e6  # noqa: E731 (µs per row)
    return {"rows_per_s": args.rows / wall, "commits_per_s": commits / wall,
            "rss_mib": usage.ru_maxrss / 1024, "connections": most[0],
            "floe_us": per_row(usage.ru_utime + usage.ru_stime),
            **{f"{name}_us": per_row(cpu) for name, cpu in services_cpu.items()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", default="10,100,1000")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--idle", default="5m", help="commit.table_idle_timeout")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--atomic", default="off",
                    help="commit.atomic_tables: off, on, or off,on (side by side, in turn)")
    args = ap.parse_args()
    modes = [m.strip() == "on" for m in args.atomic.split(",")]
    from pyiceberg.catalog import load_catalog
    with Services() as s:
        catalog = load_catalog("bench", type="rest", uri=s.info["rest_url"], **{
            "s3.endpoint": s.info["s3_endpoint"], "s3.access-key-id": s.info["access_key"],
            "s3.secret-access-key": s.info["secret_key"], "s3.region": s.info["region"],
            "s3.path-style-access": "true"})
        # The catalog's JVM and the storage warm up on a run that is not counted.
        run(s, catalog, f"warmup_{int(time.time())}", args, 2)
        results = {}
        for tables in [int(x) for x in args.tables.split(",")]:
            for r in range(args.runs):
                for atomic in modes:
                    prefix = f"t{tables}_{'a' if atomic else 'p'}{r}_{int(time.time())}"
                    results.setdefault((tables, atomic), []).append(
                        run(s, catalog, prefix, args, tables, atomic))
    print(f"{args.rows:,} messages in batches of {args.batch}, max_in_flight "
          f"{args.in_flight}, message n to table n mod N; REST fixture + SeaweedFS on this "
          f"machine; {args.runs} runs each, median [min–max]")
    names = sorted(k[:-3] for k in next(iter(results.values()))[0] if k.endswith("_us"))
    print("| tables | atomic_tables | rows/s | commits/s | peak RSS (MiB) | most connections | "
          + " | ".join(f"CPU µs/row: {n}" for n in names) + " |")
    print("|---:|---|---:|---:|---:|---:|" + "---:|" * len(names))
    for (tables, atomic), runs in results.items():
        def cell(key, fmt="{:,.0f}"):
            xs = [x[key] for x in runs]
            return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}–{fmt.format(max(xs))}]"
        cpu = " | ".join(cell(f"{n}_us", "{:.1f}") for n in names)
        print(f"| {tables:,} | {'on' if atomic else 'off'} | {cell('rows_per_s')} | {cell('commits_per_s', '{:.1f}')} | "
              f"{cell('rss_mib')} | {cell('connections')} | {cpu} |")


if __name__ == "__main__":
    main()
