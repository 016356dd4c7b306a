"""Which samples ``batch[index]`` takes along dim 0, for every index torch accepts.

torch reads an index in two steps (torch/csrc/autograd/python_variable_indexing.cpp):
a list or other sequence of fewer than 32 items that holds a tensor, a sequence, a
slice, an Ellipsis or None is a tuple of entries (deprecated, but read so); then each
entry is an int (anything with ``__index__`` that is not a bool: NumPy integers, 0-d
integer arrays), a slice, None, an Ellipsis, True/False, a tensor, or a sequence
(a list, a range, a NumPy array), which becomes a tensor. Byte (uint8) tensors are
masks, as bool ones are. :func:`index_selection` reads an index the same way, so that
every form gives the samples torch's own indexing puts in each row.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["MIXED", "Selection", "index_selection"]

# A selection of samples: one sample (an int), a slice of them, or a list of indices
# (in order, repeats allowed). None: all of them, unchanged.
Selection = int | slice | list | None

_MASKS = (torch.bool, torch.uint8)


class _Mixed:
    """A result whose dim 0 does not hold the samples one by one: one tensor, not a
    batch, with the batch's metadata whole."""

    def __repr__(self) -> str:
        return "MIXED"


MIXED = _Mixed()


def _arrays() -> tuple:
    """NumPy's array type where NumPy is imported, else nothing: an index can hold an
    array only then, and NumPy is not a dependency of torch or of tensortools."""
    numpy = sys.modules.get("numpy")
    return (numpy.ndarray,) if numpy is not None else ()


def _is_sequence(x: Any) -> bool:
    return isinstance(x, (Sequence, *_arrays())) and not isinstance(x, (str, bytes, Tensor))


def _as_tuple(index: Any) -> tuple:
    """The index's entries, as torch splits them."""
    if isinstance(index, tuple):
        return index
    if isinstance(index, (Tensor, *_arrays())) or not _is_sequence(index) or len(index) >= 32:
        return (index,)
    if any(
        isinstance(e, (Tensor, slice)) or _is_sequence(e) or e is None or e is Ellipsis
        for e in index
    ):
        return tuple(index)  # (deprecated in torch, and read so there)
    return (index,)


def _entry(e: Any) -> Any:
    """One entry as torch reads it: an int, a slice, None, Ellipsis, a bool or a tensor."""
    if e is None or e is Ellipsis or isinstance(e, (bool, slice, Tensor)):
        return e
    try:
        return operator.index(e)  # (ints, NumPy integers and 0-d integer arrays)
    except TypeError:
        pass
    arrays = _arrays()
    if arrays and isinstance(e, arrays):
        return torch.from_numpy(e)
    if _is_sequence(e):
        items = list(e) if isinstance(e, range) else e
        if arrays:  # (as torch reads a list: through NumPy, where it has NumPy)
            return torch.from_numpy(sys.modules["numpy"].asarray(items))
        return torch.tensor(items)
    return e  # (torch refused it already)


def _as_int(entry: Any) -> int | None:
    """An entry that picks one position (an int, or a 0-d integer tensor, which indexing
    reads as one), as an int; else None."""
    if type(entry) is int:
        return entry
    if isinstance(entry, Tensor) and entry.dim() == 0 and entry.dtype not in _MASKS:
        if not entry.is_floating_point() and not entry.is_complex():
            return int(entry)
    return None


def _is_advanced(entry: Any) -> bool:
    """An entry that advanced indexing reads (a tensor, a bool)."""
    return isinstance(entry, (Tensor, bool)) and _as_int(entry) is None


def _adds_a_dim(entry: Any) -> bool:
    """None, True/False and 0-d masks: entries that add a dim of size 1 (or 0) and take
    up none."""
    if entry is None or isinstance(entry, bool):
        return True
    return isinstance(entry, Tensor) and entry.dtype in _MASKS and entry.dim() == 0


def _consumes(entry: Any) -> int:
    """How many dims of the indexed tensor an entry takes up."""
    if entry is None or entry is Ellipsis or isinstance(entry, bool):
        return 0
    if isinstance(entry, Tensor) and entry.dtype in _MASKS:
        return entry.dim()
    return 1


def index_selection(index: Any, size: int, ndim: int) -> Selection | _Mixed:
    """The samples ``batch[index]`` takes along dim 0 of a batch of `size` samples and
    `ndim` dims: an int for one sample, a slice or a list of them, None where dim 0 is
    left whole, MIXED where the result's dim 0 no longer holds the samples one by one (a
    new dim in front, index tensors apart or of more than one dim). Called after torch
    indexed the batch: the index is one torch accepts."""
    if type(index) is int:  # (the common forms first, read at once)
        return index % size
    if type(index) is slice:
        return None if index == slice(None) else index
    with torch._C.DisableTorchFunctionSubclass():  # (index tensors may be batches too)
        return _selection(index, size, ndim)


def _selection(index: Any, size: int, ndim: int) -> Selection | _Mixed:
    entries = [_entry(e) for e in _as_tuple(index)]
    moved = False
    while entries and _adds_a_dim(entries[0]):
        moved = True  # a new dim in front of the samples
        entries.pop(0)
    if entries and entries[0] is Ellipsis:
        if sum(_consumes(e) for e in entries) < ndim:
            return MIXED if moved else _whole_dim0(entries)
        entries.pop(0)  # an ellipsis that stands for no dim
    first = entries[0] if entries else slice(None)
    one = _as_int(first)
    if one is not None:
        return one % size  # (the call itself refused an index out of range)
    if moved:
        return MIXED
    if isinstance(first, slice):
        if _whole_dim0(entries) is MIXED:
            return MIXED
        return None if first == slice(None) else first
    return _advanced(entries, size)


def _advanced(entries: list, size: int) -> Selection | _Mixed:
    """The samples of an index whose first entry is a tensor: advanced indexing, whose
    index tensors broadcast together and give the result's first dims (wherever the
    others stand), so row r holds the sample the first index tensor names there."""
    advanced = [e for e in entries if _is_advanced(e)]
    if any(_adds_a_dim(e) for e in advanced):
        return MIXED
    if any(e.dtype in _MASKS for e in advanced):
        if len(advanced) > 1:
            return MIXED
        return advanced[0].nonzero()[:, 0].tolist()  # (each element's sample, in order)
    samples = torch.broadcast_tensors(*advanced)[0] if len(advanced) > 1 else advanced[0]
    if samples.dim() != 1:
        return MIXED
    return [i % size for i in samples.tolist()]


def _adjacent(entries: list) -> bool:
    """Whether the index tensors stand next to each other (else advanced indexing puts
    their dims first, wherever they were)."""
    at = [k for k, e in enumerate(entries) if _is_advanced(e)]
    return not at or at[-1] - at[0] == len(at) - 1


def _whole_dim0(entries: list) -> None | _Mixed:
    """Dim 0 untouched by the index: None where the result keeps it in front, MIXED where
    advanced indexing moves other dims before it (index tensors apart from each other)."""
    return None if _adjacent(entries) else MIXED
