#!/usr/bin/env python3
"""Kafka → Iceberg, side by side: floe (`kafka_franz` → `iceberg`) against Kafka Connect's
Iceberg sink, on the same broker, topic, REST fixture and SeaweedFS, one after the other.

    make bench-kafka                                   # builds floe, then runs this
    bench-configs/kafka_vs_connect.py --records 1000000 --runs 3

What it does:
  1. starts SeaweedFS + Apache's REST fixture (e2e/services.py) and a Kafka 4.1.1 broker
     (e2e/kafka_broker.py), all on 127.0.0.1; resolves Kafka Connect and the Iceberg sink
     from Maven Central on first use (bench-configs/peers/kafka-connect/);
  2. produces --records JSON records of ~150 B (4 partitions) once;
  3. throughput: per run and sink (alternating which goes first), a fresh consumer group
     and table; from the sink's start until the table holds every record: rows/s, CPU
     seconds per 1M rows of the sink and of each service, snapshots made;
  4. latency: per sink, a fresh topic fed at --rate records/s for --latency-seconds while
     the sink runs; each record carries its produce time (`ts_ms`), and its latency is the
     timestamp of the snapshot that added it minus that time (p50/p99);
  5. restart: per sink, a fresh group and table over the 1M topic; SIGKILL the sink once
     half the records are in the table, start it again, and count duplicates once every
     record is there.

floe runs with `commit.exactly_once` keyed by topic/partition and offset; Kafka Connect's
sink with its own exactly-once commit protocol (control topic, transactions). Figures are
printed and written to --out (results.md, results.json); nothing is asserted, except that
floe's tables end with every record (a floe run that loses records fails the script; a
peer's missing records are reported).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "e2e"))
sys.path.insert(0, os.path.join(HERE, "peers", "kafka-connect"))
from kafka_broker import KafkaBroker  # noqa: E402
from services import Services, free_port  # noqa: E402

FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
NAMESPACE = "kafka_bench"
EVENT_TYPES = ["click", "view", "purchase", "signup", "logout"]


def event(i, ts_ms):
    """~150 bytes of JSON, as the generate benchmarks' events."""
    return json.dumps({
        "id": i, "user_id": i % 10000, "event_type": EVENT_TYPES[i % 5],
        "value": (i % 1000) / 10.0, "info": f"session-{i % 977}-abcdefghijklmnopq",
        "country": ["DE", "FR", "US", "JP", "BR"][i % 5], "ts_ms": ts_ms,
    }, separators=(",", ":")).encode()


def cpu_seconds(pid):
    """utime + stime of a live process, seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


class Catalog:
    def __init__(self, services):
        from pyiceberg.catalog import load_catalog
        info = services.info
        self.props = {"s3.endpoint": info["s3_endpoint"], "s3.access-key-id": info["access_key"],
                      "s3.secret-access-key": info["secret_key"], "s3.region": info["region"],
                      "s3.path-style-access": "true"}
        self.cat = load_catalog("bench", type="rest", uri=info["rest_url"], **self.props)
        try:
            self.cat.create_namespace(NAMESPACE)
        except Exception:
            pass

    def table(self, name):
        from pyiceberg.exceptions import NoSuchTableError
        try:
            return self.cat.load_table(f"{NAMESPACE}.{name}")
        except NoSuchTableError:
            return None

    def rows(self, name):
        t = self.table(name)
        snap = t.current_snapshot() if t else None
        return int(snap.summary["total-records"]) if snap else 0

    def counts(self, name):
        """(rows, distinct ids) read back with pyarrow."""
        import pyarrow.compute as pc
        ids = self.table(name).scan(selected_fields=("id",)).to_arrow()["id"]
        return len(ids), len(pc.unique(ids))

    def snapshots(self, name):
        t = self.table(name)
        return len(t.metadata.snapshots) if t else 0

    def latencies_ms(self, name):
        """Per row: the adding snapshot's timestamp minus the row's ts_ms."""
        import pyarrow.parquet as pq
        from pyarrow import fs
        t = self.table(name)
        stamp = {s.snapshot_id: s.timestamp_ms for s in t.metadata.snapshots}
        entries = t.inspect.entries().to_pylist()
        s3 = fs.S3FileSystem(access_key=self.props["s3.access-key-id"],
                             secret_key=self.props["s3.secret-access-key"],
                             endpoint_override=self.props["s3.endpoint"], scheme="http",
                             region=self.props["s3.region"], force_virtual_addressing=False)
        out = []
        for e in entries:
            if e["status"] == 2 or e["data_file"]["content"] != 0:
                continue
            added_at = stamp.get(e["snapshot_id"])
            if added_at is None:
                continue
            path = e["data_file"]["file_path"].split("://", 1)[1]
            ts = pq.read_table(path, columns=["ts_ms"], filesystem=s3)["ts_ms"].to_pylist()
            out.extend(added_at - x for x in ts)
        return out


# -- sinks -----------------------------------------------------------------------------

class FloeSink:
    name = "floe"

    def __init__(self, services, broker, workdir):
        self.services, self.broker, self.workdir = services, broker, workdir
        self.proc = None

    def config(self, topic, group, table):
        info = self.services.info
        return textwrap.dedent(f"""\
            http:
              enabled: false
            input:
              kafka_franz:
                seed_brokers: [{self.broker.bootstrap}]
                topics: [{topic}]
                consumer_group: {group}
                checkpoint_limit: 50000
                session_timeout: 10s     # as the Connect worker's consumer.session.timeout.ms
                heartbeat_interval: 3s
            output:
              iceberg:
                catalog:
                  url: {info['rest_url']}
                namespace: {NAMESPACE}
                table: {table}
                storage:
                  aws_s3:
                    bucket: {info['bucket']}
                    region: {info['region']}
                    endpoint: {info['s3_endpoint']}
                    force_path_style_urls: true
                    credentials:
                      id: {info['access_key']}
                      secret: {info['secret_key']}
                schema_evolution:
                  enabled: true
                max_in_flight: 4
                commit:
                  exactly_once:
                    writer_id: bench
                    source: '${{! meta("kafka_topic") }}/${{! meta("kafka_partition") }}'
                    offset: '${{! meta("kafka_offset") }}'
                batching:
                  count: 10000
                  period: 1s
            """)

    def start(self, topic, group, table):
        cfg = os.path.join(self.workdir, f"floe-{table}.yaml")
        with open(cfg, "w") as f:
            f.write(self.config(topic, group, table))
        log = open(os.path.join(self.workdir, f"floe-{table}.log"), "a")
        self.proc = subprocess.Popen([FLOE, "run", cfg], stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self.proc.pid

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def connect_sink(services, broker, workdir):
    from connect_sink import ConnectSink
    return ConnectSink(services, broker, workdir, NAMESPACE)


# -- phases ----------------------------------------------------------------------------

def wait_rows(catalog, table, want, timeout, sink):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if catalog.rows(table) >= want:
            return True
        if sink.proc.poll() is not None:
            raise RuntimeError(f"{sink.name} exited ({sink.proc.returncode}) before {want} rows in {table}")
        time.sleep(0.25)
    return False


def throughput_run(sink, services, broker, catalog, topic, n, tag, timeout):
    table = f"{sink.name}_{tag}"
    group = f"{sink.name}-{tag}"
    service_pids = {**services.pids, "kafka": broker.pid}
    before = {k: cpu_seconds(p) for k, p in service_pids.items()}
    started = time.monotonic()
    pid = sink.start(topic, group, table)
    done = wait_rows(catalog, table, n, timeout, sink)
    wall = time.monotonic() - started
    sink_cpu = cpu_seconds(pid)
    after = {k: cpu_seconds(p) for k, p in service_pids.items()}
    sink.stop()
    if not done:
        raise RuntimeError(f"{sink.name}: {catalog.rows(table)} of {n} rows after {timeout}s")
    rows, distinct = catalog.counts(table)
    per_m = 1e6 / n
    return {
        "sink": sink.name, "tag": tag, "rows": rows, "distinct": distinct, "seconds": round(wall, 2),
        "rows_per_s": round(n / wall), "snapshots": catalog.snapshots(table),
        "cpu_s_per_1m": {sink.name: round(sink_cpu * per_m, 2),
                         **{k: round((after[k] - before[k]) * per_m, 2) for k in service_pids}},
    }


def latency_run(sink, broker, catalog, rate, seconds, settle):
    topic = f"live_{sink.name}"
    table = f"{sink.name}_live"
    broker.create_topic(topic)
    sink.start(topic, f"{sink.name}-live", table)
    time.sleep(settle)  # joined the group and ready before the first record
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        due = int((time.time() - t0) * rate)
        while n < due:
            producer.produce(topic, event(n, int(time.time() * 1000)), partition=n % 4)
            n += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(60)
    ok = wait_rows(catalog, table, n, 900, sink)
    sink.stop()
    if not ok:
        raise RuntimeError(f"{sink.name}: latency run did not land {n} rows")
    lat = sorted(catalog.latencies_ms(table))
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]  # noqa: E731
    return {"sink": sink.name, "records": n, "rate": rate, "p50_ms": q(0.5), "p99_ms": q(0.99),
            "max_ms": lat[-1], "snapshots": catalog.snapshots(table)}


def restart_run(sink, catalog, topic, n, timeout, settle):
    """SIGKILL once half the records are in the table, start again, and wait until every
    record is there, or until the table has not changed for `settle` seconds after the
    restart (a sink that lost records never gets there)."""
    table = f"{sink.name}_restart"
    group = f"{sink.name}-restart"
    sink.start(topic, group, table)
    if not wait_rows(catalog, table, n // 2, timeout, sink):
        raise RuntimeError(f"{sink.name}: half the records not in {table} after {timeout}s")
    sink.kill()
    killed_at = catalog.rows(table)
    restarted = time.monotonic()
    sink.start(topic, group, table)
    last, changed = catalog.rows(table), time.monotonic()
    while last < n and time.monotonic() - changed < settle and time.monotonic() - restarted < timeout:
        time.sleep(1)
        rows = catalog.rows(table)
        if rows != last:
            last, changed = rows, time.monotonic()
    time.sleep(10)  # anything re-sent after the restart lands now
    sink.stop()
    rows, distinct = catalog.counts(table)
    return {"sink": sink.name, "rows_at_kill": killed_at, "rows": rows, "distinct": distinct,
            "duplicates": rows - distinct, "missing": n - distinct,
            "restart_to_last_change_s": round(changed - restarted, 1)}


# -- report ----------------------------------------------------------------------------

def fmt_median(values):
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}–{max(values):,.0f}]"


def report(args, throughput, latency, restarts):
    lines = [f"# Kafka → Iceberg: floe vs Kafka Connect's Iceberg sink", "",
             f"{args.records:,} records of ~150 B JSON, 4 partitions; {args.runs} runs per sink, "
             "alternating order; REST fixture + SeaweedFS + Kafka 4.1.1 on the same 2 cores.", "",
             "## Throughput (from the sink's start until every record is in the table)", "",
             "| sink | rows/s median [min–max] | s | snapshots | sink CPU s / 1M | rest-fixture | seaweedfs | kafka |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    by_sink = {}
    for r in throughput:
        by_sink.setdefault(r["sink"], []).append(r)
    for name, runs in by_sink.items():
        cpu = lambda k: statistics.median(r["cpu_s_per_1m"][k] for r in runs)  # noqa: E731
        lines.append(f"| {name} | {fmt_median([r['rows_per_s'] for r in runs])} | "
                     f"{statistics.median(r['seconds'] for r in runs):.1f} | "
                     f"{statistics.median(r['snapshots'] for r in runs):.0f} | {cpu(name):.1f} | "
                     f"{cpu('rest-fixture'):.1f} | {cpu('seaweedfs'):.1f} | {cpu('kafka'):.1f} |")
    if "floe" in by_sink and "kafka-connect" in by_sink:
        f = statistics.median(r["rows_per_s"] for r in by_sink["floe"])
        c = statistics.median(r["rows_per_s"] for r in by_sink["kafka-connect"])
        fc = statistics.median(r["cpu_s_per_1m"]["floe"] for r in by_sink["floe"])
        cc = statistics.median(r["cpu_s_per_1m"]["kafka-connect"] for r in by_sink["kafka-connect"])
        lines += ["", f"floe / Kafka Connect: {f / c:.2f}× the rows/s, {fc / cc:.2f}× the sink CPU per row."]
    lines += ["", f"## End-to-end latency ({args.rate:,} records/s for {args.latency_seconds} s; "
              "snapshot timestamp − record's produce time)", "",
              "| sink | records | p50 ms | p99 ms | max ms | snapshots |", "|---|---:|---:|---:|---:|---:|"]
    for r in latency:
        lines.append(f"| {r['sink']} | {r['records']:,} | {r['p50_ms']:,} | {r['p99_ms']:,} | {r['max_ms']:,} | {r['snapshots']} |")
    lines += ["", "## One forced restart (SIGKILL at half the records, then start again)", "",
              "| sink | rows at kill | rows | distinct | duplicates | missing |", "|---|---:|---:|---:|---:|---:|"]
    for r in restarts:
        lines.append(f"| {r['sink']} | {r['rows_at_kill']:,} | {r['rows']:,} | {r['distinct']:,} | {r['duplicates']:,} | {r['missing']:,} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", type=int, default=10_000, help="records/s in the latency phase")
    ap.add_argument("--latency-seconds", type=int, default=30)
    ap.add_argument("--sinks", default="floe,kafka-connect")
    ap.add_argument("--skip", default="", help="comma list of phases to skip: throughput,latency,restart")
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--settle", type=int, default=120,
                    help="restart phase: give up once the table has not changed for this long")
    ap.add_argument("--out", default=os.path.join(HERE, "results", time.strftime("%Y-%m-%d") + "-kafka"))
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="kafka-bench-")
    with Services() as services, KafkaBroker(partitions=4) as broker:
        catalog = Catalog(services)
        makers = {"floe": FloeSink, "kafka-connect": connect_sink}
        sinks = [makers[s](services, broker, workdir) for s in args.sinks.split(",")]
        topic = "events"
        broker.create_topic(topic)
        t0 = time.time()
        broker.produce(topic, [(None, event(i, int(time.time() * 1000))) for i in range(args.records)],
                       partition_of=lambda i: i % 4)
        print(f"produced {args.records:,} records in {time.time() - t0:.1f}s", flush=True)
        throughput, latency, restarts = [], [], []
        if "throughput" not in skip:
            # A fresh REST fixture spends its first half minute compiling its hot paths;
            # one untimed run keeps that off whichever sink would go first.
            warm = FloeSink(services, broker, workdir)
            warm.start(topic, "warm-up", "warm_up")
            wait_rows(catalog, "warm_up", args.records, args.timeout, warm)
            warm.stop()
            for run in range(args.runs):
                order = sinks if run % 2 == 0 else list(reversed(sinks))
                for sink in order:
                    r = throughput_run(sink, services, broker, catalog, topic, args.records, f"t{run}", args.timeout)
                    print(json.dumps(r), flush=True)
                    throughput.append(r)
        if "latency" not in skip:
            for sink in sinks:
                r = latency_run(sink, broker, catalog, args.rate, args.latency_seconds, settle=15)
                print(json.dumps(r), flush=True)
                latency.append(r)
        if "restart" not in skip:
            for sink in sinks:
                r = restart_run(sink, catalog, topic, args.records, args.timeout, settle=args.settle)
                print(json.dumps(r), flush=True)
                restarts.append(r)
    md = report(args, throughput, latency, restarts)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"throughput": throughput, "latency": latency, "restart": restarts}, f, indent=1)
    print(md)
    # floe must never lose a record; a peer's losses are reported in the tables above.
    lost = [r for r in throughput + restarts if r["sink"] == "floe" and r["distinct"] != args.records]
    if lost:
        print("floe lost records:", lost, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
