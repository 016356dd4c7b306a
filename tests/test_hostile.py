"""A batch of hostile calls (tests/hostile_calls.py) in a separate process: the process
must not die from a signal, and every call must return or raise a TypeError, ValueError
or RuntimeError."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes

ALLOWED = {"ok", "TypeError", "ValueError", "RuntimeError", "NotImplementedError"}


def test_hostile_calls_do_not_crash_the_process():
    script = Path(__file__).with_name("hostile_calls.py")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=script.parent,
    )
    assert done.returncode == 0, (
        f"exit status {done.returncode} (negative: killed by that signal)\n"
        f"{done.stdout}\n{done.stderr[-3000:]}"
    )
    lines = done.stdout.splitlines()
    assert lines[-1] == "done", done.stdout
    outcomes = dict(line.split(": ", 1) for line in lines[:-1])
    from hostile_calls import CALLS, SPARSE

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
