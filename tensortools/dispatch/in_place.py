"""Which arguments a call writes: the rule every type's dispatch uses for in-place calls
(``t.add_(x)``, ``t += x``, ``torch.add(a, b, out=t)``, ``F.relu(t, inplace=True)``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools._compiler import when_dynamo_loads
from tensortools.dispatch.tensor_like import INPLACE_OPERATORS

__all__ = ["OutOfPlace", "out_of_place_form", "written_arguments"]

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


class OutOfPlace(NamedTuple):
    """An in-place call taken apart: the out-of-place call computing what it writes,
    and the tensor it writes that into."""

    func: Callable
    args: tuple
    kwargs: dict
    target: Any


def out_of_place_form(
    func: Callable, args: tuple, kwargs: dict, known: Callable[[Callable], bool] = callable
) -> OutOfPlace | None:
    """The out-of-place form of a call that writes one tensor, or None: ``torch.sin(x,
    out=o)`` computes ``torch.sin(x)`` into ``o``; ``F.relu(x, inplace=True)`` and
    ``F.relu_(x)`` compute ``F.relu(x)`` into ``x``; ``x.add_(y)`` computes ``x.add(y)``,
    ``x += y`` computes ``x + y``. torch's in-place forms give what the out-of-place form
    gives, cast to the written tensor's dtype (where torch allows that cast), so a type that
    answers the out-of-place form cheaply answers the in-place one too. Where a function has
    several out-of-place forms (``torch.threshold`` and ``F.threshold``), the first that
    ``known`` accepts is taken."""
    if getattr(func, "_schema", None) is not None:
        return None  # (torch.ops overloads: their schemas name other outputs)
    if "out" in kwargs:
        out = kwargs["out"]
        if out is None or isinstance(out, (tuple, list)):
            return None
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        return OutOfPlace(func, args, rest, out)
    if "inplace" in kwargs:  # (a flag that is no bool is left to the call's own rules)
        if kwargs["inplace"] is not True or not args:
            return None
        return OutOfPlace(func, args, {**kwargs, "inplace": False}, args[0])
    position = _inplace_position(func)
    if position is not None and len(args) > position and args[position] is True:
        flags_off = (*args[:position], False, *args[position + 1 :])
        return OutOfPlace(func, flags_off, kwargs, args[0])
    base = next((f for f in _out_of_place_functions(func) if known(f)), None)
    if base is None or not args:
        return None
    return OutOfPlace(base, args, kwargs, args[0])


@functools.cache
def _out_of_place_by_name(func: Callable) -> tuple[Callable, ...]:
    name = getattr(func, "__name__", "")
    if name in INPLACE_OPERATORS:  # __iadd__ -> __add__ (or add; __idiv__ -> div)
        found = (getattr(Tensor, f"__{name[3:]}", None), getattr(Tensor, name[3:-2], None))
        return tuple(f for f in found if callable(f))
    if not name.endswith("_") or name.endswith("__") or func == Tensor.requires_grad_:
        return ()
    base = name[:-1]
    # A Tensor method's out-of-place form is the method (x.add_ -> x.add); a function's is
    # the function of the same namespace (torch.relu_ -> torch.relu, F.elu_ -> F.elu),
    # which takes the same arguments in the same order. (torch.threshold_ is also
    # F.threshold_: both namespaces' forms are candidates.)
    if getattr(Tensor, name, None) is func:
        found = getattr(Tensor, base, None)
        return (found,) if callable(found) else ()
    return tuple(
        getattr(namespace, base)
        for namespace in (torch.nn.functional, torch, torch.special)
        if getattr(namespace, name, None) is func and callable(getattr(namespace, base, None))
    )


def _out_of_place_functions(func: Callable) -> tuple[Callable, ...]:
    try:
        return _out_of_place_by_name(getattr(func, "method", func))
    except TypeError:  # unhashable callables
        return ()


def _distinct(objects: list) -> list:
    return list({id(o): o for o in objects if o is not None}.values())


# The facts below depend on the function alone: torch.compile takes them as constants (it
# can trace neither inspect nor string methods on a function's name), read once when it
# traces a call (see _register_with_dynamo).


def _kind(func: Callable) -> str:
    """ "in place" for a function named as one (a single trailing underscore, an in-place
    operator, item assignment), "module_load" for Tensor.module_load, else ""."""
    name = getattr(func, "__name__", "")
    if name in _INPLACE_DUNDERS or (name.endswith("_") and not name.endswith("__")):
        return "in place"
    return "module_load" if func == Tensor.module_load else ""


def _first_parameter(func: Callable) -> str | None:
    """The name of a function's first parameter (torch.nn.init.zeros_(tensor=...))."""
    return _signature(func)[0]


def _inplace_position(func: Callable) -> int | None:
    """The position of a function's `inplace` parameter (torch.nn.functional.relu(input,
    inplace=False), ...), or None."""
    return _signature(func)[1]


@when_dynamo_loads
def _register_with_dynamo() -> None:
    for fact in (_kind, _first_parameter, _inplace_position):
        torch.compiler.assume_constant_result(fact)  # (marks the function itself)


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
