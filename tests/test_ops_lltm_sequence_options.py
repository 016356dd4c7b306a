"""The LLTM sequence's CUDA path options (tensortools.ops.set_lltm_sequence_options): the
checks of the setter, the environment variables read once at import, and the CPU kernels,
which have one path and must not depend on them. (The paths themselves:
test_ops_lltm_sequence_cuda.py.)"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from _support.lltm_cases import compare_sequence, make_sequence_args, run_sequence, sequence_grads

from tensortools import ops
from tensortools.ops._lltm_sequence_options import options_from_environment

MODES = ["auto", "loop", "persistent"]
CAPS = [None, 1, 7, 2**61 - 1]


@pytest.fixture(autouse=True)
def _restore_options():
    previous = ops.lltm_sequence_options()
    yield
    ops.set_lltm_sequence_options(**previous._asdict())


@pytest.mark.parametrize("max_blocks", CAPS, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_a_setting_is_what_c_reports_and_the_setter_returns_the_previous(mode, max_blocks):
    start = ops.set_lltm_sequence_options(mode="loop", max_blocks=3)
    assert isinstance(start, ops.LLTMSequenceOptions)
    previous = ops.set_lltm_sequence_options(mode=mode, max_blocks=max_blocks)
    assert previous == ("loop", 3)
    assert ops.lltm_sequence_options() == (mode, max_blocks)  # (read back from C)
    assert ops.set_lltm_sequence_options() == (mode, max_blocks)
    assert ops.lltm_sequence_options() == ("auto", None)  # (the defaults)


BAD_SETTINGS = [
    ({"mode": None}, TypeError, "'mode'"),
    ({"mode": 1}, TypeError, "'mode'"),
    ({"mode": b"loop"}, TypeError, "'mode'"),
    ({"mode": ["loop"]}, TypeError, "'mode'"),
    ({"mode": ""}, ValueError, "'mode'"),
    ({"mode": "Loop"}, ValueError, "'mode'"),
    ({"mode": " loop"}, ValueError, "'mode'"),
    ({"mode": "fast"}, ValueError, "'mode'"),
    ({"max_blocks": True}, TypeError, "'max_blocks'"),
    ({"max_blocks": 4.0}, TypeError, "'max_blocks'"),
    ({"max_blocks": "4"}, TypeError, "'max_blocks'"),
    ({"max_blocks": torch.tensor(4)}, TypeError, "'max_blocks'"),
    ({"max_blocks": 0}, ValueError, "'max_blocks'"),
    ({"max_blocks": -1}, ValueError, "'max_blocks'"),
    ({"max_blocks": 2**61}, ValueError, "'max_blocks'"),
    ({"max_blocks": 2**64}, ValueError, "'max_blocks'"),
]


@pytest.mark.parametrize("kwargs, error, name", BAD_SETTINGS, ids=str)
def test_a_bad_setting_is_refused_naming_the_argument_and_changes_nothing(kwargs, error, name):
    ops.set_lltm_sequence_options(mode="persistent", max_blocks=5)
    with pytest.raises(error, match=name):
        ops.set_lltm_sequence_options(**kwargs)
    assert ops.lltm_sequence_options() == ("persistent", 5)


def test_the_options_are_keywords():
    with pytest.raises(TypeError):
        ops.set_lltm_sequence_options("loop")  # type: ignore[misc]


ENVIRONMENTS = [
    ({}, ("auto", None)),
    ({"TENSORTOOLS_LLTM_SEQUENCE": ""}, ("auto", None)),
    ({"TENSORTOOLS_LLTM_SEQUENCE": "auto"}, ("auto", None)),
    ({"TENSORTOOLS_LLTM_SEQUENCE": "loop"}, ("loop", None)),
    ({"TENSORTOOLS_LLTM_SEQUENCE": " persistent\n"}, ("persistent", None)),
    ({"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "1"}, ("auto", 1)),
    ({"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": ""}, ("auto", None)),
    (
        {"TENSORTOOLS_LLTM_SEQUENCE": "persistent", "TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "64"},
        ("persistent", 64),
    ),
]
BAD_ENVIRONMENTS = [
    {"TENSORTOOLS_LLTM_SEQUENCE": "fast"},
    {"TENSORTOOLS_LLTM_SEQUENCE": "LOOP"},
    {"TENSORTOOLS_LLTM_SEQUENCE": "1"},
    {"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "0"},
    {"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "-3"},
    {"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "+3"},
    {"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "1.5"},
    {"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "all"},
    {"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "\u00b2"},
    {"TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": str(2**61)},
]


@pytest.mark.parametrize("environ, want", ENVIRONMENTS, ids=str)
def test_the_environment_gives_the_documented_options(environ, want):
    assert options_from_environment(environ) == want


@pytest.mark.parametrize("environ", BAD_ENVIRONMENTS, ids=str)
def test_a_bad_environment_value_is_an_error_naming_the_variable(environ):
    (variable,) = environ
    with pytest.raises(ValueError, match=variable):
        options_from_environment(environ)


_REPORT = textwrap.dedent(
    """
    import tensortools
    print(tuple(tensortools.ops.lltm_sequence_options()))
    """
)


def _import_with(environ: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORTOOLS_LLTM_SEQUENCE")}
    return subprocess.run(
        [sys.executable, "-c", _REPORT],
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_reads_the_environment_once_into_the_setting():
    done = _import_with(
        {"TENSORTOOLS_LLTM_SEQUENCE": "loop", "TENSORTOOLS_LLTM_SEQUENCE_BLOCKS": "12"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "('loop', 12)"


def test_import_with_a_bad_environment_value_fails_naming_the_variable():
    done = _import_with({"TENSORTOOLS_LLTM_SEQUENCE": "fast"})
    assert done.returncode != 0
    assert "ValueError: TENSORTOOLS_LLTM_SEQUENCE must be auto, loop or persistent" in done.stderr


# (steps, batch, features, state): one step; no features; state 1; several of everything.
CPU_SIZES = [(1, 1, 1, 1), (5, 3, 0, 4), (4, 2, 3, 1), (6, 3, 5, 8)]


@pytest.mark.parametrize("size", CPU_SIZES, ids=str)
def test_the_cpu_kernels_give_the_same_bits_under_every_option(size):
    args = make_sequence_args(*size, dtype=torch.float32)
    grads = sequence_grads(size[0], size[1], size[3], dtype=torch.float32)
    ops.set_lltm_sequence_options()
    want = run_sequence(ops.lltm_sequence, args, grads)
    with torch.no_grad():
        want_inference = ops.lltm_sequence(*args)
    for mode in MODES:
        for max_blocks in CAPS:
            ops.set_lltm_sequence_options(mode=mode, max_blocks=max_blocks)
            got = run_sequence(ops.lltm_sequence, args, grads)
            for g, w in zip((*got[0], *got[1]), (*want[0], *want[1])):
                assert torch.equal(g, w), (mode, max_blocks)
            with torch.no_grad():
                for g, w in zip(ops.lltm_sequence(*args), want_inference):
                    assert torch.equal(g, w), (mode, max_blocks)
    # and those bits are the LLTM's: float64 under the last option against the reference
    compare_sequence(make_sequence_args(*size), sequence_grads(size[0], size[1], size[3]))
