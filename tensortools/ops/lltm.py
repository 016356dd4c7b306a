"""The LLTM recurrent cell, fused: ``torch.ops.tensortools.lltm_forward`` (its autograd
and backward kernel are registered in C++, csrc/ops/autograd/lltm_autograd.cpp)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

from tensortools.ops._checks import check_tensors

__all__ = ["lltm"]

_LLTM_ARGS = ("input", "weights", "bias", "old_h", "old_cell")


def lltm(
    input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
) -> tuple[Tensor, Tensor]:
    """One step of the LLTM recurrent cell, fused.

    Shapes (B batch, F features, S state size): ``input`` B×F, ``weights`` 3S×(S+F),
    ``bias`` 3S, ``old_h`` B×S, ``old_cell`` B×S; all of one floating dtype and device.
    Returns ``(new_h, new_cell)``, both B×S. The maths is :func:`tensortools.reference.lltm`.
    A batch of zero rows gives empty results (and zero gradients for weights and bias).
    """
    args = (input, weights, bias, old_h, old_cell)
    if has_torch_function(args):
        return handle_torch_function(lltm, args, *args)
    check_tensors("lltm", _LLTM_ARGS, args)
    new_h, new_cell, _, _ = torch.ops.tensortools.lltm_forward.default(*args)
    return new_h, new_cell
