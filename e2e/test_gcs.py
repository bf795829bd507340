"""Google Cloud Storage through the real binary: floe's embedded catalog with its
warehouse in a `gs://` bucket served by fake-gcs-server (built from the Go module proxy
by e2e/services.py), read back by pyiceberg over pyarrow's own GCS client."""
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from conftest import keep_output  # noqa: E402
from services import FakeGcs  # noqa: E402
from test_floe_run import FLOE, pipeline  # noqa: E402

BUCKET = "floe-gcs"


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs(BUCKET) as g:
        yield g


def output(gcs, tmp_path, table, extra=(), storage=None):
    storage = storage or ["gcp_cloud_storage:", f"  bucket: {BUCKET}",
                          f"  endpoint: {gcs.endpoint}", "  credentials_type: none"]
    return "\n".join([
        "iceberg:", "  catalog:", f"    url: sqlite:{tmp_path / 'catalog.db'}",
        f"    warehouse: gs://{BUCKET}/{tmp_path.name}",
        "  namespace: e2e_gcs", f"  table: {table}",
        "  storage:", *("    " + s for s in storage),
        "  schema_evolution:", "    enabled: true", *("  " + e for e in extra), ""])


def run(tmp_path, name, text):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(text)
    res = subprocess.run([FLOE, "run", str(cfg)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    keep_output(tmp_path, name, res.stdout, res.stderr)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res


def read_back(gcs, tmp_path, table):
    from pyiceberg.catalog import load_catalog
    far = str(int((time.time() + 3600) * 1000))
    cat = load_catalog("floe", type="sql", uri=f"sqlite:///{tmp_path / 'catalog.db'}",
                       warehouse=f"gs://{BUCKET}/{tmp_path.name}", **{
                           "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
                           "gcs.service.host": gcs.endpoint, "gcs.oauth2.token": "emulator",
                           "gcs.oauth2.token-expires-at": far})
    t = cat.load_table(f"e2e_gcs.{table}")
    assert t.metadata_location.startswith(f"gs://{BUCKET}/"), t.metadata_location
    return t.scan().to_arrow().sort_by("id").to_pylist()


def test_rows_land_in_gcs_and_upserts_rewrite_them(tmp_path, gcs):
    run(tmp_path, "insert", pipeline(output(gcs, tmp_path, "events", ["identifier_fields: [id]"]),
                                     1000, mapping='root.id = count("i")\nroot.v = "a"\n',
                                     batch_size=250))
    # Copy-on-write reads the files back from GCS to rewrite them.
    run(tmp_path, "upsert", pipeline(output(gcs, tmp_path, "events", [
        "identifier_fields: [id]", "row_operation: upsert", "merge_strategy: copy-on-write"]),
        100, mapping='root.id = count("u") * 10\nroot.v = "b"\n', batch_size=100))
    rows = read_back(gcs, tmp_path, "events")
    assert [r["id"] for r in rows] == list(range(1, 1001))
    changed = {r["id"] for r in rows if r["v"] == "b"}
    assert changed == set(range(10, 1001, 10))


def test_service_account_keys_are_checked_by_lint_without_being_quoted(tmp_path, gcs):
    secret = "not-a-key-SECRET-7781"
    bad = output(gcs, tmp_path, "lint", storage=[
        "gcp_cloud_storage:", f"  bucket: {BUCKET}", "  credentials_type: service_account",
        f"  credentials_json: {secret}"])
    missing = output(gcs, tmp_path, "lint", storage=[
        "gcp_cloud_storage:", f"  bucket: {BUCKET}",
        f"  credentials_file: {tmp_path / 'missing.json'}"])
    elsewhere = output(gcs, tmp_path, "lint", storage=[
        "gcp_cloud_storage:", "  bucket: another-bucket", "  credentials_type: none"])
    for name, text, expected in (
            ("bad", bad, "storage.gcp_cloud_storage: the service account key is not a JSON key"),
            ("missing", missing, "storage.gcp_cloud_storage.credentials_file: cannot read"),
            ("elsewhere", elsewhere, 'storage.gcp_cloud_storage.bucket is "another-bucket"')):
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(pipeline(text, 1))
        res = subprocess.run([FLOE, "lint", str(cfg)], capture_output=True, text=True, timeout=60)
        out = res.stdout + res.stderr
        assert res.returncode != 0 and expected in out, out
        assert secret not in out
