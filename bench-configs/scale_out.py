#!/usr/bin/env python3
"""Scale-out: N `floe run` processes writing one table at once, each fed at a fixed rate
(a rate-limited `generate` input), on Apache's REST fixture + SeaweedFS (started here).

Per writer count N (--writers) and workload (--workloads: `append`, and `upsert`, which
is merge-on-read upserts over keys of the writer's own), over --runs runs, median
[min–max], in the steady window (the first --warmup seconds, and the time after the
input ends, are left out):
- committed rows/s and commits/s, summed over the writers, from their Prometheus
  counters (sampled each second);
- conflicts and other retries per commit;
- write calls failed whole (each is re-sent by the host and its data files written
  again), and data files in the store that no snapshot references (files written twice);
- commit latency p50/p99 (the `iceberg_commit_latency_seconds` histograms of all
  writers, merged);
- rows lost and duplicated, read back by DuckDB against a model (exactly-once is on, so
  both must be 0);
- CPU per committed row of one floe process (the median writer), and of the catalog and
  the object store;
- cores busy (every process's CPU over the run's wall time) and the rows/s the cores
  allow: the machine's cores over every process's CPU per row. Where rows/s reach that,
  the cores are the limit, not contention: lower --rate to see contention alone.

The ceiling: the catalog's own commit rate, measured first with a trivial commit loop
(`set-properties` commits posted back to back, from 1 and from 4 clients). Each N is
reported against it. On a two-core machine the catalog, the store and all writers share
the cores: compare N within one run, not against another machine.

    bench-configs/scale_out.py --writers 1,2,4,8,16,32 --seconds 40 --runs 1

--in-flight takes several values (4,64): each writer's max_in_flight, run side by side
at each N like the builds of --floe; so does --max-snapshots (500,100), each writer's
commit.max_snapshots (how large the metadata every commit rewrites grows).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
sys.path.insert(0, os.path.join(ROOT, "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from services import Services, cpu_seconds, free_ports  # noqa: E402
from read_table import duckdb_connect, s3_list  # noqa: E402

NAMESPACE = "scale"
# Histogram buckets (seconds) fine enough for p50/p99 of commits from 5 ms to 2 min.
BUCKETS = [round(0.005 * 1.25 ** i, 4) for i in range(46)]


def pipeline(s, table, writer, args, workload, port, rate, in_flight, max_snapshots):
    interval_ms = max(1, round(1000 * args.batch / rate))
    count = rate * args.seconds
    keyed = ""
    if workload == "upsert":
        keyed = ("    row_operation: upsert\n    identifier_fields: [id]\n"
                 "    merge_strategy: merge-on-read\n")
    return f"""
http:
  address: 127.0.0.1:{port}
logger:
  level: {args.log_level}
shutdown_delay: 3s
metrics:
  prometheus:
    histogram_buckets: {json.dumps(BUCKETS)}
input:
  generate:
    count: {count}
    interval: {interval_ms}ms
    batch_size: {args.batch}
    mapping: |
      root.w = {writer}
      root.n = count("n")
      root.id = {writer} * {args.keys} + root.n % {args.keys}
      root.payload = "abcdefghijklmnopqrstuvwxyz0123456789-" + root.n.string()
output:
  iceberg:
{s.output_connection()}    namespace: {NAMESPACE}
    table: {table}
{keyed}    commit:
      max_snapshots: {max_snapshots}
      exactly_once:
        writer_id: w{writer}
        source: w{writer}
        offset: '${{! json("n") }}'
    max_in_flight: {in_flight}
"""


# -- the catalog's own commit rate --------------------------------------------------------

def create_table(catalog, name, keyed):
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType
    catalog.create_namespace_if_not_exists(NAMESPACE)
    schema = Schema(NestedField(1, "w", LongType(), required=False),
                    NestedField(2, "n", LongType(), required=False),
                    NestedField(3, "id", LongType(), required=True),
                    NestedField(4, "payload", StringType(), required=False),
                    identifier_field_ids=[3] if keyed else [])
    return catalog.create_table(f"{NAMESPACE}.{name}", schema=schema)


def trivial_commits(url, table, seconds, clients):
    """Commits/s of `set-properties` commits posted back to back by `clients` threads:
    the catalog's commit path alone (it writes a new metadata file each time)."""
    done, stop = [0] * clients, time.monotonic() + seconds

    def loop(c):
        i = 0
        while time.monotonic() < stop:
            body = json.dumps({"requirements": [], "updates": [
                {"action": "set-properties", "updates": {f"bench.c{c}": str(i)}}]}).encode()
            req = urllib.request.Request(f"{url}/v1/namespaces/{NAMESPACE}/tables/{table}",
                                         data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    resp.read()
                done[c] += 1
            except urllib.error.HTTPError as e:
                if e.code != 409:  # another client's commit landed first: try again
                    raise
            i += 1

    threads = [threading.Thread(target=loop, args=(c,)) for c in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - t0)


# -- metrics --------------------------------------------------------------------------------

SAMPLE = re.compile(r'^(\w+)(?:\{([^}]*)\})?\s+(\S+)$')


def parse_metrics(text):
    """{(name, labels-dict-as-tuple): value} of the iceberg_* series."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or not m.group(1).startswith("iceberg_"):
            continue
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def total(sample, name):
    return sum(v for (n, _), v in sample.items() if n == name)


def buckets(sample, name):
    """{le: cumulative count} of a histogram, summed over its series."""
    out = {}
    for (n, labels), v in sample.items():
        if n == name + "_bucket":
            le = dict(labels)["le"]
            le = float("inf") if le == "+Inf" else float(le)
            out[le] = out.get(le, 0) + v
    return out


def quantile(cumulative, q):
    """The q-quantile of a merged histogram: linear within the bucket it falls in."""
    les = sorted(cumulative)
    count = cumulative[les[-1]] if les else 0
    if not count:
        return float("nan")
    rank, lower, below = q * count, 0.0, 0.0
    for le in les:
        if cumulative[le] >= rank:
            if le == float("inf"):
                return lower
            inside = cumulative[le] - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1)
        lower, below = le, cumulative[le]
    return lower


class Writer:
    """One `floe run` process and its metrics, scraped each second."""

    def __init__(self, binary, config, port):
        self.port = port
        self.file = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        self.file.write(config)
        self.file.close()
        self.proc = subprocess.Popen([binary, "run", self.file.name], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.samples = []  # (monotonic time, parsed metrics)
        self.output = ""
        self.status = self.usage = None
        self.exited = threading.Event()
        self.waiter = threading.Thread(target=self._wait, daemon=True)
        self.waiter.start()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _wait(self):
        self.output = self.proc.stdout.read()
        _, self.status, self.usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = self.status  # so Popen never waits for it again
        self.exited.set()

    def _watch(self):
        while not self.exited.is_set():
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                              timeout=2).read().decode()
                self.samples.append((time.monotonic(), parse_metrics(text)))
            except OSError:
                pass
            self.exited.wait(1)

    def stop_by(self, deadline):
        """SIGTERM at `deadline` (monotonic) if still running, SIGKILL 30 s later; True
        if it had to be stopped."""
        if self.exited.wait(max(0.0, deadline - time.monotonic())):
            return False
        self.proc.terminate()
        if not self.exited.wait(30):
            self.proc.kill()
        return True

    def wait(self):
        self.waiter.join()
        self.thread.join()
        os.unlink(self.file.name)
        return self.status

    def at(self, t, name):
        """The counter's value at the last sample taken by time t (0 before any)."""
        value = 0.0
        for ts, sample in self.samples:
            if ts > t:
                break
            value = total(sample, name)
        return value

    def last(self):
        return self.samples[-1][1] if self.samples else {}


# -- one run ----------------------------------------------------------------------------------

def read_back(s, catalog, table, workload, writers, args, rate):
    """(rows lost, rows duplicated) against the model: every (w, n) once for appends; for
    upserts, one row per key, holding the key's last n."""
    t = catalog.load_table(f"{NAMESPACE}.{table}")
    con = duckdb_connect({"key": s.info["access_key"], "secret": s.info["secret_key"],
                          "endpoint": s.info["s3_endpoint"], "region": s.info["region"]})
    rows = con.execute(f"SELECT w, n, id FROM iceberg_scan('{t.metadata_location}')").fetchall()
    count = rate * args.seconds
    if workload == "append":
        seen = {(w, n) for w, n, _ in rows}
        want = {(w, n) for w in range(writers) for n in range(1, count + 1)}
        return len(want - seen), len(rows) - len(seen)
    model = {}
    for w in range(writers):
        for n in range(1, count + 1):
            model[w * args.keys + n % args.keys] = n
    got = {}
    for w, n, key in rows:
        got.setdefault(key, []).append(n)
    lost = sum(1 for key, n in model.items() if got.get(key) != [n])
    duplicated = sum(len(ns) - 1 for ns in got.values()) + len(set(got) - set(model))
    return lost, duplicated


def unreferenced_files(s, catalog, table):
    """Parquet files in the table's folder that no live snapshot references."""
    t = catalog.load_table(f"{NAMESPACE}.{table}")
    live = set()
    for manifest in t.current_snapshot().manifests(t.io):
        for entry in manifest.fetch_manifest_entry(t.io, discard_deleted=True):
            live.add(entry.data_file.file_path.split("://", 1)[-1])
    stored = s3_list({"s3": {"key": s.info["access_key"], "secret": s.info["secret_key"],
                             "endpoint": s.info["s3_endpoint"], "region": s.info["region"]},
                      "prefix": t.metadata.location + "/data/"})
    return len([p for p in stored if p.endswith(".parquet") and p not in live])


def run(s, catalog, workload, writers, args, run_no, build, rate=None):
    binary, in_flight, max_snapshots = build
    rate = rate or args.rate
    table = f"{workload}_n{writers}_r{run_no}_{int(time.time() * 1000)}"
    create_table(catalog, table, workload == "upsert")
    services_cpu = {name: cpu_seconds(pid) for name, pid in s.pids.items()}
    ports = free_ports(writers)
    t0 = time.monotonic()
    procs = [Writer(binary, pipeline(s, table, w, args, workload, ports[w], rate, in_flight,
                                             max_snapshots), ports[w])
             for w in range(writers)]
    # A build that falls behind is stopped --deadline seconds after its input ends: what
    # it committed by then counts, the rest is reported as behind.
    stopped = sum(p.stop_by(t0 + args.seconds + args.deadline) for p in procs)
    for w, p in enumerate(procs):
        status = p.wait()
        if args.log_dir:
            os.makedirs(args.log_dir, exist_ok=True)
            with open(os.path.join(args.log_dir, f"{table}-w{w}.log"), "w") as f:
                f.write(p.output)
        if status != 0 and not stopped:
            for q in procs:
                q.proc.kill()
            sys.exit(f"writer failed:\n{p.output[-3000:]}")
    services_cpu = {name: cpu_seconds(pid) - services_cpu[name] for name, pid in s.pids.items()}
    elapsed = time.monotonic() - t0
    lo, hi = t0 + args.warmup, t0 + args.seconds

    def window(name):
        return sum(p.at(hi, name) - p.at(lo, name) for p in procs)

    span = hi - lo
    commits = window("iceberg_snapshots_total")
    finals = [p.last() for p in procs]
    snapshots = sum(total(f, "iceberg_snapshots_total") for f in finals)
    latency = {}
    for f in finals:
        for le, v in buckets(f, "iceberg_commit_latency_seconds").items():
            latency[le] = latency.get(le, 0) + v
    lost, duplicated = read_back(s, catalog, table, workload, writers, args, rate)
    # Rows of stopped writers were never acknowledged: missing, not lost.
    behind, lost = (lost, float("nan")) if stopped else (0, lost)
    committed = writers * rate * args.seconds
    writers_cpu = [p.usage.ru_utime + p.usage.ru_stime for p in procs]
    per_row = [cpu / (rate * args.seconds) * 1e6 for cpu in writers_cpu]
    # Every process's CPU for the whole run (catch-up included), per row committed: what
    # one row costs the machine at this N, so cores / that is the most rows/s it could take.
    all_cpu = sum(writers_cpu) + sum(services_cpu.values())
    rows_done = sum(total(f, "iceberg_row_operations_total") for f in finals)
    return {
        "table": table,
        "rows_per_s": window("iceberg_row_operations_total") / span,
        "commits_per_s": commits / span,
        "conflicts": sum(total(f, "iceberg_commit_conflicts_total") for f in finals)
        / max(snapshots, 1),
        "retries": sum(total(f, "iceberg_commit_retries_total") for f in finals)
        / max(snapshots, 1),
        "failed_calls": sum(total(f, "iceberg_write_failures_total")
                            + total(f, "iceberg_commit_failures_total") for f in finals),
        "unreferenced": unreferenced_files(s, catalog, table),
        "p50_ms": quantile(latency, 0.5) * 1000,
        "p99_ms": quantile(latency, 0.99) * 1000,
        "lost": lost,
        "duplicated": duplicated,
        "stopped": stopped,
        "behind": behind,
        "floe_us": statistics.median(per_row),
        "cores_busy": all_cpu / elapsed,
        "cpu_cap": os.cpu_count() * rows_done / all_cpu,
        **{f"{name}_us": cpu / committed * 1e6 for name, cpu in services_cpu.items()},
    }


# -- report -------------------------------------------------------------------------------------

COLUMNS = [("rows_per_s", "rows/s", "{:,.0f}"), ("commits_per_s", "commits/s", "{:.1f}"),
           ("conflicts", "conflicts/commit", "{:.2f}"), ("retries", "retries/commit", "{:.2f}"),
           ("failed_calls", "calls failed", "{:.0f}"),
           ("unreferenced", "unreferenced files", "{:.0f}"),
           ("p50_ms", "commit p50 ms", "{:,.0f}"), ("p99_ms", "commit p99 ms", "{:,.0f}"),
           ("lost", "lost", "{:.0f}"), ("duplicated", "dup", "{:.0f}"),
           ("stopped", "writers stopped at the deadline", "{:.0f}"),
           ("behind", "rows not committed by then", "{:,.0f}"),
           ("cores_busy", "cores busy", "{:.2f}"),
           ("cpu_cap", "rows/s the cores allow", "{:,.0f}"),
           ("floe_us", "CPU µs/row: floe (one)", "{:.1f}")]


def cell(runs, key, fmt):
    xs = [r[key] for r in runs]
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}–{fmt.format(max(xs))}]"


def report(results, peaks, ceiling, args):
    print(f"\nWriters fed {args.rate} rows/s each in batches of {args.batch}, max_in_flight "
          f"{args.in_flight}, exactly-once on, for {args.seconds} s (steady window from "
          f"{args.warmup} s); REST fixture + SeaweedFS on this machine; {args.runs} run(s) "
          "each, median [min–max]")
    print(f"Catalog ceiling (trivial set-properties commits, one client after the other): "
          f"{ceiling[1]:.1f} commits/s on a new table ({ceiling[4]:.1f} from 4 clients), "
          f"{ceiling['long']:.1f} on a table with the runs' history")
    first = next(iter(results.values()))[0]
    services = sorted(k[:-3] for k in first if k.endswith("_us") and k != "floe_us")
    head = [c[1] for c in COLUMNS] + [f"CPU µs/row: {n}" for n in services]
    print("Single-writer peak (one writer fed "
          f"{args.peak_rate:,} rows/s, more than it commits):")
    for (workload, name), runs in peaks.items():
        print(f"- {name}, {workload}: {cell(runs, 'commits_per_s', '{:.1f}')} commits/s, "
              f"{cell(runs, 'rows_per_s', '{:,.0f}')} rows/s")
    print("| build | workload | writers | offered rows/s | commits/s vs one writer's peak | "
          "vs ceiling | " + " | ".join(head) + " |")
    print("|---|---|---:|---:|---:|---:|" + "---:|" * len(head))
    for (workload, writers, name), runs in sorted(results.items(),
                                                  key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        cells = [cell(runs, k, f) for k, _, f in COLUMNS]
        cells += [cell(runs, f"{n}_us", "{:.1f}") for n in services]
        commits = statistics.median(r["commits_per_s"] for r in runs)
        peak = statistics.median(r["commits_per_s"] for r in peaks[(workload, name)])
        print(f"| {name} | {workload} | {writers} | {writers * args.rate:,} | "
              f"{commits / peak:.0%} | {commits / ceiling['long']:.0%} | "
              + " | ".join(cells) + " |")


def plot(results, peaks, ceiling, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    styles = ["-", "--", ":", "-."]
    names = list(dict.fromkeys(name for _, _, name in results))
    for workload in sorted({w for w, _, _ in results}):
        for i, name in enumerate(names):
            ns = sorted(n for w, n, v in results if w == workload and v == name)
            if not ns:
                continue
            med = lambda key: [statistics.median(r[key] for r in results[(workload, n, name)])  # noqa
                               for n in ns]
            label = f"{name}, {workload}" if len(names) > 1 else workload
            kw = dict(marker="o", linestyle=styles[i % len(styles)], label=label)
            axes[0].plot(ns, med("commits_per_s"), **kw)
            axes[1].plot(ns, med("rows_per_s"), **kw)
            axes[2].plot(ns, med("p99_ms"), **kw)
    axes[0].axhline(ceiling["long"], color="grey", linestyle=":",
                    label="catalog ceiling (trivial commits, long table)")
    for ax, title in zip(axes, ["commits/s (all writers)", "committed rows/s (all writers)",
                                "commit latency p99 (ms)"]):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("writer processes")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[2].set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writers", default="1,2,4,8,16,32")
    ap.add_argument("--workloads", default="append,upsert")
    ap.add_argument("--rate", type=int, default=200, help="rows/s per writer")
    ap.add_argument("--batch", type=int, default=20, help="rows per batch")
    ap.add_argument("--keys", type=int, default=500, help="keys per writer (upsert)")
    ap.add_argument("--seconds", type=int, default=40, help="seconds each writer is fed")
    ap.add_argument("--warmup", type=int, default=10, help="seconds left out at the start")
    ap.add_argument("--in-flight", default="4",
                    help="max_in_flight of each writer; several (4,64) run side by side")
    ap.add_argument("--max-snapshots", default="500",
                    help="each writer's commit.max_snapshots (floe's default: 500); several "
                         "run side by side")
    ap.add_argument("--deadline", type=int, default=60,
                    help="seconds after the input ends by which a writer must be done")
    ap.add_argument("--compare", default="append",
                    help="workloads every build runs; the others run only the last build")
    ap.add_argument("--peak-rate", type=int, default=2000,
                    help="rows/s fed to one writer to find its peak commit rate")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--plot", default="", help="write a PNG of the curves here")
    ap.add_argument("--log-level", default="warn", help="the writers' logger level")
    ap.add_argument("--floe", default="",
                    help="name=binary,... : builds to compare, run in turn at each N")
    ap.add_argument("--log-dir", default="", help="keep each writer's log here")
    args = ap.parse_args()
    binaries = dict(v.split("=", 1) for v in args.floe.split(",")) if args.floe else {"floe": FLOE}
    in_flights = [int(x) for x in args.in_flight.split(",")]
    kept = [int(x) for x in args.max_snapshots.split(",")]
    # Every build at every max_in_flight and max_snapshots, named by each that varies.
    variants = {}
    for name, binary in binaries.items():
        for m in in_flights:
            for k in kept:
                label = name + (f" mif={m}" if len(in_flights) > 1 else "") + (
                    f" keep={k}" if len(kept) > 1 else "")
                variants[label] = (binary, m, k)
    def builds(workload):
        every = list(variants.items())
        return every if workload in args.compare.split(",") else every[-1:]

    from pyiceberg.catalog import load_catalog
    with Services() as s:
        catalog = load_catalog("bench", type="rest", uri=s.info["rest_url"], **{
            "s3.endpoint": s.info["s3_endpoint"], "s3.access-key-id": s.info["access_key"],
            "s3.secret-access-key": s.info["secret_key"], "s3.region": s.info["region"],
            "s3.path-style-access": "true"})
        create_table(catalog, "ceiling", False)
        trivial_commits(s.info["rest_url"], "ceiling", 5, 1)  # the JVM warms up
        ceiling = {c: trivial_commits(s.info["rest_url"], "ceiling", 15, c) for c in (1, 4)}
        print(f"catalog ceiling: {ceiling}", flush=True)
        results, peaks = {}, {}
        for workload in args.workloads.split(","):
            for r in range(args.runs):
                for name, build in builds(workload):
                    res = run(s, catalog, workload, 1, args, r, build, args.peak_rate)
                    print(f"{name}: {workload} one writer at {args.peak_rate} rows/s, run {r}: "
                          f"{res}", flush=True)
                    peaks.setdefault((workload, name), []).append(res)
            for writers in [int(x) for x in args.writers.split(",")]:
                for r in range(args.runs):
                    # Variants take turns at each N, so drift on the machine hits them alike.
                    for name, build in builds(workload):
                        res = run(s, catalog, workload, writers, args, r, build)
                        print(f"{name}: {workload} N={writers} run {r}: {res}", flush=True)
                        results.setdefault((workload, writers, name), []).append(res)
        # The catalog's rate on a table as long as the runs' (their last one, with as many
        # snapshots as the writers kept), beside the empty table's.
        last = res["table"]
        ceiling["long"] = trivial_commits(s.info["rest_url"], last, 15, 1)
        print(f"catalog ceiling on {last}: {ceiling['long']:.1f} commits/s", flush=True)
    report(results, peaks, ceiling, args)
    if args.plot:
        plot(results, peaks, ceiling, args.plot)


if __name__ == "__main__":
    main()
