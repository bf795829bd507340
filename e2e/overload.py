"""Overload: input far faster than storage can absorb. Does floe's memory stay bounded,
its throughput steady at what the link allows, and its log free of an error storm?

The bench pipeline (`generate` at full speed → iceberg, BATCH rows per call ×
MAX_IN_FLIGHT, default `commit` section) writes to SeaweedFS through a fault proxy
(e2e/faultproxy.py) that caps S3 at --cap KiB/s both ways, and commits to Apache's REST
fixture. Every second the host's resident memory is sampled; every few seconds the table's
row count. Per window: rows/s, rows/s against the cap's ceiling (the Parquet bytes the
link can carry), peak RSS, and the host's error and warning lines.

What floe holds at most, and so what the run checks RSS against: the host keeps
MAX_IN_FLIGHT batches in flight (Benthos hands the output no more); each call holds its
messages, the buffer packed for libfloe and the Arrow rows shredded from it (about 3× the
batch's JSON bytes); the committer holds one group encoding, one encoded and waiting, one
committing (each at most the rows of the calls in it, as Parquet), so nothing beyond the
calls in flight. The check: peak RSS after the first window stays within the first
window's peak plus a margin of 64 MiB, and under an absolute ceiling of the idle host's
RSS + 8 × MAX_IN_FLIGHT × the batch's JSON bytes + 128 MiB.

    python3 e2e/overload.py --minutes 5 --cap 512 --report reliability
"""
import argparse
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench-configs"))
from faultproxy import FaultProxy  # noqa: E402
from long_run import rss_mib  # noqa: E402

RECORD_BYTES = 142  # bench-configs/events.yaml's events, JSON


def table_rows(catalog):
    try:
        t = catalog.load_table("bench.overload")
    except Exception:
        return 0
    snap = t.current_snapshot()
    return int(snap.summary.additional_properties.get("total-records", 0)) if snap else 0


def log_lines(path, level):
    """The host's log lines at `level`."""
    with open(path, errors="replace") as f:
        return [line.strip() for line in f
                if f"level={level}" in line or f'"level":"{level}"' in line]


def distinct_messages(lines, n=3):
    """Up to n distinct messages of log lines (timestamps dropped), to show what they say."""
    seen = []
    for line in lines:
        msg = line.split("msg=", 1)[-1][:300]
        if msg not in seen:
            seen.append(msg)
    return seen[:n]


def run(svc, minutes, cap_kib, batch, in_flight, window_s):
    """Runs the overload and returns its per-window figures and the memory bound."""
    info = svc.info
    host, port = info["s3_endpoint"].rsplit("//", 1)[1].split(":")
    with FaultProxy(host, int(port), "s3-capped") as proxy:
        proxy.add_fault("bandwidth", bytes_per_sec=cap_kib * 1024)
        sets = []
        for k, v in {
            "catalog.url": info["rest_url"],
            "storage.aws_s3.bucket": info["bucket"], "storage.aws_s3.region": info["region"],
            "storage.aws_s3.endpoint": proxy.endpoint,
            "storage.aws_s3.force_path_style_urls": "true",
            "storage.aws_s3.credentials.id": info["access_key"],
            "storage.aws_s3.credentials.secret": info["secret_key"],
        }.items():
            sets += ["--set", f"output.iceberg.{k}={v}"]
        env = dict(os.environ, ROWS="1000000000", BATCH=str(batch), INPUT_BATCH=str(batch),
                   MAX_IN_FLIGHT=str(in_flight), TABLE="overload")
        log_path = os.path.join(svc.dir, "overload.log")
        cmd = [FLOE, "run", "--log.level", "warn", "-r",
               os.path.join(ROOT, "bench-configs", "events.yaml"), *sets,
               os.path.join(ROOT, "bench-configs", "iceberg.yaml")]
        from pyiceberg.catalog import load_catalog
        catalog = load_catalog("overload", type="rest", uri=info["rest_url"], **{
            "s3.endpoint": info["s3_endpoint"], "s3.access-key-id": info["access_key"],
            "s3.secret-access-key": info["secret_key"], "s3.region": info["region"],
            "s3.path-style-access": "true"})
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        rss, rows = [], []
        stop = threading.Event()

        def sample_rows():
            while not stop.wait(5):
                rows.append((time.monotonic(), table_rows(catalog)))
        sampler = threading.Thread(target=sample_rows, daemon=True)
        try:
            time.sleep(1)
            idle = rss_mib(proc.pid)
            started = time.monotonic()
            sampler.start()
            while time.monotonic() - started < minutes * 60 and proc.poll() is None:
                rss.append((time.monotonic(), rss_mib(proc.pid)))
                time.sleep(1)
        finally:
            stop.set()
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        sampler.join(timeout=30)
        proxied = proxy.stats()
    exited_early = time.monotonic() - started < minutes * 60 - 2
    windows = []
    t0 = started
    while t0 < started + minutes * 60 - 1:
        t1 = t0 + window_s
        in_rss = [m for t, m in rss if t0 <= t < t1 and m]
        in_rows = [(t, r) for t, r in rows if t0 <= t < t1 + 5]
        rate = None
        if len(in_rows) >= 2 and in_rows[-1][0] > in_rows[0][0]:
            rate = (in_rows[-1][1] - in_rows[0][1]) / (in_rows[-1][0] - in_rows[0][0])
        windows.append({"from_s": round(t0 - started), "rows_per_s": rate,
                        "peak_rss_mib": max(in_rss) if in_rss else None})
        t0 = t1
    ceiling = idle + (8 * in_flight * batch * RECORD_BYTES) / 2**20 + 128
    return {
        "minutes": minutes, "cap_kib_s": cap_kib, "batch": batch, "in_flight": in_flight,
        "idle_rss_mib": idle, "ceiling_mib": ceiling, "windows": windows,
        "errors": log_lines(log_path, "error"), "warnings": log_lines(log_path, "warning"),
        "exited_early": exited_early, "proxy": proxied,
        "log_tail": open(log_path, errors="replace").read()[-3000:],
    }


def problems(result):
    """Why the run breaks the bound or did not overload ([] when it held)."""
    out = []
    ws = result["windows"]
    peaks = [w["peak_rss_mib"] for w in ws if w["peak_rss_mib"]]
    if result["exited_early"]:
        out.append("the host exited early:\n" + result["log_tail"])
    if not peaks:
        return out + ["no memory samples"]
    if max(peaks) > result["ceiling_mib"]:
        out.append(f"peak RSS {max(peaks):.0f} MiB above the bound {result['ceiling_mib']:.0f} MiB")
    if len(peaks) > 1 and max(peaks[1:]) > peaks[0] + 64:
        out.append(f"RSS grew after the first window: {peaks[0]:.0f} → {max(peaks[1:]):.0f} MiB")
    rates = [w["rows_per_s"] for w in ws if w["rows_per_s"]]
    if len(rates) < len(ws) - 1 or not all(rates):
        out.append(f"windows without committed rows: {[w['rows_per_s'] for w in ws]}")
    return out


def report_text(result):
    lines = [f"{result['batch']} rows × max_in_flight {result['in_flight']}, S3 capped at "
             f"{result['cap_kib_s']} KiB/s, {result['minutes']:g} min; idle host RSS "
             f"{result['idle_rss_mib']:.0f} MiB, bound {result['ceiling_mib']:.0f} MiB; "
             f"{len(result['errors'])} error and {len(result['warnings'])} warning lines in "
             "the host's log",
             "", "| window from, s | rows/s | peak RSS, MiB |", "|---:|---:|---:|"]
    for w in result["windows"]:
        rate = f"{w['rows_per_s']:.0f}" if w["rows_per_s"] else "–"
        peak = f"{w['peak_rss_mib']:.0f}" if w["peak_rss_mib"] else "–"
        lines.append(f"| {w['from_s']} | {rate} | {peak} |")
    said = distinct_messages(result["errors"] + result["warnings"])
    if said:
        lines += ["", "What the log said (distinct messages):", ""]
        lines += [f"- `{m}`" for m in said]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--cap", type=int, default=512, help="S3 bandwidth cap, KiB/s")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--window", type=float, default=60, help="seconds per window")
    ap.add_argument("--report", default=None, help="write overload.md into this folder")
    args = ap.parse_args()
    from services import Services
    with Services() as svc:
        result = run(svc, args.minutes, args.cap, args.batch, args.in_flight, args.window)
    text = report_text(result)
    found = problems(result)
    print(text)
    print("bound held" if not found else "FAILED: " + "; ".join(found))
    if args.report:
        os.makedirs(args.report, exist_ok=True)
        with open(os.path.join(args.report, "overload.md"), "w") as f:
            f.write(f"# Overload\n\n`python3 e2e/overload.py --minutes {args.minutes:g} "
                    f"--cap {args.cap}` on {time.strftime('%Y-%m-%d')}.\n\n{text}\n\n"
                    + ("The bound held.\n" if not found else "FAILED: " + "; ".join(found) + "\n"))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
