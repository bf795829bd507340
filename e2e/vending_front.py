"""A test-only front for the REST fixture that vends short-lived storage credentials, the
way Polaris, Unity Catalog or S3 Tables do, and forwards everything else unchanged.

The credentials are real SeaweedFS identities: at start the front creates an IAM user
allowed only the test bucket (SeaweedFS's embedded IAM API, `-s3.iam.readOnly=false`),
then mints access keys for it. Each load- or create-table answer to a request that asked
for vended credentials (`X-Iceberg-Access-Delegation: vended-credentials`) gets a
`storage-credentials` entry with the current key and its expiry
(`s3.session-token-expires-at-ms`); a key is used for half its life, and a reaper
deletes it in SeaweedFS the moment its life ends, so a client that keeps a key too long
gets 403 from storage. `revoke_now()` deletes every live key early (a revocation).

    with VendingFront(services, ttl=6.0) as f:
        f.endpoint    # http://127.0.0.1:<port>
        f.asked, f.vended, f.minted, f.deleted
"""
import json
import re
import threading
import time
import uuid

import botocore.session

from front import Front

# GET …/tables/{name} (load) and POST …/tables (create); POST …/tables/{name} commits.
LOAD = re.compile(r"^/v1/(.+/)?namespaces/[^/]+/tables/[^/?]+(\?.*)?$")
CREATE = re.compile(r"^/v1/(.+/)?namespaces/[^/]+/tables(\?.*)?$")


class VendingFront(Front):
    def __init__(self, services, ttl=6.0, prefix=None):
        self.ttl = ttl
        self.bucket = services["bucket"]
        self.prefix = prefix or f"s3://{self.bucket}/"
        self.lock = threading.Lock()
        self.asked = 0        # requests that asked for vended credentials
        self.vended = 0       # answers given credentials
        self.minted = []      # access key ids, in order
        self.deleted = []     # access key ids deleted (expired or revoked)
        self.live = []        # [key id, secret, expires_at (epoch s)]
        self.user = "vended-" + uuid.uuid4().hex[:8]
        session = botocore.session.get_session()
        self.iam = session.create_client(
            "iam", region_name=services["region"], endpoint_url=services["s3_endpoint"],
            aws_access_key_id=services["access_key"],
            aws_secret_access_key=services["secret_key"])
        self.iam.create_user(UserName=self.user)
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": ["s3:*"],
            "Resource": [f"arn:aws:s3:::{self.bucket}", f"arn:aws:s3:::{self.bucket}/*"]}]}
        self.iam.put_user_policy(UserName=self.user, PolicyName="bucket",
                                 PolicyDocument=json.dumps(policy))
        self.stopping = threading.Event()
        self.reaper = threading.Thread(target=self._reap, daemon=True)
        self.reaper.start()
        super().__init__(services["rest_url"])

    def _mint(self):
        key = self.iam.create_access_key(UserName=self.user)["AccessKey"]
        entry = [key["AccessKeyId"], key["SecretAccessKey"], time.time() + self.ttl]
        self.live.append(entry)
        self.minted.append(entry[0])
        # SeaweedFS takes a moment to accept a new key everywhere.
        time.sleep(0.3)
        return entry

    def current_key(self):
        """A key with at least half its life left (a new one otherwise)."""
        with self.lock:
            fresh = [k for k in self.live if k[2] - time.time() > self.ttl / 2]
            return fresh[-1] if fresh else self._mint()

    def _delete(self, entry):
        self.iam.delete_access_key(UserName=self.user, AccessKeyId=entry[0])
        self.live.remove(entry)
        self.deleted.append(entry[0])

    def _reap(self):
        while not self.stopping.wait(0.1):
            with self.lock:
                for entry in [k for k in self.live if k[2] <= time.time()]:
                    self._delete(entry)

    def revoke_now(self):
        """Deletes every live key before its announced expiry."""
        with self.lock:
            for entry in list(self.live):
                self._delete(entry)

    def vend(self, method, path, answer):
        """The answer with a `storage-credentials` entry added to table answers."""
        table_answer = (method == "GET" and LOAD.match(path)) or (method == "POST" and CREATE.match(path))
        if not table_answer:
            return answer
        try:
            doc = json.loads(answer)
        except ValueError:
            return answer
        if "metadata" not in doc:
            return answer
        key_id, secret, expires = self.current_key()
        doc["storage-credentials"] = [{"prefix": self.prefix, "config": {
            "s3.access-key-id": key_id,
            "s3.secret-access-key": secret,
            "s3.session-token-expires-at-ms": str(int(expires * 1000)),
        }}]
        with self.lock:
            self.vended += 1
        return json.dumps(doc).encode()

    def handle(self, handler, body):
        asked = handler.headers.get("X-Iceberg-Access-Delegation") == "vended-credentials"
        if asked:
            with self.lock:
                self.asked += 1

        def rewrite(status, data):
            if asked and 200 <= status < 300:
                return self.vend(handler.command, handler.path.split("?")[0], data)
            return data

        self.forward(handler, body, rewrite)

    def key_works(self, key_id, secret, endpoint, region):
        """Whether storage still accepts a key (a HEAD of the bucket)."""
        s3 = botocore.session.get_session().create_client(
            "s3", region_name=region, endpoint_url=endpoint,
            aws_access_key_id=key_id, aws_secret_access_key=secret)
        try:
            s3.head_bucket(Bucket=self.bucket)
            return True
        except Exception:
            return False

    def close(self):
        self.stopping.set()
        super().close()
        self.reaper.join(timeout=5)
        with self.lock:
            for entry in list(self.live):
                try:
                    self._delete(entry)
                except Exception:
                    pass
