"""torch's own parameters of a function, as its argument parser binds a call.

For the functions written in C they come from the operator schemas
(``torch._C._jit_get_schemas_for_operator``), one per overload, for those written in
Python from ``inspect.signature``. :mod:`tensortools.dispatch.binding` binds calls with
them.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

from tensortools._compiler import when_dynamo_loads
from tensortools.dispatch.documented import documented_names

__all__ = ["Positions", "accepts", "torch_positions"]

#: The keyword aliases torch's argument parser accepts for functions written in C
#: (python_arg_parser.cpp: numpy_compatibility_arg_names).
ALIASES = {"axis": "dim", "keepdims": "keepdim", "x": "input", "a": "input", "x1": "input"}
ALIASES["x2"] = "other"

_NO_DEFAULT = object()


class Positions(NamedTuple):
    #: torch's name of a parameter -> the position every overload gives it
    index: Mapping[str, int]
    #: every parameter name of every overload (an alias that is one is not an alias)
    names: frozenset
    #: whether torch's argument parser binds the call (the NumPy aliases apply)
    parsed: bool
    #: the name of each position (the one most overloads give it; '' for a method's tensor)
    layout: tuple[str, ...] = ()
    #: the first position that overloads give different parameters (torch.std's dim or
    #: unbiased), 1 << 30 where there is none
    ambiguous_from: int = 1 << 30
    #: each overload's positional parameters: (name, type, fixed list size or None)
    overloads: tuple[tuple[tuple[str, str, Any], ...], ...] = ()
    #: a method whose one positional parameter is a list of ints, which torch also takes
    #: spread out (x.flip(0, 1), x.view(6, 4)): 0 none, 1 from two ints on, 2 from one int
    #: (no overload takes a lone int there: x.flip(-1) is x.flip((-1,)))
    spread: int = 0
    #: torch's default of a parameter, where its overloads agree
    defaults: Mapping[str, Any] = {}
    #: the names torch documents for each position, for all its overloads
    #: (documented.documented_names: vsplit's indices_or_sections, view's shape)
    documented: tuple[frozenset, ...] = ()
    #: the positions some overload takes an int or a list of ints in (a dim, sizes)
    ints: tuple[int, ...] = ()


_NONE = Positions({}, frozenset(), False)


@functools.cache
def torch_positions(func: Callable) -> Positions:
    """The positional parameters of ``func`` as torch binds them, by name.

    ``index`` lists a name only where every overload that takes it positionally gives it
    the same position and none takes it by keyword only (``torch.std``'s ``unbiased`` is
    not: its overloads differ). The first parameter of a ``Tensor`` method is the tensor
    itself and has no name.
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
    defaults: dict[str, Any] = {}
    overloads = []
    for schema in schemas:
        if schema.overload_name.startswith("prim_") or not any(
            "Tensor" in str(a.type) for a in schema.arguments
        ):
            continue  # (TorchScript's overloads: not torch's Python ones)
        positional = []
        for i, arg in enumerate(schema.arguments):
            key = "input" if arg.name == "self" else arg.name
            names.add(key)
            if arg.kwarg_only or index.setdefault(key, i) != i:
                refused.add(key)
            if not arg.kwarg_only:
                positional.append((key, str(arg.real_type), arg.N))
            default = arg.default_value if arg.has_default_value() else _NO_DEFAULT
            if defaults.setdefault(key, default) is not default and defaults[key] != default:
                defaults[key] = _NO_DEFAULT
        overloads.append(tuple(positional))
    for key in refused:
        index.pop(key, None)
    if method:  # (the tensor itself: t.add(input=...) is torch's TypeError)
        index = {k: i for k, i in index.items() if i > 0}
    layout, ambiguous_from = _layout(overloads)
    return Positions(
        index,
        frozenset(names),
        True,
        ("", *layout[1:]) if method else layout,
        ambiguous_from,
        tuple(overloads) if ambiguous_from < len(layout) else (),
        _spread(overloads) if method else 0,
        {k: v for k, v in defaults.items() if v is not _NO_DEFAULT},
        documented_names(func),
        tuple(
            sorted({i for o in overloads for i, (_, kind, _) in enumerate(o) if _INT.search(kind)})
        ),
    )


_INT = re.compile(r"\bint\b")


@when_dynamo_loads
def _register_with_dynamo() -> None:
    # torch.compile traces a function's body through functools.cache, and cannot trace
    # the schema lookup (str.startswith on a traced function's __name__): it calls the
    # function instead and takes the answer as a constant, which it is (one per func).
    torch.compiler.assume_constant_result(torch_positions)
    torch.compiler.assume_constant_result(torch_positions.__wrapped__)


def _layout(overloads: list) -> tuple[tuple[str, ...], int]:
    """Each position's name (the one most overloads give it; the first of those on a tie)
    and the first position that overloads name differently."""
    longest = max((len(o) for o in overloads), default=0)
    layout, ambiguous_from = [], 1 << 30
    for i in range(longest):
        counts = Counter(o[i][0] for o in overloads if i < len(o))
        layout.append(counts.most_common(1)[0][0])
        if len(counts) > 1:
            ambiguous_from = min(ambiguous_from, i)
    return tuple(layout), ambiguous_from


def _spread(overloads: list) -> int:
    """How torch's parser takes a method's ints spread out (Positions.spread): where the
    method's one positional parameter besides the tensor is a list of ints."""
    lists = ("List[int]", "Optional[List[int]]")
    if not any(len(o) == 2 and o[1][1] in lists for o in overloads):
        return 0
    lone = any(len(o) > 1 and accepts(o[1][1], o[1][2], 1) for o in overloads)
    return 1 if lone else 2


def _python_positions(func: Callable) -> Positions:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return _NONE
    index = {}
    for i, p in enumerate(params):
        if p.kind is not p.POSITIONAL_OR_KEYWORD:
            break
        index[p.name] = i
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    layout = tuple(sorted(index, key=index.get))
    names = frozenset(p.name for p in params)
    documented = documented_names(func)
    return Positions(index, names, False, layout, defaults=defaults, documented=documented)


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(
        value, torch.SymInt
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, complex, torch.SymInt, torch.SymFloat))


def _is_index(value: Any) -> bool:
    """An int, or what torch's parser takes for one: a 0-dim integral tensor."""
    if not isinstance(value, torch.Tensor):
        return _is_int(value)
    with torch._C.DisableTorchFunctionSubclass():
        return value.dim() == 0 and not value.is_floating_point() and not value.is_complex()


_SIMPLE = {
    "bool": lambda v: isinstance(v, (bool, torch.SymBool)),
    "int": _is_index,
    "float": lambda v: _is_number(v) and not isinstance(v, (bool, complex)),
    "number": _is_number,
    "complex": _is_number,
    "str": lambda v: isinstance(v, str),
    "ScalarType": lambda v: isinstance(v, torch.dtype),
    "Layout": lambda v: isinstance(v, torch.layout),
    "MemoryFormat": lambda v: isinstance(v, torch.memory_format),
    "Device": lambda v: isinstance(v, (torch.device, str, int)),
    "Tensor": lambda v: isinstance(v, torch.Tensor) or hasattr(v, "__torch_function__"),
}


def accepts(kind: str, size: Any, value: Any) -> bool:
    """Whether torch's parser takes `value` for a parameter of schema type `kind` (the
    distinctions between overloads only; True for types it does not tell apart)."""
    if kind.startswith("Optional["):
        return value is None or accepts(kind[9:-1], size, value)
    if kind.startswith("List["):
        item = kind[5:-1]
        if isinstance(value, (list, tuple)):
            return all(accepts(item, None, v) for v in value)
        return bool(size) and item == "int" and _is_int(value)  # (int[2] stride=1: [1, 1])
    check = _SIMPLE.get(kind)
    return True if check is None else check(value)
