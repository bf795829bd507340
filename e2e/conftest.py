import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from services import Services  # noqa: E402


@pytest.fixture(scope="session")
def services():
    """SeaweedFS + Apache's REST fixture on 127.0.0.1 for the whole session, stopped by PID."""
    with Services() as s:
        yield s.info
