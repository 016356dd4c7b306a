"""Calls handed to handlers as torch binds them.

torch passes ``__torch_function__`` a call's arguments as the caller wrote them:
``torch.linalg.det(A=d)`` arrives with ``A`` as a keyword, ``torch.linalg.vector_norm(x=d)``
with a NumPy-style alias of ``input``, ``torch.add(d, 2, t)`` in an older overload that
torch still accepts. A handler names its parameters as it likes, so the table binds each
call to the torch function's own parameters first (:func:`bind`): an argument that torch
takes in position ``i`` reaches the handler's ``i``-th parameter, whatever name the caller
used; a keyword-only argument reaches the handler by torch's name. A call the handler's
signature cannot take (more positional arguments than it has parameters, a keyword it
does not know, an argument given twice) is not the handler's: the table leaves it to the
class's policy (the fallback runs it on plain tensors, where torch binds it itself).

torch's parameters come from its operator schemas (``torch._C._jit_get_schemas_for_operator``)
for the functions written in C, from ``inspect.signature`` for those written in Python.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

__all__ = ["HandlerShape", "argument", "bind", "torch_positions"]

# The keyword aliases torch's argument parser accepts for functions written in C
# (python_arg_parser.cpp: numpy_compatibility_arg_names).
_ALIASES = {"axis": "dim", "keepdims": "keepdim", "x": "input", "a": "input", "x1": "input"}
_ALIASES["x2"] = "other"


class _Positions(NamedTuple):
    #: torch's name of a parameter -> the position every overload gives it
    index: Mapping[str, int]
    #: every parameter name of every overload (an alias that is one is not an alias)
    names: frozenset
    #: whether torch's argument parser binds the call (the NumPy aliases apply)
    parsed: bool


_NONE = _Positions({}, frozenset(), False)


@functools.cache
def torch_positions(func: Callable) -> _Positions:
    """The positional parameters of ``func`` as torch binds them, by name.

    A name is listed only where every overload that takes it positionally gives it the same
    position and none takes it by keyword only (``torch.std``'s ``unbiased`` is not: its
    overloads differ). The first parameter of a ``Tensor`` method is the tensor itself and
    has no name.
    """
    func = getattr(func, "method", func)  # (tensortools.dispatch.TensorMethod: the method)
    if isinstance(func, types.FunctionType):
        return _python_positions(func)
    method = isinstance(func, types.MethodDescriptorType)
    if not (method or isinstance(func, types.BuiltinFunctionType)):
        return _NONE  # property getters, slot wrappers: no keywords
    name = getattr(func, "__name__", "")
    if not name or name.startswith("__"):
        return _NONE  # (operators take their operands positionally)
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    except RuntimeError:
        return _NONE
    index: dict[str, int] = {}
    refused: set[str] = set()
    names: set[str] = set()
    for schema in schemas:
        if not any("Tensor" in str(a.type) for a in schema.arguments):
            continue  # (TorchScript's overloads on numbers: not torch's Python ones)
        for i, arg in enumerate(schema.arguments):
            key = "input" if arg.name == "self" else arg.name
            names.add(key)
            if arg.kwarg_only or index.setdefault(key, i) != i:
                refused.add(key)
    for key in refused:
        index.pop(key, None)
    if method:  # (the tensor itself: t.add(input=...) is torch's TypeError)
        index = {k: i for k, i in index.items() if i > 0}
    return _Positions(index, frozenset(names), True)


def _python_positions(func: Callable) -> _Positions:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return _NONE
    index = {}
    for i, p in enumerate(params):
        if p.kind is not p.POSITIONAL_OR_KEYWORD:
            break
        index[p.name] = i
    return _Positions(index, frozenset(p.name for p in params), False)


class HandlerShape(NamedTuple):
    """What a handler's signature takes (None for a callable without one: anything)."""

    #: its positional parameters' names, in order ('' for a positional-only one)
    positional: tuple[str, ...]
    #: whether it takes ``*args``
    more_positional: bool
    #: the names it takes by keyword
    keywords: frozenset
    #: whether it takes ``**kwargs``
    more_keywords: bool
    #: how many positional arguments it takes (inf with ``*args``)
    most_positional: float

    @classmethod
    def of(cls, handler: Callable) -> HandlerShape | None:
        """The shape of the handler a decorator wraps (functools.wraps), with the keywords
        the decorator's own signature adds (``out=``)."""
        try:
            params = inspect.signature(handler).parameters.values()
            outer = inspect.signature(handler, follow_wrapped=False).parameters.values()
        except (TypeError, ValueError):
            return None
        positional = tuple(
            (p.name if p.kind is p.POSITIONAL_OR_KEYWORD else "")
            for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
        keywords = frozenset(
            p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ) | frozenset(p.name for p in outer if p.kind is p.KEYWORD_ONLY)
        kinds = {p.kind for p in params}
        more = inspect.Parameter.VAR_POSITIONAL in kinds
        return cls(
            positional,
            more,
            keywords,
            inspect.Parameter.VAR_KEYWORD in kinds,
            float("inf") if more else len(positional),
        )


def bind(
    func: Callable, shape: HandlerShape, args: tuple, kwargs: dict
) -> tuple[tuple, dict] | None:
    """The call ``func(*args, **kwargs)`` as the handler of signature `shape` takes it, or
    None where the handler cannot take it (the policy then decides)."""
    given = len(args)
    if given > shape.most_positional:
        return None
    if not kwargs:
        return args, kwargs
    key = (func, id(shape), given, *kwargs)  # (shapes live as long as the table's cache)
    plan = _PLANS.get(key, _UNPLANNED)
    if plan is _UNPLANNED:
        if len(_PLANS) > 4096:  # (a bound on memory: the combinations met are few)
            _PLANS.clear()
        plan = _PLANS[key] = _plan(func, shape, given, tuple(kwargs))
    if plan is None:
        return None
    appended, renamed = plan
    if appended:
        args = (*args, *[kwargs[k] for k in appended])
    return args, {to: kwargs[k] for k, to in renamed}


_PLANS: dict[tuple, Any] = {}
_UNPLANNED = object()


def _plan(func: Callable, shape: HandlerShape, given: int, keys: tuple) -> tuple | None:
    """How a call of `given` positional arguments and keyword arguments `keys` reaches the
    handler: (the keys appended as positional arguments, in order; (key, the handler's
    name for it) for the rest), or None where it cannot."""
    positions = torch_positions(func)
    placed: dict[int, str] = {}  # torch's position -> the key that gives it
    canonical: dict[str, str] = {}  # such a key -> torch's name of the parameter
    renamed: list[tuple[str, str]] = []
    for key in keys:
        name = key
        if positions.parsed and key in _ALIASES and key not in positions.names:
            name = _ALIASES[key]
        i = positions.index.get(name)
        if i is None:
            renamed.append((key, name))
        elif i < given or i in placed:
            return None  # given twice: torch's own TypeError, from the fallback
        else:
            placed[i], canonical[key] = key, name
    appended: list[str] = []
    for i in sorted(placed):
        if i == given + len(appended) and i < shape.most_positional:
            appended.append(placed[i])  # (next in line: positional, also into a *args)
        elif i < len(shape.positional):
            if not shape.positional[i]:
                return None  # (positional-only: a gap before it cannot be left)
            renamed.append((placed[i], shape.positional[i]))  # (after a gap: by name)
        else:  # (after a gap, beyond the handler's named parameters: by torch's name)
            renamed.append((placed[i], canonical[placed[i]]))
    names = [to for _, to in renamed]
    if len(set(names)) < len(names) or set(names) & set(shape.positional[: given + len(appended)]):
        return None
    if not (shape.more_keywords or set(names) <= shape.keywords):
        return None
    return tuple(appended), tuple(renamed)


def argument(
    func: Callable, args: tuple, kwargs: Mapping, position: int, default: Any = None
) -> Any:
    """The argument torch binds to `position` of the call ``func(*args, **kwargs)``, given
    by position, by torch's name or by an alias; `default` where the call leaves it out."""
    if position < len(args):
        return args[position]
    positions = torch_positions(func)
    for key, value in kwargs.items():
        if positions.parsed and key in _ALIASES and key not in positions.names:
            key = _ALIASES[key]
        if positions.index.get(key) == position:
            return value
    return default
