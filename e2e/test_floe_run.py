"""End to end through the real binary: `floe run` on YAML pipelines, read back by DuckDB."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from read_table import duckdb_connect, read as read_table  # noqa: E402

EVENT_MAPPING = textwrap.indent(textwrap.dedent("""\
    root.id = count("e2e_id")
    root.user_id = root.id % 10000
    root.event_type = ["click", "view", "purchase", "signup", "logout"].index(root.id % 5)
    root.value = (root.id % 1000).number() / 10.0
    root.info = "session-" + (root.id % 977).string() + "-abcdefghijklmnopq"
    root.ts = now()
"""), " " * 8)


def pipeline(output: str, count: int, mapping: str = None, batch_size: int = 5000) -> str:
    """A `generate` input (the benchmark events, or `mapping`) feeding `output`."""
    mapping = EVENT_MAPPING if mapping is None else textwrap.indent(textwrap.dedent(mapping), " " * 6)
    return f"""
http:
  enabled: false
input:
  generate:
    count: {count}
    interval: ""
    batch_size: {batch_size}
    mapping: |
{mapping}
output:
{textwrap.indent(output, "  ")}
"""


def run_floe(tmp_path, yaml_text, timeout=600):
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(yaml_text)
    return subprocess.run([FLOE, "run", str(cfg)], cwd=tmp_path, capture_output=True, text=True, timeout=timeout)


def test_generate_100k_into_embedded_catalog(tmp_path):
    out = """iceberg:
  namespace: e2e
  table: events
  schema_evolution:
    enabled: true
  max_in_flight: 4
  batching:
    count: 5000
"""
    res = run_floe(tmp_path, pipeline(out, 100_000))
    assert res.returncode == 0, res.stderr[-3000:]
    from pyiceberg.catalog import load_catalog
    wh = tmp_path / "warehouse"
    cat = load_catalog("floe", type="sql", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    table = cat.load_table("e2e.events")
    con = duckdb_connect()
    n, ids, types, max_user = con.execute(
        f"SELECT count(*), count(DISTINCT id), count(DISTINCT event_type), max(user_id) "
        f"FROM iceberg_scan('{table.metadata_location}')").fetchone()
    assert (n, ids, types, max_user) == (100_000, 100_000, 5, 9999)


def test_lint_and_start_up_print_the_same_problems(tmp_path):
    """libfloe owns the config: `floe lint` and start-up (`floe run --chilled`, which goes
    past lint errors) print libfloe's lines, each naming its field."""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(pipeline("""iceberg:
  namespace: e2e
  table: t
  commit:
    max_snapshots: 0
  storage:
    azure_blob_storage:
      container: c
""", 1))
    problems = [
        "commit.max_snapshots must be greater than 0",
        'catalog.warehouse: storage.azure_blob_storage.container is "c"',
    ]
    lint = subprocess.run([FLOE, "lint", str(cfg)], capture_output=True, text=True, timeout=60)
    assert lint.returncode != 0
    for p in problems:
        assert p in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    run = subprocess.run([FLOE, "run", "--chilled", str(cfg)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    start_up = [line for line in (run.stdout + run.stderr).splitlines() if "failed to init output" in line]
    assert start_up and "; ".join(problems) in start_up[0], run.stdout + run.stderr
    assert not (tmp_path / "warehouse").exists(), "nothing is created for a config with problems"


def rest_s3_output(services, table: str) -> str:
    """The start of an `iceberg` output writing `e2e.<table>` through the REST fixture to
    SeaweedFS (the rest of the section follows it)."""
    return f"""iceberg:
  catalog:
    url: {services['rest_url']}
  namespace: e2e
  table: {table}
  storage:
    aws_s3:
      bucket: {services['bucket']}
      region: {services['region']}
      endpoint: {services['s3_endpoint']}
      force_path_style_urls: true
      credentials:
        id: {services['access_key']}
        secret: {services['secret_key']}
"""


def test_generate_100k_into_rest_catalog_on_s3(tmp_path, services):
    out = rest_s3_output(services, "events_rest") + """  schema_evolution:
    enabled: true
    partition_spec: "(event_type)"
  max_in_flight: 4
  batching:
    count: 10000
"""
    res = run_floe(tmp_path, pipeline(out, 100_000))
    assert res.returncode == 0, res.stderr[-3000:]
    assert services["secret_key"] not in res.stdout + res.stderr
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=services["rest_url"], **{
        "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
        "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
        "s3.path-style-access": "true"})
    table = cat.load_table("e2e.events_rest")
    con = duckdb_connect({"key": services["access_key"], "secret": services["secret_key"],
                          "endpoint": services["s3_endpoint"], "region": services["region"]})
    n, ids, types, lo, hi = con.execute(
        f"SELECT count(*), count(DISTINCT id), count(DISTINCT event_type), min(id), max(id) "
        f"FROM iceberg_scan('{table.metadata_location}')").fetchone()
    assert (n, ids, types, lo, hi) == (100_000, 100_000, 5, 1, 100_000)
    summary = table.current_snapshot().summary
    assert int(summary["total-records"]) == 100_000


def test_partition_values_with_path_characters_on_s3(tmp_path, services):
    """Partition values holding `/`, `..`, `#`, `?`, `%`, spaces and non-ASCII, written
    to the REST catalog on S3: every file is under the table's data folder, one folder
    per value, and DuckDB, pyiceberg and Apache Iceberg's Java reader read every row
    back with its value (a `#` or `?` left in a location cut the path short for readers
    that parse it as a URL)."""
    kinds = ["../../up", "a/b", "C#", "a?b", "50%", "sp ace", "ünï", "[x]*", "plain"]
    mapping = 'root.id = count("kinds")\nroot.kind = %s.index((root.id - 1) %% %d)\n' % (
        json.dumps(kinds), len(kinds))
    out = rest_s3_output(services, "odd_parts") + """  schema_evolution:
    enabled: true
    partition_spec: "(kind)"
"""
    res = run_floe(tmp_path, pipeline(out, 90, mapping, batch_size=90))
    assert res.returncode == 0, res.stderr[-3000:]
    s3 = {"key": services["access_key"], "secret": services["secret_key"],
          "endpoint": services["s3_endpoint"], "region": services["region"]}
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=services["rest_url"], **{
        "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
        "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
        "s3.path-style-access": "true"})
    table = cat.load_table("e2e.odd_parts")
    expected = sorted((i, kinds[(i - 1) % len(kinds)]) for i in range(1, 91))
    py = sorted((r["id"], r["kind"]) for r in table.scan().to_arrow().to_pylist())
    assert py == expected
    con = duckdb_connect(s3)
    duck = sorted(con.execute(
        f"SELECT id, kind FROM iceberg_scan('{table.metadata_location}')").fetchall())
    assert duck == expected
    java = read_table("java-rest", {"uri": services["rest_url"], "table": "e2e.odd_parts",
                                    "props": {"s3.endpoint": services["s3_endpoint"],
                                              "s3.access-key-id": services["access_key"],
                                              "s3.secret-access-key": services["secret_key"],
                                              "s3.region": services["region"],
                                              "s3.path-style-access": "true"}})
    assert sorted((r["id"], r["kind"]) for r in java["rows"]) == expected
    data = table.location().rstrip("/") + "/data/"
    files = [f.file.file_path for f in table.scan().plan_files()]
    assert len(files) == len(kinds), files
    for path in files:
        assert path.startswith(data) and path[len(data):].count("/") == 1, path


def test_schema_evolves_as_fields_appear(tmp_path):
    """Fields appear mid-stream, top level and three levels deep: the table gains them
    and every value is read back (before, they were dropped without a word)."""
    mapping = """\
        root.id = count("evolve")
        root.v = "x"
        if root.id > 1000 { root.country = "NL" }
        if root.id > 2000 { root.user.address.geo.lat = root.id.number() / 1000.0 }
    """
    out = """iceberg:
  namespace: e2e
  table: evolving
  schema_evolution:
    enabled: true
  max_in_flight: 4
  batching:
    count: 250
"""
    res = run_floe(tmp_path, pipeline(out, 3000, mapping, batch_size=250))
    assert res.returncode == 0, res.stderr[-3000:]
    wh = tmp_path / "warehouse"
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("floe", type="sql", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    table = cat.load_table("e2e.evolving")
    con = duckdb_connect()
    row = con.execute(
        f"SELECT count(*), count(DISTINCT id), count(country), count(user.address.geo.lat), "
        f"max(user.address.geo.lat) FROM iceberg_scan('{table.metadata_location}')").fetchone()
    assert row == (3000, 3000, 2000, 1000, 3.0), row


def test_unknown_fields_go_to_the_fallback_output_without_evolution(tmp_path):
    """Without evolution a message with a field the table lacks fails alone (the
    default `unknown_fields: error`) and the fallback output gets it; the rest land."""
    create = """iceberg:
  namespace: e2e
  table: strict
  schema_evolution:
    enabled: true
"""
    res = run_floe(tmp_path, pipeline(create, 1, 'root.id = 0\nroot.v = "x"\n', batch_size=250))
    assert res.returncode == 0, res.stderr[-3000:]
    # The input's batches go to the output as they are: with batching on the output
    # as well, Benthos answers each input batch as a whole (see docs/failures.md).
    strict = f"""fallback:
  - iceberg:
      namespace: e2e
      table: strict
      max_in_flight: 2
  - file:
      path: {tmp_path}/dead-letters.jsonl
      codec: lines
"""
    mapping = """\
        root.id = count("strict")
        root.v = "x"
        if root.id % 10 == 0 { root.extra = true }
    """
    res = run_floe(tmp_path, pipeline(strict, 1000, mapping, batch_size=250))
    assert res.returncode == 0, res.stderr[-3000:]
    dead = [json.loads(line) for line in (tmp_path / "dead-letters.jsonl").read_text().splitlines()]
    assert len(dead) == 100 and all(d["extra"] is True for d in dead), dead[:3]
    wh = tmp_path / "warehouse"
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("floe", type="sql", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    table = cat.load_table("e2e.strict")
    n = duckdb_connect().execute(
        f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}')").fetchone()[0]
    assert n == 1 + 900


def test_explicit_types_from_metadata_and_a_mapping(tmp_path):
    """`schema_metadata` and `new_column_type_mapping` type the columns a table is
    created with and those added later; inference alone would make strings of them."""
    mapping = """\
        root.id = count("typed")
        root.created_at = "2026-12-01T10:00:00Z"
        root.price = "12.50"
        if root.id > 100 { root.updated_at = "2026-12-02T10:00:00Z" }
        meta iceberg_types = {"price": "decimal(10, 2)"}.format_json()
    """
    out = r"""iceberg:
  namespace: e2e
  table: typed
  schema_evolution:
    enabled: true
    schema_metadata: iceberg_types
    new_column_type_mapping: |
      root = this.keys().filter(k -> k.has_suffix("_at")).map_each(k -> {(k): "timestamptz"}).squash()
"""
    res = run_floe(tmp_path, pipeline(out, 200, mapping, batch_size=250))
    assert res.returncode == 0, res.stderr[-3000:]
    wh = tmp_path / "warehouse"
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("floe", type="sql", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    table = cat.load_table("e2e.typed")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types == {"id": "long", "created_at": "timestamptz", "price": "decimal(10, 2)",
                     "updated_at": "timestamptz"}, types
    row = duckdb_connect().execute(
        f"SELECT count(*), sum(price)::VARCHAR, count(updated_at) "
        f"FROM iceberg_scan('{table.metadata_location}')").fetchone()
    assert row == (200, "2500.00", 100), row


def test_the_binary_names_its_version_commit_and_documents_its_components(tmp_path):
    """`floe --version` names floe's version (Cargo.toml's) and the commit built;
    `floe create` shows the iceberg output's nested sections with their defaults; `floe
    docs --check` finds the committed reference pages current."""
    res = subprocess.run([FLOE, "--version"], capture_output=True, text=True, timeout=30)
    version = re.search(r'^version = "(.*)"', open(os.path.join(ROOT, "Cargo.toml")).read(), re.M).group(1)
    # The commit the binary was linked at (make relinks it when its sources change).
    assert re.search(rf"floe {re.escape(version)} \(commit [0-9a-f]{{12}}", res.stdout), res.stdout
    res = subprocess.run([FLOE, "create", "stdin//iceberg"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert "    commit:\n      max_snapshot_age: 24h\n" in res.stdout, res.stdout
    assert "catalog: {}" not in res.stdout and "commit: {}" not in res.stdout
    res = subprocess.run([FLOE, "docs", "--check", "--dir", os.path.join(ROOT, "docs", "components")],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([FLOE, "docs", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and sorted(os.listdir(tmp_path)) == ["iceberg.md", "kafka_franz.md", "prometheus.md"]
