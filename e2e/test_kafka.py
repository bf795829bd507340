"""Kafka → Iceberg through the real binary: the `kafka_franz` input against an Apache
Kafka broker (KRaft, from Maven Central; e2e/kafka_broker.py), the iceberg output on
SeaweedFS + Apache's REST fixture, the `prometheus` exporter on the host's HTTP server.
DuckDB reads the table back; confluent-kafka produces records and reads group offsets.
"""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kafka_broker import KafkaBroker, SASL_PASSWORD, SASL_USER  # noqa: E402
from services import free_port  # noqa: E402
from test_reliability import FLOE, ROOT, Floe, committed_rows, catalog, iceberg_output, scan  # noqa: E402


@pytest.fixture(scope="module")
def kafka():
    with KafkaBroker(partitions=4) as k:
        yield k


def kafka_input(bootstrap, topics, *, group=None, extra=""):
    block = textwrap.dedent(f"""\
        kafka_franz:
          seed_brokers: [{bootstrap}]
          topics: {json.dumps(topics)}
          commit_period: 1s
        """)
    if group:
        block += f"  consumer_group: {group}\n"
    if extra:
        block += textwrap.indent(textwrap.dedent(extra).strip() + "\n", "  ")
    return block


# Keeps the record's position and metadata as columns, so the read-back can check them.
POSITION_MAPPING = """\
root = this
root.k = meta("kafka_key")
root.topic = meta("kafka_topic")
root.part = meta("kafka_partition").number()
root.off = meta("kafka_offset").number()
root.ts = meta("kafka_timestamp_unix").number()
root.trace = meta("trace")
"""

EXACTLY_ONCE = """\
exactly_once:
  writer_id: kafka-e2e
  source: '${! meta("kafka_topic") }/${! meta("kafka_partition") }'
  offset: '${! meta("kafka_offset") }'
"""


def host_pipeline(input_block, output_block, http_port=None, exactly_once=False):
    http = (f"http:\n  address: 127.0.0.1:{http_port}\nmetrics:\n  prometheus: {{}}\n"
            if http_port else "http:\n  enabled: false\n")
    if exactly_once:
        output_block += "  commit:\n" + textwrap.indent(EXACTLY_ONCE, "    ")
    return (http + "input:\n" + textwrap.indent(input_block, "  ")
            + "pipeline:\n  processors:\n    - mapping: |\n"
            + textwrap.indent(POSITION_MAPPING, " " * 8)
            + "output:\n" + textwrap.indent(output_block, "  "))


def wait_for(what, predicate, timeout, hosts=()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        for h in hosts:
            assert h.running(), h.tail()
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}\n" + "\n".join(h.tail() for h in hosts))


def metrics(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def metric_value(text, name, **labels):
    """The value of one sample of `name` whose labels include `labels`."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_records_reach_the_table_with_their_metadata_and_offsets_follow_acknowledgements(
        tmp_path, services, kafka):
    """Offsets are committed to the group only after the output acknowledged: while the
    catalog cannot be reached nothing is committed; once it can, every record lands once
    with its key, topic, partition, offset, timestamp and header, the group's offsets
    reach the end of every partition, and /metrics shows the output's counters and
    latencies and the input's lag."""
    topic, group, n = "orders", "orders-to-lake", 20_000
    kafka.create_topic(topic)
    placed = kafka.produce(topic, [(f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(n)],
                           headers_of=lambda i: [("trace", f"t-{i}".encode())])
    started = time.time()

    # 1. The catalog is down (nothing listens there): the output retries, nothing is
    #    acknowledged, so after several commit periods the group has committed nothing.
    down = iceberg_output(services, "kafka_orders", catalog_url=f"http://127.0.0.1:{free_port()}",
                          batching="count: 2000\nperiod: 200ms")
    blocked = Floe(tmp_path, "blocked", host_pipeline(kafka_input(kafka.bootstrap, [topic], group=group), down))
    try:
        wait_for("the input to join the group", lambda: "partitions assigned" in blocked.output(), 60, [blocked])
        time.sleep(4)  # four commit periods
        assert kafka.committed(group, topic) == {}, "offsets committed for records the output never acknowledged"
    finally:
        blocked.stop()

    # 2. The catalog is there: everything lands, and the offsets follow.
    port = free_port()
    out = iceberg_output(services, "kafka_orders", batching="count: 2000\nperiod: 200ms")
    host = Floe(tmp_path, "host", host_pipeline(kafka_input(kafka.bootstrap, [topic], group=group), out, port))
    try:
        wait_for("every record in the table", lambda: committed_rows(services, catalog(services), "kafka_orders") == n,
                 120, [host])
        ends = {p: max(o for (pp, o) in placed if pp == p) + 1 for p in range(4)}
        wait_for("the group's offsets at the end of each partition",
                 lambda: kafka.committed(group, topic) == ends, 30, [host])
        text = metrics(port)
    finally:
        host.proc.send_signal(signal.SIGTERM)
        host.wait(30)
        host.stop()

    rows = scan(services, "kafka_orders", "SELECT id, k, topic, part, off, ts, trace FROM $T")
    assert len(rows) == n and len({r[0] for r in rows}) == n
    for id_, key, t, part, off, ts, trace in rows:
        assert json.loads(placed[(part, off)])["id"] == id_, (part, off, id_)
        assert (key, t, trace) == (f"k{id_}", topic, f"t-{id_}")
        assert started - 120 <= ts <= time.time() + 5

    assert metric_value(text, "iceberg_row_operations_total", operation="insert") == n
    assert metric_value(text, "iceberg_snapshots_total") >= 1
    assert metric_value(text, "iceberg_write_batch_latency_seconds_count") >= 1
    assert metric_value(text, "iceberg_write_batch_latency_seconds_bucket", le="+Inf") >= 1
    for p in range(4):
        assert metric_value(text, "input_kafka_lag", topic=topic, partition=str(p)) == 0, text
    assert metric_value(text, "input_kafka_offset_commits_total") >= 1
    assert metric_value(text, "input_received") == n
    assert metric_value(text, "process_cpu_seconds_total") is not None


def max_offsets_in_table(services, table):
    return {p: o for p, o in scan(services, table, "SELECT part, max(off) FROM $T GROUP BY part")}


def test_exactly_once_through_kills_a_broker_restart_and_rebalances(tmp_path, services, kafka):
    """Two hosts in one consumer group share one exactly-once writer id. SIGKILLs of
    either host (records written but whose offsets the group had not committed are read
    again by the next owner), rebalances as hosts come and go, and a broker crash and
    restart leave each record in the table exactly once."""
    topic, group, table = "clicks", "clicks-to-lake", "kafka_clicks"
    first, second = 50_000, 50_000
    n = first + second
    kafka.create_topic(topic)
    kafka.produce(topic, [(None, json.dumps({"id": i}).encode()) for i in range(first)],
                  partition_of=lambda i: i % 4)
    late = threading.Thread(target=lambda: kafka.produce(
        topic, [(None, json.dumps({"id": first + i}).encode()) for i in range(second)],
        partition_of=lambda i: i % 4))

    out = iceberg_output(services, table, batching="count: 500\nperiod: 100ms")
    # Offsets are committed every 5 s (the default), so a SIGKILL always leaves written
    # records whose offsets the group has not committed.
    pipeline = host_pipeline(kafka_input(kafka.bootstrap, [topic], group=group,
                                         extra="commit_period: 5s\nsession_timeout: 6s\nheartbeat_interval: 1s"),
                             out, exactly_once=True)
    hosts = []

    def start(name):
        h = Floe(tmp_path, name, pipeline)
        hosts.append(h)
        return h

    def rows():
        return committed_rows(services, catalog(services), table) or 0

    try:
        a = start("a")
        wait_for("10,000 rows", lambda: rows() >= 10_000, 120, [a])
        a.stop()
        # Records in the table beyond the group's committed offsets once `a` is dead: the
        # next owner reads them again, and exactly-once must not write them twice.
        written = max_offsets_in_table(services, table)
        committed = kafka.committed(group, topic)
        again = sum(max(0, written.get(p, -1) + 1 - committed.get(p, 0)) for p in range(4))
        assert again > 0, (written, committed)

        late.start()
        a2, b = start("a2"), start("b")  # a rebalance between two live hosts
        wait_for("30,000 rows", lambda: rows() >= 30_000, 120, [a2, b])
        late.join(120)

        kafka.restart()  # a broker crash (SIGKILL) and start over the same log
        wait_for("rows after the broker restart", lambda: rows() >= 45_000, 120, [a2, b])

        b.stop()  # SIGKILL: its partitions move to a2, then to b2 as it joins
        b2 = start("b2")
        wait_for("every record", lambda: rows() >= n, 180, [a2, b2])
        time.sleep(3)  # anything still in flight would land now
    finally:
        for h in hosts:
            h.stop()

    count, ids, positions = scan(services, table,
                                 "SELECT count(*), count(DISTINCT id), count(DISTINCT (part, off)) FROM $T")[0]
    assert (count, ids, positions) == (n, n, n), \
        f"{count} rows, {ids} distinct ids, {positions} distinct positions; {again} records were read twice"


def test_sasl_plain_and_scram_and_a_refused_password(tmp_path, kafka):
    """The SASL listener refuses wrong passwords; PLAIN and SCRAM-SHA-256/512 read every
    record; a wrong password is a clear error that never prints the password."""
    topic = "sasl_events"
    kafka.create_topic(topic, partitions=2)
    kafka.produce(topic, [(None, json.dumps({"id": i}).encode()) for i in range(500)])

    def run(name, mechanism, password):
        lines = tmp_path / f"{name}.jsonl"
        cfg = ("http:\n  enabled: false\ninput:\n" + textwrap.indent(kafka_input(
            kafka.sasl_bootstrap, [topic], group=f"g-{name}", extra=f"""\
                sasl:
                  - mechanism: {mechanism}
                    username: {SASL_USER}
                    password: {password}
                """), "  ")
            + f"output:\n  file:\n    path: {lines}\n    codec: lines\n")
        return Floe(tmp_path, name, cfg), lines

    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        host, lines = run(mechanism.lower(), mechanism, SASL_PASSWORD)
        try:
            wait_for(f"500 records over {mechanism}",
                     lambda: lines.exists() and len(lines.read_text().splitlines()) >= 500, 60, [host])
        finally:
            host.stop()
        assert sorted(json.loads(x)["id"] for x in lines.read_text().splitlines()) == list(range(500))

    wrong = "not-the-password-Xq7"
    host, lines = run("wrong", "SCRAM-SHA-256", wrong)
    try:
        wait_for("an authentication error", lambda: re.search(
            r"(?i)sasl|authenticat", host.output()), 30, [host])
        time.sleep(2)
    finally:
        host.stop()
    assert not lines.exists() or lines.read_text() == ""
    assert wrong not in host.output()


def test_explicit_partitions_regexes_and_config_errors(tmp_path, kafka):
    """`topic:first-last` reads only those partitions, without a group; a regular
    expression with `regexp_topics` reads the topics it matches; settings that cannot
    work stop the host at start with an error naming the field."""
    topic = "by_partition"
    kafka.create_topic(topic, partitions=4)
    placed = kafka.produce(topic, [(None, json.dumps({"id": i}).encode()) for i in range(400)],
                           partition_of=lambda i: i % 4)
    lines = tmp_path / "p12.jsonl"
    cfg = ("http:\n  enabled: false\ninput:\n"
           + textwrap.indent(kafka_input(kafka.bootstrap, [f"{topic}:1-2"]), "  ")
           + f"output:\n  file:\n    path: {lines}\n    codec: lines\n")
    host = Floe(tmp_path, "p12", cfg)
    try:
        wait_for("partitions 1 and 2", lambda: lines.exists() and len(lines.read_text().splitlines()) >= 200,
                 60, [host])
        time.sleep(1)
    finally:
        host.stop()
    want = sorted(json.loads(v)["id"] for (p, _), v in placed.items() if p in (1, 2))
    assert sorted(json.loads(x)["id"] for x in lines.read_text().splitlines()) == want

    # A regular expression naming the topic, in a group: every partition.
    lines = tmp_path / "regex.jsonl"
    cfg = ("http:\n  enabled: false\ninput:\n"
           + textwrap.indent(kafka_input(kafka.bootstrap, ["^by_parti.*$"], group="g-regex",
                                         extra="regexp_topics: true"), "  ")
           + f"output:\n  file:\n    path: {lines}\n    codec: lines\n")
    host = Floe(tmp_path, "regex", cfg)
    try:
        wait_for("every partition through the regex",
                 lambda: lines.exists() and len(lines.read_text().splitlines()) >= 400, 60, [host])
    finally:
        host.stop()
    assert sorted(json.loads(x)["id"] for x in lines.read_text().splitlines()) == list(range(400))

    for name, extra_topics, extra, message in [
        ("group", [f"{topic}:0"], "consumer_group: g", "remove consumer_group"),
        ("limit", [topic], "checkpoint_limit: 0", "checkpoint_limit: 0: must be at least 1"),
        ("size", [topic], "fetch_max_bytes: lots", "fetch_max_bytes"),
    ]:
        cfg = ("http:\n  enabled: false\ninput:\n"
               + textwrap.indent(kafka_input(kafka.bootstrap, extra_topics, extra=extra), "  ")
               + "output:\n  drop: {}\n")
        bad = Floe(tmp_path, f"bad-{name}", cfg)
        code = bad.wait(30)
        assert code not in (None, 0) and message in bad.output(), bad.tail()

    # A broker that does not answer is reported, and retried rather than fatal.
    nobody = f"127.0.0.1:{free_port()}"
    cfg = ("http:\n  enabled: false\ninput:\n"
           + textwrap.indent(kafka_input(nobody, [topic], group="g-nobody"), "  ")
           + "output:\n  drop: {}\n")
    host = Floe(tmp_path, "nobody", cfg)
    try:
        wait_for("the unreachable broker's error", lambda: f"no broker of [{nobody}] answered" in host.output(),
                 60, [host])
    finally:
        host.stop()


def test_a_partition_moving_away_from_a_backlogged_host_and_back_loses_nothing(tmp_path, services, kafka):
    """A reviewer's sequence: host `a` is backlogged (a slow pipeline, a small
    checkpoint_limit, so its read loop holds polled records while it waits); `b` joins,
    takes a partition, and leaves cleanly, so the partition comes back to `a`; then `a` is
    SIGKILLed and `a2` finishes. Records polled before the partition moved must not move
    the group's offset when acknowledged, or the SIGKILL loses records. At-least-once
    (no exactly-once here): duplicates are allowed, missing records are not."""
    topic, group, table, n = "backlog", "backlog-to-lake", "kafka_backlog", 10_000
    kafka.create_topic(topic, partitions=2)
    kafka.produce(topic, [(None, json.dumps({"id": i}).encode()) for i in range(n)],
                  partition_of=lambda i: i % 2)
    out = iceberg_output(services, table, batching=None)
    slow = kafka_input(kafka.bootstrap, [topic], group=group,
                       extra="checkpoint_limit: 100\nsession_timeout: 6s\nheartbeat_interval: 1s")
    cfg = host_pipeline(slow, out).replace(
        "pipeline:\n  processors:\n", "pipeline:\n  processors:\n    - sleep:  # once per batch\n"
        "        duration: '${! if batch_index() == 0 { \"200ms\" } else { \"0s\" } }'\n", 1)
    hosts = []

    def start(name):
        h = Floe(tmp_path, name, cfg)
        hosts.append(h)
        return h

    try:
        a = start("a")
        wait_for("a to read", lambda: (committed_rows(services, catalog(services), table) or 0) > 0, 60, [a])
        b = start("b")
        wait_for("b to take a partition", lambda: re.search(r"partitions assigned: map\[backlog:\[\d", b.output()),
                 60, [a, b])
        time.sleep(2)
        b.proc.send_signal(signal.SIGTERM)  # a clean leave: the partition goes back to a
        assert b.wait(60) is not None, b.tail()
        wait_for("the partition back at a",
                 lambda: len(re.findall(r"partitions assigned: map\[backlog:\[\d", a.output())) >= 2, 60, [a])
        time.sleep(2)
        a.stop()  # SIGKILL
        a2 = start("a2")
        wait_for("every record at least once", lambda: (committed_rows(services, catalog(services), table) or 0) >= n,
                 180, [a2])
        wait_for("the group's offsets at the end", lambda: sum(kafka.committed(group, topic).values()) == n, 60, [a2])
    finally:
        for h in hosts:
            h.stop()
    assert scan(services, table, "SELECT count(DISTINCT id), min(id), max(id) FROM $T")[0] == (n, 0, n - 1)


def test_input_batching_periods_dropped_batches_and_position_headers(tmp_path, kafka):
    """The input's own `batching`: a partial batch goes on after its period; a batch its
    processors drop entirely counts as handled (the group's offsets reach the end); and a
    record header named like kafka_offset does not replace the record's own position."""
    topic = "batched"
    kafka.create_topic(topic, partitions=1)
    kafka.produce(topic, [(None, json.dumps({"id": i}).encode()) for i in range(10)],
                  headers_of=lambda i: [("kafka_offset", b"0"), ("kafka_partition", b"7")])

    def run(name, group, batching):
        lines = tmp_path / f"{name}.jsonl"
        cfg = ("http:\n  enabled: false\ninput:\n"
               + textwrap.indent(kafka_input(kafka.bootstrap, [topic], group=group, extra=batching), "  ")
               + "pipeline:\n  processors:\n    - mapping: |\n"
               + "        root = this\n        root.off = @kafka_offset\n        root.part = @kafka_partition\n"
               + f"output:\n  file:\n    path: {lines}\n    codec: lines\n")
        return Floe(tmp_path, name, cfg), lines

    host, lines = run("period", "g-period", "batching:\n  count: 1000\n  period: 200ms")
    try:
        wait_for("10 records before the batch is full", lambda: lines.exists() and len(lines.read_text().splitlines()) >= 10,
                 15, [host])
    finally:
        host.stop()
    got = [json.loads(x) for x in lines.read_text().splitlines()]
    assert sorted((r["id"], r["off"], r["part"]) for r in got) == [(i, i, 0) for i in range(10)]

    host, lines = run("dropped", "g-dropped",
                      "batching:\n  count: 5\n  period: 100ms\n  processors:\n    - mapping: root = deleted()")
    try:
        wait_for("the group's offset past the dropped batches",
                 lambda: kafka.committed("g-dropped", topic) == {0: 10}, 30, [host])
    finally:
        host.stop()
    assert not lines.exists() or lines.read_text() == ""


def test_tls_with_the_brokers_ca_and_without_it(tmp_path, kafka):
    """The SSL listener: trusting the test CA reads every record; without it the
    connection is refused with an error that says why."""
    topic = "tls_events"
    kafka.create_topic(topic, partitions=2)
    kafka.produce(topic, [(None, json.dumps({"id": i}).encode()) for i in range(300)])

    def run(name, tls):
        lines = tmp_path / f"{name}.jsonl"
        cfg = ("http:\n  enabled: false\ninput:\n"
               + textwrap.indent(kafka_input(kafka.tls_bootstrap, [topic], group=f"g-{name}", extra=tls), "  ")
               + f"output:\n  file:\n    path: {lines}\n    codec: lines\n")
        return Floe(tmp_path, name, cfg), lines

    host, lines = run("tls", f"tls:\n  enabled: true\n  root_cas_file: {kafka.ca_file}")
    try:
        wait_for("300 records over TLS", lambda: lines.exists() and len(lines.read_text().splitlines()) >= 300,
                 60, [host])
    finally:
        host.stop()
    assert sorted(json.loads(x)["id"] for x in lines.read_text().splitlines()) == list(range(300))

    host, lines = run("untrusted", "tls:\n  enabled: true")
    try:
        wait_for("a certificate error", lambda: re.search(r"(?i)certificate|x509", host.output()), 60, [host])
    finally:
        host.stop()
    assert not lines.exists() or lines.read_text() == ""


def test_the_kafka_example_runs_unchanged_and_keeps_each_record_once_through_a_kill(tmp_path, kafka):
    """examples/kafka-exactly-once.yaml as the README gives it (embedded catalog in the
    working folder), pointed at this broker by its environment variables: every record
    lands, the host is SIGKILLed and started again with more records produced, and each
    record is in the table once."""
    import shutil
    topic = "example-orders"
    kafka.create_topic(topic)
    shutil.copytree(os.path.join(ROOT, "examples"), tmp_path / "examples")
    env = {**os.environ, "KAFKA_BROKERS": kafka.bootstrap, "KAFKA_TOPIC": topic}

    def start(name):
        out = open(tmp_path / f"{name}.stderr", "wb")
        return subprocess.Popen([FLOE, "run", "examples/kafka-exactly-once.yaml"], cwd=tmp_path, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def ids():
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchTableError
        wh = tmp_path / "warehouse"
        if not (wh / "catalog.db").exists():
            return []
        try:
            t = load_catalog("floe", type="sql", uri=f"sqlite:///{wh}/catalog.db",
                             warehouse=f"file://{wh}").load_table("lake.orders")
        except NoSuchTableError:
            return []
        return [r["id"] for r in t.scan(selected_fields=("id",)).to_arrow().to_pylist()]

    def stop(proc, sig):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    kafka.produce(topic, [(None, json.dumps({"id": i}).encode()) for i in range(3000)])
    first = start("first")
    try:
        wait_for("the first records in the table", lambda: len(ids()) >= 1000, 120)
    finally:
        stop(first, signal.SIGKILL)
    kafka.produce(topic, [(None, json.dumps({"id": i}).encode()) for i in range(3000, 4000)])
    second = start("second")
    try:
        wait_for("every record in the table", lambda: len(ids()) >= 4000, 120)
        time.sleep(2)  # a duplicate would land in the next commits
        got = ids()
    finally:
        stop(second, signal.SIGTERM)
    assert sorted(got) == list(range(4000)), (len(got), len(set(got)))


def test_a_consumer_group_growing_to_8_hosts_and_back_keeps_each_record_once(tmp_path, services, kafka):
    """A consumer group of floe hosts on a topic of 16 partitions fed at a steady rate:
    1 → 4 → 8 hosts join, one is SIGKILLed, 8 → 4 → 1 leave gracefully, then production
    stops (e2e/consumer_group.py; bench-configs/kafka_group.py runs it longer). Every
    record lands once, the group's lag returns to 0, every join and leave rebalances the
    partitions, and the records produced before the kill all reach the table."""
    from consumer_group import run_group
    result = run_group(services, kafka, tmp_path, name="grow", rate=400, phase=12,
                       free_port=free_port)
    print({k: v for k, v in result.items() if k not in ("samples", "events")})
    assert result["rows"] == result["records"] > 0
    assert result["drain_s"] is not None and result["recovery_s"] is not None
    # Each of the 8 hosts is assigned partitions at least once, and the survivors again
    # as others join and leave.
    assert result["assignments"] >= 8 + 4, result["assignments"]
