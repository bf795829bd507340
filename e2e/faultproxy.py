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
connection thread. Usable as a context manager. `set_upstream(host, port)` points the
proxy at another upstream (e.g. a restarted service) for requests from then on.

Rules (checked only when no outage is on):

    rule = proxy.add_fault(kind, *, count=None, seconds=None, method=None, path=None,
                           **params)

A rule matches a request when `method` (case-insensitive; None = any) equals its
method and the regex `path` (None = any) is found in its request target (path and
query). It stays active until it has fired `count` times (None = no limit) or until
`seconds` have passed since it was added (None = no limit). The first active rule
that matches, in the order added, applies; `rule.fired` counts how often it did and
`stats()["fired"]` counts per kind. `clear_faults()` removes every rule. Kinds:

  latency      delay=S: wait S seconds after the request head, then forward normally.
  bandwidth    bytes_per_sec=R: forward, pacing the request sent upstream and the
               answer sent to the client at R bytes/s each way. The pace is per rule,
               shared by all connections it applies to (a capped link, full duplex).
  reset        after_bytes=N (default: half the body): pass the head and the first N
               body bytes upstream, then abort both connections with a TCP RST.
  status       status=CODE, body=None, content_type=None, headers=None: answer CODE
               without forwarding. Default body: S3's SlowDown XML for 503, else an
               Iceberg REST error (`iceberg_error`) as JSON.
  lose_answer  before=None: forward and read upstream's whole answer (so it took
               effect), call `before()` if given (what happens meanwhile elsewhere,
               while the client still waits), then abort the client connection with a
               TCP RST instead of answering.
  redirect     location=BASE_URL, status=307: answer with `Location: BASE_URL +
               request target`, without forwarding.
  hang         hold=600: read the request, then send nothing for `hold` seconds (or
               until `release_hangs()` or `close()`; `clear_faults()` leaves held
               connections held), then close the connection without an answer.

Answers made up by the proxy (outage, status, redirect) read the request body first,
so the connection stays usable, unless the client sent `Expect: 100-continue`: then
the body never comes and the connection is closed after the answer. For reset, hang
and the forwarding kinds the proxy sends `100 Continue` itself to get the body.

Run standalone to try it: `python3 faultproxy.py UPSTREAM_HOST UPSTREAM_PORT`.
"""
import http
import json
import re
import socket
import socketserver
import struct
import threading
import time
import urllib.parse

SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
                 b"<Error><Code>SlowDown</Code>"
                 b"<Message>Please reduce your request rate.</Message></Error>")
MAX_HEAD = 64 * 1024
IDLE_TIMEOUT = 120  # seconds a kept-alive client connection may sit idle

_REQUIRED = object()
# kind -> {parameter: default}; _REQUIRED marks parameters without a default.
KINDS = {
    "latency": {"delay": _REQUIRED},
    "bandwidth": {"bytes_per_sec": _REQUIRED},
    "reset": {"after_bytes": None},
    "status": {"status": _REQUIRED, "body": None, "content_type": None, "headers": None},
    "lose_answer": {"before": None},
    "redirect": {"location": _REQUIRED, "status": 307},
    "hang": {"hold": 600.0},
}
ICEBERG_ERROR_TYPES = {409: "CommitFailedException", 500: "InternalServerError",
                       503: "ServiceUnavailableException"}


def iceberg_error(status: int, message: str = None, type: str = None) -> bytes:
    """An Iceberg REST catalog error body (its ErrorModel) as JSON bytes."""
    if type is None:
        type = ICEBERG_ERROR_TYPES.get(status) or (
            "".join(_reason(status).split()) + "Exception")
    message = message or f"faultproxy: injected {status}"
    return json.dumps({"error": {"message": message, "type": type, "code": status}}).encode()


def _reason(status):
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


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


def _arm_rst(sock):
    """Makes closing `sock` send a TCP RST instead of a FIN (SO_LINGER on, timeout 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


def _sendall(sock, data):
    sock.sendall(data)


class _Pacer:
    """Sends at most `rate` bytes/s in all, over every connection that uses it: each
    chunk books the next free slot on one shared timeline and goes out when its slot
    ends (no burst allowance)."""

    def __init__(self, rate, stop):
        self.rate = float(rate)
        self.chunk = max(1, min(16384, int(self.rate / 20)))  # ~50 ms per chunk at most
        self._stop = stop
        self._lock = threading.Lock()
        self._next = 0.0

    def send(self, sock, data):
        view = memoryview(data)
        for i in range(0, len(view), self.chunk):
            piece = view[i:i + self.chunk]
            with self._lock:
                self._next = max(self._next, time.monotonic()) + len(piece) / self.rate
                due = self._next
            delay = due - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                raise _Closed("proxy closed")
            sock.sendall(piece)


class FaultRule:
    """One rule of `FaultProxy.add_fault`; `fired` counts the requests it applied to."""

    def __init__(self, kind, params, count, seconds, method, path, stop):
        self.kind = kind
        self.params = params
        self.count = count
        self.seconds = seconds
        self.method = method.upper() if method else None
        self.path = re.compile(path) if path is not None else None
        self.added = time.monotonic()
        self.fired = 0
        if kind == "bandwidth":
            self._up = _Pacer(params["bytes_per_sec"], stop)
            self._down = _Pacer(params["bytes_per_sec"], stop)

    @property
    def active(self) -> bool:
        return ((self.count is None or self.fired < self.count)
                and (self.seconds is None or time.monotonic() < self.added + self.seconds))

    def matches(self, method, target) -> bool:
        return ((self.method is None or self.method == method.upper())
                and (self.path is None or self.path.search(target) is not None))

    def __repr__(self):
        return (f"FaultRule({self.kind!r}, {self.params}, count={self.count}, "
                f"seconds={self.seconds}, method={self.method!r}, "
                f"path={self.path.pattern if self.path else None!r}, fired={self.fired})")


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, name: str = "faultproxy"):
        self.upstream = (upstream_host, int(upstream_port))
        self.name = name
        self._lock = threading.Lock()
        self._outage_until = 0.0
        self._conns = set()
        self._rules = []
        self._fired = dict.fromkeys(KINDS, 0)
        self._stop = threading.Event()
        self._hang_release = threading.Event()  # replaced by each release_hangs()
        self.faults = 0      # requests answered 503 SlowDown by an outage
        self.forwarded = 0   # requests forwarded upstream that got an answer
        self.requests = 0    # requests read from clients
        self.errors = []     # proxy-side failures (upstream unreachable, bad framing)
        # Upstream's answers, one (method, target, status) per forwarded request: what
        # the service itself said (a 409 from the catalog, not from a rule).
        self.answers = []
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

    def add_fault(self, kind: str, *, count: int = None, seconds: float = None,
                  method: str = None, path: str = None, **params) -> FaultRule:
        """Adds a rule (see the module docstring) after the existing ones; returns it."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {sorted(KINDS)}")
        unknown = set(params) - set(KINDS[kind])
        if unknown:
            raise TypeError(f"{kind}: unknown parameters {sorted(unknown)}")
        merged = {**KINDS[kind], **params}
        missing = [k for k, v in merged.items() if v is _REQUIRED]
        if missing:
            raise TypeError(f"{kind}: missing parameters {missing}")
        rule = FaultRule(kind, merged, count, seconds, method, path, self._stop)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear_faults(self):
        """Removes every rule. Connections a "hang" rule holds stay held (until their
        `hold` ends, `release_hangs()` or `close()`), so a hang can be cleared as soon
        as it fired without cutting it short."""
        with self._lock:
            self._rules = []

    @property
    def rules(self) -> list:
        with self._lock:
            return list(self._rules)

    def release_hangs(self):
        """Closes the connections held by "hang" rules now (rules stay in force)."""
        with self._lock:
            release, self._hang_release = self._hang_release, threading.Event()
        release.set()

    def set_upstream(self, host: str, port: int):
        """Forwards the requests from now on to host:port."""
        with self._lock:
            self.upstream = (host, int(port))

    def upstream_answers(self, status, method=None, path=None) -> int:
        """How many forwarded requests upstream answered with `status` (optionally only
        those of `method` whose target matches the regex `path`)."""
        with self._lock:
            answers = list(self.answers)
        return sum(1 for m, target, st in answers
                   if st == status and (method is None or m == method.upper())
                   and (path is None or re.search(path, target)))

    def stats(self) -> dict:
        with self._lock:
            return {"requests": self.requests, "forwarded": self.forwarded,
                    "faults": self.faults, "errors": len(self.errors),
                    "fired": dict(self._fired)}

    def close(self):
        self._stop.set()
        self.release_hangs()
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
            client.close()  # sends a RST instead of a FIN when armed by _arm_rst

    def _pick_rule(self, method, target):
        """The first active rule matching the request, counted as fired; under _lock."""
        for rule in self._rules:
            if rule.active and rule.matches(method, target):
                rule.fired += 1
                self._fired[rule.kind] += 1
                return rule
        return None

    def _serve_one(self, client, f) -> bool:
        """Serves one request; returns whether the client connection stays open."""
        head, start, headers = _read_head(f)
        parts = start.split(" ")
        method = parts[0].upper()
        target = parts[1] if len(parts) > 2 else ""
        version = parts[-1].upper()
        with self._lock:
            self.requests += 1
            failing = time.monotonic() < self._outage_until
            if failing:
                self.faults += 1
            rule = None if failing else self._pick_rule(method, target)
            hang_release = self._hang_release
        kind = rule.kind if rule else None
        p = rule.params if rule else {}
        conn_tokens = _tokens(headers, "connection")
        keep = "close" not in conn_tokens and (version == "HTTP/1.1" or "keep-alive" in conn_tokens)
        expect_continue = "100-continue" in _tokens(headers, "expect")

        if failing or (kind == "status" and p["status"] == 503 and p["body"] is None):
            return self._answer(client, f, headers, method, keep, 503, SLOWDOWN_BODY,
                                p.get("content_type") or "application/xml",
                                {"x-amz-request-id": "FAULTPROXY", **(p.get("headers") or {})},
                                reason="Slow Down")
        if kind == "status":
            body = p["body"] if p["body"] is not None else iceberg_error(p["status"])
            return self._answer(client, f, headers, method, keep, p["status"], body,
                                p["content_type"] or "application/json", p["headers"] or {})
        if kind == "redirect":
            url = urllib.parse.urlsplit(target)
            path = urllib.parse.urlunsplit(("", "", url.path, url.query, ""))
            location = p["location"].rstrip("/") + path
            return self._answer(client, f, headers, method, keep, p["status"], b"", None,
                                {"Location": location})
        if kind == "latency" and self._stop.wait(p["delay"]):
            return False

        if expect_continue:
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if kind == "reset":
            return self._reset(client, f, head, headers, p["after_bytes"])
        body = _read_body(f, headers)
        if body is None:
            body = b""  # a request without Content-Length or chunked has no body
        if kind == "hang":
            hang_release.wait(p["hold"])
            return False  # closed without an answer
        return self._forward(client, head, body, method, keep, rule)

    def _connect(self, client):
        """A fresh upstream connection, or None after answering the client 502."""
        with self._lock:
            upstream = self.upstream
        try:
            return socket.create_connection(upstream, timeout=300)
        except OSError as e:
            with self._lock:
                self.errors.append(f"upstream {upstream}: {e}")
            msg = f"faultproxy: upstream unreachable: {e}".encode()
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                           b"Connection: close\r\nContent-Length: " + str(len(msg)).encode()
                           + b"\r\n\r\n" + msg)
            return None

    def _forward(self, client, head, body, method, keep, rule) -> bool:
        kind = rule.kind if rule else None
        send_up = rule._up.send if kind == "bandwidth" else _sendall
        send_down = rule._down.send if kind == "bandwidth" else _sendall
        lose = kind == "lose_answer"
        up = self._connect(client)
        if up is None:
            return False
        try:
            send_up(up, head + body)
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
                with self._lock:  # counted before the client can see the answer
                    self.forwarded += 1
                    self.answers.append((method, head.split(b" ", 2)[1].decode("latin-1"), status))
                until_close = rbody is None
                if until_close:
                    if not lose:
                        send_down(client, rhead)
                    while True:
                        chunk = uf.read1(65536)
                        if not chunk:
                            break
                        if not lose:
                            send_down(client, chunk)
                elif not lose:
                    send_down(client, rhead + rbody)
            finally:
                uf.close()
        finally:
            up.close()
        if lose:  # upstream has answered (and so applied the request); the client never hears
            if rule.params["before"] is not None:
                try:
                    rule.params["before"]()
                except Exception as e:  # the test's own failure, not the client's
                    with self._lock:
                        self.errors.append(f"lose_answer before(): {e!r}")
            _arm_rst(client)
            return False
        return keep and not until_close and "close" not in _tokens(rheaders, "connection")

    def _reset(self, client, f, head, headers, after) -> bool:
        """Passes the head and `after` body bytes upstream, then RSTs both connections."""
        body = None
        if "chunked" in _tokens(headers, "transfer-encoding"):
            body = _read_chunked(f)  # its length is only known at its end
            size = len(body)
        else:
            size = int(headers.get("content-length", ["0"])[0])
        after = size // 2 if after is None else max(0, min(int(after), size))
        partial = body[:after] if body is not None else _read_exact(f, after)
        up = self._connect(client)
        if up is not None:
            try:
                up.sendall(head + partial)
            finally:
                _arm_rst(up)
                up.close()
        _arm_rst(client)
        return False

    def _answer(self, client, f, headers, method, keep, status, body, content_type,
                extra, reason=None) -> bool:
        """Answers without forwarding, after reading the request body when it comes."""
        if "100-continue" in _tokens(headers, "expect"):
            keep = False  # the client holds its body back for our go: refuse it and close
        else:
            _read_body(f, headers)
        if isinstance(body, str):
            body = body.encode()
        lines = [f"HTTP/1.1 {status} {reason or _reason(status)}"]
        if content_type:
            lines.append(f"Content-Type: {content_type}")
        lines += [f"{k}: {v}" for k, v in extra.items()]
        lines.append(f"Content-Length: {len(body)}")
        if not keep:
            lines.append("Connection: close")
        out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        client.sendall(out if method == "HEAD" else out + body)
        return keep


if __name__ == "__main__":
    import sys
    with FaultProxy(sys.argv[1], int(sys.argv[2])) as p:
        print(p.endpoint, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
