"""The HTTP front the test-only catalog fronts share: a threaded server on 127.0.0.1 that
hands each request to `handle` (forwarding it to the upstream REST fixture unless the
subclass answers it itself), optionally over TLS.

    class MyFront(Front):
        def handle(self, handler, body):
            self.forward(handler, body, rewrite=lambda status, data: data)
"""
import http.client
import http.server
import ssl
import threading
import urllib.parse

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate"}


class Front:
    def __init__(self, upstream_url, tls=None):
        """`tls`: (certificate file, key file) to serve HTTPS instead of HTTP."""
        up = urllib.parse.urlsplit(upstream_url)
        self.upstream = (up.hostname, up.port)
        if not hasattr(self, "lock"):  # a subclass may have made (and used) its own
            self.lock = threading.Lock()
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                front.handle(self, body)

            do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.endpoint = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, handler, body):
        self.forward(handler, body)

    def answer(self, handler, status, body, content_type="application/json"):
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def forward(self, handler, body, rewrite=None):
        """Sends the request upstream and its answer back; `rewrite(status, data)` may
        change the answer's body."""
        conn = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
            conn.request(handler.command, handler.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if rewrite:
                data = rewrite(resp.status, data)
            handler.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                    handler.send_header(k, v)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(data)
        finally:
            conn.close()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
