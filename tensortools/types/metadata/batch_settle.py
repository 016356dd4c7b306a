"""Applying a call's batch record (:mod:`tensortools.dispatch.batch_rules`: one per
function, registered by ``MetadataTensor.batch_rule``) to its results: each result keeps
the batch, takes the rows of the samples it holds, or drops the batch. The class's fallback
calls :func:`settle` after every call with a batch that no record ran itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools.dispatch.batch_rules import RECORDS
from tensortools.types.metadata.batch_index import Selection
from tensortools.types.metadata.batch_verdict import (
    DROP,
    KEEP,
    Call,
    elementwise,
    plain_shape,
    verdict_of,
)
from tensortools.types.metadata.dicts import metadata_of
from tensortools.types.metadata.results import (
    batch_size_of,
    samples_of,
    take_metadata,
    traced_give,
    traced_pending,
)

__all__ = ["give", "settle", "size_after", "verdict"]


def size_after(size: int, selection: Selection) -> int | None:
    """The batch size a selection leaves (None for one sample)."""
    if selection is None:
        return size
    if isinstance(selection, int):
        return None
    if isinstance(selection, slice):
        return len(range(size)[selection])
    return len(selection)


def give(
    result: Tensor, metadata: dict, size: int, selection: Selection, new: bool = False
) -> None:
    """Set `result` (a MetadataTensor result of a batch's call) to the samples of
    `selection` of the batch's `metadata` (of `size` samples). new: the result was just
    made (it has no batch size to clear)."""
    if torch.compiler.is_compiling() and (new or traced_pending(result)):
        # (a result of the graph: the samples are taken outside it, see results)
        traced_give(result, metadata, size, selection, size_after(size, selection))
        return
    if type(selection) is int:  # (one sample, the common case)
        sample = {}
        for key, value in metadata.items():  # (a loop: a comprehension costs a call)
            sample[key] = value[selection]
        take_metadata(result, sample, None, new)
        return
    take_metadata(result, samples_of(metadata, selection), size_after(size, selection), new)


def verdict(call: Call) -> Any:
    """The verdict of call.func's record on `call`: KEEP, DROP, a list (the sample each row
    holds), or one of these per result (a list of them, in the order of ``call.results``)."""
    record = RECORDS.get(call.func)
    return DROP if record is None else verdict_of(record.verdict, call)


def settle(
    func: Callable,
    args: tuple,
    kwargs: dict,
    out: Any,
    tensors: list,
    carrier: type,
) -> Any:
    """Set the batch of `out` (results of the call, made batches by the wrap) to what
    func's record says: kept, carried through the call's permutation, or dropped.
    tensors: the call's argument tensors; carrier: the class whose instances carry
    metadata. A batch the call wrote in place and returned ends as the call's out-of-place
    form's result would."""
    if issubclass(type(out), Tensor):
        leaves = [out] if batch_size_of(out) is not None else []
    else:
        leaves = [t for t in tree_leaves(out) if batch_size_of(t) is not None]
    if not leaves:
        return out
    inputs = tensors
    results = []  # (loops, not comprehensions: this runs on every call with a batch)
    for t in leaves:
        for a in inputs:
            if t is a:
                break
        else:
            results.append(t)
    for batch in inputs:  # (the first carrier of metadata: whose batch results take)
        if isinstance(batch, carrier) and getattr(batch, "metadata", None) is not None:
            break
    else:
        return out
    if batch_size_of(batch) is None:
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
    record = RECORDS.get(func) if rule is None else None  # (only now: a batch's call)
    if rule is not None:
        found = rule(call)
    elif record is None:
        found = DROP
    else:  # (a rule called here: one frame less than through verdict_of)
        judge = record.verdict
        found = judge(call) if callable(judge) else verdict_of(judge, call)
    per_result = type(found) is list and len(results) > 1 and _per_result(found, results)
    each = found if per_result else [found] * len(results)
    for t, v in zip(results, each):
        shape = plain_shape(t)
        rows = shape[0] if shape else None
        if v is KEEP and rows == call.size:
            continue
        metadata = metadata_of(batch, {})
        if _is_selection(v) and rows == len(v) and len(samplers) == 1 and rule is None:
            give(t, metadata, call.size, v)
        else:  # (a selection of one of several batches' rows: not theirs alone)
            take_metadata(t, metadata, None, False)
    return out


def _in_place(func: Callable) -> tuple[Callable, Callable | None]:
    """(the out-of-place form of func, its rule) where func is an in-place call
    (``b.t_()``, ``b += x``), to judge the batch it wrote and returned as the result of
    that form; else (func, None). An in-place form of no function with a record is a write
    of its other arguments, elementwise (``b.copy_(x)``, ``b.uniform_()``), but where it
    moves or replaces dim 0 (``resize_``, ``set_``: not a batch)."""
    forms = _OUT_OF_PLACE.get(func, ())
    if forms == ():
        forms = _OUT_OF_PLACE[func] = _out_of_place(func)
    if forms is None:
        return func, None
    for f in forms:  # (read at each call: a record may be registered later)
        record = RECORDS.get(f)
        if record is not None and record.verdict is not None:
            return f, lambda call, rule=record.verdict: verdict_of(rule, call)
    name = getattr(func, "__name__", "")
    return func, (_replaced if name in _MOVING else elementwise)


def _out_of_place(func: Callable) -> list[Callable] | None:
    """The out-of-place forms of an in-place func (None: func is not one)."""
    name = getattr(func, "__name__", "")
    if name.startswith("__i") and name.endswith("__"):
        other = f"__{name[3:]}"  # (__iadd__: __add__)
    elif name.endswith("_") and not name.endswith("__"):
        other = name[:-1]
    else:
        return None
    return [f for ns in (Tensor, torch) if (f := getattr(ns, other, None)) is not None]


#: In-place calls that move or replace dim 0 whose out-of-place form has no record.
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
