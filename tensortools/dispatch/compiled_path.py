"""What the compiled path of :class:`~tensortools.dispatch.TensorWrapper`
(csrc/python/wrapper_dispatch.cpp) reads and calls back: the kinds of path
(:class:`WrapperPath`), the record each class publishes (:class:`WrapperRecord`), the
hooks it stands in for (:func:`keeps_hooks`), and the Python function it hands every
result but one new plain tensor (:func:`wrap_result`)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils._pytree import SUPPORTED_NODES

from tensortools._native import C as _C
from tensortools._settings import OVERRIDES
from tensortools.dispatch.results import NO_WRAP, argument_tensors, wrap_outputs

__all__ = ["WrapperPath", "WrapperRecord", "keeps_hooks", "wrap_result"]


#: The paths csrc/python/wrapper_dispatch.cpp takes for a class's common call, by the
#: values that file defines (exported from it: one definition): PYTHON (the Python path),
#: WRAP (results wrapped as the class), WRAP_METADATA (each result with a copy of the first
#: metadata-carrying argument's metadata), PLAIN (the plain call alone).
WrapperPath = enum.IntEnum("WrapperPath", _C.wrapper_path_kinds)


class WrapperRecord(NamedTuple):
    """What the compiled path reads from a wrapper class (``cls._fast``)."""

    #: the WrapperPath of the class's common call (as an int)
    kind: int
    #: the class's handler table: a call with a handler takes the Python path
    handlers: dict
    #: a logging.Logger, or None: while it is enabled for INFO, the Python path
    logger: Any
    #: a per-thread store, or None: while its value is set in the thread, the Python path
    captures: Any
    #: for WRAP_METADATA, the class whose instances carry metadata; else None
    carrier: type | None
    #: for WRAP_METADATA, the functions whose calls with a batch among the arguments may
    #: stay on the compiled path (a dict; every other such call takes the Python path), or
    #: None
    batch_rules: dict | None = None


# The class methods whose behaviour the compiled path stands in for.
_HOOKS = ("context", "wrap", "fallback", "call_plain", "_python_torch_function")


def keeps_hooks(cls: type, base: type) -> bool:
    """Whether cls has base's hooks: none replaced below base (also not by a static method
    or a plain function). The compiled path knows the hooks of the classes that define
    _fast_kind, and only those."""
    return all(
        getattr(getattr(cls, n), "__func__", None) is getattr(base, n).__func__ for n in _HOOKS
    )


#: Result types with no tensor in them: returned as they are, unwalked.
_NOT_TENSORS = frozenset({int, float, bool, complex, str, torch.Size, torch.dtype, torch.device})


def wrap_result(
    cls: type, func: Callable, result: Any, context: Any, args: tuple, kwargs: dict | None
) -> Any:
    """A result of the compiled path's call other than one new plain strided tensor,
    wrapped as the Python path wraps it (for a batch's call, which comes with no context:
    with the class's own, as the Python path makes it)."""
    if result is None or type(result) in _NOT_TENSORS:
        return result  # (t.dim(), t.shape, t.dtype: nothing to wrap, nothing to walk)
    args, kwargs = args or (), kwargs or {}
    if context is None and cls._fast.kind == WrapperPath.WRAP_METADATA:
        context = cls.context(func, args, kwargs)
    call = (func, args, kwargs, argument_tensors(args, kwargs))
    return wrap_outputs(cls, result, context, {}, call)


_C.wrapper_dispatch_setup(Tensor, frozenset(NO_WRAP), wrap_result, OVERRIDES, SUPPORTED_NODES)
