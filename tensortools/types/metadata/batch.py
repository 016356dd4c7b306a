"""Batches of MetadataTensor samples.

A MetadataTensor made by collation (``default_collate``, hence any ``DataLoader``) or by
``torch.stack`` of samples along dim 0 is a *batch*: its ``batch_size`` is the number of
samples along dim 0, and each value of its metadata holds one entry per sample (a list,
or a tensor whose rows are the samples'). Calls that take a batch apart along dim 0 give
each piece its samples' metadata; ``torch.cat`` of batches along dim 0 joins them (the
verdicts of every other call are :mod:`~tensortools.types.metadata.batch_rule`'s; how
batches are built, :mod:`~tensortools.types.metadata.collation`). Each rule is registered
by ``MetadataTensor.batch_rule`` beside it, in the function's one record.

Where the rules run: See Note [Batch rules] in docs/design.md.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools.dispatch.binding import argument
from tensortools.types.metadata.batch_index import MIXED, Selection, index_selection
from tensortools.types.metadata.batch_settle import give as give_samples
from tensortools.types.metadata.batch_settle import size_after
from tensortools.types.metadata.batch_verdict import plain_shape
from tensortools.types.metadata.dicts import (
    check_batch,
    check_same_keys,
    metadata_of,
    same_value,
    stackable,
)
from tensortools.types.metadata.results import batch_size_of, samples_of, take_metadata
from tensortools.types.metadata.tensor import MetadataTensor

__all__ = ["give", "is_dim0", "plain_shape"]


def give(result: Any, metadata: dict, size: int, selection: Selection, new: bool = False) -> None:
    """Set a result of a batch's call to the samples of `selection` of the batch's
    `metadata` (of `size` samples); anything but a MetadataTensor is left as it is. new:
    the result was just made (it has no batch size to clear)."""
    if isinstance(result, MetadataTensor):
        give_samples(result, metadata, size, selection, new)


# -- which samples a call takes -------------------------------------------------------


def is_dim0(dim: Any, ndim: int) -> bool:
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    try:
        dim = operator.index(dim)
    except TypeError:
        return False  # a dimension name: not dim 0 of a batch of unnamed dims
    return ndim > 0 and dim % ndim == 0


def _split_selections(func, args, kwargs, results, size) -> list[Selection] | None:
    """The samples each piece of a split along dim 0 takes (None: the split is not along
    dim 0)."""
    name = getattr(func, "__name__", "")
    ndim = len(plain_shape(_batch_argument(func, args, kwargs)))
    if not is_dim0(argument(func, args, kwargs, 2, 0), ndim):
        return None
    if name == "tensor_split":
        indices = argument(func, args, kwargs, 1, None)
        if isinstance(indices, Tensor) and indices.dim() == 1:
            indices = indices.tolist()
        if isinstance(indices, (list, tuple)):
            bounds = [0, *indices, size]
            return [slice(bounds[k], bounds[k + 1]) for k in range(len(bounds) - 1)]
    start, out = 0, []
    for r in results:
        rows = plain_shape(r)[0]
        out.append(slice(start, start + rows))
        start += rows
    return out


# -- the rules: (cls, func, types, args, kwargs, batch) -> result or NotImplemented ------


def _plain_fallback(cls, func, types, args, kwargs):
    return super(MetadataTensor, cls).fallback(func, types, args, kwargs)


def _direct(cls, types, kwargs) -> bool:
    """Whether a call that writes nothing and returns new views may be run plainly and its
    results made instances of cls (no keyword arguments, and no type but MetadataTensors
    takes part)."""
    return not kwargs and (
        (len(types) == 1 and types[0] is cls) or all(issubclass(t, MetadataTensor) for t in types)
    )


def _batch_argument(func, args, kwargs) -> Any:
    return argument(func, args, kwargs, 0)


def _checked(batch: Any, what: str = "batch") -> tuple[dict, int, int] | None:
    """(metadata, batch size, number of dims) of a batch whose metadata holds its samples
    (else ValueError); None for anything that is not a batch."""
    size = batch_size_of(batch)
    if size is None:
        return None
    metadata = metadata_of(batch, {})
    shape = plain_shape(batch)
    check_batch(metadata, size, shape[0] if shape else 0, what)
    return metadata, size, len(shape)


@MetadataTensor.batch_rule(Tensor.__getitem__, apart=True)
def _getitem(cls, func, types, args, kwargs):
    batch = args[0]
    size = batch_size_of(batch)
    if size is None:
        return NotImplemented
    metadata = metadata_of(batch, {})
    index = args[1] if len(args) == 2 else argument(func, args, kwargs, 1, None)
    # (the common case, without the fallback's walks over the arguments and results:
    # indexing writes nothing and returns one new view)
    direct = _direct(cls, types, kwargs)
    with torch._C.DisableTorchFunctionSubclass():
        shape = batch.shape
        check_batch(metadata, size, shape[0] if shape else 0)
        out = Tensor.__getitem__(batch, index).as_subclass(cls) if direct else None
    if out is None:
        out = _plain_fallback(cls, func, types, args, kwargs)
    selection = index_selection(index, size, len(shape))
    if selection is MIXED:
        if isinstance(out, MetadataTensor):
            take_metadata(out, metadata, None, False)
        return out
    give(out, metadata, size, selection, direct)
    return out


@MetadataTensor.batch_rule(Tensor.__setitem__, runs=True)
def _setitem(cls, func, types, args, kwargs):
    """``b[index] = value`` with a MetadataTensor value: b stays a batch only where the
    rows written hold the samples they are written over (``b[m] = b[m] * 2``,
    ``b[i] = b[i] + 1``); another sample's rows (``b[:2] = b[2:]``, ``b[0] = b[1]``,
    ``b[:] = b.flip(0)``) would sit under the labels of samples they are not, so b
    becomes one tensor, its metadata whole. (A plain value's rows join the samples', as
    in ``b + t``.)"""
    batch, value = args[0], argument(func, args, kwargs, 2, None)
    size = batch_size_of(batch)
    theirs = metadata_of(value) if isinstance(value, MetadataTensor) else None
    if size is None or not theirs:  # (no labels to compare: a plain value)
        return NotImplemented
    metadata = metadata_of(batch, {})
    selection = index_selection(
        argument(func, args, kwargs, 1, None), size, len(plain_shape(batch))
    )
    out = _plain_fallback(cls, func, types, args, kwargs)
    if selection is MIXED:
        same = False
    else:
        want = samples_of(metadata, selection)
        same = (
            batch_size_of(value) == size_after(size, selection)
            and want.keys() == theirs.keys()
            and all(same_value(want[k], theirs[k]) for k in want)
        )
    if not same:
        take_metadata(batch, None, None, False)
    return out


def _both(names: str) -> list[Callable]:
    """The torch functions and the Tensor methods of `names`."""
    return [getattr(ns, name) for name in names.split() for ns in (torch, Tensor)]


def _taking_apart(pick: Callable) -> Callable:
    """The rule of a call that may take a batch apart along dim 0. ``pick(func, args,
    kwargs, out, size, ndim)`` pairs each piece of the call's result `out` with the
    samples it holds (empty where the call leaves dim 0 whole)."""

    def rule(cls, func, types, args, kwargs):
        batch = _batch_argument(func, args, kwargs)
        found = _checked(batch)
        if found is None:
            return NotImplemented
        metadata, size, ndim = found
        if _direct(cls, types, kwargs) and not torch.compiler.is_compiling():
            # (the common call, as _getitem's: the plain pieces, each made an instance
            # with its samples, where every piece holds some; no walks of the fallback)
            with torch._C.DisableTorchFunctionSubclass():
                plain = func(*args)
            pairs = pick(func, args, kwargs, plain, size, ndim)
            if type(plain) is tuple and len(pairs) == len(plain):
                with torch._C.DisableTorchFunctionSubclass():
                    out = tuple(piece.as_subclass(cls) for piece in plain)
                for piece, (_, selection) in zip(out, pairs):
                    # (new=False: each piece's batch size written, None for one sample,
                    # as the fallback's pieces have it)
                    give(piece, metadata, size, selection, False)
                return out
        out = _plain_fallback(cls, func, types, args, kwargs)
        for piece, selection in pick(func, args, kwargs, out, size, ndim):
            give(piece, metadata, size, selection)
        return out

    return rule


@MetadataTensor.batch_rule(*_both("unbind split chunk tensor_split"), apart=True)
@_taking_apart
def _pieces(func, args, kwargs, out, size, ndim):
    """unbind, split, chunk, tensor_split along dim 0: each piece its samples."""
    if getattr(func, "__name__", "") == "unbind":
        dim = argument(func, args, kwargs, 1, 0)
        return list(zip(out, range(len(out)))) if is_dim0(dim, ndim) else []
    return list(zip(out, _split_selections(func, args, kwargs, out, size) or []))


@MetadataTensor.batch_rule(*_both("select"), apart=True)
@_taking_apart
def _select_rule(func, args, kwargs, out, size, ndim):
    if not is_dim0(argument(func, args, kwargs, 1, None), ndim):
        return []
    return [(out, operator.index(argument(func, args, kwargs, 2, 0)) % size)]


@MetadataTensor.batch_rule(*_both("narrow"), apart=True)
@_taking_apart
def _narrow(func, args, kwargs, out, size, ndim):
    if not is_dim0(argument(func, args, kwargs, 1, None), ndim):
        return []
    start = operator.index(argument(func, args, kwargs, 2, 0)) % max(size, 1)
    length = operator.index(argument(func, args, kwargs, 3, 0))
    return [(out, slice(start, start + length))]


@MetadataTensor.batch_rule(*_both("index_select"), apart=True)
@_taking_apart
def _index_select(func, args, kwargs, out, size, ndim):
    if not is_dim0(argument(func, args, kwargs, 1, None), ndim):
        return []
    index = argument(func, args, kwargs, 2, None)
    return [(out, [i % size for i in index.reshape(-1).tolist()])]


@MetadataTensor.batch_rule(Tensor.__iter__, apart=True)
def _iterate(cls, func, types, args, kwargs):
    if batch_size_of(args[0]) is None:
        return NotImplemented
    return iter(args[0].unbind(0))


@MetadataTensor.batch_rule(Tensor.grad.__get__, runs=True)
def _grad(cls, func, types, args, kwargs):
    """A batch leaf's gradient is a batch too: the same samples, the same metadata (an
    alias of the gradient autograd accumulated, made at each access)."""
    batch = args[0]
    size = batch_size_of(batch)
    if size is None:
        return NotImplemented
    grad = _plain_fallback(cls, func, types, args, kwargs)  # (left as it is: NO_WRAP)
    if type(grad) is not Tensor or grad.dim() == 0 or grad.shape[0] != size:
        return grad
    out = grad.as_subclass(cls)  # (a batch whose metadata went wrong still has a gradient)
    take_metadata(out, metadata_of(batch, {}), size, True)
    return out


@MetadataTensor.batch_rule(torch.cat, torch.concat, torch.concatenate, join=True)
def _cat(cls, func, types, args, kwargs):
    """torch.cat of batches along dim 0: the joined batch. A batch joined with anything
    that is not one is refused; along other dims the merge policy applies."""
    tensors = list(argument(func, args, kwargs, 0, ()))
    dim = argument(func, args, kwargs, 1, 0)
    if (
        kwargs.get("out") is not None
        or not tensors
        or not all(isinstance(t, Tensor) for t in tensors)
    ):
        return NotImplemented
    shapes = [plain_shape(t) for t in tensors]
    ndim = max(len(shape) for shape in shapes)
    if not is_dim0(dim, ndim):
        return NotImplemented
    sizes = [batch_size_of(t) for t in tensors]
    if all(s is None for s in sizes):
        return NotImplemented
    # A tensor that is not a batch joins no samples where it has no rows: torch skips a
    # 1-D empty tensor, and a (0, ...) one adds none (the accumulator idiom,
    # torch.cat([torch.empty(0, D), b])).
    joined = [
        k for k, shape in enumerate(shapes) if sizes[k] is not None or not shape or shape[0] != 0
    ]
    for k in joined:
        if sizes[k] is None:
            raise ValueError(
                f"torch.cat along dim 0 of MetadataTensor batches: tensor {k} is not a batch "
                "(its rows would have no sample's metadata); make it one (set its batch_size "
                "and one metadata entry per sample) or join plain tensors"
            )
    dicts = []
    for k in joined:
        metadata = metadata_of(tensors[k]) or {}
        check_batch(metadata, sizes[k], shapes[k][0], f"batch (tensor {k} of torch.cat)")
        dicts.append(metadata)
    check_same_keys(dicts, "torch.cat of MetadataTensor batches", "tensor", "batches joined")
    out = _plain_fallback(cls, func, types, args, kwargs)
    metadata = {key: _join([d[key] for d in dicts]) for key in dicts[0]}
    take_metadata(out, metadata, sum(sizes[k] for k in joined), False)
    return out


def _join(values: list) -> Any:
    """Per-sample entries of several batches, in order: tensors of rows joined into one
    when they can be, else a list."""
    if all(isinstance(v, Tensor) for v in values) and stackable(values, 1):
        return torch.cat(values)
    return [x for v in values for x in v]


def _set_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``Tensor.set_``, which torch runs without ``__torch_function__``: a batch whose data
    it replaces holds no known samples any more (as after ``resize_``), so it is one
    tensor, with its metadata whole."""
    out = Tensor.set_(self, *args, **kwargs)
    if batch_size_of(self) is not None:
        take_metadata(self, None, None, False)
    return out


MetadataTensor.set_ = _set_
