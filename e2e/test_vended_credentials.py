"""Vended storage credentials through the real binary: a front for the REST fixture
(e2e/vending_front.py) hands out real, short-lived SeaweedFS keys with each table it
loads and deletes them when their life ends. floe has no storage keys of its own in
these runs, so every file it writes proves it used (and refreshed) the vended ones."""
import datetime
import os
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from conftest import keep_output  # noqa: E402
from test_floe_run import FLOE  # noqa: E402
from vending_front import VendingFront  # noqa: E402

NAMESPACE = "e2e_vended"


def pipeline(services, front, table, count, interval="20ms", static_keys=None,
             headers=None):
    """`count` rows in batches of 10 every `interval`, into `table` through the front.
    Storage has an endpoint and a region but no keys, unless `static_keys` (id, secret)."""
    lines = [
        "http:", "  enabled: false",
        "input:", "  generate:", f"    count: {count}", f'    interval: "{interval}"',
        "    batch_size: 10", "    mapping: |", f'      root.id = count("{table}")',
        '      root.body = "row-" + root.id.string()',
        "output:", "  iceberg:", "    catalog:", f"      url: {front.endpoint}",
    ]
    if headers:
        lines += ["      headers:"] + [f"        {k}: {v!r}" for k, v in headers.items()]
    lines += [
        f"    namespace: {NAMESPACE}", f"    table: {table}",
        "    storage:", "      aws_s3:", f"        bucket: {services['bucket']}",
        f"        region: {services['region']}", f"        endpoint: {services['s3_endpoint']}",
        "        force_path_style_urls: true",
    ]
    if static_keys:
        lines += ["        credentials:", f"          id: {static_keys[0]}",
                  f"          secret: {static_keys[1]}"]
    lines += ["    schema_evolution:", "      enabled: true",
              "    batching:", "      count: 100", "      period: 200ms"]
    return "\n".join(lines) + "\n"


def no_aws_env():
    """The environment without AWS keys, so storage can only use what the catalog vends."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def table_ids(services, table):
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=services["rest_url"], **{
        "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
        "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
        "s3.path-style-access": "true"})
    return cat.load_table(f"{NAMESPACE}.{table}").scan().to_arrow().column("id").to_pylist()


def run(tmp_path, name, yaml_text, timeout=120, during=None):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml_text)
    proc = subprocess.Popen([FLOE, "run", str(cfg)], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=no_aws_env())
    if during:
        threading.Thread(target=during, daemon=True).start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # e.g. storage refusing keys for ever: the host retries without end
        out, err = proc.communicate()
        out += f"\n(killed after {timeout} s)"
    keep_output(tmp_path, name, out, err)
    return proc.returncode, out + err


def test_a_run_longer_than_the_credentials_life_commits_every_row(tmp_path, services):
    # 3,000 rows in 300 batches, one every 70 ms: about 21 s against keys that live 6 s.
    with VendingFront(services, ttl=6.0) as front:
        started = time.time()
        code, log = run(tmp_path, "long", pipeline(services, front, "long", 3000, interval="70ms"))
        took = time.time() - started
        assert code == 0, log[-3000:]
        deleted_during_run = list(front.deleted)
        minted = list(front.minted)
    ids = table_ids(services, "long")
    assert sorted(ids) == list(range(1, 3001))
    assert took > 12, f"the run took {took:.1f} s: not longer than two key lives"
    # Keys were replaced and the old ones really deleted while floe ran.
    assert len(minted) >= 3 and len(deleted_during_run) >= 2, (minted, deleted_during_run)
    assert front.asked >= 2 and front.vended >= 3, (front.asked, front.vended)
    # Refreshed ahead of expiry: storage never refused floe's keys.
    assert "refused" not in log, log[-3000:]


def test_revoked_credentials_are_replaced_and_no_row_is_lost(tmp_path, services):
    with VendingFront(services, ttl=600.0) as front:
        def revoke_once_writing():
            deadline = time.time() + 60
            while time.time() < deadline and front.vended < 1:
                time.sleep(0.1)
            time.sleep(3)
            front.revoke_now()

        code, log = run(tmp_path, "revoked", pipeline(services, front, "revoked", 2000, interval="40ms"),
                        during=revoke_once_writing)
        assert code == 0, log[-3000:]
        minted, deleted = list(front.minted), list(front.deleted)
    ids = table_ids(services, "revoked")
    # Every row once: the calls storage refused were retried with the new key.
    assert sorted(ids) == list(range(1, 2001))
    # The revoked key was replaced by one minted after the revocation.
    assert len(minted) >= 2 and len(deleted) >= 1, (minted, deleted)
    assert "refused the table's vended credentials" in log, log[-3000:]


def test_without_vended_credentials_the_static_keys_serve(tmp_path, services):
    # An empty X-Iceberg-Access-Delegation header: floe asks for nothing, the front vends
    # nothing, and the configured keys write the files.
    with VendingFront(services, ttl=600.0) as front:
        code, log = run(tmp_path, "static", pipeline(
            services, front, "static", 200, interval="",
            static_keys=(services["access_key"], services["secret_key"]),
            headers={"X-Iceberg-Access-Delegation": ""}))
        assert code == 0, log[-3000:]
        assert front.asked == 0 and front.vended == 0
    assert sorted(table_ids(services, "static")) == list(range(1, 201))


def test_the_header_is_sent_by_default_and_vended_keys_win_over_static_ones(tmp_path, services):
    # Static keys of an identity SeaweedFS does not know: only the vended ones can work.
    unknown = ("not-a-key-" + uuid.uuid4().hex[:6], "not-a-secret-" + uuid.uuid4().hex[:6])
    with VendingFront(services, ttl=600.0) as front:
        code, log = run(tmp_path, "precedence", pipeline(
            services, front, "precedence", 200, interval="", static_keys=unknown))
        assert code == 0, log[-3000:]
        assert front.asked >= 1 and front.vended >= 1
    assert sorted(table_ids(services, "precedence")) == list(range(1, 201))


FOREIGN_ID = 1_000_000


def test_a_lost_commit_answer_is_settled_with_renewed_credentials(tmp_path, services):
    """Regression (5e4e407): a commit lands and its answer is lost. Before floe can look
    for it, another tool appends a row and expires every other snapshot, so floe's own
    snapshot is gone from the history and the look must read the table's manifests for
    floe's files; and the vended key is revoked, so that read is refused. floe renews
    the key between looks and finds its commit. Before, every look reused the refused
    key, the call failed with its outcome unknown, and the host wrote the rows again."""
    from pyiceberg.catalog import load_catalog
    import pyarrow as pa
    from faultproxy import FaultProxy

    table = "lost_answer"

    def meanwhile():
        cat = load_catalog("rest", type="rest", uri=services["rest_url"], **{
            "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
            "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
            "s3.path-style-access": "true"})
        t = cat.load_table(f"{NAMESPACE}.{table}")
        t.append(pa.Table.from_pylist([{"id": FOREIGN_ID, "body": "foreign"}],
                                      schema=t.schema().as_arrow()))
        t = cat.load_table(f"{NAMESPACE}.{table}")
        # Every snapshot but the head (pyiceberg's append): floe's is gone.
        now = datetime.datetime.now(datetime.timezone.utc)
        t.maintenance.expire_snapshots().older_than(now).commit()
        front.revoke_now()

    with VendingFront(services, ttl=600.0) as front:
        port = int(front.endpoint.rsplit(":", 1)[1])
        with FaultProxy("127.0.0.1", port) as proxy:
            lost = proxy.add_fault("lose_answer", count=1, method="POST",
                                   path=rf"/tables/{table}$", before=meanwhile)

            class Through:  # the pipeline's catalog is the proxy in front of the front
                endpoint = proxy.endpoint
            code, log = run(tmp_path, "lost", pipeline(services, Through, table, 100,
                                                         interval=""))
            assert code == 0, log[-3000:]
            assert lost.fired == 1
            assert not proxy.errors, proxy.errors
            minted, deleted = list(front.minted), list(front.deleted)
    ids = table_ids(services, table)
    # Every row once, and the other tool's: nothing written twice.
    assert sorted(ids) == list(range(1, 101)) + [FOREIGN_ID], sorted(ids)[:20]
    # The look read the manifests (the history was gone) with a key minted after the
    # revocation.
    found = log.find("since expired by another writer")
    refused = log.find("refused the table's vended credentials")
    assert found >= 0, log[-3000:]
    # Refused during the look, before it found the commit (not after a failed call).
    assert 0 <= refused < found, log[-3000:]
    assert len(minted) >= 2 and len(deleted) >= 1, (minted, deleted)
