"""A local stand-in for Unity Catalog's Iceberg REST endpoint, in front of the REST fixture.

No runnable Unity Catalog with a writable Iceberg API exists, so the harness runs locally
against this front. It reproduces what floe must cope with there, from Databricks' public
documentation; what it cannot reproduce is listed in e2e/databricks/harness.py.

- The endpoint lives under `/api/2.1/unity-catalog/iceberg-rest` (floe detects Unity by
  this path); the rest of the path is forwarded to the fixture's `/v1/…`.
- Every call needs `Authorization: Bearer <token>` (a personal access token), else 401.
- Creating a table whose schema has identifier-field ids is refused (400).
- Creating a table with a prohibited property is refused with a 400 that names it.
  `schema.name-mapping.default` is prohibited there; floe never sets it, so this front
  also prohibits `write.metadata.delete-after-commit.enabled` (which floe does set) to
  run floe's strip-and-retry path. `prohibited` lists them.
- Unity reads no delete files: a commit adding any (its snapshot summary counts
  `added-delete-files`) is refused, so merge-on-read upserts cannot slip through.

`refused` counts refusals by reason; `calls` counts forwarded calls.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from front import Front  # noqa: E402

PREFIX = "/api/2.1/unity-catalog/iceberg-rest"
PROHIBITED = ("schema.name-mapping.default", "write.metadata.delete-after-commit.enabled")


class UnityFront(Front):
    def __init__(self, upstream_url, token, prohibited=PROHIBITED):
        self.token = token
        self.prohibited = prohibited
        self.refused = {}
        self.calls = 0
        super().__init__(upstream_url)
        self.url = self.endpoint + PREFIX

    def refuse(self, handler, status, reason, message):
        with self.lock:
            self.refused[reason] = self.refused.get(reason, 0) + 1
        body = json.dumps({"error_code": "INVALID_PARAMETER_VALUE" if status == 400 else "UNAUTHENTICATED",
                           "message": message}).encode()
        self.answer(handler, status, body)

    def handle(self, handler, body):
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self.refuse(handler, 401, "token", "Credential was not sent or was of an unsupported type")
        if not handler.path.startswith(PREFIX + "/"):
            return self.refuse(handler, 404, "path", "not a Unity Catalog Iceberg REST path")
        path = handler.path[len(PREFIX):]
        problem = self.problem(handler.command, path.split("?")[0], body)
        if problem:
            return self.refuse(handler, 400, *problem)
        with self.lock:
            self.calls += 1
        handler.path = path
        self.forward(handler, body)

    def problem(self, method, path, body):
        """(reason, message) when Unity would refuse the call."""
        if method != "POST" or not body:
            return None
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        if path.endswith("/tables") and "schema" in doc:
            if doc["schema"].get("identifier-field-ids"):
                return ("identifier-fields",
                        "Identifier fields are not supported when creating a managed Iceberg table")
            bad = sorted(k for k in doc.get("properties") or {} if k in self.prohibited)
            if bad:
                return ("properties", f"Table properties {bad} are prohibited")
        for update in doc.get("updates") or []:
            summary = (update.get("snapshot") or {}).get("summary") or {}
            if int(summary.get("added-delete-files", "0")) > 0:
                return ("delete-files", "Unity Catalog cannot read tables with delete files")
        return None
