"""How a wrapper type's call meets its arguments and results: the tensors among the
arguments (:func:`argument_tensors`), its instances passed on as plain aliases
(:func:`plain_aliases`), and every tensor result wrapped as the type
(:func:`wrap_outputs`), with the functions whose results are left as they are
(:data:`NO_WRAP`) or are new tensors a result may become in place (:data:`FRESH_RESULTS`).
:class:`~tensortools.dispatch.TensorWrapper`'s fallback and the compiled path's Python
side both call them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map_only

from tensortools._native import C as _C
from tensortools.dispatch.in_place import written_arguments

__all__ = [
    "FRESH_RESULTS",
    "INSTANCE_WRAPS",
    "NO_WRAP",
    "argument_tensors",
    "plain_aliases",
    "wrap_outputs",
]


#: Results left as they are: torch's own list (property getters such as .grad) and the
#: pickling protocol, whose result describes the tensor rather than being one.
NO_WRAP = torch.overrides.get_default_nowrap_functions() | {Tensor.__reduce_ex__}


def plain_aliases(cls: type, obj: Any, originals: dict[int, Tensor]) -> Any:
    """obj (any nesting) with cls's instances as plain aliases, noted in originals."""

    def plain(t: Tensor) -> Tensor:
        with torch._C.DisableTorchFunctionSubclass():
            alias = t.as_subclass(Tensor)
        originals[id(alias)] = t
        return alias

    return tree_map_only(cls, plain, obj, is_leaf=_is_size)


#: Argument types that hold no tensor and are no container: a call whose arguments are
#: tensors and these alone (most calls) needs no walk by torch.utils._pytree.
_FLAT = frozenset(
    {int, float, bool, complex, str, type(None), type(Ellipsis), slice, torch.dtype}
    | {torch.device, torch.layout, torch.memory_format}
)


def argument_tensors(args: tuple, kwargs: dict | None) -> list[Tensor]:
    """The tensors among a call's arguments, in order: also inside lists, tuples and the
    other containers torch.utils._pytree takes apart, but not inside dicts other than
    the keyword arguments themselves (the compiled path walks the same way)."""
    found = []
    for a in (*args, *kwargs.values()) if kwargs else args:
        if issubclass(type(a), Tensor):
            found.append(a)
        elif type(a) not in _FLAT:
            return _walked_tensors(args, kwargs)
    return found


def _walked_tensors(args: tuple, kwargs: dict | None) -> list[Tensor]:
    leaves = tree_leaves(
        (args, kwargs or {}), is_leaf=lambda x: isinstance(x, dict) and x is not kwargs
    )
    return [t for t in leaves if issubclass(type(t), Tensor)]


#: wrap hooks that make their instance with ``cls._instance`` (TensorWrapper's own, which
#: tensortools.dispatch.wrapper adds, and MetadataTensor's).
INSTANCE_WRAPS: set = set()


#: Functions whose results that are not their arguments are new tensors nobody else holds
#: (tensortools.ops adds its operators when imported): a wrapper type's new plain result
#: of one of them may change class in place rather than become an alias.
FRESH_RESULTS: set = set()


def _adopts_results(cls: type, func: Callable) -> bool:
    """Whether a new plain result of func may change class in place rather than become an
    alias: func is in FRESH_RESULTS, cls's wrap makes its instance with
    ``_instance``, cls has no __torch_dispatch__ (whose dispatch key only as_subclass
    sets), and the call runs eagerly (torch.compile traces the alias)."""
    return (
        # (is_compiling first: under torch.compile the rest is never traced)
        not torch.compiler.is_compiling()
        and func in FRESH_RESULTS
        and getattr(cls.wrap, "__func__", None) in INSTANCE_WRAPS
        and cls.__torch_dispatch__ is torch._C._disabled_torch_dispatch_impl
    )


#: _adopt(cls, t) -> bool: t, a new plain result, changed to class cls in place where the
#: compiled path's rule allows (no weak reference, no attributes, a layout cls can take;
#: else it keeps its class and gets an alias): that rule itself, exported from
#: csrc/python/wrapper_dispatch.cpp (one definition).
_adopt: Callable[[type, Tensor], bool] = _C.wrapper_adopt


def wrap_outputs(
    cls: type,
    out: Any,
    context: Any,
    originals: dict[int, Tensor],
    call: tuple | None = None,
) -> Any:
    """Every tensor in out (any nesting) as an instance of cls, made by cls.wrap with
    context; but an argument the call wrote and returned (in place, ``out=``; see
    written_arguments) is returned as it is, of its own class, and a plain alias that
    stood for an instance in the call (originals: id(alias) -> instance) is that
    instance. call: (func, args, kwargs, the argument tensors), or None."""
    written: list | None = None
    adopt = call is not None and _adopts_results(cls, call[0])

    def wrap(t: Tensor) -> Tensor:
        nonlocal written
        if id(t) in originals:  # a plain alias standing for one of our instances
            return originals[id(t)]
        if isinstance(t, cls) or (type(t) is not Tensor and not cls.wrap_foreign):
            return t
        # (by identity: torch.compile traces `is`, not id(); the written arguments only
        # for a result that is an argument at all). The argument is returned, not t: under
        # torch.compile `is` compares the tensors' traced values, and the result of an
        # in-place call run with subclass dispatch off is traced as a plain Tensor that
        # `is` the argument it wrote, so returning t would hand back that plain Tensor.
        if call is not None and any(t is a for a in call[3]):
            if written is None:
                written = written_arguments(call[0], call[1], call[2])
            for w in written:
                if t is w:
                    return w
        if adopt:
            _adopt(cls, t)
        try:
            with torch._C.DisableTorchFunctionSubclass():
                return cls.wrap(t, context)
        except (RuntimeError, NotImplementedError) as err:
            if t.layout != torch.strided:  # sparse results and the like: a refusal
                raise TypeError(
                    f"{cls.__name__} cannot hold a result of layout {t.layout}: {err}"
                ) from err
            # the type's own wrap failed on an ordinary tensor: say so, and whose call
            # (a RuntimeError still: a TypeError from an operator would become Python's
            # "unsupported operand type(s)" and hide it)
            of = f" of {getattr(call[0], '__name__', call[0])}" if call is not None else ""
            raise RuntimeError(
                f"{cls.__name__}.wrap raised {type(err).__name__} on the result{of} "
                f"(shape {list(t.shape)}, {t.dtype}): {err}"
            ) from err

    if issubclass(type(out), Tensor):
        return wrap(out)  # (one tensor: the common result, with no walk)
    return tree_map_only(Tensor, wrap, out, is_leaf=_is_size)


def _is_size(x: Any) -> bool:
    # torch.Size is a node of torch's pytree that comes back a plain tuple: keep it whole.
    return type(x) is torch.Size
