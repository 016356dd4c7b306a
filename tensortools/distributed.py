"""Collectives for tensortools' tensor types over ``torch.distributed``.

The rule for a :class:`~tensortools.MetadataTensor` in a collective:

- in-place collectives (``dist.all_reduce``, ``dist.broadcast``, ...) change its values
  and keep its own rank's metadata, as every in-place op keeps the metadata of the tensor
  it writes to. torch's own functions already do this; nothing here is needed for them;
- :func:`all_gather` returns one tensor per rank, each carrying the metadata of the rank
  it came from. ``dist.all_gather`` cannot do that: it writes data into buffers the caller
  made, so the other ranks' metadata is lost (plain buffers) or wrong (MetadataTensor
  buffers keep the dicts they had).
"""

from __future__ import annotations

import pickle

import torch
import torch.distributed as dist
from torch import Tensor

from tensortools.types import MetadataTensor
from tensortools.types.metadata import metadata_of

__all__ = ["all_gather"]


def all_gather(tensor: Tensor, group: dist.ProcessGroup | None = None) -> list[Tensor]:
    """Gather ``tensor`` from every rank of ``group`` (the default group when ``None``).

    Every rank calls it with a tensor of the same shape and dtype, on the device its
    backend expects (CPU for gloo, the current CUDA device for NCCL). Returns a list of
    ``group.size()`` new tensors, entry ``r`` holding rank ``r``'s values in that shape
    (B×F in: ``world_size`` tensors of B×F out; no autograd through the gather).
    Entry ``r`` is a MetadataTensor carrying a copy of rank ``r``'s metadata (and its
    ``batch_size`` when it is a batch: ``torch.cat`` of the entries is then the batch of
    every rank's samples) when rank ``r`` passed a MetadataTensor (of the caller's class
    if the caller passed one too), and a plain tensor otherwise; other tensor subclasses
    are gathered as their plain data.

    Raises ``TypeError`` if ``tensor`` is not a ``torch.Tensor``. Problems that only show
    across ranks raise on every rank alike, rather than hanging or failing in the backend:
    ``ValueError`` if the ranks' shapes or dtypes differ, ``TypeError`` if a rank's
    metadata cannot be pickled. Costs one ``all_gather_object`` (shape, dtype, pickled
    metadata) besides the ``all_gather`` of the data. Like ``all_gather_object``, it
    unpickles what the other ranks send: use it only among ranks that trust each other.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(
            "tensortools.distributed.all_gather: 'tensor' must be a "
            f"torch.Tensor, got {type(tensor).__name__}"
        )
    with torch._C.DisableTorchFunctionSubclass():
        data = tensor.as_subclass(Tensor).contiguous()
    payload: bytes | str | None = None
    if isinstance(tensor, MetadataTensor):
        try:
            state = (dict(metadata_of(tensor, {})), tensor.batch_size)
            payload = pickle.dumps(state)
        except Exception as err:  # sent as text, so every rank can raise it
            payload = f"{type(err).__name__}: {err}"

    world_size = dist.get_world_size(group)
    infos: list = [None] * world_size
    dist.all_gather_object(infos, (tuple(data.shape), data.dtype, payload), group=group)
    _check(infos)

    gathered = [torch.empty_like(data) for _ in range(world_size)]
    dist.all_gather(gathered, data, group=group)
    kind = type(tensor) if isinstance(tensor, MetadataTensor) else MetadataTensor
    return [
        t if payload is None else _rebuild(kind, t, *pickle.loads(payload))
        for t, (_, _, payload) in zip(gathered, infos)
    ]


def _rebuild(kind: type, data: Tensor, metadata: dict, batch_size: int | None) -> Tensor:
    if batch_size is None:
        return kind.wrap(data, metadata)
    return kind.wrap_batch(data, metadata, batch_size)


def _check(infos: list) -> None:
    """Raise, on every rank alike, what makes the gathered (shape, dtype, payload) unfit."""
    for rank, (_, _, payload) in enumerate(infos):
        if isinstance(payload, str):
            raise TypeError(
                "tensortools.distributed.all_gather: the metadata of 'tensor' "
                f"on rank {rank} cannot be pickled ({payload})"
            )
    if len({(shape, dtype) for shape, dtype, _ in infos}) > 1:
        found = ", ".join(f"rank {r}: {shape} {dtype}" for r, (shape, dtype, _) in enumerate(infos))
        raise ValueError(
            "tensortools.distributed.all_gather: 'tensor' must have the same "
            f"shape and dtype on every rank, got {found}"
        )
