"""Permanent errors (ones a retry of the same batch cannot cure) stop or say so, per class:
a warehouse folder that cannot be made, a missing table without schema evolution, a
catalog that refuses the credentials (401). Under `permanent_errors: retry` (the
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
    """A REST catalog that answers every request 401, as one does for a wrong token."""

    def do_GET(self):
        self._refuse()

    def do_POST(self):
        self._refuse()

    def _refuse(self):
        body = json.dumps({"error": {"message": "Not authorized: bad token", "type": "NotAuthorizedException",
                                     "code": 401}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def refusing_catalog():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RefusingCatalog)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def output_for(case, tmp_path, catalog_url):
    """The iceberg output block (indented for a fallback's first entry) of each class."""
    if case == "warehouse":
        (tmp_path / "a-file").write_text("")
        return "catalog: { warehouse: ./a-file/warehouse }\nnamespace: p\ntable: t\nschema_evolution: { enabled: true }\n"
    if case == "missing-table":
        return "namespace: p\ntable: missing\n"
    return (f"catalog:\n  url: {catalog_url}\n  auth: {{ bearer: wrong-token-Zq81 }}\nnamespace: p\ntable: t\n"
            "schema_evolution: { enabled: true }\n")


# What each class's log line must name.
CAUSE = {"warehouse": "cannot create catalog folder", "missing-table": "does not exist",
         "catalog-401": "401"}


def pipeline(tmp_path, case, catalog_url, mode, fallback, count=COUNT):
    out = output_for(case, tmp_path, catalog_url)
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


CASES = ["warehouse", "missing-table", "catalog-401"]


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
    # One line per cause, not one per batch (the host's own lines aside).
    assert len(lines) == 1, lines
    assert "wrong-token-Zq81" not in log


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


@pytest.mark.parametrize("case", ["missing-table", "catalog-401"])
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


def test_a_clean_run_exits_0_without_an_unwritten_line(tmp_path):
    text = (f"input:\n  generate:\n    count: {COUNT}\n    interval: \"\"\n    mapping: 'root.id = count(\"clean\")'\n"
            "output:\n  iceberg:\n    namespace: p\n    table: clean\n    schema_evolution: { enabled: true }\n")
    rc = finish(start(tmp_path, text), 60)
    log = (tmp_path / "floe.log").read_text()
    assert rc == 0 and "not written" not in log, log[-3000:]
