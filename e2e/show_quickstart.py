"""Reads back the quickstart table with pyiceberg and DuckDB and tells how to query it."""
import os
import sys

warehouse, table = os.path.abspath(sys.argv[1]), sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))
from read_table import duckdb_connect  # noqa: E402
from pyiceberg.catalog import load_catalog  # noqa: E402

catalog = load_catalog("floe", type="sql", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
t = catalog.load_table(table)
snapshot = t.current_snapshot()
rows = int(snapshot.summary["total-records"])
con = duckdb_connect()
counted = con.execute(f"SELECT count(*) FROM iceberg_scan('{t.metadata_location}')").fetchone()[0]
print(f"\n{table}: {counted} rows read back by DuckDB ({rows} in the snapshot summary, "
      f"{len(list(t.snapshots()))} snapshots)")
print(f"""
Query it with DuckDB:
  INSTALL iceberg; LOAD iceberg;
  SELECT event_type, count(*) FROM iceberg_scan('{t.metadata_location}') GROUP BY 1;

or with pyiceberg:
  from pyiceberg.catalog import load_catalog
  cat = load_catalog("floe", type="sql", uri="sqlite:///{warehouse}/catalog.db", warehouse="file://{warehouse}")
  cat.load_table("{table}").scan().to_arrow()
""")
if counted != 1_000_000:
    sys.exit(f"expected 1000000 rows, read {counted}")
