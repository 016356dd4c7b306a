"""What torch.compile traces in place of tensortools' C dispatch functions, in one place (as
torch keeps ``torch/_dynamo/polyfills/``).

torch.compile cannot trace C: for each C function a traced call can reach, dynamo traces
the Python function registered here instead (``torch.compiler.substitute_in_graph``), once
dynamo is loaded (:func:`tensortools._compiler.when_dynamo_loads`). Each stand-in is the
Python path the C function is a faster form of. See Note [The compiled paths] ("Under
torch.compile") in docs/design.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tensortools._compiler import when_dynamo_loads
from tensortools._native import C as _C

__all__ = ["STAND_INS"]


def traced_torch_function(cls, func, types, args=(), kwargs=None):
    """For TensorWrapper's and ScalarTensor's compiled __torch_function__: the class's
    Python path, which defines every call's behaviour."""
    return cls._python_torch_function(func, types, args, kwargs)


def traced_path_of(cls: type, func: Callable, types: tuple) -> int:
    """For the compiled path's gate (compiled_path.path_of): traced, no call takes the
    compiled path, so the Python path runs whole, as written (WrapperPath.PYTHON)."""
    return _PYTHON


_PYTHON = _C.wrapper_path_kinds["PYTHON"]

#: C function -> the Python function torch.compile traces in its place.
STAND_INS: dict[Callable, Callable[..., Any]] = {
    _C.wrapper_torch_function: traced_torch_function,
    _C.scalar_torch_function: traced_torch_function,
    _C.wrapper_path_of: traced_path_of,
}


@when_dynamo_loads
def _register_with_dynamo() -> None:
    for original, traced in STAND_INS.items():
        torch.compiler.substitute_in_graph(original, skip_signature_check=True)(traced)
