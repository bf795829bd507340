"""Reads back the quickstart table with pyiceberg and DuckDB and tells how to query it;
with --drop first, drops the table (and its files) if it exists."""
import os
import sys

import shutil  # noqa: E402
from urllib.parse import urlparse  # noqa: E402

drop = sys.argv[1] == "--drop"
args = sys.argv[2:] if drop else sys.argv[1:]
warehouse, table = os.path.abspath(args[0]), args[1]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))
from read_table import duckdb_connect  # noqa: E402
from pyiceberg.catalog import load_catalog  # noqa: E402
from pyiceberg.exceptions import NoSuchTableError  # noqa: E402

if drop:
    # `make run` starts from an empty table, leaving the rest of the warehouse (the
    # examples' tables) as it is.
    if os.path.exists(f"{warehouse}/catalog.db"):
        catalog = load_catalog("floe", type="sql", uri=f"sqlite:///{warehouse}/catalog.db",
                               warehouse=f"file://{warehouse}")
        try:
            location = urlparse(catalog.load_table(table).location()).path
        except NoSuchTableError:
            sys.exit(0)
        except Exception:  # its metadata gone or unreadable: the catalog's entry still goes
            location = None
        catalog.drop_table(table)
        if location:
            shutil.rmtree(location, ignore_errors=True)
    sys.exit(0)

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
