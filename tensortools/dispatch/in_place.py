"""Which arguments a call writes: the rule every type's dispatch uses for in-place calls
(``t.add_(x)``, ``t += x``, ``torch.add(a, b, out=t)``, ``F.relu(t, inplace=True)``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools.dispatch.tensor_like import INPLACE_OPERATORS

__all__ = ["written_arguments"]

# Tensor dunders that change their first operand: the in-place operators and item
# assignment (other in-place functions end in a single underscore: add_, zero_, ...).
_INPLACE_DUNDERS = INPLACE_OPERATORS | {"__setitem__"}


def written_arguments(func: Callable, args: tuple, kwargs: dict) -> list:
    """The leaves of the arguments a call writes (each object once, in order): those its
    schema marks as written (torch.ops overloads), its out= arguments, and the first
    argument (or the tensors of a list there, as torch._foreach_*_ takes) of an in-place
    function: a name ending in one underscore, an in-place operator, item assignment,
    inplace=True, module_load."""
    schema = getattr(func, "_schema", None)
    if schema is not None:
        written = [
            args[i] if i < len(args) else kwargs.get(a.name)
            for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        ]
        return _distinct(tree_leaves(written))
    targets = tree_leaves(kwargs.get("out"))
    kind = _kind(func)
    inplace = (
        kind == "in place"
        or _inplace_argument(func, args, kwargs)
        or (kind == "module_load" and not _argument(args, kwargs, 2, "assign"))
    )
    if inplace:
        first = args[0] if args else kwargs.get(_first_parameter(func))
        targets += tree_leaves(first)
    return _distinct(targets)


def _distinct(objects: list) -> list:
    return list({id(o): o for o in objects if o is not None}.values())


# The facts below depend on the function alone: torch.compile takes them as constants (it
# can trace neither inspect nor string methods on a function's name), read once when it
# traces a call.


@torch.compiler.assume_constant_result
def _kind(func: Callable) -> str:
    """ "in place" for a function named as one (a single trailing underscore, an in-place
    operator, item assignment), "module_load" for Tensor.module_load, else ""."""
    name = getattr(func, "__name__", "")
    if name in _INPLACE_DUNDERS or (name.endswith("_") and not name.endswith("__")):
        return "in place"
    return "module_load" if func == Tensor.module_load else ""


@torch.compiler.assume_constant_result
def _first_parameter(func: Callable) -> str | None:
    """The name of a function's first parameter (torch.nn.init.zeros_(tensor=...))."""
    return _signature(func)[0]


@torch.compiler.assume_constant_result
def _inplace_position(func: Callable) -> int | None:
    """The position of a function's `inplace` parameter (torch.nn.functional.relu(input,
    inplace=False), ...), or None."""
    return _signature(func)[1]


def _signature(func: Callable) -> tuple[str | None, int | None]:
    try:
        return _parameters(func)
    except TypeError:  # unhashable callables
        return None, None


@functools.cache
def _parameters(func: Callable) -> tuple[str | None, int | None]:
    try:
        parameters = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):  # builtins without a signature
        return None, None
    first = parameters[0] if parameters else None
    return first, parameters.index("inplace") if "inplace" in parameters else None


def _argument(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _inplace_argument(func: Callable, args: tuple, kwargs: dict) -> bool:
    if "inplace" in kwargs:
        return bool(kwargs["inplace"])
    position = _inplace_position(func)
    return position is not None and len(args) > position and bool(args[position])
