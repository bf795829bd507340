#!/usr/bin/env python3
"""A long streaming run at default commit settings: does commit latency stay flat as the
table ages?

Starts SeaweedFS + Apache's REST fixture (e2e/services.py), runs the bench pipeline
(`generate` → iceberg, BATCH rows per call × MAX_IN_FLIGHT, default `commit` section) for
--minutes, and samples the table every --every seconds: its last sequence number (one
per commit), total rows, snapshots kept and metadata.json size. Prints, per window of
--window minutes, the mean time between commits and rows/s, and the ratio of the last
window to the first. Figures only: nothing is asserted.

    bench-configs/long_run.py --minutes 30 --batch 1000 --in-flight 4
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
        out.append({
            "window": w,
            "ms_per_commit": 1000 * secs / commits if commits else None,
            "rows_per_s": (b["rows"] - a["rows"]) / secs,
            "snapshots_kept": b["snapshots"],
            "metadata_kb": b["metadata_bytes"] / 1024,
        })
        w += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--window", type=float, default=5, help="minutes per reported window")
    ap.add_argument("--every", type=float, default=15, help="seconds between samples")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--out", default=None, help="write samples and windows as JSON here")
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
        cmd = [FLOE, "run", "--log.level", "warn", "-r", os.path.join(ROOT, "bench-configs", "events.yaml"),
               *sets, os.path.join(ROOT, "bench-configs", "iceberg.yaml")]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
                    samples.append(sample(catalog, "bench.long_run"))
                except Exception as e:  # the table may not exist yet
                    print(f"sample skipped: {e}", file=sys.stderr)
        finally:
            proc.terminate()
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
        if len(samples) < 2:
            sys.exit(f"too few samples; floe said:\n{err[-3000:]}")
        result = windows(samples, args.window)
        print(f"{args.batch} rows × max_in_flight {args.in_flight}, default commit settings, "
              f"{args.minutes:g} min on the REST fixture + SeaweedFS")
        print("| window (min) | ms between commits | rows/s | snapshots kept | metadata.json KiB |")
        print("|---|---:|---:|---:|---:|")
        for w in result:
            lo = w["window"] * args.window
            print(f"| {lo:g}–{lo + args.window:g} | {w['ms_per_commit']:.1f} | {w['rows_per_s']:,.0f} "
                  f"| {w['snapshots_kept']} | {w['metadata_kb']:.0f} |")
        first, last = result[0], result[-1]
        if first["ms_per_commit"] and last["ms_per_commit"]:
            print(f"last window / first: {last['ms_per_commit'] / first['ms_per_commit']:.2f}× "
                  f"ms between commits, {last['rows_per_s'] / first['rows_per_s']:.2f}× rows/s")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"samples": samples, "windows": result, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
