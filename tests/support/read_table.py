"""Independent read-back of a table floe wrote: DuckDB's iceberg extension, pyiceberg, and
Apache Iceberg's Java reader (the reference for delete files).

Usage: read_table.py <reader> <json-args>
  reader = duckdb-file   args: {"metadata": <metadata json path or table location>, "sql": "..."}
           pyiceberg-sql args: {"uri": "sqlite:///…", "warehouse": "file:///…", "table": "ns.t"}
           pyiceberg-rest args: {"uri": "http://…", "props": {...}, "table": "ns.t"}
           java-rest     args: as pyiceberg-rest, plus optional "warehouse", "columns"
                         (a projection, in order) and "snapshot_id" (see java_rest())
           duckdb-s3     args: {"metadata": "s3://…", "s3": {...}, "sql": "..."}
           s3-list       args: {"prefix": "s3://bucket/path", "s3": {...}}  (rows: object keys)
           parquet-compare args: {"actual": path, "expected": path} (see parquet_compare())
Prints one JSON document: {"rows": [...], "count": n}.
       read_table.py --serve  answers requests line by line (see serve()).
"""
import json
import sys


def jsonable(v):
    import datetime
    import decimal
    import uuid
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    return v


def duckdb_connect(s3=None):
    import duckdb
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false; SET autoload_known_extensions=true;")
    # Extensions come from PyPI wheels (duckdb-extension-*), loaded by path: no download.
    import glob
    import importlib
    import os
    for ext in ("avro", "httpfs", "iceberg"):
        pkg = importlib.import_module(f"duckdb_extension_{ext}")
        found = glob.glob(os.path.join(os.path.dirname(pkg.__file__), "extensions", "*", f"{ext}.duckdb_extension"))
        con.execute(f"LOAD '{found[0]}'")
    if s3:
        con.execute(
            "CREATE SECRET s (TYPE S3, KEY_ID ?, SECRET ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL false, REGION ?)",
            [s3["key"], s3["secret"], s3["endpoint"].split("://")[-1], s3.get("region", "us-east-1")],
        )
    return con


def s3_list(args):
    from pyarrow import fs
    s3 = args["s3"]
    endpoint = s3["endpoint"]
    filesystem = fs.S3FileSystem(
        access_key=s3["key"], secret_key=s3["secret"], region=s3.get("region", "us-east-1"),
        endpoint_override=endpoint.split("://")[-1], scheme=endpoint.split("://")[0])
    prefix = args["prefix"].split("://", 1)[-1]
    infos = filesystem.get_file_info(fs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == fs.FileType.File)


def make_v1_table(args):
    """Writes a table the way an older tool would: created as format v1 by pyiceberg,
    appended to twice with manifest merging (EXISTING entries), then upgraded to v2."""
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=args["uri"], **args.get("props", {}))
    ns, name = args["table"].rsplit(".", 1)
    cat.create_namespace_if_not_exists(ns)
    if cat.table_exists(args["table"]):
        cat.drop_table(args["table"])
    schema = pa.schema([pa.field("id", pa.int64())])
    t = cat.create_table(args["table"], schema=schema, properties={
        "format-version": "1", "commit.manifest-merge.enabled": "true",
        "commit.manifest.min-count-to-merge": "2"})
    for start in (0, 10, 20):
        t.append(pa.table({"id": list(range(start, start + 10))}, schema=schema))
    with t.transaction() as tx:
        tx.upgrade_table_version(2)
    t = cat.load_table(args["table"])
    # A v2 append that merges the v1 manifests: EXISTING entries rewritten by pyiceberg.
    t.append(pa.table({"id": list(range(30, 40))}, schema=schema))
    t = cat.load_table(args["table"])
    return {"format_version": t.format_version, "count": len(t.scan().to_arrow())}


def foreign_append_and_expire(args):
    """Another tool's commit (pyiceberg's append, which copies no floe summary keys), then
    every snapshot but the head expired by pyiceberg: floe's history is gone."""
    import time
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=args["uri"], **args.get("props", {}))
    t = cat.load_table(args["table"])
    t.append(pa.Table.from_pylist(args["rows"], schema=t.schema().as_arrow()))
    t = cat.load_table(args["table"])
    time.sleep(0.01)
    t.maintenance.expire_snapshots().older_than(
        __import__("datetime").datetime.now(__import__("datetime").timezone.utc)).commit()
    t = cat.load_table(args["table"])
    return {"snapshots": len(t.metadata.snapshots)}


def tag_head(args):
    """Another tool tags the table's current snapshot (pyiceberg's manage_snapshots)."""
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=args["uri"], **args.get("props", {}))
    t = cat.load_table(args["table"])
    head = t.metadata.current_snapshot_id
    t.manage_snapshots().create_tag(snapshot_id=head, tag_name=args["tag"]).commit()
    return {"snapshot_id": head}


def move_location(args):
    """Another tool moves the table's location: new metadata and manifests belong under
    the new one. pyiceberg cannot apply `set-location` to its own copy yet, so this sends
    the update to the catalog directly (its REST commit call) and reloads."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.table.update import AssertTableUUID, SetLocationUpdate
    cat = load_catalog("rest", type="rest", uri=args["uri"], **args.get("props", {}))
    t = cat.load_table(args["table"])
    cat.commit_table(t, (AssertTableUUID(uuid=t.metadata.table_uuid),),
                     (SetLocationUpdate(location=args["location"]),))
    t = cat.load_table(args["table"])
    return {"location": t.metadata.location}


def head_manifest_list(args):
    """The table's location and where its current snapshot's manifest list lives."""
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=args["uri"], **args.get("props", {}))
    t = cat.load_table(args["table"])
    return {"location": t.metadata.location,
            "manifest_list": t.metadata.current_snapshot().manifest_list}


def at_ref(args):
    """The table's refs, and the ids in the snapshot `ref` points at (read by pyiceberg,
    so every file of that snapshot must still be there)."""
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=args["uri"], **args.get("props", {}))
    t = cat.load_table(args["table"])
    refs = {name: r.snapshot_id for name, r in t.metadata.refs.items()}
    ids = None
    if args["ref"] in refs:
        ids = sorted(t.scan(snapshot_id=refs[args["ref"]]).to_arrow()["id"].to_pylist())
    return {"refs": refs, "ids": ids, "snapshots": len(t.metadata.snapshots)}


def drop_sql_table(args):
    """Drops a table of an embedded (SQL) catalog, as another tool would."""
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("floe", type="sql", uri=args["uri"], warehouse=args["warehouse"])
    cat.drop_table(args["table"])
    return {"dropped": args["table"]}


def partition_check(args):
    """Each data file's partition tuple against pyiceberg's transforms of every row in the
    file; the files each filter in args["filters"] plans; and the rows read back."""
    import datetime
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog
    from pyiceberg.types import DateType, TimestampType, TimestamptzType
    if args["catalog"] == "sql":
        cat = load_catalog("floe", type="sql", uri=args["uri"], warehouse=args["warehouse"])
    else:
        cat = load_catalog("rest", type="rest", uri=args["uri"], **args.get("props", {}))
    t = cat.load_table(args["table"])
    spec, schema = t.spec(), t.schema()
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

    def internal(v):
        # Partition values as stored: days for dates, microseconds for timestamps.
        if isinstance(v, datetime.datetime):
            v = v if v.tzinfo else v.replace(tzinfo=datetime.timezone.utc)
            return (v - epoch) // datetime.timedelta(microseconds=1)
        if isinstance(v, datetime.date):
            return (v - epoch.date()).days
        return v

    tasks = list(t.scan().plan_files())
    mismatches = []
    for task in tasks:
        f = task.file
        with t.io.new_input(f.file_path).open() as stream:
            data = pq.read_table(stream).flatten()
        for i, field in enumerate(spec.fields):
            source = schema.find_field(field.source_id)
            column = data.column(schema.find_column_name(field.source_id))
            if isinstance(source.field_type, (TimestampType, TimestamptzType)):
                column = pc.cast(column, pa.int64())
            elif isinstance(source.field_type, DateType):
                column = pc.cast(column, pa.int32())
            transform = field.transform.transform(source.field_type)
            expected = {internal(transform(v)) for v in column.to_pylist()}
            got = internal(f.partition[i])
            if expected != {got}:
                mismatches.append({"file": f.file_path, "field": field.name,
                                   "partition": jsonable(got),
                                   "rows": jsonable(sorted(expected, key=str))})
    planned = {e: len(list(t.scan(row_filter=e).plan_files())) for e in args.get("filters", [])}
    rows = t.scan().to_arrow().num_rows
    return {"files": len(tasks), "mismatches": mismatches, "planned": planned, "rows": rows}


def nanoseconds_as_integers(table):
    """Nanosecond timestamps (v3) as integers: Python's datetime holds microseconds."""
    import pyarrow as pa

    def convert(t):
        if pa.types.is_timestamp(t) and t.unit == "ns":
            return pa.int64()
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(convert(f.type)) for f in t])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(t.value_field.with_type(convert(t.value_type)))
        return t

    return table.cast(pa.schema([f.with_type(convert(f.type)) for f in table.schema]))


_JAVA_READER = []


def java_rest(args):
    """Rows read by Apache Iceberg's Java reader (RESTCatalog + S3FileIO +
    IcebergGenerics.read(table).build(), which applies position and equality deletes), in
    e2e/java-reader's TableReader: one long-lived JVM per process, started (and on a fresh
    machine installed: Maven resolves its classpath once into .e2e/java-reader) on the
    first read. args are pyiceberg-rest's ({"uri", "table", "props": {"s3.endpoint", ...}})
    with optional "warehouse", "columns" and "snapshot_id". Values are what jsonable makes
    of pyiceberg's (decimals as str(Decimal), timestamps as isoformat strings, timestamptz
    with "+00:00", nanosecond timestamps as integers, binary as hex, maps as [key, value]
    pairs); rows sorted the same way."""
    if not _JAVA_READER:
        import importlib.util
        import os
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e", "java_reader.py")
        spec = importlib.util.spec_from_file_location("java_reader", path)
        java_reader = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(java_reader)
        _JAVA_READER.append(java_reader.JavaReader())
    rows = _JAVA_READER[0].read(args)
    rows.sort(key=lambda r: json.dumps(r, sort_keys=True))
    return {"rows": rows, "count": len(rows)}


def parquet_compare(args):
    """Rows of the Parquet file args["actual"] that differ from those of args["expected"],
    read by DuckDB (read_parquet, both ways EXCEPT ALL, and ordered by the first column)
    and by pyarrow (ordered likewise): {"differences": [...], "count": rows of actual}."""
    import pyarrow.parquet as pq
    differences = []
    con = duckdb_connect()
    a, e = args["actual"], args["expected"]
    for name, path in (("a", a), ("e", e)):
        # Instants as text: fetching TIMESTAMPTZ values would need pytz.
        zoned = [c for c, t, *_ in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()
                 if t == "TIMESTAMP WITH TIME ZONE"]
        replace = f"REPLACE ({', '.join(f'CAST({c} AS VARCHAR) AS {c}' for c in zoned)})" if zoned else ""
        con.execute(f"CREATE VIEW {name} AS SELECT * {replace} FROM read_parquet('{path}')")
    for left, right in (("a", "e"), ("e", "a")):
        extra = con.execute(f"SELECT * FROM {left} EXCEPT ALL SELECT * FROM {right}").fetchall()
        if extra:
            differences.append({"duckdb_only_in": left, "rows": jsonable(extra[:5])})
    ordered = con.execute("SELECT * FROM a ORDER BY 1").fetchall()
    wanted = con.execute("SELECT * FROM e ORDER BY 1").fetchall()
    # As JSON text, so NaN equals NaN.
    if json.dumps(jsonable(ordered)) != json.dumps(jsonable(wanted)):
        differences.append({"duckdb": "the rows differ in order or in a NaN"})
    count = con.execute(f"SELECT count(*) FROM read_parquet('{a}')").fetchone()[0]
    con.close()
    first = lambda t: t.sort_by(t.column_names[0]).to_pylist()
    actual, expected = first(pq.read_table(a)), first(pq.read_table(e))
    for n, (x, y) in enumerate(zip(actual, expected)):
        if json.dumps(jsonable(x)) != json.dumps(jsonable(y)):
            differences.append({"pyarrow_row": n, "actual": jsonable(x), "expected": jsonable(y)})
            break
    if len(actual) != len(expected):
        differences.append({"pyarrow": f"{len(actual)} rows, expected {len(expected)}"})
    return {"differences": differences, "count": count}


# Readers that act on a table and answer with their own document.
ACTIONS = {
    "drop-sql-table": drop_sql_table,
    "foreign-append-and-expire": foreign_append_and_expire,
    "tag-head": tag_head,
    "move-location": move_location,
    "head-manifest-list": head_manifest_list,
    "at-ref": at_ref,
    "make-v1-table": make_v1_table,
    "partition-check": partition_check,
    "parquet-compare": parquet_compare,
}


def read(reader, args):
    """The answer to one request, as a JSON-ready document."""
    if reader in ACTIONS:
        return ACTIONS[reader](args)
    if reader == "java-rest":
        return java_rest(args)
    if reader == "s3-list":
        keys = s3_list(args)
        return {"rows": keys, "count": len(keys)}
    if reader.startswith("duckdb"):
        con = duckdb_connect(args.get("s3"))
        sql = args["sql"].replace("$T", f"iceberg_scan('{args['metadata']}')")
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        con.close()
    else:
        from pyiceberg.catalog import load_catalog
        if reader == "pyiceberg-sql":
            cat = load_catalog("floe", type="sql", uri=args["uri"], warehouse=args["warehouse"])
        else:
            cat = load_catalog("rest", type="rest", uri=args["uri"], **args.get("props", {}))
        table = cat.load_table(args["table"])
        rows = nanoseconds_as_integers(table.scan().to_arrow()).to_pylist()
        rows.sort(key=lambda r: json.dumps(jsonable(r), sort_keys=True))
    return {"rows": jsonable(rows), "count": len(rows)}


def serve():
    """Answers one request per stdin line ({"reader", "args"}) with one line: {"ok": answer}
    or {"error": traceback}, until stdin closes. The Rust tests keep a few of these
    running, so DuckDB's and pyiceberg's imports (about 1.7 s) are paid once, not per read.
    Every request still opens its own DuckDB connection and loads its own catalog."""
    import gc
    import traceback
    answers = sys.stdout
    sys.stdout = sys.stderr  # a library's stray print must not corrupt the protocol
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {"ok": read(request["reader"], request["args"])}
        except Exception:  # reported to the test, which fails naming the reader
            reply = {"error": traceback.format_exc()}
        gc.collect()  # closes the request's catalog connections and files now
        answers.write(json.dumps(reply, sort_keys=True) + "\n")
        answers.flush()


def main():
    if sys.argv[1] == "--serve":
        serve()
        return
    print(json.dumps(read(sys.argv[1], json.loads(sys.argv[2])), sort_keys=True))


if __name__ == "__main__":
    main()
