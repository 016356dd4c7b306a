"""tensortools' fused operators, as Python functions over ``torch.ops.tensortools``.

Each function here is overridable: when an argument defines ``__torch_function__`` the
call goes through :func:`torch.overrides.handle_torch_function`, so tensor-like types can
intercept it. The fake (meta) kernels and the autograd formulas of the underlying
operators are registered next to their wrappers, so ``torch.compile(fullgraph=True)``
traces the operators. Autograd is registered in C++, for the Autograd dispatch key, so
the hand-written backward runs without a Python layer.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

import tensortools._native  # noqa: F401  (registers torch.ops.tensortools)

__all__ = ["lltm"]


def _check_tensors(fn_name: str, names: tuple[str, ...], args: tuple) -> None:
    for name, arg in zip(names, args):
        if not isinstance(arg, Tensor):
            raise TypeError(
                f"tensortools.ops.{fn_name}: '{name}' must be a torch.Tensor, "
                f"got {type(arg).__name__}"
            )
        if arg.layout != torch.strided:
            raise TypeError(
                f"tensortools.ops.{fn_name}: '{name}' must be a dense (strided) tensor, "
                f"got layout {arg.layout}"
            )


# ---------------------------------------------------------------------------------------
# LLTM

_LLTM_ARGS = ("input", "weights", "bias", "old_h", "old_cell")


def lltm(input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor,
         old_cell: Tensor) -> tuple[Tensor, Tensor]:
    """One step of the LLTM recurrent cell, fused.

    Shapes (B batch, F features, S state size): ``input`` B×F, ``weights`` 3S×(S+F),
    ``bias`` 3S, ``old_h`` B×S, ``old_cell`` B×S; all of one floating dtype and device.
    Returns ``(new_h, new_cell)``, both B×S. The maths is :func:`tensortools.reference.lltm`.
    A batch of zero rows gives empty results (and zero gradients for weights and bias).
    """
    args = (input, weights, bias, old_h, old_cell)
    if has_torch_function(args):
        return handle_torch_function(lltm, args, *args)
    _check_tensors("lltm", _LLTM_ARGS, args)
    new_h, new_cell, _, _ = torch.ops.tensortools.lltm_forward.default(*args)
    return new_h, new_cell


@torch.library.register_fake("tensortools::lltm_forward")
def _lltm_forward_fake(input, weights, bias, old_h, old_cell):
    batch, features = input.shape
    state = old_h.shape[1]
    return (
        old_cell.new_empty(batch, state),
        old_cell.new_empty(batch, state),
        input.new_empty(batch, 3 * state),
        input.new_empty(batch, state + features),
    )


@torch.library.register_fake("tensortools::lltm_backward")
def _lltm_backward_fake(grad_h, grad_cell, new_cell, gates, X, weights):
    batch, state = new_cell.shape
    return (
        X.new_empty(batch, X.shape[1] - state),
        weights.new_empty(weights.shape),
        weights.new_empty(weights.shape[0]),
        X.new_empty(batch, state),
        new_cell.new_empty(batch, state),
    )
