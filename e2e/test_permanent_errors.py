"""Permanent errors (ones a retry of the same batch cannot cure) stop or say so, per class:
a warehouse folder that cannot be made, a missing table without schema evolution, a
catalog that refuses the credentials (401) or the request (403), a bucket that does not
exist (S3's NoSuchBucket, told in one readable line). Under `permanent_errors: retry` (the
default) the host keeps retrying, and a host stopped then says how many messages it left
unwritten and exits non-zero; under `fail` the batch fails with the error, so a fallback
output receives every message; under `stop` the host exits 1 at once, acknowledging
nothing."""
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
COUNT = 30


class RefusingCatalog(http.server.BaseHTTPRequestHandler):
    """A REST catalog that answers every request 401, as one does for a wrong token, or 403
    under the prefix /403, as one does for a principal without the grant."""

    def do_GET(self):
        self._refuse()

    def do_POST(self):
        self._refuse()

    def _refuse(self):
        code = 403 if self.path.startswith("/403/") else 401
        error = ({"message": "Not authorized: bad token", "type": "NotAuthorizedException", "code": 401}
                 if code == 401 else
                 {"message": "Principal is not allowed to create tables", "type": "ForbiddenException", "code": 403})
        body = json.dumps({"error": error}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class BucketlessS3(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint without the bucket: every request is answered 404 NoSuchBucket, as
    AWS and MinIO answer for a bucket nobody created."""

    def _no_bucket(self):
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchBucket</Code>'
                b"<Message>The specified bucket does not exist</Message><BucketName>no-such-bucket</BucketName>"
                b"<RequestId>1</RequestId></Error>")
        self.send_response(404)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _no_bucket

    def log_message(self, *args):
        pass


def serve(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module")
def refusing_catalog():
    """The two fakes' addresses: the refusing catalog's and the bucketless S3's."""
    catalog, catalog_url = serve(RefusingCatalog)
    s3, s3_url = serve(BucketlessS3)
    yield {"catalog": catalog_url, "s3": s3_url}
    catalog.shutdown()
    s3.shutdown()


def output_for(case, tmp_path, fakes):
    """The iceberg output block (indented for a fallback's first entry) of each class."""
    if case == "warehouse":
        (tmp_path / "a-file").write_text("")
        return "catalog: { warehouse: ./a-file/warehouse }\nnamespace: p\ntable: t\nschema_evolution: { enabled: true }\n"
    if case == "missing-table":
        return "namespace: p\ntable: missing\n"
    if case == "bucket-missing":
        return ("catalog: { url: 'sqlite:./catalog.db', warehouse: 's3://no-such-bucket/wh' }\nnamespace: p\n"
                "table: t\nschema_evolution: { enabled: true }\nstorage:\n  aws_s3:\n"
                f"    endpoint: {fakes['s3']}\n    region: us-east-1\n    force_path_style_urls: true\n"
                "    credentials: { id: test-key, secret: test-secret-Qx77 }\n")
    url = fakes["catalog"] + ("/403" if case == "catalog-403" else "")
    return (f"catalog:\n  url: {url}\n  auth: {{ bearer: wrong-token-Zq81 }}\nnamespace: p\ntable: t\n"
            "schema_evolution: { enabled: true }\n")


# What each class's log line must name.
CAUSE = {"warehouse": "cannot create the embedded catalog's folder", "missing-table": "does not exist",
         "catalog-401": "401", "catalog-403": "403",
         "bucket-missing": "failed (status: 404): NoSuchBucket: The specified bucket does not exist"}


def pipeline(tmp_path, case, fakes, mode, fallback, count=COUNT):
    out = output_for(case, tmp_path, fakes)
    if mode:
        out += f"permanent_errors: {mode}\n"
    iceberg = "iceberg:\n" + "".join("  " + line + "\n" for line in out.splitlines())
    if fallback:
        first = "".join(("    - " if n == 0 else "      ") + line + "\n" for n, line in enumerate(iceberg.splitlines()))
        output = "  fallback:\n" + first + f"    - file: {{ path: {tmp_path}/dead-letters.ndjson, codec: lines }}\n"
    else:
        output = "".join("  " + line + "\n" for line in iceberg.splitlines())
    return (f"input:\n  generate:\n    count: {count}\n    interval: \"\"\n    batch_size: 10\n"
            f"    mapping: 'root.id = count(\"{case}\")'\noutput:\n{output}")


def start(tmp_path, text):
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(text)
    log = open(tmp_path / "floe.log", "wb")
    return subprocess.Popen([FLOE, "run", str(cfg)], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def finish(proc, timeout):
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return None


CASES = ["warehouse", "missing-table", "catalog-401", "catalog-403", "bucket-missing"]


def one_readable_line(line):
    """A storage failure in floe's words, not the storage client's nested chain."""
    return all(noise not in line for noise in ("(persistent)", "Parts {", "context: {", "Failure in doing io"))


@pytest.mark.parametrize("case", CASES)
def test_under_fail_a_permanent_error_fails_the_batch_to_the_fallback_output(tmp_path, case, refusing_catalog):
    proc = start(tmp_path, pipeline(tmp_path, case, refusing_catalog, "fail", fallback=True))
    rc = finish(proc, 120)
    log = (tmp_path / "floe.log").read_text()
    assert rc == 0, log[-3000:]
    dead = [json.loads(line)["id"] for line in (tmp_path / "dead-letters.ndjson").read_text().splitlines()]
    assert sorted(dead) == list(range(1, COUNT + 1)), log[-3000:]
    lines = [line for line in log.splitlines() if "permanent_errors: fail" in line]
    assert lines and CAUSE[case] in lines[0], log[-3000:]
    assert one_readable_line(lines[0]), lines[0]
    # One line per cause, not one per batch (the host's own lines aside).
    assert len(lines) == 1, lines
    assert "wrong-token-Zq81" not in log and "test-secret-Qx77" not in log


@pytest.mark.parametrize("case", CASES)
def test_under_stop_a_permanent_error_stops_the_host_with_exit_code_1(tmp_path, case, refusing_catalog):
    started = time.time()
    proc = start(tmp_path, pipeline(tmp_path, case, refusing_catalog, "stop", fallback=True, count=0))
    rc = finish(proc, 60)
    log = (tmp_path / "floe.log").read_text()
    assert rc == 1, log[-3000:]
    assert time.time() - started < 40
    stop_lines = [line for line in log.splitlines() if "stopping the host (permanent_errors: stop)" in line]
    assert stop_lines and CAUSE[case] in stop_lines[0], log[-3000:]
    # Nothing unwritten is acknowledged, not even to the fallback output.
    dead = tmp_path / "dead-letters.ndjson"
    assert not dead.exists() or dead.read_text() == "", dead.read_text()[:500]


@pytest.mark.parametrize("case", ["missing-table", "catalog-401", "bucket-missing"])
def test_by_default_the_host_keeps_retrying_and_routes_nothing_to_the_fallback(
        tmp_path, case, refusing_catalog):
    proc = start(tmp_path, pipeline(tmp_path, case, refusing_catalog, None, fallback=True))
    assert finish(proc, 6) is None, "the host exited while retrying"
    log = (tmp_path / "floe.log").read_text()
    # A write retried, or (when the catalog refuses the first request) the host's own
    # connection retries.
    retrying = [line for line in log.splitlines() if "retrying it" in line or "Failed to connect" in line]
    assert retrying and CAUSE[case] in retrying[0], log[-3000:]
    assert not (tmp_path / "dead-letters.ndjson").exists() or \
        (tmp_path / "dead-letters.ndjson").read_text() == ""


def test_a_host_stopped_with_messages_unwritten_says_how_many_and_exits_non_zero(tmp_path, refusing_catalog):
    proc = start(tmp_path, pipeline(tmp_path, "missing-table", refusing_catalog, "retry", fallback=False))
    time.sleep(4)
    assert proc.poll() is None, (tmp_path / "floe.log").read_text()[-3000:]
    os.killpg(proc.pid, signal.SIGTERM)
    rc = finish(proc, 60)
    log = (tmp_path / "floe.log").read_text()
    assert rc not in (0, None), log[-3000:]
    unwritten = [line for line in log.splitlines() if "messages were not written when the output closed" in line]
    assert unwritten, log[-3000:]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_host_whose_catalog_is_unreachable_counts_what_it_never_wrote_and_exits_non_zero(tmp_path, sig):
    """The catalog is never reached (nothing listens on its port): the batches are handed
    to the output all the same and retried, the refusal is logged once per cause rather
    than once a second, and a host stopped by a signal says how many messages it left
    unwritten and exits non-zero."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # released: nothing listens there
    text = (f"input:\n  generate:\n    count: {COUNT}\n    interval: \"\"\n    batch_size: 10\n"
            f"    mapping: 'root.id = count(\"unreachable\")'\noutput:\n  iceberg:\n"
            f"    catalog: {{ url: http://127.0.0.1:{port} }}\n    namespace: p\n    table: t\n"
            "    schema_evolution: { enabled: true }\n")
    proc = start(tmp_path, text)
    time.sleep(6)
    assert proc.poll() is None, (tmp_path / "floe.log").read_text()[-3000:]
    os.killpg(proc.pid, sig)
    rc = finish(proc, 60)
    log = (tmp_path / "floe.log").read_text()
    assert rc not in (0, None), log[-3000:]
    unwritten = [line for line in log.splitlines() if "messages were not written when the output closed" in line]
    assert unwritten and f"{COUNT} messages" in unwritten[0], log[-3000:]
    refused = [line for line in log.splitlines() if f"127.0.0.1:{port}" in line and "refused" in line.lower()]
    assert 1 <= len(refused) <= 2, "\n".join(refused)


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB file system (tmpfs), for a warehouse that fills up; skipped where this
    process may not mount one."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small file system here (needs root and CAP_SYS_ADMIN)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_is_one_readable_line_naming_the_file_and_the_cause(tmp_path, full_disk):
    text = (f"input:\n  generate:\n    count: 4000\n    interval: \"\"\n    batch_size: 2000\n    mapping: |\n"
            "      root.id = count(\"full\")\n      root.s = uuid_v4() + uuid_v4() + uuid_v4() + uuid_v4()\n"
            f"output:\n  iceberg:\n    catalog: {{ warehouse: {full_disk}/wh }}\n    namespace: p\n    table: t\n"
            "    schema_evolution: { enabled: true }\n")
    proc = start(tmp_path, text)
    time.sleep(5)
    os.killpg(proc.pid, signal.SIGTERM)
    rc = finish(proc, 60)
    log = (tmp_path / "floe.log").read_text()
    assert rc not in (0, None), log[-3000:]
    lines = [line for line in log.splitlines() if "No space left on device" in line]
    assert lines, log[-3000:]
    assert f"storage write of {full_disk}/wh/p/t/" in lines[0], lines[0]
    assert one_readable_line(lines[0]), lines[0]


def test_a_clean_run_exits_0_without_an_unwritten_line(tmp_path):
    text = (f"input:\n  generate:\n    count: {COUNT}\n    interval: \"\"\n    mapping: 'root.id = count(\"clean\")'\n"
            "output:\n  iceberg:\n    namespace: p\n    table: clean\n    schema_evolution: { enabled: true }\n")
    rc = finish(start(tmp_path, text), 60)
    log = (tmp_path / "floe.log").read_text()
    assert rc == 0 and "not written" not in log, log[-3000:]
