"""The registry of operator records, and the kinds of case a record gives the shared sweeps.

Each ``tests/test_ops_<op>.py`` has a ``class TestSamples(OperatorTests)``: the record of
the operators it covers. Beside its samples (``builders``, ``references``, ...), the record
gives the cases of the sweeps that run over every operator, as OpInfo's
``sample_inputs_func``/``error_inputs_func`` do:

- ``error_calls`` (:class:`ErrorCall`) and ``raw_accepts``: hostile arguments,
  ``tests/test_ops_errors.py``;
- ``autocast`` (:class:`AutocastUnit`) or ``autocast_elsewhere``: the plain pair under
  ``torch.autocast``, ``tests/test_ops_autocast.py``;
- ``compile_calls`` (:class:`CompileCall`): over a MetadataTensor under ``torch.compile``,
  ``tests/test_compile.py``;
- ``transforms`` (:class:`Transform`): torch.func and forward-mode AD,
  ``tests/test_ops_func.py``.

The sweeps iterate :func:`records` (every such file, found by name) and :func:`cases` (one
field of every record, merged): adding an operator adds its own record, and no shared list
names it.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

TESTS = Path(__file__).resolve().parents[1]


class ErrorCall(NamedTuple):
    """A public entry point, its valid float64 CPU arguments (``make()``: made anew for each
    call, by name), the plain-PyTorch maths, and the hostile variants of each argument it
    takes as valid (argument -> variant names of ``tests/test_ops_errors.py``)."""

    fn: Callable
    make: Callable[[], dict[str, Any]]
    reference: Callable
    accepts: dict[str, frozenset[str]] = {}


class AutocastUnit(NamedTuple):
    """``fused(*leaves)`` and ``pair(*leaves)``: the same maths, the pair in plain PyTorch.
    ``leaves`` are float32 tensors (those requiring grad are differentiated); modules are
    made by ``make`` and copied, so that each side has its own parameters and buffers.
    ``operator``: the public entry point it exercises, where the case's name does not
    start with it."""

    fused: Callable
    pair: Callable
    leaves: Callable  # device -> list of tensors
    make: Callable | None = None  # (device, training) -> (fused module, pair module)
    operator: str | None = None


class CompileCall(NamedTuple):
    """``fn(*args())``, the first argument a MetadataTensor, compiled (fullgraph) and eager."""

    fn: Callable
    args: Callable[[], tuple]


class Transform(NamedTuple):
    """``fn`` against its plain-PyTorch ``reference`` under every torch.func transform, in
    float64: arguments of ``shapes``, vmapped over ``in_dims`` (which vary per sample).
    ``operator`` is the operator it calls; ``no_double_backward``: its backward is a kernel
    without a derivative, refused with an error naming ``tensortools.ops.<operator>``;
    ``second_order_reference``: the maths its second derivatives are held to, where not
    ``reference``; ``slow``: the tests of tests/test_ops_func.py over a second for it
    ("second_order", "gradcheck")."""

    fn: Callable
    reference: Callable
    shapes: list[tuple[int, ...]]
    in_dims: tuple[int | None, ...]
    operator: str
    no_double_backward: bool = False
    second_order_reference: Callable | None = None
    slow: frozenset[str] = frozenset()


def public_operator(case: str) -> str:
    """The public entry point a case's name starts with: ``fused_conv_bn2d(eval)`` ->
    ``fused_conv_bn2d``."""
    return case.split("(")[0]


@functools.cache
def records() -> dict[str, type]:
    """Every operator record: ``tests/test_ops_<op>.py``'s ``TestSamples``, by ``<op>``."""
    found = {}
    for path in sorted(TESTS.glob("test_ops_*.py")):
        if re.search(r"^class TestSamples\(", path.read_text(), re.MULTILINE):
            module = importlib.import_module(path.stem)
            found[path.stem.removeprefix("test_ops_")] = module.TestSamples
    return found


def cases(field: str) -> dict[str, Any]:
    """One field (a dict of named cases) of every record, merged; a name two records give
    is an error naming both."""
    merged: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for module, record in records().items():
        for name, case in getattr(record, field).items():
            if name in merged:
                raise ValueError(
                    f"{field}: case {name!r} is in the records of both "
                    f"test_ops_{owner[name]}.py and test_ops_{module}.py"
                )
            merged[name], owner[name] = case, module
    return merged
