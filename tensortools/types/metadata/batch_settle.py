"""Applying the batch rule's table (:mod:`~tensortools.types.metadata.batch_rule`) to a
call's results: each result keeps the batch, takes the rows of the samples it holds, or
drops the batch (registered on the class when imported)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools.dispatch.wrapper import argument_tensors
from tensortools.types.metadata.batch import give, plain_shape
from tensortools.types.metadata.batch_rule import RULES, SAME
from tensortools.types.metadata.batch_verdict import DROP, KEEP, Call
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
    call's argument tensors, where the caller has them (else walked here)."""
    if issubclass(type(out), Tensor):
        leaves = [out] if batch_size_of(out) is not None else []
    else:
        leaves = [t for t in tree_leaves(out) if batch_size_of(t) is not None]
    if not leaves:
        return out
    inputs = argument_tensors(args, kwargs) if tensors is None else tensors
    results = [t for t in leaves if not any(t is a for a in inputs)]
    batch = first_carrier(inputs)
    if not results or batch is None or batch_size_of(batch) is None:
        return out
    shape = plain_shape(batch)
    call = Call(func, args, kwargs or {}, batch, len(shape), shape[0], results)
    found = verdict(call)
    each = found if _per_result(found, results) else [found] * len(results)
    for t, v in zip(results, each):
        shape = plain_shape(t)
        rows = shape[0] if shape else None
        if v is KEEP and rows == call.size:
            continue
        metadata = batch.metadata or {}
        if _is_selection(v) and rows == len(v):
            give(t, metadata, call.size, v)
        else:
            take_metadata(t, metadata, None, False)
    return out


def _is_selection(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) for i in v)


def _per_result(found: Any, results: list) -> bool:
    return (
        isinstance(found, list)
        and len(found) == len(results)
        and len(results) > 1
        and all(v is KEEP or v is DROP or _is_selection(v) for v in found)
    )


# The table's rule for every call with a batch that no rule of metadata.batch takes (on the
# Python path).
register_batch_results(settle)
