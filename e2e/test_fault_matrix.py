"""A smoke subset of the fault matrix (e2e/fault_matrix.py) in `make test`: one
exactly-once trial of a fault of each kind of part (storage, catalog, a crashed service,
four writers, a crashed writer, lost acknowledgements). The whole matrix (every fault, both modes, two trials each) is
`make reliability`."""
import uuid

import pytest

from fault_matrix import FAULTS_BY_NAME, check, run_trial

SMOKE = ["s3-reset-upload", "s3-slowdown", "catalog-lost-answer", "seaweedfs-crash",
         "rest-fixture-crash", "four-writers", "writer-crash", "lost-acks"]


@pytest.mark.parametrize("fault", SMOKE)
def test_a_fault_loses_and_duplicates_nothing(tmp_path, running_services, services, fault):
    outcome = run_trial(running_services, str(tmp_path), FAULTS_BY_NAME[fault], True,
                        f"smoke{uuid.uuid4().hex[:8]}")
    print({k: v for k, v in outcome.items() if k != "log_tail"})
    problems = check(outcome)
    assert not problems, "; ".join(problems)
