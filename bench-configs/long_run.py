#!/usr/bin/env python3
"""A long streaming run at default commit settings: does commit latency stay flat as the
table ages?

Starts SeaweedFS + Apache's REST fixture (e2e/services.py), runs the bench pipeline
(`generate` → iceberg, BATCH rows per call × MAX_IN_FLIGHT, default `commit` section) for
--minutes, and samples the table every --every seconds: its last sequence number (one
per commit), total rows, snapshots kept and metadata.json size, and the host's resident
memory. Benthos's `logger` metrics exporter reports, once per window, the output's
write-call latency (a call returns once its rows are committed) as p50/p90/p99 over that
window. Prints, per window of --window minutes, the mean time between commits, rows/s,
those latencies, peak RSS and metadata size, and the ratio of the last window to the
first. Figures only: nothing is asserted. With --report DIR it also writes DIR/soak.md
and the plot DIR/soak.png (the soak of `make reliability`).

    bench-configs/long_run.py --minutes 60 --batch 1000 --in-flight 4 --report reliability
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
sys.path.insert(0, os.path.join(ROOT, "e2e"))
from services import Services  # noqa: E402


def sample(catalog, table):
    t = catalog.load_table(table)
    snap = t.current_snapshot()
    summary = snap.summary.additional_properties if snap else {}
    meta_bytes = len(json.dumps(t.metadata.model_dump(by_alias=True, mode="json")))
    return {
        "t": time.time(),
        "seq": t.metadata.last_sequence_number,
        "rows": int(summary.get("total-records", 0)),
        "snapshots": len(t.metadata.snapshots),
        "metadata_bytes": meta_bytes,
    }


def rss_mib(pid):
    """Resident memory of a process, MiB (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def latency_reports(log_path):
    """The logger exporter's reports of the write-call timer, one per window: [(its
    time, p50, p90, p99 in ms)], from the host's JSON log lines."""
    out = []
    with open(log_path, errors="replace") as f:
        for line in f:
            if "iceberg_write_batch_latency_ns" not in line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("name") != "iceberg_write_batch_latency_ns" or "p50" not in e:
                continue
            # Values are nanoseconds, as numbers or numeric text.
            out.append((e.get("time"), *(float(e[q]) / 1e6 for q in ("p50", "p90", "p99"))))
    return out


def windows(samples, minutes):
    """Per window: ms between commits and rows/s, from the first and last sample in it."""
    start = samples[0]["t"]
    out = []
    w = 0
    while True:
        lo, hi = start + w * minutes * 60, start + (w + 1) * minutes * 60
        inside = [s for s in samples if lo <= s["t"] <= hi]
        if len(inside) < 2:
            break
        a, b = inside[0], inside[-1]
        commits = b["seq"] - a["seq"]
        secs = b["t"] - a["t"]
        rss = [s["rss_mib"] for s in inside if s.get("rss_mib")]
        out.append({
            "window": w,
            "ms_per_commit": 1000 * secs / commits if commits else None,
            "rows_per_s": (b["rows"] - a["rows"]) / secs,
            "snapshots_kept": b["snapshots"],
            "metadata_kb": b["metadata_bytes"] / 1024,
            "rss_mib_max": max(rss) if rss else None,
        })
        w += 1
    return out


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def table_text(result, window):
    lines = ["| window (min) | ms between commits | rows/s | write call p50 / p90 / p99 ms "
             "| peak RSS MiB | snapshots kept | metadata.json KiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for w in result:
        lo = w["window"] * window
        lat = w.get("latency_ms")
        lat_text = f"{lat['p50']:.0f} / {lat['p90']:.0f} / {lat['p99']:.0f}" if lat else "–"
        lines.append(f"| {lo:g}–{lo + window:g} | {fmt(w['ms_per_commit'], '.1f')} "
                     f"| {w['rows_per_s']:,.0f} | {lat_text} | {fmt(w['rss_mib_max'], '.0f')} "
                     f"| {w['snapshots_kept']} | {w['metadata_kb']:.0f} |")
    return "\n".join(lines)


def write_report(args, samples, result, table):
    """soak.md (the windows) and soak.png (RSS, write latency and metadata size over time)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(args.report, exist_ok=True)
    t0 = samples[0]["t"]
    minutes = [(s["t"] - t0) / 60 for s in samples]
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    axes[0].plot(minutes, [s.get("rss_mib") or 0 for s in samples])
    axes[0].set_ylabel("host RSS, MiB")
    mids = [(w["window"] + 0.5) * args.window for w in result if w.get("latency_ms")]
    for q in ("p50", "p90", "p99"):
        axes[1].plot(mids, [w["latency_ms"][q] for w in result if w.get("latency_ms")],
                     marker="o", label=q)
    axes[1].set_ylabel("write call, ms")
    axes[1].legend()
    axes[2].plot(minutes, [s["metadata_bytes"] / 1024 for s in samples])
    axes[2].set_ylabel("metadata.json, KiB")
    axes[2].set_xlabel("minutes")
    fig.suptitle(f"{args.minutes:g} min, {args.batch} rows × max_in_flight {args.in_flight}, "
                 "REST fixture + SeaweedFS, default commit settings")
    fig.tight_layout()
    fig.savefig(os.path.join(args.report, "soak.png"), dpi=90)
    with open(os.path.join(args.report, "soak.md"), "w") as f:
        f.write(f"# Soak\n\n`bench-configs/long_run.py --minutes {args.minutes:g} --batch {args.batch} "
                f"--in-flight {args.in_flight} --report {args.report}` on {time.strftime('%Y-%m-%d')}: "
                "the bench pipeline (`generate` → iceberg) at full speed on the REST fixture + "
                "SeaweedFS, default commit settings. Write call latency is the output's "
                "`iceberg_write_batch_latency_ns` timer per window (a call returns once its rows "
                "are committed); peak RSS is the host's, sampled every "
                f"{args.every:g} s.\n\n{table}\n\n![soak](soak.png)\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--window", type=float, default=5, help="minutes per reported window")
    ap.add_argument("--every", type=float, default=15, help="seconds between samples")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--out", default=None, help="write samples and windows as JSON here")
    ap.add_argument("--report", default=None, help="write soak.md and soak.png into this folder")
    args = ap.parse_args()
    from pyiceberg.catalog import load_catalog

    with Services() as s:
        sets = []
        for k, v in {
            "catalog.url": s.info["rest_url"],
            "storage.aws_s3.bucket": s.info["bucket"], "storage.aws_s3.region": s.info["region"],
            "storage.aws_s3.endpoint": s.info["s3_endpoint"],
            "storage.aws_s3.force_path_style_urls": "true",
            "storage.aws_s3.credentials.id": s.info["access_key"],
            "storage.aws_s3.credentials.secret": s.info["secret_key"],
        }.items():
            sets += ["--set", f"output.iceberg.{k}={v}"]
        env = dict(os.environ, ROWS="1000000000", BATCH=str(args.batch), INPUT_BATCH=str(args.batch),
                   MAX_IN_FLIGHT=str(args.in_flight), TABLE="long_run")
        sets += ["--set", "logger.format=json", "--set", f"metrics.logger.push_interval={args.window:g}m",
                 "--set", "metrics.logger.flush_metrics=true"]
        cmd = [FLOE, "run", "--log.level", "info", "-r", os.path.join(ROOT, "bench-configs", "events.yaml"),
               *sets, os.path.join(ROOT, "bench-configs", "iceberg.yaml")]
        log_path = os.path.join(s.dir, "long_run.log")
        log = open(log_path, "w")
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.PIPE, text=True)
        catalog = load_catalog("long", type="rest", uri=s.info["rest_url"], **{
            "s3.endpoint": s.info["s3_endpoint"], "s3.access-key-id": s.info["access_key"],
            "s3.secret-access-key": s.info["secret_key"], "s3.region": s.info["region"],
            "s3.path-style-access": "true"})
        samples = []
        try:
            end = time.time() + args.minutes * 60
            while time.time() < end and proc.poll() is None:
                time.sleep(args.every)
                try:
                    point = sample(catalog, "bench.long_run")
                    point["rss_mib"] = rss_mib(proc.pid)
                    samples.append(point)
                except Exception as e:  # the table may not exist yet
                    print(f"sample skipped: {e}", file=sys.stderr)
        finally:
            proc.terminate()
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
        log.close()
        if len(samples) < 2:
            sys.exit(f"too few samples; floe said:\n{err[-3000:]}")
        result = windows(samples, args.window)
        reports = latency_reports(log_path)
        for w, r in zip(result, reports):
            w["latency_ms"] = {"p50": r[1], "p90": r[2], "p99": r[3]}
        print(f"{args.batch} rows × max_in_flight {args.in_flight}, default commit settings, "
              f"{args.minutes:g} min on the REST fixture + SeaweedFS")
        table = table_text(result, args.window)
        print(table)
        first, last = result[0], result[-1]
        if first["ms_per_commit"] and last["ms_per_commit"]:
            print(f"last window / first: {last['ms_per_commit'] / first['ms_per_commit']:.2f}× "
                  f"ms between commits, {last['rows_per_s'] / first['rows_per_s']:.2f}× rows/s")
        if args.report:
            write_report(args, samples, result, table)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"samples": samples, "windows": result, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
