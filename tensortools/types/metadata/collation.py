"""Building MetadataTensor batches: ``torch.stack`` of samples along dim 0 (a handler of
the class's table), :func:`collate` (registered with ``default_collate``, hence any
``DataLoader``) and :func:`decollate`; and ``torch.func.vmap`` of a function over a
batch's samples, whose results mapped out at dim 0 are batches of those samples again
(:func:`_flat_vmap`, put at vmap's boundary when imported)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._functorch.vmap as _torch_vmap
from torch import Tensor
from torch.overrides import has_torch_function
from torch.utils._pytree import _broadcast_to_and_flatten, tree_flatten, tree_unflatten

from tensortools.types.metadata.batch import is_dim0, plain_shape
from tensortools.types.metadata.dicts import (
    check_batch,
    check_same_keys,
    metadata_of,
    same_metadata,
    stackable,
)
from tensortools.types.metadata.results import batch_size_of
from tensortools.types.metadata.tensor import TRACKING, MetadataTensor

__all__ = ["collate", "decollate"]


def _samples_metadata(items: Sequence, who: str) -> list[dict]:
    """Each sample's metadata (a plain tensor's: none); ValueError unless every sample
    has the same keys. Samples that are batches (a stack of batches: a batch of steps,
    each step one of them) must all be, each holding its samples' metadata."""
    dicts = [dict(metadata_of(t, {})) if isinstance(t, MetadataTensor) else {} for t in items]
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
        data = torch.stack(items, dim)
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


# -- torch.func.vmap over a batch ------------------------------------------------------
# vmap computes below __torch_function__: it hands the function plain BatchedTensor views
# of its inputs and builds the results from what the function returns, so no call of the
# class sees the batch, and torch offers no hook at vmap's boundary (vmap is not a torch
# function; _add_batch_dim consults __torch_function__ only for export's modes). So that
# boundary is wrapped here, once: torch's torch._functorch.vmap._flat_vmap, the function
# every vmap (torch.func.vmap, torch.vmap, chunked or not) runs the function through, with
# the inputs' mapped dims and the out_dims, is replaced by _flat_vmap, which calls it and
# labels the results. tensordict keeps its TensorDicts through vmap likewise (replacing
# functions of that module). The rule: docs/metadata-tensor.md, "torch.func".

#: torch's own function, which :func:`_flat_vmap` runs every call through.
TORCH_FLAT_VMAP: Callable = _torch_vmap._flat_vmap


def _flat_vmap(
    func: Callable,
    batch_size: int,
    flat_in_dims: list,
    flat_args: list,
    args_spec: Any,
    out_dims: Any,
    randomness: str,
    **kwargs: Any,
) -> Any:
    # (torch's signature, so that torch's callers and dynamo call it as they call torch's)
    out = TORCH_FLAT_VMAP(
        func, batch_size, flat_in_dims, flat_args, args_spec, out_dims, randomness, **kwargs
    )
    batch = _samples(flat_in_dims, flat_args, batch_size)
    if batch is None:
        return out
    return _label(out, out_dims, batch, batch_size)


def _samples(flat_in_dims: list, flat_args: list, batch_size: int) -> MetadataTensor | None:
    """The batch whose samples vmap maps over (the first of the inputs' batches), or None
    where no batch is an input, tracking is off, or not every batch is mapped over its
    dim 0 holding the same samples."""
    batches = [
        (arg, in_dim)
        for arg, in_dim in zip(flat_args, flat_in_dims)
        if isinstance(arg, MetadataTensor) and batch_size_of(arg) is not None
    ]
    if not batches:
        return None
    first = batches[0][0]
    if not TRACKING.value_for(type(first)) or batch_size_of(first) != batch_size:
        return None
    labels = metadata_of(first, {})
    for arg, in_dim in batches:
        # (a batch mapped over another dim, or passed whole, puts its samples into every
        # row; a batch of other samples labels the rows otherwise: no row is one sample's)
        if in_dim != 0 or not same_metadata(metadata_of(arg, {}), labels):
            return None
    return first


def _label(out: Any, out_dims: Any, batch: MetadataTensor, batch_size: int) -> Any:
    """out with each tensor mapped out at dim 0 made a batch of `batch`'s samples."""
    leaves, spec = tree_flatten(out)
    if isinstance(out, Tensor):  # (as torch reads out_dims for one tensor)
        dims = list(out_dims) if isinstance(out_dims, tuple) else [out_dims]
    else:
        dims = _broadcast_to_and_flatten(out_dims, spec)
    cls = type(batch)
    labels = metadata_of(batch, {})
    labelled = [
        _as_batch(cls, leaf, labels, batch_size)
        if isinstance(leaf, Tensor) and _at_dim_0(leaf, dim)
        else leaf
        for leaf, dim in zip(leaves, dims)
    ]
    return tree_unflatten(labelled, spec)


def _as_batch(cls: type, result: Tensor, labels: dict, batch_size: int) -> Tensor:
    if type(result) is Tensor:
        return cls.wrap_batch(result, dict(labels), batch_size)
    if (
        isinstance(result, MetadataTensor)
        and batch_size_of(result) == batch_size
        and same_metadata(metadata_of(result, {}), labels)
    ):
        return result  # (an input itself, returned by the identity: labelled already)
    # A fresh alias of another type's result (a parameter's subclass, say).
    with torch._C.DisableTorchFunctionSubclass():
        plain = result.as_subclass(Tensor)
    return cls.wrap_batch(plain, dict(labels), batch_size)


def _at_dim_0(result: Tensor, out_dim: int | None) -> bool:
    """Whether vmap put the mapped dim of `result` at dim 0 (out_dims 0, or its negative)."""
    if out_dim is None:
        return False
    ndim = result.dim()
    return ndim > 0 and out_dim % ndim == 0


def _install_vmap() -> None:
    """Put :func:`_flat_vmap` in the place of torch's (once), where torch's has the
    signature it was written for (else vmap's results stay plain, as torch gives them)."""
    if _torch_vmap._flat_vmap is TORCH_FLAT_VMAP and list(
        inspect.signature(TORCH_FLAT_VMAP).parameters
    ) == list(inspect.signature(_flat_vmap).parameters):
        _torch_vmap._flat_vmap = _flat_vmap


_collate_plain = torch.utils.data._utils.collate.collate_tensor_fn
_register_collate()
_install_vmap()
