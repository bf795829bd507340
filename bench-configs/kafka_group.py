#!/usr/bin/env python3
"""A Kafka consumer group of floe hosts growing 1 → 4 → 8 and shrinking back under load,
exactly-once, on a real broker (one topic of 16 partitions), Apache's REST fixture and
SeaweedFS, all started here (e2e/consumer_group.py runs the schedule).

Prints the records produced and found (each once), the partition assignments the hosts
logged (rebalances), the time to recover after a host is SIGKILLed (until every record
produced before the kill is in the table), the time for the group's lag to reach 0 once
production stops, and per phase the committed rows/s and the group's mean lag; --plot
draws rows/s, lag and hosts over time. Everything shares this machine's cores: the
broker, the catalog, the store and up to 8 hosts.

    bench-configs/kafka_group.py --rate 2000 --phase 30 --plot group.png
"""
import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "e2e"))
from consumer_group import run_group  # noqa: E402
from kafka_broker import KafkaBroker  # noqa: E402
from services import Services, free_port  # noqa: E402


def phases(result):
    """(label, start, end) of each phase, from the schedule's events."""
    events = result["events"]
    cuts = [0.0] + [t for t, what in events if what in ("+h3", "+h7", "killh7", "-h6", "-h3")]
    labels = ["1 host", "4 hosts", "8 hosts", "7 hosts (after the kill)", "4 hosts", "1 host"]
    ends = cuts[1:] + [result["samples"][-1][0] if result["samples"] else cuts[-1]]
    return list(zip(labels, cuts, ends))


def report(result):
    print(f"{result['records']:,} records at {result['rate']:,}/s over 16 partitions; "
          f"{result['rows']:,} rows in the table, each record once")
    print(f"partition assignments logged (rebalances seen by the hosts): {result['assignments']}")
    print(f"recovery after SIGKILL of one of 8 hosts: {result['recovery_s']:.1f} s "
          "(session timeout 6 s)")
    print(f"lag back to 0 after production stopped: {result['drain_s']:.1f} s")
    print(f"snapshots: {result['snapshots']}")
    print("| phase | committed rows/s | mean group lag (records) |")
    print("|---|---:|---:|")
    samples = result["samples"]
    for label, start, end in phases(result):
        inside = [s for s in samples if start <= s[0] < end]
        if len(inside) < 2:
            continue
        rate = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
        lag = statistics.mean(s[2] for s in inside)
        print(f"| {label} | {rate:,.0f} | {lag:,.0f} |")


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = result["samples"]
    t = [x[0] for x in s]
    rate = [0.0] + [(s[i][1] - s[i - 1][1]) / (s[i][0] - s[i - 1][0]) for i in range(1, len(s))]
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    axes[0].plot(t, rate)
    axes[0].axhline(result["rate"], color="grey", linestyle=":", label="produced/s")
    axes[0].set_ylabel("committed rows/s")
    axes[0].legend(fontsize=8)
    axes[1].plot(t, [x[2] for x in s])
    axes[1].set_ylabel("group lag (records)")
    axes[2].step(t, [x[4] for x in s], where="post")
    axes[2].set_ylabel("hosts running")
    axes[2].set_xlabel("seconds")
    for when, what in result["events"]:
        if what.startswith("kill"):
            for ax in axes:
                ax.axvline(when, color="red", linestyle="--", linewidth=0.8)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=2000, help="records produced per second")
    ap.add_argument("--phase", type=int, default=30, help="seconds between schedule steps")
    ap.add_argument("--plot", default="")
    args = ap.parse_args()
    with Services() as s, KafkaBroker(partitions=16) as kafka, \
            tempfile.TemporaryDirectory() as work:
        result = run_group(s.info, kafka, Path(work), rate=args.rate, phase=args.phase,
                           free_port=free_port)
    report(result)
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
