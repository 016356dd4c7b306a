"""A batch of hostile calls (tests/_support/hostile_calls.py) in a separate process: the process
must not die from a signal, and every call must return or raise a TypeError, ValueError
or RuntimeError."""

import pytest
from _support.script_runs import run_script

pytestmark = pytest.mark.slow  # starts processes

ALLOWED = {"ok", "TypeError", "ValueError", "RuntimeError", "NotImplementedError"}


def test_hostile_calls_do_not_crash_the_process():
    outcomes = dict(line.split(": ", 1) for line in run_script("hostile_calls.py", 300))
    from _support.hostile_calls import CALLS, SPARSE

    assert outcomes.keys() == CALLS.keys()
    for name, outcome in outcomes.items():
        assert outcome.split(" ", 1)[0] in ALLOWED, (name, outcome)
    # the calls that must be refused are
    assert outcomes["conv_bn raw stride 0"].startswith("ValueError")
    assert outcomes["lltm_backward raw mismatched"].startswith("ValueError")
    assert outcomes["conv_bn raw backward grad on meta"].startswith("ValueError")
    for name in SPARSE:  # every malformed sparse adjacency is refused, naming it
        assert outcomes[name].startswith("ValueError") and "'adj'" in outcomes[name], (
            name,
            outcomes[name],
        )
