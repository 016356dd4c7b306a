"""Applying the batch rule's table (:mod:`~tensortools.types.metadata.batch_rule`) to a
call's results: each result keeps the batch, takes the rows of the samples it holds, or
drops the batch (registered on the class when imported)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools.dispatch.wrapper import argument_tensors
from tensortools.types.metadata.batch import give, plain_shape
from tensortools.types.metadata.batch_rule import RULES, SAME
from tensortools.types.metadata.batch_verdict import DROP, KEEP, Call, elementwise
from tensortools.types.metadata.results import batch_size_of, take_metadata
from tensortools.types.metadata.tensor import MetadataTensor, register_batch_results

__all__ = ["first_carrier", "settle", "verdict"]


def verdict(call: Call) -> Any:
    """The table's verdict on `call`: KEEP, DROP, a list (the sample each row holds), or
    one of these per result (a list of them, in the order of ``call.results``)."""
    rule = SAME.get(call.func) or RULES.get(call.func)
    return DROP if rule is None else rule(call)


def first_carrier(tensors: list) -> Tensor | None:
    """The first of a call's argument tensors (argument_tensors) carrying metadata (whose
    metadata, and batch, results take)."""
    for a in tensors:
        if isinstance(a, MetadataTensor) and getattr(a, "metadata", None) is not None:
            return a
    return None


def settle(func: Callable, args: tuple, kwargs: dict, out: Any, tensors: list | None = None) -> Any:
    """Set the batch of `out` (results of the call, made batches by the wrap) to what the
    table says: kept, carried through the call's permutation, or dropped. tensors: the
    call's argument tensors, where the caller has them (else walked here). A batch the
    call wrote in place and returned ends as the call's out-of-place form's result would."""
    if issubclass(type(out), Tensor):
        leaves = [out] if batch_size_of(out) is not None else []
    else:
        leaves = [t for t in tree_leaves(out) if batch_size_of(t) is not None]
    if not leaves:
        return out
    inputs = argument_tensors(args, kwargs) if tensors is None else tensors
    results = [t for t in leaves if not any(t is a for a in inputs)]
    batch = first_carrier(inputs)
    if batch is None or batch_size_of(batch) is None:
        return out
    rule = None
    if len(results) < len(leaves) and any(t is batch for t in leaves):
        func, rule = _in_place(func)  # (the batch written in place and returned?)
        if rule is not None:
            results = [batch]
    if not results:
        return out
    # (every argument that holds samples, once per place: the rules judge them all)
    if len(inputs) == 1:
        samplers = (batch,)
    else:
        samplers = tuple(a for a in inputs if batch_size_of(a) is not None)
    shape = plain_shape(batch)
    size = shape[0] if rule is None else batch_size_of(batch)  # (dim 0 before the call)
    call = Call(func, args, kwargs or {}, batch, len(shape), size, results, samplers)
    found = verdict(call) if rule is None else rule(call)
    each = found if _per_result(found, results) else [found] * len(results)
    for t, v in zip(results, each):
        shape = plain_shape(t)
        rows = shape[0] if shape else None
        if v is KEEP and rows == call.size:
            continue
        metadata = batch.metadata or {}
        if _is_selection(v) and rows == len(v) and len(samplers) == 1 and rule is None:
            give(t, metadata, call.size, v)
        else:  # (a selection of one of several batches' rows: not theirs alone)
            take_metadata(t, metadata, None, False)
    return out


def _in_place(func: Callable) -> tuple[Callable, Callable | None]:
    """(the out-of-place form of func, its rule) where func is an in-place call
    (``b.t_()``, ``b += x``), to judge the batch it wrote and returned as the result of
    that form; else (func, None). An in-place form of no function of the table is a write
    of its other arguments, elementwise (``b.copy_(x)``, ``b.uniform_()``), but where it
    moves or replaces dim 0 (``resize_``, ``set_``: not a batch)."""
    found = _OUT_OF_PLACE.get(func)
    if found is None:
        found = _OUT_OF_PLACE[func] = _out_of_place(func)
    return found


def _out_of_place(func: Callable) -> tuple[Callable, Callable | None]:
    name = getattr(func, "__name__", "")
    if name.startswith("__i") and name.endswith("__"):
        names = [f"__{name[3:]}"]  # (__iadd__: __add__)
    elif name.endswith("_") and not name.endswith("__"):
        names = [name[:-1]]
    else:
        return func, None
    for ns in (Tensor, torch):
        for n in names:
            f = getattr(ns, n, None)
            rule = SAME.get(f) or RULES.get(f) if f is not None else None
            if rule is not None:
                return f, rule
    return func, (_replaced if name in _MOVING else elementwise)


#: In-place calls that move or replace dim 0 whose out-of-place form the table lacks.
_MOVING = {"resize_", "resize_as_", "set_", "as_strided_"}
_OUT_OF_PLACE: dict = {}


def _replaced(call: Call) -> Any:
    return DROP


def _is_selection(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) for i in v)


def _per_result(found: Any, results: list) -> bool:
    return (
        isinstance(found, list)
        and len(found) == len(results)
        and len(results) > 1
        and all(v is KEEP or v is DROP or _is_selection(v) for v in found)
    )


def _set_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``Tensor.set_``, which torch runs without ``__torch_function__``: a batch whose data
    it replaces holds no known samples any more (as after ``resize_``), so it is one
    tensor, with its metadata whole."""
    out = Tensor.set_(self, *args, **kwargs)
    if batch_size_of(self) is not None:
        take_metadata(self, None, None, False)
    return out


MetadataTensor.set_ = _set_
# The table's rule for every call with a batch that no rule of metadata.batch takes (on the
# Python path).
register_batch_results(settle)
