"""Building MetadataTensor batches: ``torch.stack`` of samples along dim 0 (a handler of
the class's table), :func:`collate` (registered with ``default_collate``, hence any
``DataLoader``) and :func:`decollate`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.overrides import has_torch_function

from tensortools.types.metadata.batch import is_dim0, plain_shape
from tensortools.types.metadata.dicts import (
    check_batch,
    check_same_keys,
    metadata_of,
    stackable,
)
from tensortools.types.metadata.results import batch_size_of
from tensortools.types.metadata.tensor import MetadataTensor

__all__ = ["collate", "decollate"]


def _samples_metadata(items: Sequence, who: str) -> list[dict]:
    """Each sample's metadata (a plain tensor's: none); ValueError unless every sample
    has the same keys. Samples that are batches (a stack of batches: a batch of steps,
    each step one of them) must all be, each holding its samples' metadata."""
    dicts = [dict(metadata_of(t) or {}) if isinstance(t, MetadataTensor) else {} for t in items]
    sizes = [batch_size_of(t) for t in items]
    if any(size is not None for size in sizes):
        for i, size in enumerate(sizes):
            if size is None:
                k = next(k for k, s in enumerate(sizes) if s is not None)
                raise ValueError(
                    f"{who}: sample {i} is not a batch, sample {k} is a batch of {sizes[k]} "
                    "samples; a stack of batches (a batch of steps) takes batches only "
                    "(join a batch with more samples by torch.cat along dim 0)"
                )
            check_batch(dicts[i], size, plain_shape(items[i])[0], f"batch (sample {i} of {who})")
    check_same_keys(dicts, who, "sample", "samples of a batch (a plain tensor has none)")
    return dicts


def _batched(dicts: list[dict]) -> dict:
    """The batch's metadata: each key's per-sample values, stacked into one tensor when
    they are tensors of one shape, dtype and device, else a list."""
    out = {}
    for key in dicts[0] if dicts else ():
        values = [d[key] for d in dicts]
        out[key] = torch.stack(values) if stackable(values) else values
    return out


def _carrier_class(items: Sequence) -> type:
    return next(type(t) for t in items if isinstance(t, MetadataTensor))


def _stack(tensors, dim=0, *, out=None):
    """torch.stack of samples along dim 0: the batch default_collate makes of them (of
    batches: the batch of steps, each step one of them)."""
    items = list(tensors)
    if out is not None or not items or isinstance(dim, bool) or not hasattr(dim, "__index__"):
        return NotImplemented  # (a NumPy int is a dim as an int is; a name is not)
    if any(not isinstance(t, MetadataTensor) and has_torch_function((t,)) for t in items):
        # a sample of a type that overrides torch (a tensor-like, another subclass): the
        # call is passed on to it (the fallback), as torch's protocol asks; it was taken
        # for a sample without metadata (ValueError), or read as a tensor (AttributeError)
        return NotImplemented
    if not is_dim0(dim, len(plain_shape(items[0])) + 1):
        return NotImplemented
    cls = _carrier_class(items)
    metadata = _batched(_samples_metadata(items, "torch.stack"))
    with torch._C.DisableTorchFunctionSubclass():
        data = torch.stack([t.as_subclass(Tensor) for t in items], dim)
    return cls.wrap_batch(data, metadata, len(items))


MetadataTensor.implements(torch.stack)(_stack)


def collate(batch: list, *, collate_fn_map: dict | None = None) -> MetadataTensor:
    """``torch.utils.data.default_collate`` for samples among which is a MetadataTensor
    (registered for batches whose first sample is one when tensortools is imported; see
    docs/metadata-tensor.md, Batches).

    The data are stacked as for plain tensors (into shared memory in a worker process);
    the result is a batch of ``len(batch)`` samples whose metadata maps each key to the
    samples' values in sample order: a list (``{"id": 3}`` and ``{"id": 7}`` give
    ``{"id": [3, 7]}``), or one tensor when the values are tensors of one shape, dtype
    and device (their stack). Every sample must have the same keys; a plain tensor among
    the samples has none.
    """
    cls = _carrier_class(batch)
    metadata = _batched(_samples_metadata(batch, f"{cls.__name__} collate"))
    with torch._C.DisableTorchFunctionSubclass():
        plain = [t.as_subclass(Tensor) for t in batch]
        data = _collate_plain(plain)
    return cls.wrap_batch(data, metadata, len(batch))


def decollate(batch: Tensor) -> list[MetadataTensor]:
    """One MetadataTensor per sample of a MetadataTensor batch, in order, each with its
    own metadata (as ``list(batch.unbind(0))``)."""
    if batch_size_of(batch) is None:
        got = f"a {type(batch).__name__}" + (
            " that is not a batch" if isinstance(batch, MetadataTensor) else ""
        )
        raise TypeError(f"tensortools.decollate: 'batch' must be a MetadataTensor batch, got {got}")
    return list(batch.unbind(0))


def _register_collate() -> None:
    """Make default_collate (hence any DataLoader) batch MetadataTensors with collate.

    default_collate picks a function by the first sample's type: its own entry, else the
    first entry whose type it is an instance of, in the map's order. MetadataTensor's
    entry goes just before torch.Tensor's, so that subclasses of MetadataTensor find it
    too; for every other sample nothing changes (torch.Tensor's entry is left as it is).
    A batch whose first sample is a plain tensor goes to torch's tensor rule, whose
    torch.stack MetadataTensor answers with the same batch."""
    collate_map = torch.utils.data._utils.collate.default_collate_fn_map
    if collate_map.get(MetadataTensor) is collate:
        return
    entries = [(k, v) for k, v in collate_map.items() if k is not MetadataTensor]
    collate_map.clear()
    for key, function in entries:
        if key is Tensor:
            collate_map[MetadataTensor] = collate
        collate_map[key] = function
    collate_map.setdefault(MetadataTensor, collate)


_collate_plain = torch.utils.data._utils.collate.collate_tensor_fn
_register_collate()
