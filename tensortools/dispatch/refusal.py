"""The strict policy's refusal: the error that names the function refused and the
arguments of the type that refused it."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from tensortools.dispatch.documented import documented_names

__all__ = ["strict_refusal"]


def _refused_arguments(cls: type, func: Callable, args: tuple, kwargs: dict) -> list[str]:
    """The names of the arguments of a call that are instances of cls: as the function's
    own signature names them (tensortools.ops), else as torch documents them, else by
    position."""
    try:
        positions = [
            p.name
            for p in inspect.signature(func).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):  # (a builtin without a signature)
        positions = [sorted(names)[0] for names in documented_names(func)]
    found = [
        f"'{positions[i]}'" if i < len(positions) else f"argument {i}"
        for i, a in enumerate(args)
        if isinstance(a, cls)
    ]
    return found + [f"'{k}'" for k, v in kwargs.items() if isinstance(v, cls)]


def strict_refusal(
    cls: type, func: Callable, args: tuple = (), kwargs: dict | None = None
) -> TypeError:
    """The error for a call that cls's "strict" policy refuses where no other type takes
    part (torch's own message names neither the policy nor the way out, and lists
    torch.Tensor among the types where a plain tensor is passed too): it names the
    function and the arguments of cls."""
    name = torch.overrides.resolve_name(func) or (
        f"{func.__module__}.{func.__qualname__}"
        if hasattr(func, "__module__") and hasattr(func, "__qualname__")
        else repr(func)
    )
    where = _refused_arguments(cls, func, args, kwargs or {})
    given = f" for its {cls.__name__} argument{'s' * (len(where) > 1)} {', '.join(where)}"
    return TypeError(
        f"no implementation found for '{name}' on {cls.__name__}: refused under the "
        f"'strict' policy{given if where else ''} (no handler of {cls.__name__} answers "
        f"this call, and 'strict' never runs the fallback); to run it, use `with "
        f"{cls.__name__}.using_policy('fallback'):` around the call, or "
        f"{cls.__name__}.set_policy('fallback')"
    )
