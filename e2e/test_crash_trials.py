"""A smoke subset of the crash trials (e2e/crash_trials.py) in `make test`: one trial per
kill point and catalog with exactly-once, and a random kill at-least-once. The full
matrix (50 trials each) is `make reliability`."""
import random

import pytest

from crash_trials import POINTS, check, run_trial

POINT_NAMES = list(POINTS) + ["random"]


@pytest.mark.parametrize("catalog", ["rest", "sql"])
@pytest.mark.parametrize("point,exactly_once", [(p, True) for p in POINT_NAMES]
                         + [("random", False)])
def test_a_killed_host_loses_and_duplicates_nothing(tmp_path, services, catalog, point,
                                                     exactly_once):
    seed = random.randrange(1 << 30)
    outcome = run_trial(services, str(tmp_path), catalog, point, exactly_once,
                        random.Random(seed), f"smoke{seed}")
    print({k: v for k, v in outcome.items() if k != "log_tail"})
    problems = check(outcome)
    assert not problems, f"seed {seed}: " + "; ".join(problems)
