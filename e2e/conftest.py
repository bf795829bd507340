import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from services import Services  # noqa: E402


@pytest.fixture(scope="session")
def running_services():
    """SeaweedFS + Apache's REST fixture on 127.0.0.1 for the whole session, stopped by PID
    (the `Services` object: tests that crash and restart a service need it)."""
    with Services() as s:
        yield s


@pytest.fixture(scope="session")
def services(running_services):
    """The services' endpoints and credentials."""
    return running_services.info


# Output files the tests keep of every floe run (`keep_output`), scanned for secrets.
OUTPUT_SUFFIXES = (".stdout", ".stderr", ".log")


def keep_output(tmp_path, name, stdout, stderr):
    """Saves a floe run's output beside the test, so the secrets check reads it."""
    for suffix, text in ((".stdout", stdout), (".stderr", stderr)):
        if text:
            (tmp_path / f"{name}{suffix}").write_text(text if isinstance(text, str) else text.decode(errors="replace"))


@pytest.fixture(autouse=True)
def no_secret_in_any_output(request, tmp_path):
    """After every test that used the services: no log line or error floe printed holds
    the S3 secret key (the secrets check of the reliability issue, over the whole suite)."""
    yield
    if "services" not in request.fixturenames:
        return
    secret = request.getfixturevalue("services")["secret_key"]
    for f in tmp_path.rglob("*"):
        if f.is_file() and f.suffix in OUTPUT_SUFFIXES:
            text = f.read_text(errors="replace")
            assert secret not in text, f"{f.name} holds the S3 secret key"
