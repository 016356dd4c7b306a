"""What the compiled path of :class:`~tensortools.dispatch.TensorWrapper`
(csrc/python/wrapper_dispatch.cpp and its files) reads and calls back: the kinds of path
(:class:`WrapperPath`), the record each class publishes (:class:`WrapperRecord`, built by
:func:`record_of` from the facts the class states), the hooks it stands in for
(:func:`keeps_hooks`), its gate (:func:`path_of`), and the Python function it hands every
result but one new plain tensor (:func:`wrap_result`)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils._pytree import SUPPORTED_NODES

from tensortools._native import C as _C
from tensortools._settings import OVERRIDES
from tensortools.dispatch.results import NO_WRAP, argument_tensors, wrap_outputs
from tensortools.dispatch.table import POLICY

__all__ = [
    "RECORD_INPUTS",
    "WrapperPath",
    "WrapperRecord",
    "keeps_hooks",
    "only_own_types",
    "path_of",
    "record_of",
    "wrap_result",
]


#: The paths csrc/python/wrapper_dispatch.cpp takes for a class's common call, by the
#: values that file defines (exported from it: one definition): PYTHON (the Python path),
#: WRAP (results wrapped as the class), WRAP_METADATA (each result with a copy of the first
#: metadata-carrying argument's metadata), PLAIN (the plain call alone).
WrapperPath = enum.IntEnum("WrapperPath", _C.wrapper_path_kinds)


class WrapperRecord(NamedTuple):
    """What the compiled path reads from a wrapper class (``cls._fast``), by these names
    (csrc/python/wrapper_record.cpp finds each field in the class by its name, once; any
    other object in ``cls._fast`` sends every call to the Python path)."""

    #: the WrapperPath of the class's common call (as an int)
    kind: int
    #: the class's handler table: a call with a handler takes the Python path
    handlers: dict
    #: a logging.Logger, or None: while it is enabled for INFO, the Python path
    logger: Any = None
    #: a per-thread store, or None: while its value is set in the thread, the Python path
    captures: Any = None
    #: for WRAP_METADATA, the class whose instances carry metadata; else None
    carrier: type | None = None
    #: for WRAP_METADATA, the functions whose calls with a batch among the arguments may
    #: stay on the compiled path (a dict: None keeps the batch, a Rows or OverDims is
    #: judged by it; every other such call takes the Python path), or None
    batch_calls: Mapping | None = None


# The class methods whose behaviour the compiled path stands in for.
_HOOKS = ("context", "wrap", "fallback", "call_plain", "_python_torch_function")

#: The class attributes a wrapper class states its compiled path's facts in (documented
#: on TensorWrapper): with the hooks and __torch_dispatch__, what a record is built from.
#: Assigning or deleting any of them on a class rebuilds its record and its subclasses'.
FACTS = (
    "_fast_wrap",
    "_fast_requires",
    "_fast_switches",
    "_fast_logger",
    "_fast_captures",
    "_fast_carrier",
    "_fast_batch_calls",
)
RECORD_INPUTS = frozenset((*FACTS, *_HOOKS, "__torch_dispatch__"))


def keeps_hooks(cls: type, base: type) -> bool:
    """Whether cls has base's hooks: none replaced below base (also not by a static method
    or a plain function)."""
    return all(
        getattr(getattr(cls, n), "__func__", None) is getattr(base, n).__func__ for n in _HOOKS
    )


def record_of(cls: type) -> WrapperRecord:
    """cls's record, from the facts it states (``_fast_*``, see TensorWrapper), the
    process-wide values of its settings, its handlers and its hooks. The compiled path
    knows the hooks of the nearest class that states ``_fast_wrap`` (its owner): a class
    that replaces one of them, a class under the "strict" policy, and one with a
    __torch_dispatch__ of its own (whose dispatch keys only as_subclass sets) take the
    Python path."""
    owner = next(k for k in cls.__mro__ if "_fast_wrap" in k.__dict__)
    if cls._fast_wrap not in _KINDS:
        raise TypeError(
            f"{cls.__name__}: '_fast_wrap' must be a WrapperPath, got {cls._fast_wrap!r}"
        )
    kind = WrapperPath(cls._fast_wrap)
    if (
        POLICY.global_value(cls) != "fallback"
        or not keeps_hooks(cls, owner)
        or cls.__torch_dispatch__ is not torch._C._disabled_torch_dispatch_impl
    ):
        kind = WrapperPath.PYTHON
    elif not all(setting.global_value(cls) for setting in cls._fast_switches):
        kind = WrapperPath.PLAIN
    elif any(setting.global_value(cls) != value for setting, value in cls._fast_requires):
        kind = WrapperPath.PYTHON
    carrier, calls = None, None
    if cls._fast_wrap == WrapperPath.WRAP_METADATA:
        carrier = owner if cls._fast_carrier is None else cls._fast_carrier
        calls = cls._fast_batch_calls
    return WrapperRecord(
        kind=int(kind),
        handlers=cls._handlers,
        logger=cls._fast_logger,
        captures=cls._fast_captures,
        carrier=carrier,
        batch_calls=calls,
    )


_KINDS = frozenset(WrapperPath)

#: only_own_types(cls, types) -> bool: whether every overriding type of a call is cls, a
#: subclass or a parent of it, or torch.Tensor (no type cls knows nothing about takes
#: part): the rule of the gate, exported from C (one definition).
only_own_types: Callable[[type, tuple], bool] = _C.only_own_types

#: path_of(cls, func, types) -> int: the WrapperPath the compiled path takes for cls's call
#: of func among types, before it reads the arguments (PYTHON where it leaves the call to
#: the Python path): its gate, exported from C (one definition) for the Python path to ask.
path_of: Callable[[type, Callable, tuple], int] = _C.wrapper_path_of


#: Result types with no tensor in them: returned as they are, unwalked.
_NOT_TENSORS = frozenset({int, float, bool, complex, str, torch.Size, torch.dtype, torch.device})


def wrap_result(
    cls: type, func: Callable, result: Any, context: Any, args: tuple, kwargs: dict | None
) -> Any:
    """A result of the compiled path's call other than one new plain strided tensor,
    wrapped as the Python path wraps it (for a batch's call, which comes with no context:
    with the class's own, as the Python path makes it, and the batch settled by the
    class's ``_settle_batch`` where the function's record judges its calls)."""
    if result is None or type(result) in _NOT_TENSORS:
        return result  # (t.dim(), t.shape, t.dtype: nothing to wrap, nothing to walk)
    args, kwargs = args or (), kwargs or {}
    call = (func, args, kwargs, argument_tensors(args, kwargs))
    if context is None and cls._fast.kind == WrapperPath.WRAP_METADATA:
        out = wrap_outputs(cls, result, cls.context(func, args, kwargs), {}, call)
        calls, settle = cls._fast.batch_calls, getattr(cls, "_settle_batch", None)
        if calls is None or settle is None or calls.get(func) is None:
            return out  # (a "keep" record: every result is the batch)
        return settle(func, args, kwargs, out, call[3])
    return wrap_outputs(cls, result, context, {}, call)


_C.wrapper_dispatch_setup(
    Tensor, frozenset(NO_WRAP), wrap_result, OVERRIDES, SUPPORTED_NODES, WrapperRecord
)
