"""How a call's results take MetadataTensor metadata: the rules, written once in C.

``csrc/python/metadata_results.h`` defines them for the compiled path, and
``metadata_results.cpp`` exports them for every other result (the fallback's context and
wrap, the batch rules, the ``batch_size`` setter, every read of a batch size):

- :func:`carriers`: which dicts a call's results take (every carrier's among its argument
  tensors, in order, for the merge policy to make one of), and the batch size they pass on
  (the first carrier's);
- :func:`take_metadata`: a result takes a copy of a dict, and the batch size where it
  holds samples (a 0-d result holds none): the one write of ``_batch_size``;
- :func:`batch_size_of`: a MetadataTensor's batch size, the one read of ``_batch_size``
  (which the other two share).

torch.compile cannot trace C, so dynamo traces a Python stand-in in place of each (below;
``tests/test_metadata_results.py`` holds them to the C rules over every kind of input).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from tensortools._compiler import when_dynamo_loads
from tensortools._native import C as _C
from tensortools.dispatch.compiled_path import WrapperPath

__all__ = [
    "PENDING",
    "PendingMetadata",
    "batch_size_of",
    "carriers",
    "register_class",
    "take_metadata",
]

#: carriers(carrier, tensors) -> (dicts, size): the metadata of every instance of `carrier`
#: among `tensors` (a call's argument tensors, in order) that holds any (not None), and the
#: batch size of the first of them (None where it is not a batch). Every carrier's metadata
#: and batch size are read, in order.
carriers: Callable[[type, list], tuple[list, Any]] = _C.metadata_carriers

#: take_metadata(result, metadata, size, new): `result` takes a copy of `metadata` (None: it
#: keeps its own) and the batch size `size` where it holds samples (size not None, result
#: not 0-d); otherwise it is no batch (its batch size None; nothing is written where `new`,
#: a result just made).
take_metadata: Callable[[Tensor, Mapping | None, Any, bool], None] = _C.metadata_take

#: batch_size_of(t): the batch size of a MetadataTensor batch; None for anything else (a
#: MetadataTensor that is not a batch, anything that is not a MetadataTensor).
batch_size_of: Callable[[Any], Any] = _C.metadata_batch_size

_WRAP_METADATA = int(WrapperPath.WRAP_METADATA)

#: (the class whose instances batch_size_of reads: MetadataTensor, once registered)
_CLASS: type | None = None


def register_class(cls: type) -> None:
    """Make `cls` (MetadataTensor) the class whose instances :func:`batch_size_of` reads."""
    global _CLASS
    _C.metadata_setup(cls)
    _CLASS = cls


# -- what torch.compile traces in their place ----------------------------------------------


def _traced_batch_size_of(t: Any) -> Any:
    return _read_size(t) if _CLASS is not None and issubclass(type(t), _CLASS) else None


def _read_size(t: Any) -> Any:
    return getattr(t, "_batch_size", None)


def traced_metadata(t: Any) -> dict | None:
    """A MetadataTensor's metadata as a compiled function reads it: the dict a result of
    the graph holds by reference until it is first read (see _traced_take), else its own
    (None where it has none). Outside a compiled function, the dict itself."""
    pending = getattr(t, "_pending_metadata", None)
    if pending is None:
        return getattr(t, "metadata", None)
    rows = getattr(t, "_pending_rows", None)
    return pending if rows is None else samples_of(pending, rows)


def pending_copy(t: Any) -> dict:
    """The copy of the metadata a result of a compiled function takes when first read:
    the samples of its rows (where it holds some of a batch's) of the dict it holds."""
    rows = t._pending_rows
    return dict(t._pending_metadata) if rows is None else samples_of(t._pending_metadata, rows)


def traced_take_from(result: Tensor, carrier: Any, size: Any) -> None:
    """For a compiled function: `result`, just made, takes `carrier`'s metadata (None: an
    empty dict) and the batch size `size`, by reference (see _traced_take)."""
    source = None if carrier is None else getattr(carrier, "_pending_metadata", None)
    if source is None:
        metadata = None if carrier is None else getattr(carrier, "metadata", None)
        _traced_take(result, {} if metadata is None else metadata, size, True)
        return
    result._pending_metadata = source
    rows = getattr(carrier, "_pending_rows", None)
    if rows is not None:
        result._pending_rows = rows
    _traced_take(result, None, size, True)


def traced_pending(result: Any) -> bool:
    """Whether `result` is a result of the graph being traced, holding its dict by
    reference (so that what it holds may be replaced by reference too)."""
    return getattr(result, "_pending_metadata", None) is not None


def traced_give(result: Tensor, metadata: Mapping, size: Any, selection: Any, after: Any) -> None:
    """For a compiled function: `result` takes the samples of `selection` (an int, a
    slice or a list of ints: constants of the graph) of `metadata`, a batch of `size`
    samples, and the batch size `after`. It holds the dict by reference with the rows to
    take, so that the samples are taken outside the graph, when first read."""
    if isinstance(selection, slice):  # (the rows it names: no length to read later)
        selection = list(range(size)[selection])
    result._pending_metadata = metadata
    result._pending_rows = selection
    _traced_take(result, None, after, False)


def samples_of(metadata: Mapping, selection: Any) -> Mapping:
    """Each value's entries for `selection` (one sample's value for an int; None: all of
    `metadata`, itself)."""
    if selection is None:
        return metadata
    out = {}
    for key, value in metadata.items():
        if isinstance(selection, int):
            out[key] = value[selection]
        elif isinstance(selection, slice):
            out[key] = list(value[selection]) if isinstance(value, tuple) else value[selection]
        elif isinstance(value, Tensor):
            out[key] = value[torch.tensor(selection, dtype=torch.long, device=value.device)]
        else:
            out[key] = [value[i] for i in selection]
    return out


def first_carrier(carrier: type, tensors: list) -> tuple[Any, Any]:
    """(The first instance of `carrier` among `tensors` that holds metadata, or None; its
    batch size): for a compiled function, what a call's results take under the "first"
    merge policy, found without putting any dict in a list (dynamo would then read, and
    guard on, every value of it)."""
    for t in tensors:
        if issubclass(type(t), carrier) and traced_metadata(t) is not None:
            return t, _read_size(t)
    return None, None


def _traced_carriers(carrier: type, tensors: list) -> tuple[list, Any]:
    found, first_size = [], None
    for t in tensors:
        if issubclass(type(t), carrier):
            metadata = traced_metadata(t)
            size = _read_size(t)
            if metadata is not None:
                if not found:
                    first_size = size
                found.append(metadata)
    return found, first_size


def _traced_take(result: Tensor, metadata: Mapping | None, size: Any, new: bool) -> None:
    # Traced, a new result of a class with MetadataTensor's own hooks holds the dict it
    # takes by reference (`_pending_metadata`), and its copy is made outside the graph
    # when first read (PendingMetadata): a copy made here would read every value, and
    # dynamo would guard the graph on them. A class with hooks of its own gets its copy
    # here, as its hooks may read it. A result that already holds that very dict (an
    # in-place call's) keeps it.
    with torch._C.DisableTorchFunctionSubclass():
        holds_samples = size is not None and result.dim() > 0
    if metadata is not None:
        if new and type(result)._fast.kind == _WRAP_METADATA:
            result._pending_metadata = metadata
        elif new:
            result.metadata = dict(metadata)
        elif metadata is not traced_metadata(result):
            result.metadata = dict(metadata)
            if getattr(result, "_pending_metadata", None) is not None:
                result._pending_metadata = None
    if holds_samples:
        result._batch_size = size
    elif not new:
        result._batch_size = None


class PendingMetadata:
    """MetadataTensor's ``metadata``, read only where an instance holds no dict of its
    own: a result of a compiled function holds the dict it takes by reference (see
    _traced_take), and its own copy is made here, outside the graph, when first read. (A
    descriptor without __set__: an instance's own dict is read without it.)"""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        if instance._pending_metadata is None:
            raise AttributeError(
                f"{type(instance).__name__!r} object has no attribute 'metadata' (a tensor "
                "made the type by as_subclass holds none; inside a compiled function, read "
                "the metadata of a tensor made in it with "
                "tensortools.types.metadata.metadata_of(t))"
            )
        if torch.compiler.is_compiling():  # (read inside a compiled function: a copy)
            return pending_copy(instance)
        # (setdefault: threads reading it at once all get the one copy)
        metadata = instance.__dict__.setdefault("metadata", pending_copy(instance))
        for name in PENDING:
            instance.__dict__.pop(name, None)
        return metadata


PENDING = ("_pending_metadata", "_pending_rows")


@when_dynamo_loads
def _copy_outside_the_graph() -> None:
    # A read that runs between a compiled function's graphs (a graph break, the caller's
    # own code) is no graph of its own: its values would be the guards of one. Traced
    # inside a graph (a read by the compiled function), it is inlined as ever.
    from torch._dynamo.eval_frame import skip_code

    for code in (PendingMetadata.__get__.__code__, pending_copy.__code__):
        skip_code(code)


@when_dynamo_loads
def _register_with_dynamo() -> None:
    for rule, traced in (
        (carriers, _traced_carriers),
        (take_metadata, _traced_take),
        (batch_size_of, _traced_batch_size_of),
    ):
        torch.compiler.substitute_in_graph(rule, skip_signature_check=True)(traced)
