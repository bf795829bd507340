"""`commit.atomic_tables`: every batch is a CDC cut of three tables (`x`, `y`, `z`,
routed per message by `table: ${! json("t") }`), and readers must find each cut in all
three tables or in none, also right after the writer was killed.

The host (`floe run`, an `http_server` input, the REST fixture + SeaweedFS or the
embedded catalog) is SIGKILLed between upload and commit (a failpoints build dying on
the n-th pass through `commit.uploaded`, which each table's part passes before the
parts are sent together), right after a commit was applied (`commit.applied`: without
atomic_tables that is one table's commit while the batch's others are still on their
way, which tears the batch), or at a random moment. pyiceberg reads all three tables right
after the kill: each batch is whole in every table or absent from every one, and every
acknowledged batch is there. A new host then gets what was not acknowledged plus half of
what was (exactly-once): at the end every record is in its table once, by pyiceberg and
DuckDB.
"""
import os
import random
import signal
import textwrap
import threading
import time

import pytest

from crash_trials import FLOE, FLOE_FAILPOINTS, CLIENTS, run_host
from read_table import duckdb_connect
from services import output_connection

TABLES = ("x", "y", "z")
# Failpoints the host dies at (src/failpoint.rs).
POINTS = {"upload": "commit.uploaded", "applied": "commit.applied"}
BATCHES = 48
PER_TABLE = 10  # records of each table in one batch


def batch_records(b):
    """Batch b: PER_TABLE records for each table, interleaved; seqs are global."""
    first = b * PER_TABLE * len(TABLES)
    return list(range(first, first + PER_TABLE * len(TABLES)))


def table_of(seq):
    return TABLES[seq % len(TABLES)]


def output_block(services, catalog, namespace, warehouse):
    if catalog == "rest":
        block = "iceberg:\n" + output_connection(services, 2)
    else:
        block = f"iceberg:\n  catalog:\n    warehouse: {warehouse}\n"
    # Each record's table comes from its seq.
    block += textwrap.indent(textwrap.dedent(f"""\
        namespace: {namespace}
        table: '${{! ["x", "y", "z"].index(json("seq") % 3) }}'
        schema_evolution:
          enabled: true
        max_in_flight: 4
        commit:
          atomic_tables: true
          exactly_once:
            writer_id: cuts
            source: 'cuts/partition-${{! json("seq") % 2 }}'
            offset: '${{! (json("seq") / 2).floor() }}'
        """), "  ")
    return block


def catalog_for(services, catalog, warehouse):
    from pyiceberg.catalog import load_catalog
    if catalog == "rest":
        return load_catalog("rest", type="rest", uri=services["rest_url"], **{
            "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
            "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
            "s3.path-style-access": "true"})
    return load_catalog("floe", type="sql", uri=f"sqlite:///{warehouse}/catalog.db",
                        warehouse=f"file://{warehouse}")


def read_tables(services, catalog, namespace, warehouse):
    """Each table's seqs by pyiceberg (empty for a table not created yet)."""
    from pyiceberg.exceptions import NoSuchTableError
    cat = catalog_for(services, catalog, warehouse)
    seqs = {}
    for t in TABLES:
        try:
            table = cat.load_table(f"{namespace}.{t}")
        except NoSuchTableError:
            seqs[t] = []
            continue
        seqs[t] = table.scan(selected_fields=("seq",)).to_arrow()["seq"].to_pylist()
    return seqs


def duckdb_counts(services, catalog, namespace, warehouse):
    """(rows, distinct seqs) per table by DuckDB."""
    cat = catalog_for(services, catalog, warehouse)
    s3 = None
    if catalog == "rest":
        s3 = {"key": services["access_key"], "secret": services["secret_key"],
              "endpoint": services["s3_endpoint"], "region": services["region"]}
    con = duckdb_connect(s3)
    counts = {}
    for t in TABLES:
        location = cat.load_table(f"{namespace}.{t}").metadata_location
        counts[t] = tuple(con.execute(
            f"SELECT count(*), count(DISTINCT seq) FROM iceberg_scan('{location}')").fetchone())
    return counts


def torn_batches(seqs):
    """Batches some of whose records are in the tables and some not: (batch, table →
    records present) for each."""
    present = {t: set(s) for t, s in seqs.items()}
    torn = []
    for b in range(BATCHES):
        have = {t: sum(1 for s in batch_records(b) if table_of(s) == t and s in present[t])
                for t in TABLES}
        if len(set(have.values())) > 1 or set(have.values()) - {0, PER_TABLE}:
            torn.append((b, have))
    return torn


def first_host(point, rng, records):
    """(binary, env, on_ack factory) for the host that is killed."""
    if point in POINTS:
        # Every batch passes each point once per table: after its part is uploaded, and
        # after the catalog applied it (for tables committing together, after all did).
        nth = rng.randint(len(TABLES) + 1, 6 * len(TABLES))
        return FLOE_FAILPOINTS, {"FLOE_FAILPOINT_CRASH": f"{POINTS[point]}:{nth}"}, None
    kill_after = rng.randint(CLIENTS, BATCHES // 2)
    delay = rng.uniform(0, 0.3)

    def factory(host, killers, started):
        def on_ack(n):
            if n == kill_after:
                killers.append(threading.Timer(delay, host.kill))
                killers[-1].start()
        return on_ack
    return FLOE, {}, factory


@pytest.mark.parametrize("catalog", ["rest", "sql"])
@pytest.mark.parametrize("point", ["upload", "applied", "random"])
def test_a_killed_writer_leaves_each_cut_in_all_tables_or_none(tmp_path, services, catalog,
                                                              point):
    seed = int(os.environ.get("FLOE_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    batches = [batch_records(b) for b in range(BATCHES)]
    # A kill that comes before any acknowledgement shows nothing: drawn again (a new
    # namespace, a new kill), up to three times.
    for draw in range(3):
        namespace = f"atomic_{point}_{catalog}_{seed}_{draw}"
        warehouse = os.path.join(str(tmp_path), f"wh{draw}")
        os.makedirs(warehouse, exist_ok=True)
        output = output_block(services, catalog, namespace, warehouse)
        binary, env, factory = first_host(point, rng, batches)
        acked, code, log, _, _ = run_host(str(tmp_path), f"first{draw}", binary, output, env,
                                          batches, factory)
        assert code == -signal.SIGKILL, f"seed {seed}: the host was not killed:\n{log[-2000:]}"
        if point in POINTS:
            assert f"failpoint {POINTS[point]}: killing the process" in log, log[-2000:]
        if acked:
            break
    assert acked, f"seed {seed}: nothing was acknowledged before the kill, in three draws"

    # A request the writer sent before it died is still applied by the catalog, and
    # Apache's REST fixture commits a transaction's tables one after another: a reader
    # that comes while it does finds some applied and not the others. Read once it is
    # done.
    time.sleep(2)
    after_kill = read_tables(services, catalog, namespace, warehouse)
    torn = torn_batches(after_kill)
    assert not torn, f"seed {seed}: batches torn across tables after the kill: {torn}"
    for b in acked:
        for s in batches[b]:
            assert s in after_kill[table_of(s)], f"seed {seed}: acknowledged {s} lost"

    # What was not acknowledged, and half of what was, again (as a consumer restarting
    # from an older position), regrouped differently.
    replayed = [b for b in sorted(acked) if rng.random() < 0.5] or [min(acked)]
    resend = [b for b in range(BATCHES) if b not in acked] + replayed
    started = time.time()
    acked_again, _, log2, _, _ = run_host(str(tmp_path), "second", FLOE, output, {},
                                          [batches[b] for b in resend])
    assert len(acked_again) == len(resend), f"seed {seed}: not all acknowledged:\n{log2[-2000:]}"

    final = read_tables(services, catalog, namespace, warehouse)
    assert not torn_batches(final)
    for t in TABLES:
        want = sorted(s for b in range(BATCHES) for s in batches[b] if table_of(s) == t)
        assert sorted(final[t]) == want, f"seed {seed}: table {t} differs"
    duck = duckdb_counts(services, catalog, namespace, warehouse)
    assert all(duck[t] == (len(final[t]), len(final[t])) for t in TABLES), duck
    print(f"seed {seed}: {len(acked)} of {BATCHES} cuts acknowledged before the kill, "
          f"{sum(len(v) for v in after_kill.values())} rows then; recovery "
          f"{time.time() - started:.1f}s")
