"""Which functions a type is classified over, and the outcome of each for it."""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["OUTCOMES", "outcome", "overridable_functions", "qualified_name"]

#: How a type answers a function: a table entry, the fallback, or a TypeError.
OUTCOMES = ("handled", "fallback", "refused")


def qualified_name(func: Callable) -> str:
    name = torch.overrides.resolve_name(func)
    if name:
        return name
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(func)


def overridable_functions() -> list[tuple[str, Callable]]:
    """(qualified name, function) for every overridable function torch does not ignore,
    and tensortools' own operators, sorted by name."""
    from tensortools import ops

    ignored = torch.overrides.get_ignored_functions()
    seen: dict[str, Callable] = {f"tensortools.ops.{n}": getattr(ops, n) for n in ops.__all__}
    for funcs in torch.overrides.get_overridable_functions().values():
        for func in funcs:
            # (torch._dynamo, once imported, puts a wrapper of torch.manual_seed in its
            # place: the function torch ignores is the wrapped one)
            if func in ignored or getattr(func, "__wrapped__", None) in ignored:
                continue
            seen.setdefault(qualified_name(func), func)
    return sorted(seen.items())


def outcome(cls: type, func: Callable) -> str:
    """ "handled", "fallback" or "refused": what a call of func meets on cls."""
    if cls.handler_for(func) is not None:
        return "handled"
    return "refused" if cls.refuses_unhandled() else "fallback"
