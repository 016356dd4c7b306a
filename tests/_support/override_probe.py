"""Calling every overridable torch function with a probe of a type in tensor positions,
as PyTorch's own override tests do, to see that the call reaches the type."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.testing._internal.generated.annotated_fn_args import annotated_args

# Example values for the argument types of annotated_args.
_VALUES = {
    "int64_t": 1,
    "SymInt": 1,
    "double": 1.0,
    "bool": False,
    "Scalar": 1,
    "IntArrayRef": [1, 1],
    "SymIntArrayRef": [1, 1],
    "ScalarType": torch.float32,
    "Layout": torch.strided,
    "Device": "cpu",
    "MemoryFormat": torch.contiguous_format,
    "c10::string_view": "mean",
    "Dimname": "a",
    "DimnameList": ["a"],
}
_TENSOR_LISTS = (
    "TensorList",
    "ITensorListRef",
    "const ITensorListRef &",
    "c10::List<::std::optional<Tensor>>",
    "::std::optional<TensorList>",
)


class Reached(Exception):
    """Raised by a probe's __torch_function__: the call got there."""


def probe_type(base: type) -> type:
    class Probe(base):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            raise Reached(func)

    Probe.__name__ = f"Probe{base.__name__}"
    return Probe


def example_args(func: Callable, override: Callable, instance: Any) -> list | None:
    """Positional arguments for func with `instance` in every tensor position, or None
    where no example can be built."""
    if func in annotated_args:
        args = []
        for a in annotated_args[func]:
            if a["is_kwarg_only"] == "True":
                continue
            kind = a["simple_type"]
            if kind.rstrip("?") == "Tensor":
                args.append(instance)
            elif kind in _TENSOR_LISTS:
                args.append([instance, instance])
            elif kind in _VALUES:
                args.append(_VALUES[kind])
            elif kind.endswith("?"):
                args.append(None)
            else:
                return None
        return args
    params = inspect.signature(override).parameters.values()
    return [
        instance
        for p in params
        if (p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        or p.kind == p.VAR_POSITIONAL
    ]


def call_through(func: Callable, args: list, instance: Any) -> str:
    """'reached', 'own' (the type answers by its own attribute), 'bypassed' (returned
    without reaching), or 'no call' (the example did not fit the signature)."""
    target = func
    if not isinstance(instance, torch.Tensor) and args and args[0] is instance:
        # A tensor-like that is not a Tensor meets Tensor methods as its own attributes.
        owner = getattr(func, "__self__", None)
        name = getattr(owner if isinstance(owner, type(torch.Tensor.T)) else func, "__name__", None)
        if name and (
            getattr(torch.Tensor, name, None) is func
            or getattr(getattr(torch.Tensor, name, None), "__get__", None) == func
        ):
            if name in type(instance).__dict__ or any(
                name in k.__dict__
                for k in type(instance).__mro__[1:-1]
                if k.__module__.startswith("tensortools.types")
            ):
                return "own"
            try:
                attr = getattr(instance, name)
                if callable(attr) and not isinstance(
                    getattr(torch.Tensor, name), type(torch.Tensor.T)
                ):
                    attr(*args[1:])
            except Reached:
                return "reached"
            except Exception:
                return "no call"
            return "bypassed"
    try:
        target(*args)
    except Reached:
        return "reached"
    except Exception:
        return "no call"
    return "bypassed"
