"""Upserts and deletes end to end: `floe run` with a per-message row_operation, read back
by DuckDB (which applies merge-on-read's equality deletes)."""
import pytest

from test_floe_run import FLOE, run_floe  # noqa: F401
from read_table import duckdb_connect

KEYS = 500


def upsert_pipeline(count: int, max_in_flight: int, strategy: str = "merge-on-read") -> str:
    return f"""
http:
  enabled: false
input:
  generate:
    count: {count}
    interval: ""
    batch_size: 1000
    mapping: |
      root.n = count("upserts")
      root.id = root.n % {KEYS}
      root.v = "v" + root.n.string()
      meta op = if root.n % 7 == 0 {{ "delete" }} else {{ "upsert" }}
output:
  iceberg:
    namespace: e2e
    table: keyed
    row_operation: ${{! meta("op") }}
    identifier_fields: [id]
    merge_strategy: {strategy}
    schema_evolution:
      enabled: true
    max_in_flight: {max_in_flight}
    batching:
      count: 1000
"""


def read_rows(tmp_path):
    from pyiceberg.catalog import load_catalog
    wh = tmp_path / "warehouse"
    cat = load_catalog("floe", type="sql", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    table = cat.load_table("e2e.keyed")
    rows = duckdb_connect().execute(
        f"SELECT id, v, n FROM iceberg_scan('{table.metadata_location}')").fetchall()
    return table, rows


@pytest.mark.parametrize("strategy", ["merge-on-read", "copy-on-write", "merge-on-read-positional"])
def test_upserts_in_order_leave_the_last_operation_per_key(tmp_path, strategy):
    count = 20_000
    res = run_floe(tmp_path, upsert_pipeline(count, 1, strategy))
    assert res.returncode == 0, res.stderr[-3000:]
    table, rows = read_rows(tmp_path)
    # One writer in order: each key holds its last message, unless that was a delete.
    last = {}
    for n in range(1, count + 1):
        last[n % KEYS] = n
    want = sorted((k, f"v{n}", n) for k, n in last.items() if n % 7 != 0)
    assert sorted(rows) == want
    assert list(table.schema().identifier_field_ids) == [table.schema().find_field("id").field_id]
    if strategy == "copy-on-write":
        # No delete files: pyiceberg (which reads no equality deletes) sees the same rows.
        assert table.current_snapshot().summary["total-delete-files"] == "0"
    if strategy == "merge-on-read-positional":
        # No equality deletes: old rows leave by position deletes, which pyiceberg
        # applies, or with their whole file (every batch here replaces every key, so
        # each file is replaced whole by the next).
        summary = table.current_snapshot().summary
        assert summary["total-equality-deletes"] == "0"
        gone = sum(int(s.summary.additional_properties.get(k, 0))
                   for s in table.metadata.snapshots
                   for k in ("added-position-deletes", "deleted-data-files"))
        assert gone > 0
    if strategy != "merge-on-read":
        scanned = table.scan(selected_fields=("id", "v", "n")).to_arrow().to_pylist()
        assert sorted((r["id"], r["v"], r["n"]) for r in scanned) == want


@pytest.mark.parametrize("max_in_flight,strategy",
                         [(4, "merge-on-read"), (8, "merge-on-read"), (4, "copy-on-write"),
                          (4, "merge-on-read-positional")])
def test_concurrent_upserts_keep_one_row_per_key(tmp_path, max_in_flight, strategy):
    count = 20_000
    res = run_floe(tmp_path, upsert_pipeline(count, max_in_flight, strategy))
    assert res.returncode == 0, res.stderr[-3000:]
    _, rows = read_rows(tmp_path)
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)), "a key holds more than one row"
    # Batches commit in any order, but every row left is one the key was given.
    for k, v, n in rows:
        assert n % KEYS == k and v == f"v{n}" and n % 7 != 0
    # Keys whose every message is an upsert cannot be absent.
    always_upserted = {k for k in range(KEYS)
                       if all(n % 7 != 0 for n in range(k if k else KEYS, count + 1, KEYS))}
    assert always_upserted <= set(ids)
