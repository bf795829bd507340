"""Redpanda Connect compatibility (issue 37, item 7): the configs of Redpanda Connect's
`iceberg` output page (e2e/rpcn/, copied unchanged) through `floe lint`. Every field the
page lists is known to floe; what floe refuses, it says why: a template's placeholders and
settings Redpanda Connect would silently choose between, and in the examples an input
floe does not have and keyed writes behind processors that may reorder them (the page's
examples lint clean once those two are changed)."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")
RPCN = os.path.join(ROOT, "e2e", "rpcn")

EXAMPLES = ["cdc-upsert-delete.yaml", "cdc-copy-on-write.yaml"]
FIELD_BLOCKS = {
    "common-fields.yaml": [
        "(8,7) catalog.auth: set one of bearer, oauth2 and aws_sigv4",
        "(9,9) catalog.auth.oauth2: client_id and client_secret must both be set",
        "(25,9) storage.gcp_cloud_storage.credentials_type: service_account needs credentials_file or credentials_json",
    ],
    "all-fields.yaml": [
        "(8,7) catalog.auth: set one of bearer, oauth2 and aws_sigv4",
        "(9,9) catalog.auth.oauth2: client_id and client_secret must both be set",
        "(25,11) catalog.auth.aws_sigv4.credentials: id and secret must both be set, or profile, role or "
        "from_ec2_role (leave credentials out to use the environment or ~/.aws/credentials)",
        "(48,9) storage.aws_s3.credentials: id and secret must both be set (leave credentials out for none)",
        "(55,9) storage.gcp_cloud_storage.credentials_type: service_account needs credentials_file or credentials_json",
    ],
}


def lint(path):
    res = subprocess.run([FLOE, "lint", str(path)], capture_output=True, text=True, timeout=60)
    return res.returncode, [line[len(str(path)):] for line in (res.stdout + res.stderr).splitlines()]


@pytest.mark.parametrize("name", sorted(FIELD_BLOCKS))
def test_every_field_of_the_page_is_known_and_only_placeholders_are_refused(name):
    code, lines = lint(os.path.join(RPCN, name))
    assert code == 1
    # Neither floe's check nor Benthos' names a field it does not know.
    assert not [line for line in lines if "is not a field" in line or "not recognised" in line], lines
    assert lines == FIELD_BLOCKS[name], lines


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_page_examples_lint_to_two_findings_that_say_why(name):
    code, lines = lint(os.path.join(RPCN, name))
    assert code == 1
    assert len(lines) == 2, lines
    keyed = [line for line in lines if line.startswith("(8,3) pipeline.processors run on one thread per CPU")]
    assert keyed and "set pipeline.threads: 1" in keyed[0], lines
    assert "(2,1) unable to infer input type from candidates: [redpanda]" in lines, lines


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_page_examples_lint_clean_with_floes_kafka_input_and_one_pipeline_thread(tmp_path, name):
    text = open(os.path.join(RPCN, name)).read()
    assert "  redpanda:\n" in text and "pipeline:\n  processors:\n" in text
    text = text.replace("  redpanda:\n", "  kafka_franz:\n").replace(
        "pipeline:\n  processors:\n", "pipeline:\n  threads: 1\n  processors:\n")
    cfg = tmp_path / name
    cfg.write_text(text)
    assert lint(cfg) == (0, [])
