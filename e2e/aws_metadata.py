"""Test-only stand-ins for the AWS endpoints that hand out temporary credentials: the
container credentials endpoint (ECS, EKS Pod Identity) and the instance metadata
service (IMDSv2, with its session token). No such service runs outside AWS, so these
follow AWS's documented request and answer shapes.

Each mints fresh credentials that live `ttl` seconds; `valid(key_id)` gives a key's
botocore `Credentials` while it lives (for e2e/sigv4_front.py to check signatures
with), `issued` lists the keys handed out and `refused` counts requests that lacked the
authorization or session token the real service requires.

    with CredentialServer("container", ttl=6, authorization="tok") as s:
        s.url   # for AWS_CONTAINER_CREDENTIALS_FULL_URI
    with CredentialServer("imds", ttl=6) as s:
        s.endpoint   # for AWS_EC2_METADATA_SERVICE_ENDPOINT
    with CredentialServer("sts", ttl=600, base=lookup, region="eu-west-1") as s:
        s.endpoint   # STS: AssumeRole, signed (checked by e2e/sigv4_front.py's rules)
                     # with the credentials `base(key_id)` gives
"""
import datetime
import json
import threading
import time
import uuid

from botocore.credentials import Credentials

import http.server

ROLE = "floe-test-role"


class CredentialServer:
    def __init__(self, kind, ttl=6.0, authorization=None, base=None, region="us-east-1"):
        assert kind in ("container", "imds", "sts")
        self.kind, self.ttl, self.authorization = kind, ttl, authorization
        self.base, self.region = base, region
        self.requests = []  # STS: each AssumeRole request's form
        self.reasons = []  # STS: why requests were refused
        self.lock = threading.Lock()
        self.keys = {}  # key id → (secret, token, expires_at)
        self.issued = []
        self.refused = 0
        self.session_tokens = set()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body, content_type="application/json"):
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):
                if server.kind == "imds" and self.path == "/latest/api/token" and \
                        self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    token = uuid.uuid4().hex
                    with server.lock:
                        server.session_tokens.add(token)
                    return self.reply(200, token, "text/plain")
                server.refuse()
                self.reply(403, "")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, text = server.assume_role(self.path, self.headers, body)
                self.reply(status, text, "text/xml")

            def do_GET(self):
                status, body = server.answer(self.path, self.headers)
                self.reply(status, body, "application/json" if body.startswith("{") else "text/plain")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = self.endpoint + "/v1/credentials"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def refuse(self):
        with self.lock:
            self.refused += 1

    def mint(self):
        key_id = "ASIA" + uuid.uuid4().hex[:16].upper()
        secret, token = uuid.uuid4().hex + uuid.uuid4().hex, "session-" + uuid.uuid4().hex
        expires = time.time() + self.ttl
        with self.lock:
            self.keys[key_id] = (secret, token, expires)
            self.issued.append(key_id)
        stamp = datetime.datetime.fromtimestamp(expires, datetime.timezone.utc)
        return json.dumps({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": key_id,
                           "SecretAccessKey": secret, "Token": token,
                           "Expiration": stamp.strftime("%Y-%m-%dT%H:%M:%SZ")})

    def answer(self, path, headers):
        if self.kind == "container":
            if path != "/v1/credentials" or (
                    self.authorization and headers.get("Authorization") != self.authorization):
                self.refuse()
                return 403, ""
            return 200, self.mint()
        with self.lock:
            known = headers.get("X-aws-ec2-metadata-token") in self.session_tokens
        if not known:
            self.refuse()
            return 401, ""
        base = "/latest/meta-data/iam/security-credentials/"
        if path == base:
            return 200, ROLE
        if path == base + ROLE:
            return 200, self.mint()
        return 404, ""

    def assume_role(self, path, headers, body):
        """STS AssumeRole: the request must be signed for sts in this server's region with
        credentials `base` knows; the answer is STS's XML with fresh credentials."""
        import types
        import urllib.parse
        from sigv4_front import SigV4Front
        if self.kind != "sts":
            self.refuse()
            return 404, ""
        checker = types.SimpleNamespace(lookup=self.base, credentials=None, region=self.region, service="sts")
        problem = SigV4Front.verify(checker, "POST", path, headers, body)
        form = dict(urllib.parse.parse_qsl(body.decode()))
        if problem is None and form.get("Action") != "AssumeRole":
            problem = f"action {form.get('Action')!r}"
        if problem:
            self.refuse()
            with self.lock:
                self.reasons.append(problem)
            return 403, ("<ErrorResponse><Error><Type>Sender</Type><Code>SignatureDoesNotMatch</Code>"
                         f"<Message>{problem}</Message></Error></ErrorResponse>")
        with self.lock:
            self.requests.append(form)
        c = json.loads(self.mint())
        return 200, ("<AssumeRoleResponse><AssumeRoleResult><Credentials>"
                     f"<AccessKeyId>{c['AccessKeyId']}</AccessKeyId><SecretAccessKey>{c['SecretAccessKey']}"
                     f"</SecretAccessKey><SessionToken>{c['Token']}</SessionToken><Expiration>{c['Expiration']}"
                     "</Expiration></Credentials><AssumedRoleUser><Arn>"
                     f"{form.get('RoleArn')}/{form.get('RoleSessionName')}</Arn></AssumedRoleUser>"
                     "</AssumeRoleResult></AssumeRoleResponse>")

    def valid(self, key_id):
        """The key's credentials while it lives, else None."""
        with self.lock:
            entry = self.keys.get(key_id)
        if not entry or entry[2] <= time.time():
            return None
        return Credentials(key_id, entry[0], entry[1])

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
