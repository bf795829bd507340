"""Catalog TLS through the real binary: an HTTPS front for the REST fixture whose
certificate a private CA (made here with the openssl CLI) signed. floe must trust it
through `catalog.tls_root_cas_file` or the system's roots (`SSL_CERT_FILE`), refuse it
otherwise with an error that says why, and accept anything with `tls_skip_verify`."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from conftest import keep_output  # noqa: E402
from front import Front  # noqa: E402
from test_floe_run import FLOE, pipeline  # noqa: E402
from test_vended_credentials import table_ids  # noqa: E402

NAMESPACE = "e2e_vended"  # table_ids reads this namespace


class CountingFront(Front):
    """Forwards every request that completed a TLS handshake, and counts them."""

    def __init__(self, upstream_url, tls):
        self.requests = 0
        super().__init__(upstream_url, tls=tls)

    def handle(self, handler, body):
        with self.lock:
            self.requests += 1
        self.forward(handler, body)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and a server certificate for 127.0.0.1 signed by it (PEM files)."""
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=floe test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext")
    return {"ca": str(d / "ca.pem"), "cert": str(d / "server.pem"), "key": str(d / "server.key")}


def output(services, front, table, tls_lines=()):
    return "\n".join([
        "iceberg:", "  catalog:", f"    url: {front.endpoint}", *(f"    {t}" for t in tls_lines),
        f"  namespace: {NAMESPACE}", f"  table: {table}",
        "  storage:", "    aws_s3:", f"      bucket: {services['bucket']}",
        f"      region: {services['region']}", f"      endpoint: {services['s3_endpoint']}",
        "      force_path_style_urls: true", "      credentials:",
        f"        id: {services['access_key']}", f"        secret: {services['secret_key']}",
        "  schema_evolution:", "    enabled: true", "  batching:", "    count: 100", ""])


def run(tmp_path, name, yaml_text, env=None, timeout=120):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml_text)
    proc = subprocess.Popen([FLOE, "run", str(cfg)], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # an untrusted catalog: the host keeps retrying to connect
        out, _ = proc.communicate()
    keep_output(tmp_path, name, out, "")
    return proc.returncode, out


def ids(n):
    return list(range(1, n + 1))


def id_pipeline(out, count):
    return pipeline(out, count, mapping='root.id = count("tls")\n', batch_size=100)


def test_a_private_ca_file_is_trusted(tmp_path, services, pki):
    with CountingFront(services["rest_url"], (pki["cert"], pki["key"])) as front:
        code, log = run(tmp_path, "ca_file", id_pipeline(output(
            services, front, "ca_file", [f"tls_root_cas_file: {pki['ca']}"]), 300))
        assert code == 0, log[-3000:]
        assert front.requests >= 4
    assert sorted(table_ids(services, "ca_file")) == ids(300)


def test_the_system_roots_are_trusted(tmp_path, services, pki):
    # SSL_CERT_FILE names the system's trust store for rustls-native-certs, as for OpenSSL.
    with CountingFront(services["rest_url"], (pki["cert"], pki["key"])) as front:
        code, log = run(tmp_path, "system", id_pipeline(output(services, front, "system"), 200),
                        env={"SSL_CERT_FILE": pki["ca"]})
        assert code == 0, log[-3000:]
    assert sorted(table_ids(services, "system")) == ids(200)


def test_an_unknown_issuer_is_refused_with_the_reason(tmp_path, services, pki):
    with CountingFront(services["rest_url"], (pki["cert"], pki["key"])) as front:
        code, log = run(tmp_path, "untrusted", id_pipeline(output(services, front, "untrusted"), 100),
                        timeout=15)
        assert front.requests == 0
    assert code != 0
    assert "UnknownIssuer" in log or "unknown issuer" in log.lower(), log[-3000:]


def test_tls_skip_verify_accepts_the_certificate(tmp_path, services, pki):
    with CountingFront(services["rest_url"], (pki["cert"], pki["key"])) as front:
        code, log = run(tmp_path, "skip", id_pipeline(output(
            services, front, "skip", ["tls_skip_verify: true"]), 200))
        assert code == 0, log[-3000:]
    assert sorted(table_ids(services, "skip")) == ids(200)


def test_lint_finds_a_missing_ca_file(tmp_path, services):
    class Nowhere:
        endpoint = "https://127.0.0.1:9"
    cfg = tmp_path / "lint.yaml"
    cfg.write_text(id_pipeline(output(services, Nowhere, "lint",
                                      [f"tls_root_cas_file: {tmp_path / 'missing.pem'}"]), 1))
    res = subprocess.run([FLOE, "lint", str(cfg)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "catalog.tls_root_cas_file: cannot read" in res.stdout + res.stderr, res.stdout + res.stderr
