"""Reads a table floe wrote through the embedded catalog back with pyiceberg and DuckDB.

    .venv/bin/python examples/read_table.py [WAREHOUSE [NAMESPACE.TABLE]]

Defaults: ./warehouse and demo.events (examples/quickstart.yaml's table). `make py-deps`
makes .venv with both readers.
"""
import glob
import importlib
import os
import sys

import duckdb
from pyiceberg.catalog import load_catalog

warehouse = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "warehouse")
name = sys.argv[2] if len(sys.argv) > 2 else "demo.events"

# The embedded catalog is a SQLite file in Iceberg's JDBC catalog layout.
catalog = load_catalog("floe", type="sql", uri=f"sqlite:///{warehouse}/catalog.db",
                       warehouse=f"file://{warehouse}")
table = catalog.load_table(name)
print(f"{name} ({table.metadata_location})\n")
print("pyiceberg:")
print(table.scan().to_arrow().to_pandas().to_string() if importlib.util.find_spec("pandas")
      else table.scan().to_arrow().to_pylist())


def duckdb_with_iceberg():
    """DuckDB with its iceberg extension, from the duckdb-extension-iceberg wheel when
    installed (no download), else DuckDB's own `INSTALL iceberg`."""
    con = duckdb.connect()
    try:
        for ext in ("avro", "iceberg"):
            pkg = importlib.import_module(f"duckdb_extension_{ext}")
            path = glob.glob(os.path.join(os.path.dirname(pkg.__file__), "extensions", "*",
                                          f"{ext}.duckdb_extension"))[0]
            con.execute(f"LOAD '{path}'")
    except ImportError:
        con.execute("INSTALL iceberg; LOAD iceberg")
    return con


print("\nDuckDB:")
con = duckdb_with_iceberg()
print(con.sql(f"SELECT * FROM iceberg_scan('{table.metadata_location}')"))
