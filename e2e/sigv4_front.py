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
import re

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from front import Front

AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                  r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")


class SigV4Front(Front):
    def __init__(self, upstream_url, key_id, secret, region="us-east-1", service="glue",
                 token=None, lookup=None):
        """`lookup(key_id)`, when given, says which credentials a key id stands for (None:
        unknown or expired), for temporary credentials that rotate."""
        self.credentials = Credentials(key_id, secret, token)
        self.lookup = lookup
        self.region, self.service = region, service
        self.accepted = 0
        self.rejected = 0
        self.reasons = []
        super().__init__(upstream_url)

    def handle(self, handler, body):
        problem = self.verify(handler.command, handler.path, handler.headers, body)
        if problem:
            with self.lock:
                self.rejected += 1
                self.reasons.append(problem)
            msg = ('{"message": "The request signature we calculated does not match '
                   'the signature you provided: ' + problem.replace('"', "'") + '"}').encode()
            self.answer(handler, 403, msg)
            return
        with self.lock:
            self.accepted += 1
        self.forward(handler, body)

    def verify(self, method, target, headers, body):
        """Why the request's signature is not valid, or None."""
        m = AUTH.match(headers.get("Authorization", ""))
        if not m:
            return "no SigV4 Authorization header"
        key_id, date, region, service, signed, signature = m.groups()
        credentials = self.lookup(key_id) if self.lookup else self.credentials
        if credentials is None:
            return f"key {key_id} is unknown or expired"
        if (key_id, region, service) != (credentials.access_key, self.region, self.service):
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
        if credentials.token and headers.get("X-Amz-Security-Token") != credentials.token:
            return "wrong or missing session token"
        missing = [n for n in signed_names if headers.get(n) is None]
        if missing:
            return f"signed headers missing: {missing}"
        request = AWSRequest(method=method, url=f"http://{headers['Host']}{target}", data=body,
                             headers={n: headers[n] for n in signed_names})
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(credentials, self.service, self.region)
        expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)),
                                    request)
        if not hmac.compare_digest(expected, signature):
            return "signature mismatch"
        return None
