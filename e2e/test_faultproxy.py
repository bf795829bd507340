"""The fault proxy itself (e2e/faultproxy.py), against a tiny in-process upstream: no
external services. Each test shows that its fault really happens, and only as often
and where it is configured to."""
import http.client
import http.server
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faultproxy import FaultProxy  # noqa: E402


class Upstream:
    """HTTP/1.1 server on 127.0.0.1 that records each request: method, path, declared
    body length, body bytes it actually got, whether it answered. It answers 200 with
    `reply=N` bytes (query parameter) or a short text naming itself."""

    def __init__(self, name="upstream"):
        self.name = name
        self.received = []
        self._cond = threading.Condition()
        up = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_expect_100(self):
                return True  # just read the body: a 100 written into a reset would hide the request

            def _handle(self):
                length = int(self.headers.get("Content-Length", 0))
                rec = {"method": self.command, "path": self.path, "length": length,
                       "got": 0, "answered": False, "headers": dict(self.headers)}
                try:
                    while rec["got"] < length:
                        chunk = self.rfile.read1(min(65536, length - rec["got"]))
                        if not chunk:
                            break
                        rec["got"] += len(chunk)
                except OSError as e:
                    rec["error"] = repr(e)
                if rec["got"] < length:  # cut off: no answer
                    self.close_connection = True
                    up._record(rec)
                    return
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                if "reply" in query:
                    body = b"x" * int(query["reply"][0])
                else:
                    body = f"{up.name} got {self.command} {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                rec["answered"] = True
                up._record(rec)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # resets are the point of several tests

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def _record(self, rec):
        with self._cond:
            self.received.append(rec)
            self._cond.notify_all()

    def wait_for(self, n, timeout=5.0):
        """The records once there are at least n (fails after `timeout`)."""
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.received) >= n, timeout), (
                f"upstream saw {len(self.received)} requests, expected {n}")
            return list(self.received)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream():
    u = Upstream()
    yield u
    u.close()


@pytest.fixture
def proxy(upstream):
    with FaultProxy("127.0.0.1", upstream.port, name="test") as p:
        yield p


def call(proxy, method, path, body=None, headers=None, timeout=10, conn=None):
    """One request through the proxy: (status, headers, body). Reuses `conn` if given."""
    c = conn or http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        if conn is None:
            c.close()


def call_error(proxy, method, path, body=None, timeout=10):
    """The exception a request through the proxy ends in (fails if it got an answer)."""
    try:
        status, _, _ = call(proxy, method, path, body=body, timeout=timeout)
    except Exception as e:  # noqa: BLE001
        return e
    pytest.fail(f"{method} {path} got an answer ({status}); expected a connection failure")


def assert_reset(e):
    """A TCP RST (ECONNRESET / EPIPE), not a clean close and not a timeout."""
    assert isinstance(e, (ConnectionResetError, BrokenPipeError)), repr(e)
    assert not isinstance(e, http.client.RemoteDisconnected), (
        f"the connection was closed cleanly (FIN), not reset: {e!r}")


def raw_request(proxy, head: bytes, timeout=5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)
    s.sendall(head)
    return s


# -- unchanged behaviour ---------------------------------------------------------------

def test_forwards_byte_for_byte_without_rules(proxy, upstream):
    body = os.urandom(70_000)
    status, headers, reply = call(proxy, "PUT", "/bucket/key?x=1", body=body,
                                  headers={"X-Amz-Date": "20250101T000000Z"})
    assert status == 200 and reply == b"upstream got PUT /bucket/key?x=1"
    (rec,) = upstream.wait_for(1)
    assert (rec["method"], rec["path"], rec["got"]) == ("PUT", "/bucket/key?x=1", 70_000)
    assert rec["headers"]["Host"] == f"127.0.0.1:{proxy.port}"  # the Host the client signed
    assert rec["headers"]["X-Amz-Date"] == "20250101T000000Z"
    assert proxy.stats() == {"requests": 1, "forwarded": 1, "faults": 0, "errors": 0,
                             "fired": dict.fromkeys(proxy.stats()["fired"], 0)}


def test_outage_still_works(proxy, upstream):
    proxy.outage(5)
    assert proxy.in_outage
    status, headers, body = call(proxy, "PUT", "/b/k", body=b"a" * 1000)
    assert status == 503 and b"<Code>SlowDown</Code>" in body
    assert headers["x-amz-request-id"] == "FAULTPROXY"
    assert proxy.faults == 1 and upstream.received == []
    proxy.end_outage()
    assert not proxy.in_outage
    assert call(proxy, "GET", "/b/k")[0] == 200
    assert proxy.stats()["forwarded"] == 1 and proxy.requests == 2


def test_set_upstream(proxy, upstream):
    other = Upstream("other")
    try:
        assert call(proxy, "GET", "/a")[2] == b"upstream got GET /a"
        proxy.set_upstream("127.0.0.1", other.port)
        assert call(proxy, "GET", "/b")[2] == b"other got GET /b"
        assert [r["path"] for r in upstream.received] == ["/a"]
        assert [r["path"] for r in other.wait_for(1)] == ["/b"]
    finally:
        other.close()


# -- rule mechanics --------------------------------------------------------------------

def test_add_fault_validates():
    with FaultProxy("127.0.0.1", 9, name="v") as p:
        with pytest.raises(ValueError):
            p.add_fault("explode")
        with pytest.raises(TypeError):
            p.add_fault("latency")  # delay missing
        with pytest.raises(TypeError):
            p.add_fault("reset", after=3)  # no such parameter
        assert p.rules == []


def test_status_fires_count_times_on_a_kept_alive_connection(proxy, upstream):
    rule = proxy.add_fault("status", count=2, status=503)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        answers = [call(proxy, "PUT", f"/b/k{i}", body=b"z" * 5000, conn=conn) for i in range(3)]
    finally:
        conn.close()
    assert [a[0] for a in answers] == [503, 503, 200]
    assert all(b"<Code>SlowDown</Code>" in a[2] for a in answers[:2])
    assert answers[2][2] == b"upstream got PUT /b/k2"
    (rec,) = upstream.wait_for(1)
    assert rec["path"] == "/b/k2" and rec["got"] == 5000
    assert rule.fired == 2 and not rule.active
    assert proxy.stats()["fired"]["status"] == 2 and proxy.stats()["forwarded"] == 1


def test_status_iceberg_errors_and_rule_order(proxy, upstream):
    proxy.add_fault("status", count=1, status=409)
    proxy.add_fault("status", count=1, status=500)
    proxy.add_fault("status", count=1, status=503, body=b'{"custom": true}',
                    headers={"Retry-After": "1"})
    proxy.add_fault("status", count=1, status=503, body="plain", content_type="text/plain")
    got = [call(proxy, "POST", "/v1/namespaces/ns/tables/t", body=b"{}") for _ in range(5)]
    assert [g[0] for g in got] == [409, 500, 503, 503, 200]
    for (status, headers, body), kind in zip(got[:2], ["CommitFailedException", "InternalServerError"]):
        assert headers["content-type"] == "application/json"
        err = json.loads(body)["error"]
        assert (err["type"], err["code"]) == (kind, status) and err["message"]
    assert got[2][2] == b'{"custom": true}' and got[2][1]["retry-after"] == "1"
    assert got[2][1]["content-type"] == "application/json"
    assert got[3][2] == b"plain" and got[3][1]["content-type"] == "text/plain"
    assert len(upstream.wait_for(1)) == 1


def test_method_and_path_filters(proxy, upstream):
    rule = proxy.add_fault("status", status=409, method="post", path=r"^/v1/namespaces/[^/]+/tables/")
    proxy.add_fault("status", status=500, path=r"uploadId=")  # searched in the query too
    assert call(proxy, "GET", "/v1/namespaces/ns/tables/t")[0] == 200     # other method
    assert call(proxy, "POST", "/v1/namespaces/ns/views/t")[0] == 200     # other path
    assert call(proxy, "POST", "/v1/namespaces/ns/tables/t")[0] == 409
    assert call(proxy, "POST", "/v1/namespaces/ns/tables/u")[0] == 409    # no count: stays
    assert call(proxy, "PUT", "/b/k?partNumber=1&uploadId=7")[0] == 500
    assert call(proxy, "PUT", "/b/k")[0] == 200
    assert rule.fired == 2
    assert [r["path"] for r in upstream.wait_for(3)] == [
        "/v1/namespaces/ns/tables/t", "/v1/namespaces/ns/views/t", "/b/k"]


def test_seconds_expiry(proxy, upstream):
    rule = proxy.add_fault("status", seconds=0.5, status=500)
    assert call(proxy, "GET", "/a")[0] == 500
    assert call(proxy, "GET", "/a")[0] == 500
    time.sleep(0.7)
    assert not rule.active
    assert call(proxy, "GET", "/a")[0] == 200
    assert rule.fired == 2 and len(upstream.wait_for(1)) == 1


def test_clear_faults(proxy, upstream):
    proxy.add_fault("status", status=500)
    assert call(proxy, "GET", "/a")[0] == 500
    proxy.clear_faults()
    assert proxy.rules == []
    assert call(proxy, "GET", "/a")[0] == 200


# -- kinds -----------------------------------------------------------------------------

def test_latency(proxy, upstream):
    rule = proxy.add_fault("latency", count=1, delay=0.8)
    t = time.monotonic()
    assert call(proxy, "PUT", "/a", body=b"q" * 100)[0] == 200
    slow = time.monotonic() - t
    t = time.monotonic()
    assert call(proxy, "PUT", "/a", body=b"q" * 100)[0] == 200
    fast = time.monotonic() - t
    assert slow >= 0.8 and fast < 0.5, (slow, fast)
    assert rule.fired == 1 and [r["got"] for r in upstream.wait_for(2)] == [100, 100]


def test_bandwidth_paces_upload_and_download(proxy, upstream):
    body = os.urandom(400_000)
    t = time.monotonic()
    assert call(proxy, "PUT", "/big", body=body)[0] == 200
    unpaced = time.monotonic() - t
    proxy.add_fault("bandwidth", bytes_per_sec=200_000)
    t = time.monotonic()
    assert call(proxy, "PUT", "/big", body=body)[0] == 200
    upload = time.monotonic() - t
    t = time.monotonic()
    status, _, reply = call(proxy, "GET", "/down?reply=200000")
    download = time.monotonic() - t
    print(f"unpaced {unpaced:.2f} s, 400 kB up {upload:.2f} s, 200 kB down {download:.2f} s")
    assert unpaced < 1.0
    assert upload >= 1.5, "400 kB at 200 kB/s should take about 2 s"
    assert status == 200 and len(reply) == 200_000 and download >= 0.8
    assert [r["got"] for r in upstream.wait_for(3)] == [400_000, 400_000, 0]


def test_bandwidth_is_shared_across_connections(proxy, upstream):
    proxy.add_fault("bandwidth", bytes_per_sec=200_000)
    took = []

    def put(i):
        t = time.monotonic()
        assert call(proxy, "PUT", f"/p{i}", body=b"s" * 200_000)[0] == 200
        took.append(time.monotonic() - t)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    print(f"two 200 kB uploads at once: {sorted(took)}")
    # One link at 200 kB/s carries 400 kB in ~2 s; a pace per connection would take ~1 s.
    assert len(took) == 2 and max(took) >= 1.6


def test_reset_mid_upload(proxy, upstream):
    rule = proxy.add_fault("reset", count=1, after_bytes=1000)
    assert_reset(call_error(proxy, "PUT", "/b/k", body=os.urandom(100_000)))
    (rec,) = upstream.wait_for(1)
    print(f"upstream got {rec['got']} of {rec['length']} bytes: {rec.get('error')}")
    assert rec["path"] == "/b/k" and rec["length"] == 100_000
    assert rec["got"] <= 1000 and not rec["answered"]
    assert "ConnectionResetError" in rec.get("error", ""), "upstream saw a clean close, not a RST"
    assert rule.fired == 1
    assert call(proxy, "PUT", "/b/k", body=b"1" * 10)[0] == 200  # count=1: done

    # Default: half the body; with Expect: 100-continue the proxy says go first.
    proxy.add_fault("reset", count=1)
    s = raw_request(proxy, b"PUT /b/e HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n"
                           b"Expect: 100-continue\r\n\r\n")
    try:
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(b"e" * 10_000)
        with pytest.raises(ConnectionResetError):
            s.recv(100)
    finally:
        s.close()
    rec = upstream.wait_for(3)[2]
    print(f"upstream got {rec['got']} of {rec['length']} bytes")
    assert rec["path"] == "/b/e" and rec["got"] <= 5000 and not rec["answered"]
    assert "ConnectionResetError" in rec.get("error", "")


def test_lose_answer(proxy, upstream):
    rule = proxy.add_fault("lose_answer", count=1, method="POST")
    assert_reset(call_error(proxy, "POST", "/v1/namespaces/ns/tables/t", body=b"c" * 50_000))
    (rec,) = upstream.wait_for(1)
    assert rec["got"] == 50_000 and rec["answered"], "upstream should have applied it"
    assert rule.fired == 1 and proxy.stats()["fired"]["lose_answer"] == 1
    assert call(proxy, "POST", "/v1/namespaces/ns/tables/t", body=b"{}")[0] == 200


def test_redirect(proxy, upstream):
    proxy.add_fault("redirect", count=1, location="http://127.0.0.1:9/")
    proxy.add_fault("redirect", count=1, status=308, location="http://other:8181/prefix")
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        s1, h1, _ = call(proxy, "PUT", "/b/k?partNumber=2&uploadId=u", body=b"r" * 3000, conn=conn)
        s2, h2, _ = call(proxy, "POST", "/v1/config", body=b"{}", conn=conn)
        s3, _, _ = call(proxy, "GET", "/b/k", conn=conn)  # same connection, still usable
    finally:
        conn.close()
    assert (s1, h1["location"]) == (307, "http://127.0.0.1:9/b/k?partNumber=2&uploadId=u")
    assert (s2, h2["location"]) == (308, "http://other:8181/prefix/v1/config")
    assert s3 == 200
    assert [r["path"] for r in upstream.wait_for(1)] == ["/b/k"]


def test_hang(upstream):
    with FaultProxy("127.0.0.1", upstream.port) as proxy:
        proxy.add_fault("hang", count=1)
        # A client with a 1 s timeout gives up: no answer comes.
        with pytest.raises(TimeoutError):
            call(proxy, "PUT", "/h", body=b"h" * 1000, timeout=1)

        hold = proxy.add_fault("hang", count=1, path="/held")
        s = raw_request(proxy, b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n", timeout=1)
        time.sleep(0.2)
        proxy.clear_faults()  # a fired hang stays held
        with pytest.raises(TimeoutError):
            s.recv(100)
        # Other connections are served meanwhile.
        assert call(proxy, "GET", "/other", timeout=2)[0] == 200
        assert hold.fired == 1
        proxy.release_hangs()
        s.settimeout(2)
        assert s.recv(100) == b"", "released: closed without an answer"
        s.close()

        proxy.add_fault("hang", count=1, hold=0.5)
        s = raw_request(proxy, b"GET /short HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3)
        t = time.monotonic()
        assert s.recv(100) == b""
        assert 0.3 <= time.monotonic() - t < 2
        s.close()

        proxy.add_fault("hang")
        s = raw_request(proxy, b"GET /at-close HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3)
        time.sleep(0.2)  # the request is held
        t = time.monotonic()
    closing = time.monotonic() - t  # FaultProxy.close() with a connection hung
    assert closing < 1.5, f"close() took {closing:.2f} s"
    assert s.recv(100) == b""
    s.close()
    assert [r["path"] for r in upstream.wait_for(1)] == ["/other"]
