#!/usr/bin/env python3
"""Upsert throughput: a `generate` → iceberg pipeline of upserts and deletes (1 in 10) over
--keys keys, in --batch-row batches, per merge strategy and max_in_flight, beside plain
inserts of the same messages, on Apache's REST fixture + SeaweedFS (started here).

Each run writes a fresh table; its rows/s is --rows over the `floe run` wall time (process
start included), beside the CPU each process spent per row (floe, the catalog, the object
store: they share the machine's cores, so wall-time ratios are capped by their CPU too);
strategies take turns run by run, so drift in the machine's speed touches them alike. The
table is read back (DuckDB: one row per key, no more keys than
--keys). Each run starts at the next strategy, so that none always runs first or last.
Prints median [min–max] over --runs runs, the ratio to inserts (of the medians, and
run by run, each run's strategies having run back to back), and per strategy what the
commits did (data files added and removed, delete files, per commit). Figures
only: nothing is asserted beyond the read-back.

    bench-configs/upserts.py --rows 200000 --keys 50000 --runs 3
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
sys.path.insert(0, os.path.join(ROOT, "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from services import Services, cpu_seconds  # noqa: E402
from read_table import duckdb_connect  # noqa: E402


KEY_MAPPINGS = {
    # A batch's keys are those of the batch --keys/--batch before it: each upsert batch
    # replaces about one earlier file (copy-on-write's best case).
    "clustered": "(root.n * 7919) % {keys}",
    # Keys drawn at random: a batch touches nearly every file (copy-on-write's worst case).
    "scattered": "random_int(max: {keys} - 1)",
}


def pipeline(s, table, rows, keys, batch, in_flight, strategy, workload):
    keyed = ""
    if strategy != "insert":
        keyed = ('    row_operation: ${! meta("op") }\n    identifier_fields: [id]\n'
                 f"    merge_strategy: {strategy}\n")
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
      root.n = count("{table}")
      root.id = {KEY_MAPPINGS[workload].format(keys=keys)}
      root.user = "user-" + (root.n % 977).string()
      root.payload = "abcdefghijklmnopqrstuvwxyz0123456789-" + root.n.string()
      root.value = root.n % 1000
      meta op = if root.n % 10 == 0 {{ "delete" }} else {{ "upsert" }}
output:
  iceberg:
{s.output_connection()}    namespace: bench
    table: {table}
    schema_evolution:
      enabled: true
{keyed}    max_in_flight: {in_flight}
    batching:
      count: {batch}
"""


def run(s, catalog, table, args, in_flight, strategy):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(pipeline(s, table, args.rows, args.keys, args.batch, in_flight, strategy,
                         args.workload))
    services_cpu = {name: cpu_seconds(pid) for name, pid in s.pids.items()}
    t0 = time.perf_counter()
    proc = subprocess.Popen([FLOE, "run", f.name], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    os.unlink(f.name)
    if status != 0:
        sys.exit(f"floe failed:\n{stderr[-3000:]}")
    services_cpu = {name: cpu_seconds(pid) - services_cpu[name] for name, pid in s.pids.items()}
    t = catalog.load_table(f"bench.{table}")
    con = duckdb_connect({"key": s.info["access_key"], "secret": s.info["secret_key"],
                          "endpoint": s.info["s3_endpoint"], "region": s.info["region"]})
    n, distinct = con.execute(
        f"SELECT count(*), count(DISTINCT id) FROM iceberg_scan('{t.metadata_location}')").fetchone()
    if strategy != "insert" and (n != distinct or n > args.keys):
        sys.exit(f"{table}: {n} rows for {distinct} keys: read-back failed")
    if strategy == "insert" and n != args.rows:
        sys.exit(f"{table}: {n} rows, want {args.rows}")
    commits = [x for x in t.metadata.snapshots]
    added = sum(int(x.summary.additional_properties.get("added-data-files", 0)) for x in commits)
    removed = sum(int(x.summary.additional_properties.get("deleted-data-files", 0)) for x in commits)
    deletes = sum(int(x.summary.additional_properties.get("added-delete-files", 0)) for x in commits)
    per_row = lambda seconds: seconds / args.rows * 1e6  # noqa: E731 (µs per row)
    return {"rows_per_s": args.rows / wall, "commits": len(commits), "added": added,
            "removed": removed, "delete_files": deletes, "rows_left": n,
            "cpu_us": [per_row(usage.ru_utime + usage.ru_stime)]
            + [per_row(cpu) for cpu in services_cpu.values()]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--in-flight", default="1,4")
    ap.add_argument("--strategies",
                    default="insert,merge-on-read,merge-on-read-positional,copy-on-write")
    ap.add_argument("--workload", choices=sorted(KEY_MAPPINGS), default="clustered")
    ap.add_argument("--warmup", type=int, default=2,
                    help="uncounted insert runs first, while the fixture's JVM warms up")
    args = ap.parse_args()
    from pyiceberg.catalog import load_catalog
    with Services() as s:
        catalog = load_catalog("bench", type="rest", uri=s.info["rest_url"], **{
            "s3.endpoint": s.info["s3_endpoint"], "s3.access-key-id": s.info["access_key"],
            "s3.secret-access-key": s.info["secret_key"], "s3.region": s.info["region"],
            "s3.path-style-access": "true"})
        # The catalog's JVM and the storage warm up on runs that are not counted.
        for w in range(args.warmup):
            run(s, catalog, f"warmup_{w}_{int(time.time())}", args, 1, "insert")
        results = {}
        strategies = args.strategies.split(",")
        for in_flight in [int(x) for x in args.in_flight.split(",")]:
            for r in range(args.runs):
                # Each run starts at the next strategy, so none always runs first or last
                # (the fixture's JVM still speeds up from run to run).
                for strategy in strategies[r % len(strategies):] + strategies[:r % len(strategies)]:
                    table = f"up_{strategy.replace('-', '_')}_{in_flight}_{r}_{int(time.time())}"
                    one = run(s, catalog, table, args, in_flight, strategy)
                    results.setdefault((strategy, in_flight), []).append(one)
        services = " / ".join(["floe", *s.pids])
        print(f"{args.rows:,} messages ({args.batch} per batch; upserts, 1 in 10 a delete) over "
              f"{args.keys:,} keys ({args.workload}), REST fixture + SeaweedFS, {args.runs} runs each")
        print("| strategy | max_in_flight | rows/s median [min–max] | vs insert | "
              "vs insert, run by run: median [min–max] | commits | "
              f"data files added / removed per commit | delete files per commit | "
              f"CPU µs/row {services} |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for (strategy, in_flight), runs in results.items():
            rates = [x["rows_per_s"] for x in runs]
            base = results.get(("insert", in_flight))
            ratio = (statistics.median(rates) / statistics.median([x["rows_per_s"] for x in base])
                     if base else float("nan"))
            # Each run's strategies ran back to back, so the machine's drift between runs
            # (inserts alone vary by a third) cancels in each run's own ratio.
            paired = ([x["rows_per_s"] / b["rows_per_s"] for x, b in zip(runs, base)]
                      if base else [float("nan")])
            c = statistics.median([x["commits"] for x in runs])
            per = lambda k: statistics.median([x[k] / max(x["commits"], 1) for x in runs])  # noqa: E731
            print(f"| {strategy} | {in_flight} | {statistics.median(rates):,.0f} "
                  f"[{min(rates):,.0f}–{max(rates):,.0f}] | {ratio:.2f}× | "
                  f"{statistics.median(paired):.2f}× [{min(paired):.2f}–{max(paired):.2f}] | "
                  f"{c:.0f} | "
                  f"{per('added'):.1f} / {per('removed'):.1f} | {per('delete_files'):.1f} | "
                  + " / ".join(f"{statistics.median(x['cpu_us'][i] for x in runs):.1f}"
                               for i in range(len(runs[0]['cpu_us']))) + " |")


if __name__ == "__main__":
    main()
