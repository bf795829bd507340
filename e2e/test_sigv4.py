"""SigV4 catalog auth (`catalog.auth.aws_sigv4`) through the real binary, against a front
for the REST fixture that accepts only correctly signed requests (e2e/sigv4_front.py,
checking each signature with botocore's signer) and rejects the rest, as Glue's Iceberg
endpoint does. Storage is SeaweedFS directly; pyiceberg reads back from the fixture."""
import os
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from aws_metadata import CredentialServer  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402
from sigv4_front import SigV4Front  # noqa: E402
from test_floe_run import FLOE, pipeline  # noqa: E402

KEY_ID = "AKIDFLOESIGV4TEST"
SECRET = "sigv4-secret-Qm27w-do-not-log"


def output(services, front, table, credentials=True, secret=SECRET):
    """An iceberg output block signing its catalog calls for eu-west-1/glue."""
    creds = ("        credentials:\n"
             f"          id: {KEY_ID}\n"
             f"          secret: {secret}\n") if credentials else ""
    return ("iceberg:\n"
            "  catalog:\n"
            f"    url: {front.endpoint}\n"
            "    auth:\n"
            "      aws_sigv4:\n"
            "        region: eu-west-1\n"
            "        service: glue\n"
            + creds +
            "  namespace: e2e_sigv4\n"
            f"  table: {table}\n"
            "  storage:\n"
            "    aws_s3:\n"
            f"      bucket: {services['bucket']}\n"
            f"      region: {services['region']}\n"
            f"      endpoint: {services['s3_endpoint']}\n"
            "      force_path_style_urls: true\n"
            "      credentials:\n"
            f"        id: {services['access_key']}\n"
            f"        secret: {services['secret_key']}\n"
            "  schema_evolution:\n"
            "    enabled: true\n"
            "  batching:\n"
            "    count: 100\n")


def rows_of(services, table):
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("rest", type="rest", uri=services["rest_url"], **{
        "s3.endpoint": services["s3_endpoint"], "s3.access-key-id": services["access_key"],
        "s3.secret-access-key": services["secret_key"], "s3.region": services["region"],
        "s3.path-style-access": "true"})
    return cat.load_table(f"e2e_sigv4.{table}").scan().to_arrow().num_rows


def run(tmp_path, yaml_text, env=None, timeout=180):
    cfg = tmp_path / f"{uuid.uuid4().hex[:6]}.yaml"
    cfg.write_text(yaml_text)
    return subprocess.run([FLOE, "run", str(cfg)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_signed_catalog_calls_are_accepted_and_the_rows_committed(tmp_path, services):
    with SigV4Front(services["rest_url"], KEY_ID, SECRET, region="eu-west-1",
                    service="glue") as front:
        res = run(tmp_path, pipeline(output(services, front, "signed"), 500, batch_size=100))
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert front.rejected == 0, front.reasons[:5]
        # config, namespace, create, load and the commits: every call was signed.
        assert front.accepted >= 5
    assert rows_of(services, "signed") == 500
    assert SECRET not in res.stdout + res.stderr


def test_credentials_from_the_environment(tmp_path, services):
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    with SigV4Front(services["rest_url"], KEY_ID, SECRET, region="eu-west-1",
                    service="glue") as front:
        res = run(tmp_path, pipeline(output(services, front, "from_env", credentials=False),
                                     200, batch_size=100), env=env)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert front.rejected == 0 and front.accepted >= 5
    assert rows_of(services, "from_env") == 200


def test_a_wrong_secret_is_refused_and_never_logged(tmp_path, services):
    wrong = "wrong-sigv4-secret-Zk19-do-not-log"
    with SigV4Front(services["rest_url"], KEY_ID, SECRET, region="eu-west-1",
                    service="glue") as front:
        cfg = tmp_path / "wrong.yaml"
        cfg.write_text(pipeline(output(services, front, "wrong", secret=wrong), 100,
                                batch_size=100))
        proc = subprocess.Popen([FLOE, "run", str(cfg)], cwd=tmp_path, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()  # the output keeps retrying refused credentials; nothing is lost
            out, _ = proc.communicate()
        assert front.accepted == 0
        assert front.rejected >= 1 and front.reasons[0] == "signature mismatch", front.reasons[:3]
    assert "403" in out, out[-2000:]
    assert wrong not in out and SECRET not in out


def no_static_keys(tmp_path):
    """An environment with no AWS keys and no shared credentials file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "none")
    return env


def run_clean(tmp_path, yaml_text, env, timeout=180):
    cfg = tmp_path / f"{uuid.uuid4().hex[:6]}.yaml"
    cfg.write_text(yaml_text)
    return subprocess.run([FLOE, "run", str(cfg)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, env=env)


def slow_pipeline(out, count, interval):
    """`count` rows in batches of 10, one batch every `interval`."""
    return pipeline(out, count, batch_size=10).replace('interval: ""', f'interval: "{interval}"')


def test_container_credentials_are_fetched_and_renewed(tmp_path, services):
    # Keys that live 6 s over a run of about 20 s: floe must fetch new ones before the
    # old expire; the front refuses a key once it has expired.
    with CredentialServer("container", ttl=6.0, authorization="pod-identity-token") as creds, \
            SigV4Front(services["rest_url"], "unused", "unused", region="eu-west-1",
                       service="glue", lookup=creds.valid) as front:
        env = no_static_keys(tmp_path)
        # As EKS Pod Identity sets it: the token in a file, which wins over the variable.
        (tmp_path / "token").write_text("pod-identity-token\n")
        env.update({"AWS_CONTAINER_CREDENTIALS_FULL_URI": creds.url,
                    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(tmp_path / "token"),
                    "AWS_CONTAINER_AUTHORIZATION_TOKEN": "a-wrong-token"})
        res = run_clean(tmp_path, slow_pipeline(output(services, front, "container",
                                                       credentials=False), 2000, "100ms"), env)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert front.rejected == 0, front.reasons[:5]
        # Renewed before expiry (3 s into each 6 s life), not per request.
        assert 3 <= len(creds.issued) <= 15 and creds.refused == 0, (creds.issued, creds.refused)
    assert rows_of(services, "container") == 2000
    out = res.stdout + res.stderr
    assert "pod-identity-token" not in out
    for key in creds.issued:
        secret, token, _ = creds.keys[key]
        assert secret not in out and token not in out


def test_instance_role_credentials_through_imdsv2(tmp_path, services):
    with CredentialServer("imds", ttl=600.0) as creds, \
            SigV4Front(services["rest_url"], "unused", "unused", region="eu-west-1",
                       service="glue", lookup=creds.valid) as front:
        env = no_static_keys(tmp_path)
        env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = creds.endpoint
        res = run_clean(tmp_path, pipeline(output(services, front, "instance", credentials=False),
                                           300, batch_size=100), env)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert front.rejected == 0 and front.accepted >= 5, front.reasons[:5]
        # IMDSv2: every metadata read carried the session token.
        assert len(creds.issued) >= 1 and creds.refused == 0 and creds.session_tokens
    assert rows_of(services, "instance") == 300


# Redpanda Connect's aws_sigv4 fields (issue 37, item 7): each acts as there.

def output_with(services, front, table, sigv4_extra):
    """output() with `sigv4_extra` (YAML lines under aws_sigv4) in place of the keys."""
    extra = "".join(f"        {line}\n" for line in sigv4_extra.splitlines())
    return output(services, front, table, credentials=False).replace(
        "        service: glue\n", "        service: glue\n" + extra)


def test_a_role_is_assumed_through_sts_at_the_endpoint_with_the_external_id(tmp_path, services):
    """credentials.role + role_external_id: STS AssumeRole (at `endpoint`), signed with the
    configured keys; the catalog calls are signed with the role's temporary keys. The
    `tcp` section of Redpanda Connect's page, with its defaults, is accepted too."""
    base = {KEY_ID: Credentials(KEY_ID, SECRET)}
    role = "arn:aws:iam::123456789012:role/floe-writer"
    with CredentialServer("sts", ttl=600.0, base=base.get, region="eu-west-1") as sts, \
            SigV4Front(services["rest_url"], "unused", "unused", region="eu-west-1",
                       service="glue", lookup=sts.valid) as front:
        extra = (f"endpoint: {sts.endpoint}\n"
                 "tcp:\n  connect_timeout: 0s\n  keep_alive: { idle: 15s, interval: 15s, count: 9 }\n"
                 "  tcp_user_timeout: 0s\n"
                 f"credentials:\n  id: {KEY_ID}\n  secret: {SECRET}\n  role: {role}\n"
                 "  role_external_id: ext-4242\n")
        res = run_clean(tmp_path, pipeline(output_with(services, front, "assumed", extra), 300,
                                           batch_size=100), no_static_keys(tmp_path))
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert front.rejected == 0 and front.accepted >= 5, front.reasons[:5]
        assert sts.refused == 0, sts.reasons[:3]
        assert sts.requests and sts.requests[0]["RoleArn"] == role, sts.requests
        assert sts.requests[0]["ExternalId"] == "ext-4242"
    assert rows_of(services, "assumed") == 300
    out = res.stdout + res.stderr
    assert SECRET not in out
    for key in sts.issued:
        assert sts.keys[key][0] not in out and sts.keys[key][1] not in out


def test_from_ec2_role_takes_the_instance_role_over_the_environment(tmp_path, services):
    with CredentialServer("imds", ttl=600.0) as creds, \
            SigV4Front(services["rest_url"], "unused", "unused", region="eu-west-1",
                       service="glue", lookup=creds.valid) as front:
        env = no_static_keys(tmp_path)
        env.update({"AWS_EC2_METADATA_SERVICE_ENDPOINT": creds.endpoint,
                    "AWS_ACCESS_KEY_ID": "AKIDNOTTHEINSTANCE", "AWS_SECRET_ACCESS_KEY": "not-the-instance"})
        res = run_clean(tmp_path, pipeline(output_with(services, front, "ec2_role",
                                                       "credentials: { from_ec2_role: true }"),
                                           200, batch_size=100), env)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert front.rejected == 0 and front.accepted >= 5, front.reasons[:5]
        assert creds.issued and creds.refused == 0
    assert rows_of(services, "ec2_role") == 200


def test_a_named_profile_signs_in_place_of_the_default_one(tmp_path, services):
    (tmp_path / "credentials").write_text(
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = not-this-one\n\n"
        f"[writer]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n")
    with SigV4Front(services["rest_url"], KEY_ID, SECRET, region="eu-west-1",
                    service="glue") as front:
        env = no_static_keys(tmp_path)
        env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "credentials")
        res = run_clean(tmp_path, pipeline(output_with(services, front, "profile",
                                                       "credentials: { profile: writer }"),
                                           200, batch_size=100), env)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert front.rejected == 0 and front.accepted >= 5, front.reasons[:5]
    assert rows_of(services, "profile") == 200
