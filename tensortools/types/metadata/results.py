"""How a call's results take MetadataTensor metadata: the rules, written once in C.

``csrc/python/metadata_results.cpp`` defines them for the compiled path and exports them
for every other result (the fallback's context and wrap, the batch rules, the
``batch_size`` setter):

- :func:`carriers`: which dicts a call's results take (every carrier's among its argument
  tensors, in order, for the merge policy to make one of), and the batch size they pass on
  (the first carrier's);
- :func:`take_metadata`: a result takes a copy of a dict, and the batch size where it
  holds samples (a 0-d result holds none): the one write of ``_batch_size``.

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

__all__ = ["carriers", "take_metadata"]

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


# -- what torch.compile traces in their place ----------------------------------------------


def _traced_carriers(carrier: type, tensors: list) -> tuple[list, Any]:
    found, first_size = [], None
    for t in tensors:
        if issubclass(type(t), carrier):
            metadata = getattr(t, "metadata", None)
            size = getattr(t, "_batch_size", None)
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
    for rule, traced in ((carriers, _traced_carriers), (take_metadata, _traced_take)):
        torch.compiler.substitute_in_graph(rule, skip_signature_check=True)(traced)
