"""A fault-injecting HTTP/1.1 reverse proxy for e2e tests, in the test process.

`FaultProxy(upstream_host, upstream_port)` listens on 127.0.0.1 on a free port
(`.endpoint`, `.port`) and forwards each request to the upstream byte for byte: request
line, headers (Host included) and body are passed on unchanged, so AWS SigV4
signatures made for the proxy's address still verify upstream (SeaweedFS checks the
signature against the Host header it receives, which is the one the client signed).
Responses come back unchanged as well.

Client connections may be kept alive (S3 SDKs reuse connections); each request gets
a fresh upstream connection. `outage(seconds)` answers every request that arrives in
the next `seconds` with `503 SlowDown` and S3's XML error body, without forwarding it;
`faults` counts the requests answered so. `close()` stops the listener and every
connection thread. Usable as a context manager.

Run standalone to try it: `python3 faultproxy.py UPSTREAM_HOST UPSTREAM_PORT`.
"""
import socket
import socketserver
import threading
import time

SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
                 b"<Error><Code>SlowDown</Code>"
                 b"<Message>Please reduce your request rate.</Message></Error>")
MAX_HEAD = 64 * 1024
IDLE_TIMEOUT = 120  # seconds a kept-alive client connection may sit idle


class _Closed(Exception):
    """The peer closed the connection (cleanly, between messages, or not)."""


def _read_head(f):
    """Reads a message head up to and including the blank line: (raw bytes, start
    line, {lower-case name: [values]}). Raises _Closed at EOF before any byte."""
    lines = []
    size = 0
    while True:
        line = f.readline(MAX_HEAD + 1)
        if not line:
            raise _Closed("eof" if not lines else "eof inside a message head")
        if not lines and line in (b"\r\n", b"\n"):
            continue  # tolerated: stray CRLF between messages (RFC 9112 2.2)
        lines.append(line)
        size += len(line)
        if size > MAX_HEAD:
            raise ValueError("message head too large")
        if line in (b"\r\n", b"\n"):
            break
    start = lines[0].decode("latin-1").rstrip("\r\n")
    headers = {}
    for line in lines[1:-1]:
        name, _, value = line.decode("latin-1").partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return b"".join(lines), start, headers


def _read_exact(f, n):
    data = f.read(n)
    if len(data) != n:
        raise _Closed(f"eof after {len(data)} of {n} body bytes")
    return data


def _read_chunked(f):
    """A chunked body, raw (sizes, extensions, data, trailers), through its end."""
    parts = []
    while True:
        line = f.readline(MAX_HEAD)
        if not line:
            raise _Closed("eof inside a chunked body")
        parts.append(line)
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailer section, up to the blank line
                t = f.readline(MAX_HEAD)
                if not t:
                    raise _Closed("eof inside chunked trailers")
                parts.append(t)
                if t in (b"\r\n", b"\n"):
                    return b"".join(parts)
        parts.append(_read_exact(f, size + 2))  # data + CRLF


def _tokens(headers, name):
    return {t.strip().lower() for v in headers.get(name, []) for t in v.split(",")}


def _read_body(f, headers):
    """Body of a message whose length is framed (chunked or Content-Length); b"" when
    neither is given. Returns None when the body is only ended by closing."""
    if "chunked" in _tokens(headers, "transfer-encoding"):
        return _read_chunked(f)
    if "content-length" in headers:
        return _read_exact(f, int(headers["content-length"][0]))
    return None


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, name: str = "faultproxy"):
        self.upstream = (upstream_host, int(upstream_port))
        self.name = name
        self._lock = threading.Lock()
        self._outage_until = 0.0
        self._conns = set()
        self.faults = 0      # requests answered 503 SlowDown instead of forwarded
        self.forwarded = 0   # requests forwarded upstream that got an answer
        self.requests = 0    # requests read from clients
        self.errors = []     # proxy-side failures (upstream unreachable, bad framing)
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                proxy._serve_connection(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            block_on_close = False

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name=f"{name}-accept", daemon=True)
        self._thread.start()

    # -- control ---------------------------------------------------------------------

    def outage(self, seconds: float):
        """From now on, for `seconds`, every request gets 503 SlowDown."""
        with self._lock:
            self._outage_until = time.monotonic() + seconds

    def end_outage(self):
        with self._lock:
            self._outage_until = 0.0

    @property
    def in_outage(self) -> bool:
        with self._lock:
            return time.monotonic() < self._outage_until

    def stats(self) -> dict:
        with self._lock:
            return {"requests": self.requests, "forwarded": self.forwarded,
                    "faults": self.faults, "errors": len(self.errors)}

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- serving ---------------------------------------------------------------------

    def _serve_connection(self, client: socket.socket):
        with self._lock:
            self._conns.add(client)
        client.settimeout(IDLE_TIMEOUT)
        f = client.makefile("rb")
        try:
            while self._serve_one(client, f):
                pass
        except (_Closed, OSError):
            pass
        except ValueError as e:  # malformed framing
            with self._lock:
                self.errors.append(f"bad request: {e}")
        finally:
            with self._lock:
                self._conns.discard(client)
            f.close()
            client.close()

    def _serve_one(self, client, f) -> bool:
        """Serves one request; returns whether the client connection stays open."""
        head, start, headers = _read_head(f)
        method = start.split(" ", 1)[0].upper()
        version = start.rsplit(" ", 1)[-1].upper()
        with self._lock:
            self.requests += 1
            failing = time.monotonic() < self._outage_until
            if failing:
                self.faults += 1
        conn_tokens = _tokens(headers, "connection")
        keep = "close" not in conn_tokens and (version == "HTTP/1.1" or "keep-alive" in conn_tokens)
        expect_continue = "100-continue" in _tokens(headers, "expect")

        if failing:
            if expect_continue:
                # The client waits for our go before sending its body: refuse it and close.
                self._send_slowdown(client, method, close=True)
                return False
            _read_body(f, headers)
            self._send_slowdown(client, method, close=not keep)
            return keep

        if expect_continue:
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = _read_body(f, headers)
        if body is None:
            body = b""  # a request without Content-Length or chunked has no body
        try:
            up = socket.create_connection(self.upstream, timeout=300)
        except OSError as e:
            with self._lock:
                self.errors.append(f"upstream {self.upstream}: {e}")
            msg = f"faultproxy: upstream unreachable: {e}".encode()
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                           b"Connection: close\r\nContent-Length: " + str(len(msg)).encode()
                           + b"\r\n\r\n" + msg)
            return False
        try:
            up.sendall(head + body)
            uf = up.makefile("rb")
            try:
                while True:
                    rhead, rstart, rheaders = _read_head(uf)
                    status = int(rstart.split(" ", 2)[1])
                    if 100 <= status < 200 and status != 101:
                        continue  # interim answers (e.g. upstream's own 100 Continue)
                    break
                if method == "HEAD" or status in (204, 304) or status == 101:
                    rbody = b""
                else:
                    rbody = _read_body(uf, rheaders)
                until_close = rbody is None
                if until_close:
                    client.sendall(rhead)
                    while True:
                        chunk = uf.read1(65536)
                        if not chunk:
                            break
                        client.sendall(chunk)
                else:
                    client.sendall(rhead + rbody)
            finally:
                uf.close()
        finally:
            up.close()
        with self._lock:
            self.forwarded += 1
        return keep and not until_close and "close" not in _tokens(rheaders, "connection")

    def _send_slowdown(self, client, method, close):
        head = ("HTTP/1.1 503 Slow Down\r\n"
                "Content-Type: application/xml\r\n"
                "x-amz-request-id: FAULTPROXY\r\n"
                f"Content-Length: {len(SLOWDOWN_BODY)}\r\n"
                + ("Connection: close\r\n" if close else "")
                + "\r\n").encode()
        client.sendall(head if method == "HEAD" else head + SLOWDOWN_BODY)


if __name__ == "__main__":
    import sys
    with FaultProxy(sys.argv[1], int(sys.argv[2])) as p:
        print(p.endpoint, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
