"""The LLTM recurrent cell, fused: ``torch.ops.tensortools.lltm_forward``, and the LLTM over
a whole sequence in one operator: ``torch.ops.tensortools.lltm_sequence_forward``, or
``lltm_sequence_inference`` where no gradient is wanted (their
autograd and backward kernels are registered in C++, csrc/ops/autograd/lltm_autograd.cpp)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

from tensortools.ops._checks import check_tensors

__all__ = ["lltm", "lltm_sequence"]

_LLTM_ARGS = ("input", "weights", "bias", "old_h", "old_cell")
_SEQUENCE_ARGS = ("input", "weights", "bias", "h0", "c0")


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


def lltm_sequence(
    input: Tensor, weights: Tensor, bias: Tensor, h0: Tensor, c0: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The LLTM cell applied over a whole sequence, in one operator.

    Shapes (T steps, B batch, F features, S state size): ``input`` T×B×F, ``weights``
    3S×(S+F), ``bias`` 3S, ``h0`` and ``c0`` B×S; all of one floating dtype and device.
    Returns ``(output, h_n, c_n)``: ``output`` T×B×S holds every step's new h, ``h_n`` and
    ``c_n`` (B×S) are the last step's h and cell (``h0`` and ``c0`` for T = 0). The maths
    is T calls of :func:`lltm` (:func:`tensortools.reference.lltm_sequence`); the input's
    part of every step's gates is one matrix product over all steps, and backward computes
    the gradients of ``input``, ``weights`` and ``bias`` in one product each. Every sequence
    of a batch has length T (no padding or packed sequences). Where no gradient is wanted
    (``torch.no_grad()``, ``torch.inference_mode()``, or no argument requires grad) it runs
    ``torch.ops.tensortools.lltm_sequence_inference``: the same results, bit for bit, with
    no step's cell or gates kept for backward.
    """
    args = (input, weights, bias, h0, c0)
    if has_torch_function(args):
        return handle_torch_function(lltm_sequence, args, *args)
    check_tensors("lltm_sequence", _SEQUENCE_ARGS, args)
    if not (torch.is_grad_enabled() and any(a.requires_grad for a in args)):
        # No gradient wanted: the same forward, keeping nothing for backward.
        output, h_n, c_n = torch.ops.tensortools.lltm_sequence_inference.default(*args)
        return output, h_n, c_n
    output, h_n, c_n, _, _ = torch.ops.tensortools.lltm_sequence_forward.default(*args)
    return output, h_n, c_n
