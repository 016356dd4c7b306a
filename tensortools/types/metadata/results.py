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

__all__ = ["batch_size_of", "carriers", "register_class", "take_metadata"]

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


def _traced_carriers(carrier: type, tensors: list) -> tuple[list, Any]:
    found, first_size = [], None
    for t in tensors:
        if issubclass(type(t), carrier):
            metadata = getattr(t, "metadata", None)
            size = _read_size(t)
            if metadata is not None:
                if not found:
                    first_size = size
                found.append(metadata)
    return found, first_size


def _traced_take(result: Tensor, metadata: Mapping | None, size: Any, new: bool) -> None:
    with torch._C.DisableTorchFunctionSubclass():
        holds_samples = size is not None and result.dim() > 0
    if metadata is not None:
        result.metadata = dict(metadata)
    if holds_samples:
        result._batch_size = size
    elif not new:
        result._batch_size = None


@when_dynamo_loads
def _register_with_dynamo() -> None:
    for rule, traced in (
        (carriers, _traced_carriers),
        (take_metadata, _traced_take),
        (batch_size_of, _traced_batch_size_of),
    ):
        torch.compiler.substitute_in_graph(rule, skip_signature_check=True)(traced)
