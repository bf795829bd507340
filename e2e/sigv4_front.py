"""A test-only front for the REST fixture that accepts only SigV4-signed requests, the
way AWS Glue's Iceberg endpoint does, and forwards those it accepts.

Each request's signature is recomputed with botocore's signer (an implementation
independent of floe's) over the headers the request says it signed, with the date it
says it was signed at, and compared; the payload hash it sends must match its body, the
scope must name this front's region and service and the key's id, and `host` and
`x-amz-date` must be signed. Anything else gets 403 with an AWS-style error body and is
not forwarded. `accepted` and `rejected` count requests; `reasons` keeps why.

    with SigV4Front(upstream_url, key_id, secret, region="us-east-1", service="glue") as f:
        f.endpoint  # http://127.0.0.1:<port>
"""
import hashlib
import hmac
import http.client
import http.server
import re
import threading
import urllib.parse

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                  r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate"}


class SigV4Front:
    def __init__(self, upstream_url, key_id, secret, region="us-east-1", service="glue",
                 token=None):
        up = urllib.parse.urlsplit(upstream_url)
        self.upstream = (up.hostname, up.port)
        self.credentials = Credentials(key_id, secret, token)
        self.region, self.service = region, service
        self.lock = threading.Lock()
        self.accepted = 0
        self.rejected = 0
        self.reasons = []
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                problem = front.verify(self.command, self.path, self.headers, body)
                if problem:
                    with front.lock:
                        front.rejected += 1
                        front.reasons.append(problem)
                    msg = ('{"message": "The request signature we calculated does not match '
                           'the signature you provided: ' + problem.replace('"', "'") + '"}').encode()
                    self.send_response(403)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                with front.lock:
                    front.accepted += 1
                front.forward(self, body)

            do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def verify(self, method, target, headers, body):
        """Why the request's signature is not valid, or None."""
        m = AUTH.match(headers.get("Authorization", ""))
        if not m:
            return "no SigV4 Authorization header"
        key_id, date, region, service, signed, signature = m.groups()
        if (key_id, region, service) != (self.credentials.access_key, self.region, self.service):
            return f"scope {key_id}/{region}/{service} is not this endpoint's"
        signed_names = signed.split(";")
        if "host" not in signed_names or "x-amz-date" not in signed_names:
            return "host and x-amz-date must be signed"
        amz_date = headers.get("X-Amz-Date", "")
        if not amz_date.startswith(date):
            return "x-amz-date does not match the credential scope"
        payload = headers.get("X-Amz-Content-SHA256")
        if payload is not None and payload != hashlib.sha256(body).hexdigest():
            return "x-amz-content-sha256 is not the body's hash"
        if self.credentials.token and headers.get("X-Amz-Security-Token") != self.credentials.token:
            return "wrong or missing session token"
        missing = [n for n in signed_names if headers.get(n) is None]
        if missing:
            return f"signed headers missing: {missing}"
        request = AWSRequest(method=method, url=f"http://{headers['Host']}{target}", data=body,
                             headers={n: headers[n] for n in signed_names})
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(self.credentials, self.service, self.region)
        expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)),
                                    request)
        if not hmac.compare_digest(expected, signature):
            return "signature mismatch"
        return None

    def forward(self, handler, body):
        conn = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
            conn.request(handler.command, handler.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
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
