"""Two `floe run` processes upserting one table at once (issue 36, item 3): each reads
its own seeded stream of inserts, upserts and deletes on its own keys from a file, at
max_in_flight 4 with small batches, into one REST table on SeaweedFS. Their commits
conflict; each conflict is resolved by planning again on the other writer's new head
(copy-on-write and positional deletes look the touched rows up again; merge-on-read
rebases its equality deletes). The table must equal the union of the two streams'
models, read by DuckDB, Apache Iceberg's Java reader and (where there are no equality
deletes) pyiceberg. FLOE_E2E_SEED replays a stream."""
import random
import subprocess

import pytest

from crash_trials import FLOE, Host
from keyed_streams import (STRATEGIES, check_table, host_config, keyed_output, keyed_stream,
                           metric_sum, model, run_seed, scrape_until_acknowledged, stream_shape,
                           throttled_file_input, write_lines)
from keyed_streams import java  # noqa: F401  (a fixture: pytest finds it in this module)
from services import free_ports

BATCH = 25
BATCHES = 80
KEYS = 300
# Disjoint key ranges, one per writer.
WRITERS = {"a": 0, "b": 1_000_000}
# Each writer reads at most this many operations a second, so the two run side by side
# for seconds: unthrottled, a writer could commit its 2,000 operations before the other
# process had started, and nothing conflicted (seen once in four runs).
FILE_RATE = 500


def start_writer(tmp_path, services, table, strategy, writer, ops, port):
    """One host writing `ops` from a file, serving its metrics on `port`."""
    path = tmp_path / f"{writer}.ndjson"
    write_lines(path, ops)
    reader, rate_limit = throttled_file_input(path, BATCH, FILE_RATE)
    config = rate_limit + host_config(reader, keyed_output(services, table, strategy), port)
    return Host(str(tmp_path), f"writer-{writer}", FLOE, config), port


def stop(host):
    """SIGTERM (the host waits out its shutdown_delay otherwise), then SIGKILL."""
    if host.proc.poll() is None:
        host.proc.terminate()
        try:
            host.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            host.kill()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_processes_upserting_one_table_leave_the_union_of_their_models(tmp_path, services, java, strategy):
    seed = run_seed()
    rng = random.Random(f"{seed}/writers/{strategy}")
    table = f"two_writers_{strategy.replace('-', '_')}_{seed}"
    streams = {w: keyed_stream(rng, range(base, base + KEYS), BATCHES, BATCH, w) for w, base in WRITERS.items()}
    for w, ops in streams.items():
        print(f"writer {w}: {len(ops)} messages in {BATCHES} batches of {BATCH}: {stream_shape(ops)}")

    hosts = {}
    try:
        for (w, ops), port in zip(streams.items(), free_ports(len(streams))):
            hosts[w] = start_writer(tmp_path, services, table, strategy, w, ops, port)
        texts = {w: scrape_until_acknowledged(port, len(streams[w]), 180, host)
                 for w, (host, port) in hosts.items()}
    finally:
        for host, _ in hosts.values():
            stop(host)

    conflicts = {}
    for w, (host, _) in hosts.items():
        text = texts[w]
        acknowledged = metric_sum(text, "iceberg_row_operations_total")
        assert acknowledged == len(streams[w]), \
            f"writer {w} acknowledged {acknowledged} of {len(streams[w])}\n{host.output()[-3000:]}"
        assert metric_sum(text, "iceberg_rows_failed_total") == 0, host.output()[-3000:]
        conflicts[w] = metric_sum(text, "iceberg_commit_conflicts_total")
    print(f"{strategy}: commit conflicts {conflicts}")
    # The point of the test: commits met the other writer's and were planned again.
    assert sum(conflicts.values()) > 0, "no commit conflicted: the writers never contended"

    all_ops = streams["a"] + streams["b"]
    want = {**model(streams["a"]), **model(streams["b"])}
    problems = check_table(services, table, strategy, java, all_ops, seed, want)
    assert not problems, "\n".join(problems)
