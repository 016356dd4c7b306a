"""The C dispatch paths under hostile Python (tests/_support/hostile_dispatch.py) in a separate
process: it must not die from a signal, and each path must give the Python path's answer
(for a mutation made by a finalizer: the Python path's with the mutation made before the
call, or without it)."""

import pytest
from _support.script_runs import run_script

pytestmark = pytest.mark.slow  # starts a process


def test_hostile_python_inside_the_c_paths_crashes_nothing_and_changes_no_answer():
    lines = run_script("hostile_dispatch.py", 600)
    # a result that only a weak cache held is wrapped as an alias: the cache's object
    # stays the plain tensor it was
    assert lines[-1] == "weakly held result: MetadataTensor beside Tensor", lines[-1]
    outcomes = dict(line.split(" => ", 1) for line in lines[:-1])
    from _support.hostile_dispatch import CASES

    assert outcomes.keys() == CASES.keys()
    differing = {name: outcome for name, outcome in outcomes.items() if outcome != "same"}
    assert not differing, differing
