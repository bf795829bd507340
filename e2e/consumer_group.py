"""A Kafka consumer group of floe hosts growing and shrinking under load, exactly-once.

One topic of 16 partitions on a real broker (kafka_broker.py) is fed at a steady rate
while `floe run` hosts, all in one consumer group and sharing one exactly-once writer id,
join and leave on a schedule: 1 → 4 → 8 hosts, one SIGKILLed, then 8 → 4 → 1 stopped
gracefully. Then production stops and the group drains. Measured:

- every record in the table once (rows, distinct ids and distinct (partition, offset)
  all equal to the records produced);
- the group's lag back to 0 (its committed offsets at the end of every partition) and
  how long that took after production stopped;
- rebalances: the partition assignments the hosts logged;
- recovery after the SIGKILL: the time from the kill until every record produced
  before it is in the table (the killed host's partitions wait for its session to time
  out, then their new owner reads from the last committed offset; exactly-once skips
  what the dead host had already committed);
- committed rows/s and the group's lag over time, sampled each second.

Used by e2e/test_kafka.py (a short schedule) and bench-configs/kafka_group.py.
"""
import json
import os
import signal
import textwrap
import threading
import time

from test_reliability import NAMESPACE, Floe, catalog, committed_rows, iceberg_output, scan

PARTITIONS = 16


def host_config(services, kafka, topic, group, table, http_port):
    output = iceberg_output(services, table, batching="count: 1000\nperiod: 500ms",
                            max_in_flight=4)
    output += textwrap.indent(textwrap.dedent(f"""\
        commit:
          exactly_once:
            writer_id: {group}
            source: '${{! meta("kafka_topic") }}/${{! meta("kafka_partition") }}'
            offset: '${{! meta("kafka_offset") }}'
        """), "  ")
    return (f"http:\n  address: 127.0.0.1:{http_port}\nmetrics:\n  prometheus: {{}}\n"
            "logger:\n  level: info\n"
            "input:\n  kafka_franz:\n"
            f"    seed_brokers: [{kafka.bootstrap}]\n    topics: [{topic}]\n"
            f"    consumer_group: {group}\n    commit_period: 1s\n"
            "    session_timeout: 6s\n    heartbeat_interval: 1s\n"
            "pipeline:\n  processors:\n    - mapping: |\n"
            "        root = this\n"
            "        root.part = meta(\"kafka_partition\").number()\n"
            "        root.off = meta(\"kafka_offset\").number()\n"
            "output:\n" + textwrap.indent(output, "  "))


class Producer:
    """Produces {"id": i} at `rate` records/s (100 ms chunks, record i to partition
    i % 16) until stopped; `produced` counts the records acknowledged."""

    def __init__(self, kafka, topic, rate):
        from confluent_kafka import Producer as KafkaProducer
        self.producer = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5,
                                       "enable.idempotence": True, "acks": "all"})
        self.topic, self.rate = topic, rate
        self.sent = 0
        self.produced = 0
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err, _msg):
        if err:
            self.errors.append(err)
        else:
            self.produced += 1

    def _run(self):
        started = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                value = json.dumps({"id": self.sent, "pad": "x" * 64}).encode()
                try:
                    self.producer.produce(self.topic, value=value, partition=self.sent % PARTITIONS,
                                          on_delivery=self._done)
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.1)
        self.producer.flush(60)

    def start(self):
        self.thread.start()

    def finish(self):
        """Stops producing; returns the records sent once all are acknowledged."""
        self.stop.set()
        self.thread.join(120)
        assert not self.errors, self.errors[:3]
        assert self.produced == self.sent, (self.produced, self.sent)
        return self.sent


def end_offsets(kafka, topic):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "floe-offsets-probe"})
    try:
        ends = {}
        for p in range(PARTITIONS):
            _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        return ends
    finally:
        c.close()


def group_lag(kafka, topic, group):
    ends = end_offsets(kafka, topic)
    committed = kafka.committed(group, topic)
    return sum(max(0, ends[p] - committed.get(p, 0)) for p in ends)


def run_group(services, kafka, workdir, *, name="group", rate=1000, phase=20,
              drain_timeout=240, free_port=None, log=print):
    """Runs the schedule with `phase` seconds between steps; returns the measurements
    (see the module doc) and raises AssertionError if a record is lost or duplicated or
    the group does not drain."""
    topic, group, table = f"{name}_events", f"{name}_hosts", f"{name}_events"
    kafka.create_topic(topic, partitions=PARTITIONS)
    producer = Producer(kafka, topic, rate)
    hosts, samples, events = {}, [], []
    cat = catalog(services)
    t0 = time.monotonic()

    def start(host):
        port = free_port()
        hosts[host] = Floe(workdir, host, host_config(services, kafka, topic, group, table, port))
        events.append((time.monotonic() - t0, f"+{host}"))

    def stop(host, sig):
        h = hosts[host]
        if sig == signal.SIGKILL:
            h.stop()
        else:
            os.kill(h.pid, signal.SIGTERM)
            if h.wait(60) is None:
                h.stop()
        events.append((time.monotonic() - t0, f"{'kill' if sig == signal.SIGKILL else '-'}{host}"))

    sampling = threading.Event()

    def sample():
        while not sampling.wait(1.0):
            try:
                rows = committed_rows(services, cat, table) or 0
                lag = group_lag(kafka, topic, group)
            except Exception:  # noqa: BLE001 (a sample missed while the table appears)
                continue
            live = sum(1 for h in hosts.values() if h.running())
            samples.append((time.monotonic() - t0, rows, lag, producer.produced, live))

    sampler = threading.Thread(target=sample, daemon=True)
    recovery = None
    try:
        producer.start()
        sampler.start()
        start("h0")
        time.sleep(phase)
        for i in range(1, 4):
            start(f"h{i}")
        log(f"{time.monotonic() - t0:.0f}s: 4 hosts")
        time.sleep(phase)
        for i in range(4, 8):
            start(f"h{i}")
        log(f"{time.monotonic() - t0:.0f}s: 8 hosts")
        time.sleep(phase)
        # A SIGKILL: its uncommitted records are read again by the partitions' new owner.
        before_kill = producer.produced
        killed_at = time.monotonic()
        stop("h7", signal.SIGKILL)
        log(f"{killed_at - t0:.0f}s: h7 killed with {before_kill} records produced")
        deadline = killed_at + drain_timeout
        while time.monotonic() < deadline:
            got = scan(services, table, f"SELECT count(DISTINCT id) FROM $T WHERE id < {before_kill}")
            if got and got[0][0] == before_kill:
                recovery = time.monotonic() - killed_at
                break
            time.sleep(0.5)
        assert recovery is not None, f"records produced before the kill not all in the table after {drain_timeout}s"
        log(f"recovered in {recovery:.1f}s")
        time.sleep(max(0.0, phase - recovery))
        for i in (4, 5, 6):
            stop(f"h{i}", signal.SIGTERM)
        log(f"{time.monotonic() - t0:.0f}s: 4 hosts")
        time.sleep(phase)
        for i in (1, 2, 3):
            stop(f"h{i}", signal.SIGTERM)
        log(f"{time.monotonic() - t0:.0f}s: 1 host")
        time.sleep(phase)
        produced = producer.finish()
        stopped_at = time.monotonic()
        log(f"{stopped_at - t0:.0f}s: {produced} records produced; draining")
        deadline = stopped_at + drain_timeout
        drained = None
        while time.monotonic() < deadline:
            if group_lag(kafka, topic, group) == 0 and committed_rows(services, cat, table) == produced:
                drained = time.monotonic() - stopped_at
                break
            assert hosts["h0"].running(), "the last host exited"
            time.sleep(0.5)
        assert drained is not None, (
            f"the group's lag is {group_lag(kafka, topic, group)} and the table holds "
            f"{committed_rows(services, cat, table)} of {produced} rows {drain_timeout}s after production stopped")
        time.sleep(2)  # anything still in flight would land now
    finally:
        sampling.set()
        producer.stop.set()
        for h in hosts.values():
            h.stop()
    rows, ids, positions = scan(services, table,
                                "SELECT count(*), count(DISTINCT id), count(DISTINCT (part, off)) FROM $T")[0]
    assert (rows, ids, positions) == (produced, produced, produced), \
        f"{rows} rows, {ids} distinct ids, {positions} distinct positions for {produced} records"
    assignments = sum(h.output().count("partitions assigned") for h in hosts.values())
    snapshots = len(cat.load_table(f"{NAMESPACE}.{table}").metadata.snapshots)
    return {"records": produced, "rows": rows, "recovery_s": recovery, "drain_s": drained,
            "assignments": assignments, "snapshots": snapshots, "samples": samples,
            "events": events, "rate": rate, "phase": phase}
