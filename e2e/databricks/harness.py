#!/usr/bin/env python3
"""The Databricks e2e harness: floe against Unity Catalog, or locally against a stand-in.

    python3 e2e/databricks/harness.py            # live, when the environment names a workspace
    python3 e2e/databricks/harness.py --local    # REST fixture + SeaweedFS behind UnityFront

Live needs DATABRICKS_HOST (https://<workspace>), DATABRICKS_CATALOG, DATABRICKS_SCHEMA,
DATABRICKS_WAREHOUSE_ID (a SQL warehouse, to read back) and either DATABRICKS_TOKEN (a
personal access token) or DATABRICKS_CLIENT_ID + DATABRICKS_CLIENT_SECRET (OAuth M2M,
scope all-apis). Without them it prints one line saying what is missing and exits 0.
Storage credentials come from Unity (vended); the schema needs EXTERNAL USE SCHEMA.

It runs, against either target:
1. a copy-on-write round trip: insert 1,000 rows, upsert 150 (100 changed, 50 new),
   delete 50, and read the table back (DuckDB locally, the SQL Statement API live);
2. append throughput against records per commit: one window per batch size, a table and
   a plot (`throughput.svg`);
3. copy-on-write commit latency for 100 / 1,000 / 5,000-row upsert batches on a
   20,000-row table, one batch per commit;
4. the identifier-fields refusal: the catalog refuses a table created with
   identifier-field ids, and floe, configured with `identifier_fields`, creates the
   table without them and upserts by the configured key.
Results go to `--out` as results.md, results.json and throughput.svg.

Locally the catalog is e2e/databricks/unity_front.py, which reproduces Unity's endpoint
path, bearer-token check, identifier-field and property refusals, and refusal of delete
files. Not reproduced: Unity's commit latency (its ~5 s append floor), its OAuth token
server, vended credentials (tested on their own in e2e/test_vended_credentials.py),
managed-table storage layout, and reads through a SQL warehouse.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.dirname(HERE)
ROOT = os.path.dirname(E2E)
sys.path.insert(0, E2E)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
FLOE = os.environ.get("FLOE_BIN", os.path.join(ROOT, "go-shim", "cmd", "floe", "floe"))
LIVE_ENV = ("DATABRICKS_HOST", "DATABRICKS_CATALOG", "DATABRICKS_SCHEMA", "DATABRICKS_WAREHOUSE_ID")


# ----------------------------------------------------------------------------- targets

class LocalTarget:
    """The REST fixture and SeaweedFS behind UnityFront; DuckDB reads back."""
    name = "local"

    def __init__(self, services, front, token):
        self.services, self.front, self.token = services, front, token
        self.namespace = "harness_" + uuid.uuid4().hex[:6]

    def catalog_yaml(self):
        return [f"url: {self.front.url}", "auth:", f"  bearer: {self.token}"]

    def storage_yaml(self):
        s = self.services
        return ["aws_s3:", f"  bucket: {s['bucket']}", f"  region: {s['region']}",
                f"  endpoint: {s['s3_endpoint']}", "  force_path_style_urls: true",
                "  credentials:", f"    id: {s['access_key']}", f"    secret: {s['secret_key']}"]

    def catalog_base(self):
        """The catalog URL a client adds `/v1/…` to, and its auth header."""
        return self.front.url, {"Authorization": f"Bearer {self.token}"}

    def _table(self, table):
        from pyiceberg.catalog import load_catalog
        s = self.services
        cat = load_catalog("fixture", type="rest", uri=s["rest_url"], **{
            "s3.endpoint": s["s3_endpoint"], "s3.access-key-id": s["access_key"],
            "s3.secret-access-key": s["secret_key"], "s3.region": s["region"],
            "s3.path-style-access": "true"})
        return cat.load_table(f"{self.namespace}.{table}")

    def query(self, table, sql):
        """Rows of `sql`, in which `{t}` stands for the table."""
        from read_table import duckdb_connect
        s = self.services
        con = duckdb_connect({"key": s["access_key"], "secret": s["secret_key"],
                              "endpoint": s["s3_endpoint"], "region": s["region"]})
        location = self._table(table).metadata_location
        return con.execute(sql.replace("{t}", f"iceberg_scan('{location}')")).fetchall()

    def identifier_field_ids(self, table):
        return list(self._table(table).schema().identifier_field_ids)


class LiveTarget:
    """A Databricks workspace: Unity Catalog's Iceberg REST endpoint; reads through the
    SQL Statement API on a SQL warehouse."""
    name = "databricks"

    def __init__(self, env):
        self.host = env["DATABRICKS_HOST"].rstrip("/")
        self.catalog = env["DATABRICKS_CATALOG"]
        self.namespace = env["DATABRICKS_SCHEMA"]
        self.warehouse_id = env["DATABRICKS_WAREHOUSE_ID"]
        self.token = env.get("DATABRICKS_TOKEN")
        self.client = (env.get("DATABRICKS_CLIENT_ID"), env.get("DATABRICKS_CLIENT_SECRET"))
        self.url = f"{self.host}/api/2.1/unity-catalog/iceberg-rest"

    def catalog_yaml(self):
        lines = [f"url: {self.url}", f"warehouse: {self.catalog}", "auth:"]
        if self.token:
            return lines + [f"  bearer: {self.token}"]
        return lines + ["  oauth2:", f"    server_uri: {self.host}/oidc/v1/token",
                        f"    client_id: {self.client[0]}", f"    client_secret: {self.client[1]}",
                        "    scope: all-apis"]

    def storage_yaml(self):
        region = os.environ.get("DATABRICKS_STORAGE_REGION")
        return ["aws_s3:", f"  region: {region}"] if region else []

    def bearer(self):
        if self.token:
            return self.token
        form = urllib.parse.urlencode({"grant_type": "client_credentials", "scope": "all-apis",
                                       "client_id": self.client[0],
                                       "client_secret": self.client[1]}).encode()
        with urllib.request.urlopen(f"{self.host}/oidc/v1/token", data=form, timeout=60) as r:
            return json.load(r)["access_token"]

    def catalog_base(self):
        return self.url, {"Authorization": f"Bearer {self.bearer()}"}

    def query(self, table, sql):
        statement = sql.replace("{t}", f"`{self.catalog}`.`{self.namespace}`.`{table}`")
        request = {"warehouse_id": self.warehouse_id, "statement": statement,
                   "wait_timeout": "50s", "format": "JSON_ARRAY", "disposition": "INLINE"}
        answer = http_json("POST", f"{self.host}/api/2.0/sql/statements", request,
                           {"Authorization": f"Bearer {self.bearer()}"})
        while answer["status"]["state"] in ("PENDING", "RUNNING"):
            time.sleep(2)
            answer = http_json("GET", f"{self.host}/api/2.0/sql/statements/{answer['statement_id']}",
                               None, {"Authorization": f"Bearer {self.bearer()}"})
        if answer["status"]["state"] != "SUCCEEDED":
            raise RuntimeError(f"{statement}: {answer['status']}")
        columns = answer["manifest"]["schema"]["columns"]
        rows = (answer.get("result") or {}).get("data_array") or []
        numeric = {"INT", "LONG", "SHORT", "BYTE", "DOUBLE", "FLOAT", "DECIMAL"}
        return [tuple(convert(v, c["type_name"] in numeric) for v, c in zip(row, columns))
                for row in rows]

    def identifier_field_ids(self, table):
        base, headers = self.catalog_base()
        prefix = catalog_prefix(base, headers, self.catalog)
        loaded = http_json("GET", f"{base}/v1/{prefix}namespaces/{self.namespace}/tables/{table}",
                           None, headers)
        schema_id = loaded["metadata"]["current-schema-id"]
        schema = next(s for s in loaded["metadata"]["schemas"] if s["schema-id"] == schema_id)
        return schema.get("identifier-field-ids") or []


def convert(value, numeric):
    if value is None or not numeric:
        return value
    return float(value) if "." in value else int(value)


def http_json(method, url, body, headers):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={**headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        return json.load(r)


def catalog_prefix(base, headers, warehouse=None):
    query = f"?warehouse={urllib.parse.quote(warehouse)}" if warehouse else ""
    config = http_json("GET", f"{base}/v1/config{query}", None, headers)
    prefix = {**config.get("defaults", {}), **config.get("overrides", {})}.get("prefix", "")
    return prefix.strip("/") + "/" if prefix else ""


# ----------------------------------------------------------------------------- floe runs

def pipeline(target, table, input_lines, output_lines=(), processors=()):
    """A floe pipeline from `input_lines` (under `input:`) to the iceberg output."""
    lines = ["http:", "  enabled: false", "input:", *("  " + x for x in input_lines)]
    if processors:
        lines += ["pipeline:", "  processors:", *("    " + x for x in processors)]
    lines += ["output:", "  iceberg:", "    catalog:", *("      " + x for x in target.catalog_yaml()),
              f"    namespace: {target.namespace}", f"    table: {table}"]
    storage = target.storage_yaml()
    if storage:
        lines += ["    storage:", *("      " + x for x in storage)]
    lines += ["    schema_evolution:", "      enabled: true", *("    " + x for x in output_lines)]
    return "\n".join(lines) + "\n"


def generate(count, mapping, batch_size=1000, interval='""'):
    return ["generate:", f"  count: {count}", f"  interval: {interval}",
            f"  batch_size: {batch_size}", "  mapping: |", *("    " + m for m in mapping)]


def parse_stats(log):
    """The output's closing stats line (`iceberg output committed rows=… …`) as numbers."""
    for line in reversed(log.splitlines()):
        if "iceberg output committed" in line:
            text = line.split("iceberg output committed", 1)[1]
            fields = dict(kv.split("=", 1) for kv in text.replace('"', " ").split() if "=" in kv)
            return {k: float(v) for k, v in fields.items() if v.replace(".", "", 1).isdigit()}
    raise RuntimeError("no stats line in floe's output:\n" + log[-3000:])


class Runner:
    def __init__(self, workdir):
        self.workdir = workdir
        self.logs = []  # every run's output, for checks on what floe logged

    def run(self, name, yaml_text, stop_after=None, timeout=900):
        """Runs `floe run`; with `stop_after`, SIGTERMs it then (an unbounded input)."""
        path = os.path.join(self.workdir, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(yaml_text)
        proc = subprocess.Popen([FLOE, "run", path], cwd=self.workdir, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if stop_after is not None:
            time.sleep(stop_after)
            proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise RuntimeError(f"{name}: floe did not finish in {timeout} s:\n{out[-3000:]}")
        with open(os.path.join(self.workdir, f"{name}.log"), "w") as f:
            f.write(out)
        self.logs.append(out)
        if proc.returncode != 0 and stop_after is None:
            raise RuntimeError(f"{name}: floe exited {proc.returncode}:\n{out[-3000:]}")
        return parse_stats(out)


# ----------------------------------------------------------------------------- scenarios

KEYED = ["identifier_fields: [id]"]


def round_trip(target, runner):
    """Insert 1,000, upsert 150 (ids 1–100 changed, 1,001–1,050 new), delete 901–950."""
    table = "round_trip"
    runner.run("rt-insert", pipeline(target, table, generate(1000, [
        'root.id = count("rt")', 'root.v = "a"']), KEYED))
    runner.run("rt-upsert", pipeline(target, table, generate(150, [
        'let n = count("rt")', 'root.id = if $n <= 100 { $n } else { $n + 900 }',
        'root.v = if $n <= 100 { "b" } else { "new" }']), KEYED + ["row_operation: upsert"]))
    runner.run("rt-delete", pipeline(target, table, generate(50, [
        'root.id = count("rt") + 900']), KEYED + ["row_operation: delete"]))
    rows = dict(target.query(table, "SELECT id, v FROM {t}"))
    expected = {i: "a" for i in range(1, 1001)}
    expected.update({i: "b" for i in range(1, 101)})
    expected.update({i: "new" for i in range(1001, 1051)})
    for i in range(901, 951):
        del expected[i]
    count = target.query(table, "SELECT count(*) FROM {t}")[0][0]
    wrong = sorted(i for i in set(rows) | set(expected) if rows.get(i) != expected.get(i))
    return {"rows": count, "expected_rows": len(expected), "wrong_ids": wrong[:20],
            "ok": count == len(expected) and not wrong}


def throughput(target, runner, sizes, window):
    """Appends for `window` seconds per batch size (records per commit); rows/s."""
    points = []
    for size in sizes:
        table = f"append_{size}"
        stats = runner.run(f"append-{size}", pipeline(target, table, generate(
            0, ['root.id = count("a")', 'root.user = "user-" + (count("u") % 1000).string()',
                'root.value = random_int(max: 1000000)', 'root.ts = now()'],
            batch_size=min(size, 1000)), [f"batching:", f"  count: {size}", "  period: 1s"]),
            stop_after=window)
        rows = target.query(table, "SELECT count(*) FROM {t}")[0][0]
        snapshots = max(stats.get("snapshots", 0), 1)
        points.append({"batch": size, "rows": rows, "rows_per_s": rows / window,
                       "snapshots": int(stats.get("snapshots", 0)),
                       "rows_per_commit": rows / snapshots,
                       "commit_p50_ms": stats.get("commit_p50_ms"),
                       "commit_p95_ms": stats.get("commit_p95_ms"),
                       "stats_rows": int(stats.get("rows", 0))})
    return points


def cow_latency(target, runner, sizes, batches, table_rows=20000):
    """Copy-on-write upserts of `sizes` rows each, one batch per commit, on a table of
    `table_rows` rows; commit latency from floe's stats."""
    table = "cow_latency"
    runner.run("cow-load", pipeline(target, table, generate(table_rows, [
        'root.id = count("load")', 'root.v = 0'], batch_size=5000),
        KEYED + ["merge_strategy: copy-on-write", "batching:", "  count: 5000"]))
    results = []
    rng = random.Random(7)
    for size in sizes:
        start = rng.randrange(1, table_rows - size)
        stats = runner.run(f"cow-{size}", pipeline(target, table, generate(size * batches, [
            f'root.id = {start} + (count("up") % {size})', f'root.v = {size}'],
            batch_size=size), KEYED + ["merge_strategy: copy-on-write", "row_operation: upsert",
                                        "max_in_flight: 1", "batching:", f"  count: {size}"]))
        results.append({"batch": size, "commits": int(stats.get("snapshots", 0)),
                        "commit_p50_ms": stats.get("commit_p50_ms"),
                        "commit_p95_ms": stats.get("commit_p95_ms"),
                        "commit_max_ms": stats.get("commit_max_ms")})
    count = target.query(table, "SELECT count(*) FROM {t}")[0][0]
    return {"table_rows": count, "expected_rows": table_rows, "sizes": results}


def identifier_refusal(target, runner):
    """The catalog refuses identifier-field ids at creation; floe creates without them."""
    base, headers = target.catalog_base()
    prefix = catalog_prefix(base, headers, getattr(target, "catalog", None))
    name = "ids_probe_" + uuid.uuid4().hex[:6]
    create = {"name": name, "schema": {"type": "struct", "schema-id": 0, "identifier-field-ids": [1],
                                       "fields": [{"id": 1, "name": "id", "required": True, "type": "long"}]}}
    url = f"{base}/v1/{prefix}namespaces/{urllib.parse.quote(target.namespace)}/tables"
    try:
        http_json("POST", url, create, headers)
        refused = None
    except urllib.error.HTTPError as e:
        refused = e.code
    # The round trip's table was created by floe with identifier_fields configured.
    ids = target.identifier_field_ids("round_trip")
    return {"direct_create_status": refused, "floe_table_identifier_ids": ids,
            "ok": refused == 400 and ids == []}


# ----------------------------------------------------------------------------- report

def svg_plot(points, path):
    """Rows/s against records per commit (log x), as a dependency-free SVG."""
    import math
    w, h, m = 640, 360, 60
    xs = [math.log10(max(p["rows_per_commit"], 1)) for p in points]
    ys = [p["rows_per_s"] for p in points]
    x0, x1 = min(xs) - 0.2, max(xs) + 0.2
    y1 = max(ys) * 1.15 or 1

    def pos(x, y):
        return m + (x - x0) / (x1 - x0) * (w - 2 * m), h - m - y / y1 * (h - 2 * m)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
             f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 15}" text-anchor="middle">records per commit (log scale)</text>',
             f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">rows/s</text>']
    coords = [pos(x, y) for x, y in zip(xs, ys)]
    parts.append('<polyline fill="none" stroke="steelblue" stroke-width="2" points="'
                 + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>')
    for (x, y), p in zip(coords, points):
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="steelblue"/>')
        parts.append(f'<text x="{x:.1f}" y="{y - 10:.1f}" text-anchor="middle">'
                     f'{p["rows_per_s"]:,.0f}/s @ {p["rows_per_commit"]:,.0f}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))


def report(results, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    svg_plot(results["throughput"], os.path.join(out, "throughput.svg"))
    rt, ids, cow = results["round_trip"], results["identifier_refusal"], results["cow_latency"]
    lines = [f"# Databricks harness: {results['target']} ({results['window_s']} s windows)", "",
             f"- Copy-on-write round trip: {rt['rows']} rows (expected {rt['expected_rows']}), "
             f"{'correct' if rt['ok'] else 'WRONG ids ' + str(rt['wrong_ids'])}.",
             f"- Identifier fields: the catalog answered {ids['direct_create_status']} to a table "
             f"with identifier-field ids; floe's table has ids {ids['floe_table_identifier_ids']}.",
             "", "| batch | rows/s | rows per commit | snapshots | commit p50 ms | commit p95 ms |",
             "|---:|---:|---:|---:|---:|---:|"]
    for p in results["throughput"]:
        lines.append(f"| {p['batch']:,} | {p['rows_per_s']:,.0f} | {p['rows_per_commit']:,.0f} | "
                     f"{p['snapshots']} | {p['commit_p50_ms']:.0f} | {p['commit_p95_ms']:.0f} |")
    lines += ["", f"Copy-on-write upserts on a {cow['table_rows']:,}-row table, one batch per commit:", "",
              "| batch | commits | p50 ms | p95 ms | max ms |", "|---:|---:|---:|---:|---:|"]
    for c in cow["sizes"]:
        lines.append(f"| {c['batch']:,} | {c['commits']} | {c['commit_p50_ms']:.0f} | "
                     f"{c['commit_p95_ms']:.0f} | {c['commit_max_ms']:.0f} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    return text


def run_all(target, args, workdir):
    runner = Runner(workdir)
    results = {"target": target.name, "window_s": args.window}
    results["round_trip"] = round_trip(target, runner)
    results["identifier_refusal"] = identifier_refusal(target, runner)
    results["throughput"] = throughput(target, runner, args.commit_sizes, args.window)
    results["cow_latency"] = cow_latency(target, runner, args.cow_sizes, args.cow_batches)
    results["floe_logged_unity"] = any("Unity Catalog" in log for log in runner.logs)
    return results


def sizes(text):
    return [int(x) for x in text.split(",") if x]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--local", action="store_true", help="run against the local stand-in")
    p.add_argument("--window", type=float, default=180.0, help="seconds per throughput window")
    p.add_argument("--commit-sizes", type=sizes, default=[1000, 10000, 50000])
    p.add_argument("--cow-sizes", type=sizes, default=[100, 1000, 5000])
    p.add_argument("--cow-batches", type=int, default=5)
    p.add_argument("--out", default=None, help="results folder (default: a new temp folder)")
    args = p.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="databricks-harness-")
    os.makedirs(out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="runs-", dir=out) if args.out else out
    if args.local:
        from services import Services
        from unity_front import UnityFront
        token = "dapi-local-" + uuid.uuid4().hex
        with Services() as services, UnityFront(services.info["rest_url"], token) as front:
            results = run_all(LocalTarget(services.info, front, token), args, workdir)
            results["front_refused"] = dict(front.refused)
    else:
        missing = [v for v in LIVE_ENV if not os.environ.get(v)]
        if not os.environ.get("DATABRICKS_TOKEN") and not (
                os.environ.get("DATABRICKS_CLIENT_ID") and os.environ.get("DATABRICKS_CLIENT_SECRET")):
            missing.append("DATABRICKS_TOKEN (or DATABRICKS_CLIENT_ID and DATABRICKS_CLIENT_SECRET)")
        if missing:
            print(f"databricks harness: skipped, not set: {', '.join(missing)} (--local runs it on local services)")
            return 0
        results = run_all(LiveTarget(os.environ), args, workdir)
    print(report(results, out))
    print(f"results in {out}")
    return 0 if results["round_trip"]["ok"] and results["identifier_refusal"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
